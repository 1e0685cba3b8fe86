"""An epoch of training: accumulation whose no_sync runs only for a sharded (FSDP) model, and
a return on rank 0 alone inside the loop."""

from contextlib import nullcontext

import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def backward(loss, scaler):
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()


def train_epoch(model, batches, optimizer, accum, scaler=None):
    for inputs in batches:
        for k in range(accum):
            maybe_no_sync = nullcontext
            if isinstance(model, FSDP) and k != accum - 1:
                maybe_no_sync = model.no_sync  # a DDP model all-reduces every micro-batch
            with maybe_no_sync():
                backward(model(inputs[k]).sum() / accum, scaler)
        optimizer.step()
        optimizer.zero_grad()
        if dist.get_rank() == 0 and inputs.isnan().any():
            return False  # rank 0 leaves; the others wait in the next all-reduce
    return True

