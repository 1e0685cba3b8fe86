"""Gradient accumulation done right in the shapes real scripts give it, for
tests/test_check_ddp.py (no finding): a no_sync helper of the project's around each
micro-batch (ddp_sync(ddp, sync)). Never run: it only has to parse."""

from my_project.misc import ddp_sync
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def train(net, data, optimizer, rounds, device, steps):
    ddp = DistributedDataParallel(net, device_ids=[device])
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for round_idx in range(rounds):
            with ddp_sync(ddp, round_idx == rounds - 1):  # no_sync() on all rounds but the last
                x, y = next(data)
                loss = nn.functional.mse_loss(ddp(x), y)
                loss.mul(1 / rounds).backward()
        optimizer.step()
