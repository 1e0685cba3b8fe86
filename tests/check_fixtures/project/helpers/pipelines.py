"""Builders that return tuples, for train_review5.py: a training loader on a
DistributedSampler beside an evaluation loader on an exact split; an evaluation loader on a
padding sampler or none; a loader helper that makes its own DistributedSampler and one that
makes a RandomSampler; a wrap helper that returns the wrapper with the optimizer; a step
helper that steps only when told."""

from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from helpers.samplers import ExactShardSampler


def build_train_and_eval(train_set, val_set, world_size, rank, batch_size=8):
    train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True)
    val_sampler = ExactShardSampler(val_set, world_size, rank)  # every sample once: no padding
    train_loader = DataLoader(train_set, batch_size=batch_size, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=batch_size, sampler=val_sampler)
    return train_set, val_set, train_loader, val_loader


def sharded_loader(dataset, batch_size, rank, world_size, shuffle):
    sampler = None
    if shuffle:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    return sampler, DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def eval_loader(dataset, distributed):
    sampler = DistributedSampler(dataset, shuffle=False) if distributed else None  # pads
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    return loader


def shuffled_loader(dataset, batch_size, shuffle):
    sampler = RandomSampler(dataset) if shuffle else None  # every rank: the whole data set
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def parallelize(model, optimizer, device):
    model = DistributedDataParallel(model.to(device), device_ids=[device])
    return model, optimizer


def apply_gradients(loss, optimizer, model, do_step=True):
    loss.backward()
    if do_step:
        optimizer.step()
        optimizer.zero_grad()
