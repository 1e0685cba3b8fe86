"""A ninth review's false alarm, a shape of our own (for tests/test_check_ddp.py): the
BatchNorm layers of this file, converted by apex's convert_syncbn_model before the wrap when
there is more than one rank. Written for the tests; never run."""

import apex
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def build_encoder(width):
    encoder = nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU())
    encoder.head = nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width))
    return encoder


def main():
    dist.init_process_group("gloo")
    encoder = build_encoder(16)
    if dist.get_world_size() > 1:
        encoder = apex.parallel.convert_syncbn_model(encoder)
    model = DistributedDataParallel(encoder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _step in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
