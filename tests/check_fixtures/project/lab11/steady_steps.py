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


def world_size_and_rank():
    return dist.get_world_size(), dist.get_rank()


def generate(model, tokens, steps):
    world_size, rank = world_size_and_rank()  # the tuple carries the rank; world_size is shared
    for _ in range(steps):
        tokens = model(tokens)
        done = (tokens > 0).all()
        if world_size == 1:
            if done:
                break
        else:
            flag = done.int()
            dist.all_reduce(flag)
            if flag == world_size:
                break
    return tokens
