"""A block that builds BatchNorm, re-exported by its package with `*` (for tests/test_check_ddp.py)."""

from torch import nn


class NormedBlock(nn.Sequential):
    def __init__(self, channels=8):
        super().__init__(nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels))
