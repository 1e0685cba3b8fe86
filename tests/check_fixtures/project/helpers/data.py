"""Samplers and loaders built for the caller."""

from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

from .samplers import ExactShardSampler, PaddedShardSampler


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


def build_loaders(train_set, val_set, batch_size=8):
    train_sampler = DistributedSampler(train_set)
    val_sampler = make_val_sampler(val_set)
    return (DataLoader(train_set, batch_size=batch_size, sampler=train_sampler),
            DataLoader(val_set, batch_size=batch_size, sampler=val_sampler))


def build_all(train_set, val_set):
    return build_loaders(train_set, val_set)


def make_val_sampler(dataset):
    return PaddedShardSampler(dataset, num_replicas=2, rank=0)


def make_eval_loader(dataset, training, num_replicas, rank):
    if training:
        sampler = DistributedSampler(dataset)
    else:
        sampler = PaddedShardSampler(dataset, num_replicas, rank)
    return DataLoader(dataset, batch_size=8, sampler=sampler)


def make_exact_loader(dataset, num_replicas, rank):
    return DataLoader(dataset, batch_size=8, sampler=ExactShardSampler(dataset, num_replicas, rank))


def make_split_loader(dataset, split):
    if split == "train":
        sampler = DistributedSampler(dataset)
    else:
        sampler = ExactShardSampler(dataset, num_replicas=2, rank=0)
    return DataLoader(dataset, batch_size=8, sampler=sampler)
