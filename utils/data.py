"""Synthetic data sets: nothing to download, identical on every rank for a given seed."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def synthetic_classification(
    num_samples: int, num_features: int = 32, num_classes: int = 4, seed: int = 0
) -> TensorDataset:
    """Inputs drawn at random, labels from a fixed random linear 'teacher'.

    The labels are a learnable function of the inputs, so a model's loss falls as it
    trains; the same seed gives the same data set on every rank.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_samples, num_features, generator=generator)
    teacher = torch.randn(num_features, num_classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    return TensorDataset(inputs, labels)
