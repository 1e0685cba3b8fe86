"""A module in a folder without __init__.py, imported by name from it (for
tests/test_check_ddp.py: read_folder_module.py). Written for the tests; never run."""

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_loader(batch_size):
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    return DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data))
