"""Loader builders of a project (tests/check_fixtures/project/train_eighth_feed.py): one that
returns what another builds, where the DistributedSampler is made when the group is up and
handed to a loader class of the project; one whose inner builder makes no sampler at all.
Written for the tests; never run."""

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


class FeedLoader:
    """Makes the DataLoader and reads it again and again."""

    def __init__(self, dataset, *, batch_size, shuffle=False, sampler=None):
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler)

    def __iter__(self):
        return iter(self.loader)


def make_data_loader(dataset, *, shuffle=False, batch_size=8):
    return _torch_data_loader(dataset, shuffle=shuffle, batch_size=batch_size)


def _torch_data_loader(dataset, *, shuffle, batch_size):
    sampler = None
    if dist.is_initialized():
        sampler = DistributedSampler(dataset, shuffle=shuffle, drop_last=True)
        batch_size //= dist.get_world_size()
    return FeedLoader(dataset, batch_size=batch_size, shuffle=sampler is None and shuffle, sampler=sampler)


def make_plain_loader(dataset, *, shuffle=False, batch_size=8):
    return _plain_loader(dataset, shuffle=shuffle, batch_size=batch_size)


def _plain_loader(dataset, *, shuffle, batch_size):
    return FeedLoader(dataset, batch_size=batch_size, shuffle=shuffle)
