"""Gradient accumulation without no_sync() in the shapes real scripts give it, for
tests/test_check_ddp.py (exactly the `# expect:` lines): a loss scaler of the project's that
runs backward() itself (update_grad=), a wrap through a helper of the project's, and a
no_sync() that only wraps an evaluation. Never run: it only has to parse."""

import torch
from my_project.utils import NativeScaler, smart_DDP
from torch import nn


def train(model, loader, optimizer, accum_iter):
    model = smart_DDP(model)  # DistributedDataParallel, in a helper of another file
    loss_scaler = NativeScaler()
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y) / accum_iter
        loss_scaler(loss, optimizer, update_grad=(step + 1) % accum_iter == 0)  # expect: DDP050
        if (step + 1) % accum_iter == 0:
            optimizer.zero_grad()


def train_split(model, batches, optimizer, microbatch, held_out):
    ddp = smart_DDP(model)
    for x, y in batches:
        for i in range(0, len(x), microbatch):  # micro-batches of one batch, a step after them
            loss = nn.functional.mse_loss(ddp(x[i:i + microbatch]), y[i:i + microbatch])
            loss.backward()  # expect: DDP050
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad(), ddp.no_sync():  # an evaluation: no gradient to hold back
            ddp(held_out)
