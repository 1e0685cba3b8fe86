"""Helpers of the project for project/train_review10.py and clean_review10.py: a run folder
whose helper starts the nccl group (and never picks a GPU); loaders that are generators over
a DataLoader (a subclass, or one over data it makes) that shuffles with no sampler; a sampler
helper and a batch helper around it; an epoch that caches features, then runs backward over
the cached micro-batches. Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler, TensorDataset


def start_run(cfg):
    if cfg.world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl", init_method="env://")
    folder = os.path.join(cfg.output, "run")
    os.makedirs(folder, exist_ok=True)
    return folder


class PrefetchLoader(DataLoader):
    def __iter__(self):
        return iter(list(super().__iter__()))


def endless(dataset, batch_size):
    loader = PrefetchLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    while True:
        yield from loader


def endless_noise(batch_size):
    noise = TensorDataset(torch.randn(256, 8), torch.randn(256, 2))
    loader = DataLoader(noise, batch_size=batch_size, shuffle=True)
    while True:
        yield from loader


def pick_sampler(dataset, shuffle, distributed):
    if distributed:
        return DistributedSampler(dataset, shuffle=shuffle)
    return SequentialSampler(dataset)


def group_batches(sampler, size, drop_last=True):
    return BatchSampler(sampler, size, drop_last=drop_last)


def cached_epoch(net, loader, optimizer, rounds):
    kept_x, kept_y = [], []
    for step, (x, y) in enumerate(loader):
        kept_x.append(x)
        kept_y.append(y)
        if (step + 1) % rounds > 0:
            continue
        optimizer.zero_grad()
        for j in range(rounds):
            loss = torch.nn.functional.mse_loss(net(kept_x[j]), kept_y[j])
            loss.backward()
        optimizer.step()
        kept_x, kept_y = [], []
