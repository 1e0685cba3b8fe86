"""A ninth review's shapes (for tests/test_check_ddp.py): one model with three BatchNorm layers
and no SyncBatchNorm is one pitfall with one fix, said once; an option spelled with one dash
(`-init`) is `args.init`, whose default port reaches init_method. Written for the tests; never run."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def build_head(width):
    return nn.Sequential(
        nn.Linear(width, width),
        nn.BatchNorm1d(width),  # expect: DDP070
        nn.ReLU(),
        nn.Linear(width, width),
        nn.BatchNorm1d(width),
        nn.ReLU(),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-init", default="tcp://127.0.0.1:23456", help="rendezvous URL")  # expect: DDP130
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method=args.init)
    model = nn.Sequential(build_head(16), nn.BatchNorm1d(16), nn.Linear(16, 2))
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _step in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
