"""An eighth review's false alarm of DDP010, a shape of our own, where nothing is wrong: a
loader from a builder of the project that returns what another builder makes, and that one
makes a DistributedSampler under `if dist.is_initialized():`. Written for the tests; never
run: it only has to parse."""

import torch
import torch.distributed as dist
from helpers.feeds import make_data_loader
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset


def main(epochs):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    feed = make_data_loader(data, shuffle=True)
    model = DDP(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        feed.loader.sampler.set_epoch(epoch)
        for x, y in feed:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main(3)
