"""A helper of the project that converts BatchNorm for DDP (for tests/test_check_ddp.py)."""

from torch import nn


def synced(model):
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)
