"""Trainers and runners that a config picks from a registry (for tests/test_check_ddp.py).
Every trainer runs the base's train(), whose step accumulates without no_sync; the runners
differ in fit(): one accumulates, one steps on every batch."""

from torch import nn

from .registry import RUNNERS, TRAINERS


class TrainerBase:
    def __init__(self, model, optimizer, accum=4):
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


@TRAINERS.register_module()
class Trainer(TrainerBase):
    pass


@TRAINERS.register_module("logged")
class LoggedTrainer(TrainerBase):
    def log(self, text):
        print(text)


@RUNNERS.register_module()
class AccumulatingRunner(TrainerBase):
    def fit(self, loader):
        for i, (x, y) in enumerate(loader, 1):
            (nn.functional.mse_loss(self.model(x), y) / self.accum).backward()
            if i % self.accum == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()


@RUNNERS.register_module()
class PlainRunner(TrainerBase):
    def fit(self, loader):
        for x, y in loader:
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
