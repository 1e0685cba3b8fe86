"""A model class without BatchNorm, and a data set, both picked by name (for tests/test_check_ddp.py)."""

from torch import nn
from torch.utils.data import Dataset

from .registry import HEADS


@HEADS.register_module()
class LinearNet(nn.Module):
    def __init__(self, features=8):
        super().__init__()
        self.fc = nn.Linear(features, 2)


class Shapes(Dataset):
    def __len__(self):
        return 0
