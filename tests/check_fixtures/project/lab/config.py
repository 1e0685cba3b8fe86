"""A run's settings: properties pick the autocast dtype from a precision word; the data
settings keep drop_last off by default."""

from dataclasses import dataclass

import torch


class RunConfig:
    def __init__(self, precision="amp_bf16", epochs=3):
        self.precision = precision
        self.epochs = epochs

    @property
    def amp_dtype(self):
        if self.precision == "amp_fp16":
            return torch.float16
        return torch.bfloat16

    @property
    def wide_dtype(self):
        if self.precision == "fp32":
            return torch.float32
        return torch.bfloat16


@dataclass
class DataSettings:
    batch_size: int = 8
    drop_last: bool = False


@dataclass
class AmpSettings:
    autocast_dtype: torch.dtype = torch.float16
    steady_dtype: torch.dtype = torch.bfloat16
