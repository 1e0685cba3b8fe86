"""A plain DDP loop that skips the optimizer step after a non-finite loss: not gradient
accumulation, so no no_sync() is needed (tests/test_check_ddp.py: no finding). Never run."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, optimizer):
    model = DDP(model)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if torch.isfinite(loss):
            optimizer.step()
    dist.barrier()
