"""The real workload of chapters 12 and up: torchvision's ResNet-18 on CIFAR-10 images.

- ``resnet18_cifar()``: ``torchvision.models.resnet18`` sized for 32x32 inputs (a 3x3
  first convolution with stride 1 and no max-pool, as CIFAR ResNets do: the ImageNet stem
  would shrink a 32x32 image to 8x8 before the first block).
- ``cifar10_or_fake()``: CIFAR-10 through ``torchvision.datasets.CIFAR10`` from a local
  copy (``--data-dir``; ``download=True`` fetches it, for a login node with a network), or,
  without one, ``torchvision.datasets.FakeData`` with the same shapes, classes and
  transforms, so every chapter runs on a machine without a network. The description it
  returns says which, for the script's first line.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn
from torch.utils.data import Dataset

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_TRAIN_SIZE = 50_000


def resnet18_cifar(num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18 (11.2 M parameters) with a stem for 32x32 images."""
    from torchvision.models import resnet18

    model = resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def cifar10_transforms(train: bool):
    """The usual CIFAR-10 augmentation (random crop with 4 px padding, horizontal flip) for
    training, then tensor conversion and normalisation with the data set's statistics."""
    from torchvision import transforms

    augment = [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()] if train else []
    normalize = transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)
    return transforms.Compose([*augment, transforms.ToTensor(), normalize])


def cifar10_or_fake(data_dir: str | Path | None, *, train: bool = True, download: bool = False,
                    fake_size: int = CIFAR10_TRAIN_SIZE, seed: int = 0) -> tuple[Dataset, str]:
    """(data set, description): CIFAR-10 from ``data_dir``, else FakeData of the same shape.

    FakeData draws each image and label from a generator seeded with its index (plus
    ``seed``), so every rank and every run sees the same fake data set.
    """
    from torchvision import datasets

    transform = cifar10_transforms(train)
    if data_dir is not None:
        dataset = datasets.CIFAR10(str(data_dir), train=train, download=download, transform=transform)
        return dataset, f"data=CIFAR-10 ({len(dataset)} images from {data_dir})"
    dataset = datasets.FakeData(size=fake_size, image_size=(3, 32, 32), num_classes=10,
                                transform=transform, random_offset=seed)
    return dataset, (f"data=FakeData ({fake_size} random 32x32 images, 10 classes; "
                     "pass --data-dir with a CIFAR-10 copy for the real data set)")
