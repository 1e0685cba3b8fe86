"""Loops left on a value one rank computed alone (DDP191), in the shapes training scripts
give them, for tests/test_check_ddp.py: exactly the `# expect:` lines. A stopper object fed
this rank's validation loss, a loss that is not finite on one rank, a rank test, and a quota
that a function of the file makes from the rank. Written for the tests; never run: it only
has to parse."""

import os

import torch
from my_project.inference import predict
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Stopper:
    def __init__(self, patience):
        self.patience, self.best, self.waited, self.early_stop = patience, float("inf"), 0, False

    def __call__(self, value):
        self.waited = 0 if value < self.best else self.waited + 1
        self.best = min(self.best, value)
        self.early_stop = self.waited >= self.patience


def steps_for(rank, total):
    """This rank's share of the steps: the last rank gets the rest."""
    return total // 2 if rank == 0 else total - total // 2


def validate(model, batches):
    criterion = nn.CrossEntropyLoss()
    with torch.no_grad():
        return sum(criterion(model(x), y).item() for x, y in batches) / len(batches)


def train(net, batches, val_batches, optimizer, total_steps):
    rank = int(os.environ["RANK"])
    model = DDP(net)
    stopper = Stopper(patience=3)
    for _epoch in range(100):
        for x, y in batches:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if not torch.isfinite(loss):
                break  # expect: DDP191
            loss.backward()
            optimizer.step()
        stopper(validate(model, val_batches))  # this rank's own validation batches
        if stopper.early_stop:
            break  # expect: DDP191
        if rank == 0 and os.path.exists("STOP"):
            break  # expect: DDP191
    criterion = nn.CrossEntropyLoss()
    for x, y in batches:
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        held_out = criterion(predict(x), y).item()  # predict(): a helper out of sight
        if held_out > 10.0:
            break  # expect: DDP191
    quota = steps_for(rank, total_steps)
    for step, (x, y) in enumerate(batches):
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step >= quota:
            break  # expect: DDP191
