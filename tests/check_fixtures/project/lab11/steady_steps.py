"""The quiet twin of steps.py: no_sync for every wrapper, and a stop decided on every rank."""

from contextlib import nullcontext

import torch.distributed as dist

from lab11.steps import backward


def steady_epoch(model, batches, optimizer, accum, scaler=None):
    for inputs in batches:
        for k in range(accum):
            maybe_no_sync = model.no_sync if k != accum - 1 else nullcontext
            with maybe_no_sync():
                backward(model(inputs[k]).sum() / accum, scaler)
        optimizer.step()
        optimizer.zero_grad()
        stop = inputs.isnan().any().float()
        dist.all_reduce(stop)
        if stop.item() > 0:
            return False
    return True
