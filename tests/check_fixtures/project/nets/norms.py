"""Model classes whose BatchNorm is not a DDP pitfall, or that have none (for
tests/test_check_ddp.py): BatchNorm frozen in eval mode, GroupNorm, no norm at all."""

from torch import nn


class FrozenNet(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)

    def train(self, mode=True):
        super().train(mode)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
        return self


class GroupNet(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(2, channels)


class TinyNet(nn.Module):
    def __init__(self, features=8):
        super().__init__()
        self.fc = nn.Linear(features, 2)
