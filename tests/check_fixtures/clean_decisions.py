"""Loops left on values every rank shares, for tests/test_check_ddp.py (no finding, no
note): a step read from a helper that was given the rank, scores all-gathered, an evaluation
of the file that gathers before it returns, a logger synchronized across the ranks, a loss
dict reduced by a helper, counters and options. Written for the tests; never run: it only
has to parse."""

import argparse
import json

import torch
import torch.distributed as dist
from my_project.checkpoints import load_meta
from my_project.utils import reduce_dict
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_meta(path, rank=0):
    """The run's metadata; the rank only chooses who prints."""
    with open(path) as handle:
        meta = json.load(handle)
    if rank == 0:
        print(f"resuming at step {meta['step']}")
    return meta


def evaluate(model, batches):
    """Every rank's score, gathered: every rank returns the same mean."""
    with torch.no_grad():
        mine = sum((model(x).argmax(1) == y).float().mean().item() for x, y in batches) / len(batches)
    scores = [None] * dist.get_world_size()
    dist.all_gather_object(scores, mine)
    return sum(scores) / len(scores)


def train(net, batches, val_batches, optimizer, logger, path):
    parser = argparse.ArgumentParser()
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--total-steps", type=int, default=1000)
    args = parser.parse_args()
    rank = dist.get_rank()
    model = DDP(net)
    meta = load_meta(path, rank=rank)  # a helper given the rank: its result is the run's
    step = meta["step"]
    resumed = read_meta(path, rank=rank)["step"]
    best = 0.0
    while True:
        for x, y in batches:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            logger.update(loss=loss.item())
            step += 1
            if step == args.total_steps or resumed + step > 2 * args.total_steps:
                break
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, logger.last)
        best = max(best, max(gathered))  # the same on every rank
        if best > args.threshold:
            break
        if evaluate(model, val_batches) > args.threshold:
            break
        logger.synchronize_between_processes()
        if logger.loss.global_avg < 0.01:
            break
        losses = reduce_dict({"loss": loss.detach()})
        if losses["loss"] < 0.01:
            break
