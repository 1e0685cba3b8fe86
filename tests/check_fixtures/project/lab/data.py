"""A loader helper: a shuffling DistributedSampler for training, an exact shard otherwise."""

import torch.distributed as dist
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, batch_size=8, shuffle=False, kind=DataLoader):
    if not dist.is_initialized():
        return kind(dataset, batch_size=batch_size, shuffle=shuffle)
    if shuffle:
        sampler = DistributedSampler(dataset)
        return kind(dataset, batch_size=batch_size, sampler=sampler)
    shard = Subset(dataset, list(range(dist.get_rank(), len(dataset), dist.get_world_size())))
    return kind(shard, batch_size=batch_size)
