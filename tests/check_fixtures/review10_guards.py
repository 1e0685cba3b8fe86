"""Saves under tests the checker cannot read, and evaluation under float16 autocast (for
tests/test_check_ddp.py). Notes: a save under a call of an installed package that may pick
rank 0 (`if should_write(args):`), under a flag of an object made out of sight (`if
keeper.enabled:`), under `self.writes` set only from a value out of sight. Errors, where the
code in view shows the pitfall: a save under a test of the epoch, or of an option of the
file's own parser, or a number out of sight compared (`epoch % settings.SAVE_EVERY == 0`),
runs on every rank; float16 autocast in a step whose loss goes to
backward(). Quiet: float16 autocast in a validate() that calls .eval() and runs no backward.
Written for the tests; never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from keeping import Keeper, settings, should_write
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--save-last", action="store_true")
    return parser.parse_args()


class Loop:
    def __init__(self, args):
        self.net = DistributedDataParallel(nn.Linear(8, 2).cuda())
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.writes = args.report

    def step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):  # expect: DDP060
            loss = nn.functional.mse_loss(self.net(x), y)
        loss.backward()
        self.optimizer.step()

    def validate(self, batches):
        self.net.eval()
        with torch.autocast("cuda", dtype=torch.float16):
            return sum(float(self.net(x).sum()) for x in batches)

    def snapshot(self):
        if self.writes:
            torch.save(self.net.module.state_dict(), "loop.pt")  # expect: DDP040 note


def main():
    args = options()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    loop = Loop(args)
    keeper = Keeper(args)
    for epoch in range(3):
        loop.step(torch.randn(4, 8).cuda(), torch.randn(4, 2).cuda())
        if should_write(args):
            torch.save(loop.net.module.state_dict(), "a.pt")  # expect: DDP040 note
        if keeper.enabled:
            torch.save(loop.net.module.state_dict(), "b.pt")  # expect: DDP040 note
        if epoch % 2 == 0:
            torch.save(loop.net.module.state_dict(), "c.pt")  # expect: DDP040
        if args.save_last:
            torch.save(loop.net.module.state_dict(), "d.pt")  # expect: DDP040
        if epoch % settings.SAVE_EVERY == 0:  # a number compared, not a flag: read
            torch.save(loop.net.module.state_dict(), "e.pt")  # expect: DDP040
    loop.snapshot()
    print(loop.validate([torch.randn(4, 8).cuda()]))
