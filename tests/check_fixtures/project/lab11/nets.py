"""A policy whose BatchNorm sits four classes down: Policy -> Encoder -> Stage -> Block."""

from torch import nn


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)


class Stage(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.first, self.second = Block(channels), Block(channels)


class Encoder(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.stage = Stage(channels)


class Policy(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.encoder = Encoder(channels)
        self.head = nn.Linear(channels, 4)
