"""A ninth review's shape (for tests/test_check_ddp.py): the held-out loader that a helper of
the project returns in a tuple, given to a class of this file that keeps it in a field and
reads it in its evaluation method. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from lab12 import data
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Runner:
    def __init__(self, fit_loader, held_out_loader):
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.fit_loader = fit_loader
        self.held_out_loader = held_out_loader

    @torch.no_grad()
    def score_batch(self, x, y):
        return (self.net(x).argmax(1) == y).sum()

    def test(self):
        self.net.eval()
        hits = torch.zeros(())
        for x, y in self.held_out_loader:
            hits += self.score_batch(x, y)
        dist.all_reduce(hits)
        return hits

    def fit(self, epochs):
        for epoch in range(epochs):
            self.fit_loader.sampler.set_epoch(epoch)
            self.net.train()
            for x, y in self.fit_loader:
                self.optimizer.zero_grad()
                nn.functional.cross_entropy(self.net(x), y).backward()
                self.optimizer.step()
            print(self.test())


def main():
    dist.init_process_group("gloo")
    fit_loader, held_out_loader = data.make_loaders(8)  # expect: DDP031
    Runner(fit_loader, held_out_loader).fit(3)


if __name__ == "__main__":
    main()
