"""Data sets a train script picks by name with eval (for tests/test_check_ddp.py): not models."""

from torch.utils.data import Dataset


class Squares(Dataset):
    def __len__(self):
        return 0
