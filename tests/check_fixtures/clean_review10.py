"""The shapes of review10.py where they are right (no finding): the loader kept in an
attribute over a padding sampler is the training loader (read with backward, not under
no_grad); the cached-features epoch wraps its micro-batches in no_sync() but the last.
Written for the tests; never run: it only has to parse."""

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, rounds):
        dist.init_process_group("gloo")
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.rounds = rounds
        data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
        self.sampler = DistributedSampler(data)
        self.loader = DataLoader(data, batch_sampler=BatchSampler(self.sampler, 8, True))

    def fit(self, epochs):
        for epoch in range(epochs):
            self.sampler.set_epoch(epoch)
            kept = []
            for step, (x, y) in enumerate(self.loader):
                kept.append((x, y))
                if (step + 1) % self.rounds > 0:
                    continue
                for j, (x_j, y_j) in enumerate(kept):
                    last_one = j == len(kept) - 1
                    with contextlib.nullcontext() if last_one else self.net.no_sync():
                        nn.functional.mse_loss(self.net(x_j), y_j).backward()
                self.optimizer.step()
                kept = []
