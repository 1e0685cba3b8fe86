"""Gradient accumulation inside a method called once per batch (for tests/test_check_ddp.py):
backward() on every call, the optimizer step only when a counter says so, a counter passed in
or kept in an attribute, and no no_sync() anywhere. Written for the tests; never run: it only
has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, accum):
        self.model = DDP(nn.Linear(8, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.accum = accum

    def step(self, x, y, global_step):
        loss = nn.functional.mse_loss(self.model(x), y)
        (loss / self.accum).backward()  # expect: DDP050
        if global_step % self.accum == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()


class Runner:
    def __init__(self, every, amp):
        self.model = DDP(nn.Linear(8, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler(enabled=amp)
        self.every, self.amp, self.count = every, amp, 0

    def run_step(self, x, y):
        loss = nn.functional.mse_loss(self.model(x), y)
        if self.amp:
            self.scaler.scale(loss).backward()  # expect: DDP050
        else:
            loss.backward()
        self.count += 1
        if self.count >= self.every:
            self.count = 0
            if self.amp:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad()


def main(loader, accum):
    dist.init_process_group("gloo")
    trainer, runner = Trainer(accum), Runner(accum, amp=False)
    for i, (x, y) in enumerate(loader):
        trainer.step(x, y, i + 1)
        runner.run_step(x, y)
