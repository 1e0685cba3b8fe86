"""A trainer of the project whose step accumulates (for tests/test_check_ddp.py): backward()
on every call, the optimizer step when the count passed in says so."""

from torch import nn


class Stepper:
    def __init__(self, model, optimizer, accum):
        self.model, self.optimizer, self.accum = model, optimizer, accum

    def train(self, loader):
        for i, (x, y) in enumerate(loader, 1):
            self.step(x, y, i)

    def step(self, x, y, seen):
        loss = nn.functional.mse_loss(self.model(x), y) / self.accum
        loss.backward()
        if seen % self.accum == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
