"""Methods called once per batch that do not accumulate (for tests/test_check_ddp.py): a step
on every call, a step skipped when the loss is not finite, a backward that runs only when the
counter says so (with the step), a log every few calls. Written for the tests; never run: it
only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, every):
        self.model = DDP(nn.Linear(8, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.every, self.seen = every, 0

    def step(self, x, y, global_step):
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.seen += 1
        if global_step % self.every == 0:
            print(f"step {global_step}: loss {loss.item():.3f}")

    def careful_step(self, x, y):
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        if torch.isfinite(loss):
            self.optimizer.step()
        self.optimizer.zero_grad()

    def sparse_step(self, x, y, global_step):
        if global_step % self.every == 0:
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
            self.optimizer.zero_grad()


def main(loader):
    dist.init_process_group("gloo")
    trainer = Trainer(4)
    for i, (x, y) in enumerate(loader):
        trainer.step(x, y, i + 1)
        trainer.careful_step(x, y)
        trainer.sparse_step(x, y, i + 1)
