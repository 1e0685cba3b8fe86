"""A trainer class of a ninth review's shapes (for tests/test_check_ddp.py): its save()
writes a snapshot of the network with no test on the rank, its load() reads one back with
no map_location (its own call of it, in report_best(), is rank 0's); restore()
maps to the CPU; its periodic save inside train_step() is rank 0's. Written for the tests;
never run: it only has to parse."""

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, rank, folder):
        self.rank, self.folder, self.steps = rank, folder, 0
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def snapshot_path(self, number):
        return f"{self.folder}/snapshot-{number}.pt"

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        nn.functional.cross_entropy(self.net(x), y).backward()
        self.optimizer.step()
        self.steps += 1
        if self.rank == 0 and self.steps % 100 == 0:
            self.save(self.steps // 100)

    def save(self, number):
        snapshot = {"net": self.net.module.state_dict(), "steps": self.steps}
        torch.save(snapshot, self.snapshot_path(number))

    def load(self, number):
        snapshot = torch.load(self.snapshot_path(number))
        self.net.module.load_state_dict(snapshot["net"])
        self.steps = snapshot["steps"]

    def report_best(self, number):
        if self.rank == 0:
            self.load(number)
            print(self.net.module.weight.norm())

    def restore(self, number):
        snapshot = torch.load(self.snapshot_path(number), map_location="cpu")
        self.net.module.load_state_dict(snapshot["net"])
