"""Model classes that build BatchNorm, registered by name (for tests/test_check_ddp.py)."""

from torch import nn

from .registry import HEADS, MODELS


@MODELS.register_module()
@HEADS.register_module()
class NormedNet(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)


class Base(nn.Module):
    pass


@MODELS.register_module("wide")
class WideNormedNet(Base):
    def __init__(self, channels=16):
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)
