"""Models whose BatchNorm sits in a block they hold and build later, or in a block of a
package that re-exports it with `*` (for tests/test_check_ddp.py). Their weights are set up by
an isinstance test on BatchNorm: that initializes it, and freezes nothing."""

from torch import nn

from .parts import NormedBlock


class Block(nn.Module):
    def __init__(self, features=8):
        super().__init__()
        self.norm = nn.BatchNorm1d(features)


class StackNet(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.layers = self.stack(Block, depth)
        self.apply(self.init_weights)

    @staticmethod
    def stack(block, depth):
        return nn.Sequential(*[block() for _ in range(depth)])

    @staticmethod
    def init_weights(module):
        if isinstance(module, nn.BatchNorm1d):
            nn.init.ones_(module.weight)


class PartsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = NormedBlock(8)
