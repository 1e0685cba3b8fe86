"""Loader helpers of a ninth review's shapes (for tests/test_check_ddp.py): a training and a
held-out loader, each on a DistributedSampler, returned together; or the held-out loader on
no sampler (every rank reads it whole). Written for the tests;
never run: it only has to parse."""

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_loaders(batch_size):
    fitting = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    held_out = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    fit_sampler = DistributedSampler(fitting, drop_last=True)
    fit_loader = DataLoader(fitting, batch_size=batch_size, sampler=fit_sampler)
    held_out_loader = DataLoader(held_out, batch_size=batch_size, sampler=DistributedSampler(held_out))
    return fit_loader, held_out_loader


def make_split_loaders(batch_size):
    fitting = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    held_out = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    fit_sampler = DistributedSampler(fitting)
    fit_loader = DataLoader(fitting, batch_size=batch_size, sampler=fit_sampler)
    held_out_loader = DataLoader(held_out, batch_size=batch_size, shuffle=False)
    return fit_loader, held_out_loader
