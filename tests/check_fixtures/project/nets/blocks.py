"""Model classes with BatchNorm, one of them through a block it builds (for tests/test_check_ddp.py)."""

from torch import nn


class ConvBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.norm(self.conv(x)).relu()


class PlainNet(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.blocks = nn.Sequential(ConvBlock(channels), ConvBlock(channels))

    def forward(self, x):
        return self.blocks(x)
