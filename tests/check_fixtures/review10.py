"""A seventh round's shapes in one file (for tests/test_check_ddp.py): an evaluation loader
kept in an attribute, on a BatchSampler over a padding DistributedSampler (a name, or made
inline), and read under no_grad in another method; an epoch with a plain branch and a
cached-features branch, whose accumulation is said at the loop of micro-batches, not at the
plain branch's backward. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, accum_freq):
        dist.init_process_group("gloo")
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.accum_freq = accum_freq
        held_out = TensorDataset(torch.randn(30, 8), torch.randn(30, 2))
        padded = DistributedSampler(held_out, shuffle=False)  # expect: DDP031
        self.held_out_loader = DataLoader(held_out, batch_sampler=BatchSampler(padded, 8, False))
        probes = BatchSampler(DistributedSampler(held_out, shuffle=False), 4, False)  # expect: DDP031
        self.probe_loader = DataLoader(held_out, batch_sampler=probes)

    def epoch(self, loader):
        kept = []
        for step, (x, y) in enumerate(loader):
            if self.accum_freq == 1:
                nn.functional.mse_loss(self.net(x), y).backward()
                self.optimizer.step()
                continue
            kept.append((x, y))
            if (step + 1) % self.accum_freq > 0:
                continue
            for x_j, y_j in kept:
                nn.functional.mse_loss(self.net(x_j), y_j).backward()  # expect: DDP050
            self.optimizer.step()
            kept = []

    @torch.no_grad()
    def validate(self):
        total = torch.zeros(2)
        for x, y in self.held_out_loader:
            total += (self.net(x) - y).abs().sum(0)
        for x, y in self.probe_loader:
            total += (self.net(x) - y).abs().sum(0)
        dist.all_reduce(total)
        return total
