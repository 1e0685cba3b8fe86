"""Samplers of the project: one pads the shards to equal length, as DistributedSampler does;
one gives each rank its exact share."""

import math

from torch.utils.data import Sampler


class PaddedShardSampler(Sampler):
    def __init__(self, dataset, num_replicas, rank):
        self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.rank, self.num_replicas, self.length = rank, num_replicas, len(dataset)

    def __iter__(self):
        indices = list(range(self.length))
        indices += indices[: self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


class ExactShardSampler(Sampler):
    def __init__(self, dataset, num_replicas, rank):
        self.indices = range(rank, len(dataset), num_replicas)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)
