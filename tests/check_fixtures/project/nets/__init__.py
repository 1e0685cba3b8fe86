"""A package of model classes for tests/test_check_ddp.py's project fixture: a train script
picks one by name, as real projects do."""

from .blocks import ConvBlock, PlainNet
from .norms import FrozenNet, GroupNet, TinyNet

__all__ = ["ConvBlock", "PlainNet", "FrozenNet", "GroupNet", "TinyNet"]
