"""The real workload of chapters 12 and up: a convolutional network on 32x32 images.

- ``resnet18_cifar()``: ``torchvision.models.resnet18`` sized for 32x32 inputs (a 3x3
  first convolution with stride 1 and no max-pool, as CIFAR ResNets do: the ImageNet stem
  would shrink a 32x32 image to 8x8 before the first block). ``small_cnn()``: three
  convolutions, for runs that must learn within seconds on a CPU.
- ``load_images()``: a data set as uint8 tensors (N x 3 x 32 x 32), a training split and a
  held-out split. ``digits`` (the default): scikit-learn's 1797 handwritten digits, shipped
  inside the package, so a run learns with no download. ``fake``: torchvision's FakeData
  (random images, random labels: nothing to learn). ``cifar10``: CIFAR-10 through
  ``torchvision.datasets.CIFAR10`` from a local copy (``--data-dir``; ``--download`` fetches
  it, for a login node with a network). The description it returns is the script's first line.
- Three input pipelines: ``image_loader()`` (bad and good: per-sample transforms in a
  DataLoader) and ``DeviceBatches`` (the whole data set on the device, augmented a batch at
  a time there). ``read_latency_ms`` makes every image read wait like one from a network
  file system (``SlowReads``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, Dataset

from utils.cli import non_negative_float, non_negative_int, output_dir, positive_int, usage_error
from utils.data import make_loader
from utils.timing import Clock, synchronized_clock

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_TRAIN_SIZE = 50_000
DIGITS_HELD_OUT = 360  # of scikit-learn's 1797 digits; the other 1437 train


def resnet18_cifar(num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18 (11.2 M parameters) with a stem for 32x32 images."""
    from torchvision.models import resnet18

    model = resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def small_cnn(num_classes: int = 10) -> nn.Module:
    """Three 3x3 convolutions with BatchNorm (24 k parameters): learns the digits in seconds."""
    def block(channels_in: int, channels_out: int) -> list[nn.Module]:
        return [nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


MODELS = {"resnet18": resnet18_cifar, "small": small_cnn}


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


def cifar10(data_dir: str | Path, train: bool, download: bool, transform=None) -> Dataset:
    """torchvision's CIFAR-10 from `data_dir`, or a usage error that says what to do."""
    from torchvision import datasets

    try:
        return datasets.CIFAR10(str(data_dir), train=train, download=download, transform=transform)
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        usage_error(f"--data-dir {data_dir}: no CIFAR-10 copy there ({error}); pass --download to "
                    "fetch one (on a machine with a network), or point at the folder that holds "
                    "cifar-10-batches-py")


def cifar10_or_fake(data_dir: str | Path | None, *, train: bool = True, download: bool = False,
                    fake_size: int = CIFAR10_TRAIN_SIZE, seed: int = 0,
                    read_latency_ms: float = 0) -> tuple[Dataset, str]:
    """(data set, description): CIFAR-10 from ``data_dir``, else FakeData of the same shape,
    as torchvision data sets of PIL images with the usual transforms (profile_step.py).

    FakeData draws each image and label from a generator seeded with its index (plus
    ``seed``), so every rank and every run sees the same fake data set.
    """
    from torchvision import datasets

    transform = cifar10_transforms(train)
    if data_dir is not None:
        dataset = cifar10(data_dir, train, download, transform)
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


@dataclass
class Images:
    """A split of a data set, decoded: uint8 images N x 3 x 32 x 32 and int64 labels, with
    the per-channel mean and standard deviation of the training split (0-255 scale), and
    whether a horizontal flip is an augmentation (not for digits: a flipped 2 is no 2)."""

    images: torch.Tensor
    labels: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    flip: bool = True

    def __len__(self) -> int:
        return len(self.labels)


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8x8 digits (0-16), scaled to 28x28, padded to 32x32, as 3 channels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) * (255 / 16)
    large = F.pad(F.interpolate(small, size=28, mode="bilinear", align_corners=False), (2, 2, 2, 2))
    return large.round().clamp(0, 255).to(torch.uint8).expand(-1, 3, -1, -1).contiguous(), \
        torch.tensor(digits.target, dtype=torch.int64)


def _pil_images(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    from torchvision.transforms.functional import pil_to_tensor

    images, labels = zip(*((pil_to_tensor(image), label) for image, label in dataset), strict=True)
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


def load_images(data: str, data_dir: str | Path | None = None, *, download: bool = False,
                fake_size: int = 512, seed: int = 0) -> tuple[Images, Images, str]:
    """(training split, held-out split, description) of ``digits``, ``fake`` or ``cifar10``."""
    from torchvision import datasets

    if data == "cifar10":
        if data_dir is None:
            usage_error("--data cifar10 needs --data-dir DIR (a CIFAR-10 copy; --download fetches one)")
        splits = [cifar10(data_dir, train, download) for train in (True, False)]
        tensors = [(torch.from_numpy(s.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(s.targets))
                   for s in splits]
        about = (f"data=CIFAR-10 ({len(splits[0])} training + {len(splits[1])} held-out images "
                 f"from {data_dir})")
    elif data == "fake":
        tensors = [_pil_images(datasets.FakeData(size=size, image_size=(3, 32, 32), num_classes=10,
                                                 random_offset=offset))
                   for size, offset in ((fake_size, seed), (max(1, fake_size // 4), seed + fake_size))]
        about = (f"data=FakeData ({fake_size} random 32x32 images, random labels: nothing to learn; "
                 "--data digits learns)")
    elif data == "digits":
        images, labels = _digits()
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))  # a fixed split
        held, train = order[:DIGITS_HELD_OUT], order[DIGITS_HELD_OUT:]
        tensors = [(images[train], labels[train]), (images[held], labels[held])]
        about = (f"data=digits (scikit-learn, {len(train)} training + {len(held)} held-out images, "
                 "8x8 scaled to 32x32)")
    else:
        usage_error(f"--data {data}: choose digits, fake or cifar10")
    floats = tensors[0][0].float()
    mean = tuple(floats.mean(dim=(0, 2, 3)).tolist())
    std = tuple(floats.std(dim=(0, 2, 3)).clamp(min=1.0).tolist())
    train, held_out = (Images(images, labels, mean, std, flip=data != "digits") for images, labels in tensors)
    return train, held_out, about


class AugmentedImages(Dataset):
    """One image at a time on the CPU, as torchvision's transforms work: random crop with
    4 px of padding and horizontal flip (training), float conversion, normalisation."""

    def __init__(self, split: Images, train: bool = True) -> None:
        from torchvision import transforms

        augment = [transforms.RandomCrop(32, padding=4)] if train else []
        augment += [transforms.RandomHorizontalFlip()] if train and split.flip else []
        self.split = split
        self.transform = transforms.Compose([
            *augment, transforms.ConvertImageDtype(torch.float32),
            transforms.Normalize([m / 255 for m in split.mean], [s / 255 for s in split.std])])

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.transform(self.split.images[index]), self.split.labels[index]


# --8<-- [start:loaders]
def image_loader(dataset: Dataset, batch_size: int, device: torch.device, variant: str,
                 sampler, workers: int | None = None, local_world_size: int | None = None):
    """The pitfall. bad: every image read and augmented by the training process itself,
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


def read_all(split: Images, latency_s: float, parallel: int = 32) -> float:
    """Read every image once, as a device-resident pipeline does before its first step:
    with --read-latency-ms, `parallel` reads in flight at a time. Returns the seconds."""
    start = time.perf_counter()  # gpu-checked: host reads only, no CUDA work in between
    if latency_s > 0:
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(lambda _: time.sleep(latency_s), range(len(split))))
    return time.perf_counter() - start  # gpu-checked


# --8<-- [start:device_batches]
class DeviceBatches:
    """The third pipeline: the data set decoded once into a uint8 tensor on the training
    device; each batch cut from it with the sampler's indices, then cropped, flipped and
    normalised there, the whole batch at once. No worker, no copy per step."""

    def __init__(self, split: Images, batch_size: int, device: torch.device, sampler,
                 seed: int, channels_last: bool = False) -> None:
        self.images, self.labels = split.images.to(device), split.labels.to(device)  # once
        self.batches = BatchSampler(sampler, batch_size, drop_last=True)  # the rank's indices
        self.mean = torch.tensor(split.mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(split.std, device=device).view(1, -1, 1, 1)
        self.generator = torch.Generator(device).manual_seed(seed)  # seed + rank: see the script
        self.channels_last, self.device, self.flip = channels_last, device, split.flip

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for indices in self.batches:
            index = torch.as_tensor(indices, device=self.device)
            yield self.augment(self.images[index]), self.labels[index]

    def augment(self, batch: torch.Tensor, pad: int = 4) -> torch.Tensor:
        """Random crop (4 px of zero padding) and horizontal flip, a different one per image
        (the random numbers drawn on the device, from this rank's generator)."""
        n, _, h, w = batch.shape
        padded = F.pad(batch, (pad, pad, pad, pad))
        dy, dx = (torch.randint(0, 2 * pad + 1, (2, n, 1), device=self.device, generator=self.generator))
        rows = (dy + torch.arange(h, device=self.device)).view(n, 1, h, 1)
        cols = (dx + torch.arange(w, device=self.device)).view(n, 1, 1, w)
        channels = torch.arange(batch.shape[1], device=self.device).view(1, -1, 1, 1)
        crops = padded[torch.arange(n, device=self.device).view(n, 1, 1, 1), channels, rows, cols]
        if self.flip:  # mirror each image with probability 1/2
            flip = torch.rand(n, device=self.device, generator=self.generator) < 0.5
            crops = torch.where(flip.view(n, 1, 1, 1), crops.flip(3), crops)
        out = (crops.float() - self.mean) / self.std
        return out.contiguous(memory_format=torch.channels_last) if self.channels_last else out
# --8<-- [end:device_batches]


def normalized(split: Images, device: torch.device) -> torch.Tensor:
    """The held-out images, on the device, normalised (no augmentation)."""
    mean = torch.tensor(split.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(split.std, device=device).view(1, -1, 1, 1)
    return (split.images.to(device).float() - mean) / std


def evaluate(model: nn.Module, split: Images, device: torch.device, rank: int = 0, world_size: int = 1,
             batch_size: int = 256) -> float:
    """Held-out accuracy. Rank r scores images r, r + N, r + 2N, ... (no padding, so every image
    counts once); the counts are summed over the ranks. Under DDP the first forward here
    copies rank 0's BatchNorm buffers to every rank, so every rank scores the same model."""
    import torch.distributed as dist

    images, labels = normalized(split, device)[rank::world_size], split.labels.to(device)[rank::world_size]
    model.eval()
    correct = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            predicted = model(images[start:start + batch_size]).argmax(dim=1)
            correct[0] += (predicted == labels[start:start + batch_size]).sum()
        correct[1] = len(labels)
    model.train()
    if world_size > 1:
        dist.all_reduce(correct)
    return (correct[0] / correct[1]).item()


def add_workload_args(parser):
    """The flags of chapter 12's training scripts (besides make_parser's and
    add_training_args'), and --variant's third choice, device."""
    variant = next(action for action in parser._actions if action.dest == "variant")
    variant.choices = ["good", "bad", "device"]
    variant.help = variant.help.replace(" (default:", "; device: the data set on the device, "
                                        "augmented a batch at a time there (default:")
    parser.add_argument("--data", choices=["digits", "fake", "cifar10"], default=None,
                        help="digits: scikit-learn's handwritten digits, they learn; fake: FakeData's "
                             "random images; cifar10: needs --data-dir (default: cifar10 with "
                             "--data-dir, fake with --fake-size, else digits)")
    parser.add_argument("--data-dir", type=output_dir, default=None,
                        help="a CIFAR-10 copy (implies --data cifar10)")
    parser.add_argument("--download", action="store_true", help="fetch CIFAR-10 into --data-dir")
    parser.add_argument("--fake-size", type=positive_int, default=None,
                        help="FakeData images (implies --data fake; default: 512)")
    parser.add_argument("--model", choices=sorted(MODELS), default=None,
                        help="resnet18 (torchvision's, CIFAR stem) or small (three convolutions) "
                             "(default: resnet18 on a GPU, small on CPUs, where a ResNet-18 epoch "
                             "takes minutes)")
    parser.add_argument("--steps-per-epoch", type=positive_int, default=None,
                        help="stop each epoch after this many steps (default: the whole epoch)")
    parser.add_argument("--warm-up", type=non_negative_int, default=2,
                        help="steps left out of the timings (default: %(default)s)")
    parser.add_argument("--ceiling-steps", type=positive_int, default=5,
                        help="timed steps on one batch already on the device, after a warm-up one: "
                             "the step's own ceiling (default: %(default)s)")
    parser.add_argument("--channels-last", action="store_true", help="channels_last memory format")
    parser.add_argument("--bf16", action="store_true", help="forward under bf16 autocast")
    parser.add_argument("--read-latency-ms", type=non_negative_float, default=0, metavar="MS",
                        help="wait this long before each image, as a read from a network file system "
                             "would (default: %(default)s)")
    parser.add_argument("--workers", type=non_negative_int, default=None,
                        help="loader workers per rank with --variant good (default: 1 on a CPU, "
                             "up to 4 per GPU within the CPUs: utils/data.py loader_workers)")
    parser.add_argument("--monitor-dir", type=output_dir, default=None, metavar="DIR",
                        help="sample GPUs and host with nvitop into DIR/monitor_<host>.csv and .png")
    return parser


def resolve_data(args) -> None:
    """--data from the flags given: cifar10 with --data-dir, fake with --fake-size, else digits."""
    implied = "cifar10" if args.data_dir else "fake" if args.fake_size else "digits"
    args.data = args.data or implied
    if args.fake_size and args.data != "fake":
        usage_error(f"--fake-size sizes FakeData: it does not go with --data {args.data}")
    if args.data_dir and args.data != "cifar10":
        usage_error(f"--data-dir is for CIFAR-10: it does not go with --data {args.data}")
    args.fake_size = args.fake_size or 512


def check_steps(args, steps_per_epoch: int) -> int:
    """The training steps in all; stops with a message, not a ZeroDivisionError, when the
    warm-up takes every step."""
    steps = args.epochs * min(steps_per_epoch, args.steps_per_epoch or steps_per_epoch)
    if steps <= args.warm_up:  # the same on every rank: usage_error() ends them all
        usage_error(
            f"{steps} training step(s) in all ({args.epochs} epoch(s) of {steps_per_epoch} batches of "
            f"{args.batch_size} per rank), and --warm-up {args.warm_up} leaves them all out of the "
            "timings: use more --epochs or data (--fake-size), a smaller --batch-size, "
            "or a smaller --warm-up")
    return steps


def build_pipeline(args, train: Images, device: torch.device, sampler, seed: int,
                   local_world_size: int | None = None):
    """(batches, description) for --variant: a DataLoader (bad, good) or DeviceBatches (device).
    Without --model, the model follows the device (default_model): the description says which."""
    how = default_model(args, device)
    latency_s = args.read_latency_ms / 1000
    if args.variant == "device":
        seconds = read_all(train, latency_s)
        batches = DeviceBatches(train, args.batch_size, device, sampler, seed, args.channels_last)
        return batches, f"{len(train)} images read once ({seconds:.1f} s), kept on the device{how}"
    dataset = AugmentedImages(train)
    if latency_s > 0:
        dataset = SlowReads(dataset, latency_s)
    loader = image_loader(dataset, args.batch_size, device, args.variant, sampler, args.workers,
                          local_world_size)
    if args.variant == "bad":
        return loader, f"every image read and augmented in the training process, inside the step{how}"
    return loader, (f"every image read and augmented by {loader.num_workers} worker process(es) per rank, "
                    f"ahead of the step{how}")


def default_model(args, device: torch.device) -> str:
    """--model when given (""); else ResNet-18 on a GPU and the small network on CPUs, where a
    ResNet-18 epoch of the digits takes minutes: sets args.model, returns what to print."""
    if args.model is not None:
        return ""
    args.model = "resnet18" if device.type == "cuda" else "small"
    return f"; model={args.model} (the default on a {device.type.upper()}; --model resnet18|small picks)"


def batch_race(split: Images, batches: DeviceBatches, batch_size: int, device: torch.device,
               rounds: int = 10) -> str:
    """Seconds to make one batch, per sample (the loaders' transforms, one image at a time in
    this process, then the collate) and on the device (DeviceBatches), timed in turn; the
    fastest of `rounds` each, as timeit advises (other processes only ever add time)."""
    from torch.utils.data import DataLoader

    loader, indices = DataLoader(AugmentedImages(split), batch_size=batch_size), list(range(batch_size))
    per_sample, on_device = [], []
    for _ in range(rounds):
        start = synchronized_clock(device)
        next(iter(loader))[0].to(device)
        middle = synchronized_clock(device)
        batches.augment(batches.images[torch.as_tensor(indices, device=device)])
        per_sample.append(middle - start)
        on_device.append(synchronized_clock(device) - middle)
    return (f"per_sample_batch={min(per_sample):.6f}s device_batch={min(on_device):.6f}s "
            f"device_batch_speedup={min(per_sample) / min(on_device):.1f}")


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


def train_step(model: nn.Module, optimizer, inputs: torch.Tensor, labels: torch.Tensor,
               bf16: bool = False, schedule=None) -> torch.Tensor:
    """Forward (under bf16 autocast with bf16=True), backward, optimizer step, and a step of
    the learning-rate schedule if there is one; the loss."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(inputs.device.type, dtype=torch.bfloat16) if bf16 else nullcontext():
        loss = F.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
    if schedule is not None:
        schedule.step()
    return loss.detach()


def linear_decay(optimizer, total_steps: int):
    """--lr at the first step, falling linearly to 0 at the last: the final epochs settle."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total_steps))


# --8<-- [start:train_epoch]
def train_epoch(model: nn.Module, optimizer, loader, device: torch.device, times: StepTimes,
                max_steps: int | None, non_blocking: bool, bf16: bool = False, schedule=None) -> float:
    """One epoch (or its first max_steps steps); returns the mean loss of its steps."""
    losses, batches = [], iter(loader)
    for _ in range(min(len(loader), max_steps or len(loader))):
        fetch = times.clock.mark()
        inputs, labels = next(batches)  # waits here while the batch is being made
        inputs = inputs.to(device, non_blocking=non_blocking)  # bad: a blocking copy
        labels = labels.to(device, non_blocking=non_blocking)
        start = times.clock.mark()
        losses.append(train_step(model, optimizer, inputs, labels, bf16, schedule))
        times.add(fetch, start, times.clock.mark())
    return torch.stack(losses).mean().item()
# --8<-- [end:train_epoch]


# --8<-- [start:ceiling]
def ceiling_step(model: nn.Module, optimizer, batch, device: torch.device, steps: int,
                 bf16: bool = False) -> float:
    """Seconds per step (the mean of `steps`) on one batch already on the device, after one
    warm-up step: the most any input pipeline can deliver with this model, batch and device.
    The learning-rate schedule is not stepped: the ceiling's steps train at its last rate."""
    inputs, labels = (t.to(device) for t in batch)
    clock = Clock(device)
    train_step(model, optimizer, inputs, labels, bf16)
    start = clock.mark()
    for _ in range(steps):
        train_step(model, optimizer, inputs, labels, bf16)
    return clock.seconds(start, clock.mark()) / steps
# --8<-- [end:ceiling]
