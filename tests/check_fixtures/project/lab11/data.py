"""A helper that returns the data set and its loader, as a pair."""

from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def provide(data, shuffle):
    sampler = DistributedSampler(data, shuffle=shuffle)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    return data, loader
