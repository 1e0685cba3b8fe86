"""The real workload of chapters 12 and up: torchvision's ResNet-18 on CIFAR-10 images.

- ``resnet18_cifar()``: ``torchvision.models.resnet18`` sized for 32x32 inputs (a 3x3
  first convolution with stride 1 and no max-pool, as CIFAR ResNets do: the ImageNet stem
  would shrink a 32x32 image to 8x8 before the first block).
- ``cifar10_or_fake()``: CIFAR-10 through ``torchvision.datasets.CIFAR10`` from a local
  copy (``--data-dir``; ``download=True`` fetches it, for a login node with a network), or,
  without one, ``torchvision.datasets.FakeData`` with the same shapes, classes and
  transforms, so every chapter runs on a machine without a network. The description it
  returns says which, for the script's first line. ``read_latency_ms`` makes every image
  wait like a read from a network file system (``SlowReads``).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from utils.data import make_loader
from utils.timing import Clock

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


class SlowReads(Dataset):
    """A data set whose every item first waits ``latency_s``: the read of one image file
    from a network or parallel file system (NFS, Lustre, GPFS), an I/O wait that takes no
    CPU. The process that indexes the data set waits it: the training process itself
    without loader workers, a worker (while the ranks compute) with them."""

    def __init__(self, dataset: Dataset, latency_s: float) -> None:
        self.dataset, self.latency_s = dataset, latency_s

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        time.sleep(self.latency_s)
        return self.dataset[index]


def cifar10_or_fake(data_dir: str | Path | None, *, train: bool = True, download: bool = False,
                    fake_size: int = CIFAR10_TRAIN_SIZE, seed: int = 0,
                    read_latency_ms: float = 0) -> tuple[Dataset, str]:
    """(data set, description): CIFAR-10 from ``data_dir``, else FakeData of the same shape.

    FakeData draws each image and label from a generator seeded with its index (plus
    ``seed``), so every rank and every run sees the same fake data set.
    """
    from torchvision import datasets

    transform = cifar10_transforms(train)
    if data_dir is not None:
        dataset = datasets.CIFAR10(str(data_dir), train=train, download=download, transform=transform)
        about = f"data=CIFAR-10 ({len(dataset)} images from {data_dir})"
    else:
        dataset = datasets.FakeData(size=fake_size, image_size=(3, 32, 32), num_classes=10,
                                    transform=transform, random_offset=seed)
        about = (f"data=FakeData ({fake_size} random 32x32 images, 10 classes; "
                 "pass --data-dir with a CIFAR-10 copy for the real data set)")
    if read_latency_ms > 0:
        dataset = SlowReads(dataset, read_latency_ms / 1000)
        about += f"; every image read waits {read_latency_ms:g} ms (--read-latency-ms)"
    return dataset, about


def add_workload_args(parser):
    """The flags of chapter 12's training scripts (besides make_parser's and
    add_training_args')."""
    parser.add_argument("--data-dir", default=None, help="a CIFAR-10 copy (default: FakeData)")
    parser.add_argument("--download", action="store_true", help="fetch CIFAR-10 into --data-dir")
    parser.add_argument("--fake-size", type=int, default=512, help="FakeData images (default: %(default)s)")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="stop each epoch after this many steps (default: the whole epoch)")
    parser.add_argument("--warm-up", type=int, default=2,
                        help="steps left out of the timings (default: %(default)s)")
    parser.add_argument("--read-latency-ms", type=float, default=0, metavar="MS",
                        help="wait this long before each image, as a read from a network file system "
                             "would (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=None,
                        help="loader workers per rank with --variant good (default: 1 on a CPU, "
                             "up to 4 per GPU within the CPUs: utils/data.py loader_workers)")
    parser.add_argument("--monitor-dir", default=None, metavar="DIR",
                        help="sample GPUs and host with nvitop into DIR/monitor_<host>.csv and .png")
    return parser


# --8<-- [start:loaders]
def image_loader(dataset: Dataset, batch_size: int, device: torch.device, variant: str,
                 sampler, workers: int | None = None, local_world_size: int | None = None):
    """The pitfall. bad: every image decoded and augmented by the training process itself,
    between two steps, into pageable memory. good: make_loader's settings (utils/data.py):
    worker processes prepare the next batches while this one trains, pinned memory and a
    start method that is safe with CUDA and NCCL on a GPU."""
    from torch.utils.data import DataLoader

    if variant == "bad":
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, num_workers=0)
    if workers is None and device.type != "cuda":
        workers = 1  # a CPU rank: make_loader would use none
    return make_loader(dataset, batch_size, device, sampler=sampler, drop_last=True,
                       num_workers=workers, local_world_size=local_world_size, per_sample=True)
# --8<-- [end:loaders]


class StepTimes:
    """Per step, the seconds spent waiting for the batch (fetch and copy) and computing
    (forward, backward, all-reduce, optimizer), on the device's own timeline: utils/timing.py's
    Clock (CUDA events on a GPU). On a GPU, "waiting" is the time the GPU had nothing to do."""

    def __init__(self, device: torch.device, warm_up: int) -> None:
        self.clock, self.warm_up = Clock(device), warm_up
        self.marks: list[tuple] = []  # (before fetch, before forward, after optimizer step)

    def add(self, fetch, start, end) -> None:
        self.marks.append((fetch, start, end))

    def totals(self) -> tuple[float, float, int]:
        """(seconds waiting, seconds computing, timed steps) after the warm-up steps."""
        timed = self.marks[self.warm_up:]
        wait = sum(self.clock.seconds(f, s) for f, s, _ in timed)
        compute = sum(self.clock.seconds(s, e) for _, s, e in timed)
        return wait, compute, len(timed)


# --8<-- [start:train_epoch]
def train_epoch(model: nn.Module, optimizer, loader, device: torch.device, times: StepTimes,
                max_steps: int | None, non_blocking: bool) -> float:
    """One epoch (or its first max_steps steps); returns the mean loss of its steps."""
    loss_fn, losses, batches = nn.CrossEntropyLoss(), [], iter(loader)
    for _ in range(min(len(loader), max_steps or len(loader))):
        fetch = times.clock.mark()
        inputs, labels = next(batches)  # waits here while the batch is being made
        inputs = inputs.to(device, non_blocking=non_blocking)  # bad: a blocking copy
        labels = labels.to(device, non_blocking=non_blocking)
        start = times.clock.mark()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        times.add(fetch, start, times.clock.mark())
        losses.append(loss.detach())
    return torch.stack(losses).mean().item()
# --8<-- [end:train_epoch]
