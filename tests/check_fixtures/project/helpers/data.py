"""Samplers and loaders built for the caller."""

from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler


def make_data_sampler(dataset, shuffle, distributed):
    if distributed:
        return DistributedSampler(dataset, shuffle=shuffle)
    return RandomSampler(dataset) if shuffle else SequentialSampler(dataset)


def make_loader(dataset, batch_size, shuffle=True):
    sampler = DistributedSampler(dataset, shuffle=shuffle)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def forever(loader):
    while True:
        yield from loader
