"""Chapter 12: ResNet-18 on CIFAR-10 (or FakeData) in one process on one device.

The starting point: train_ddp.py is this script with the few lines DDP changes (the page
shows the diff). The same flags; --variant bad|good picks the input pipeline.

Run it:
    python scripts/12_scaling_and_performance/train_single.py --epochs 1 --steps-per-epoch 8
    python scripts/12_scaling_and_performance/train_single.py --data-dir ~/data/cifar10 --batch-size 256
"""

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
from torch.utils.data import RandomSampler

from utils.cli import add_training_args, add_variant_arg, make_parser
from utils.monitor import Monitor
from utils.vision import (
    StepTimes,
    add_workload_args,
    cifar10_or_fake,
    image_loader,
    resnet18_cifar,
    train_epoch,
)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=8, lr=0.01)
    add_variant_arg(parser, bad="num_workers=0: each batch made between steps, blocking copies",
                    good="loader workers, pinned memory, persistent workers, non-blocking copies")
    return add_workload_args(parser).parse_args()


def start_monitor(directory: str | None) -> Monitor | None:
    """An nvitop sampler of this machine's GPUs and host, watching this process."""
    if directory is None:
        return None
    return Monitor(Path(directory) / f"monitor_{socket.gethostname()}.csv", [os.getpid()])


def main() -> None:
    args = parse_args()
    # 1. One process, one device.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # gpu-checked: one GPU
    world_size, rank = 1, 0
    torch.manual_seed(args.seed)
    # 2. The data, and the loader of --variant.
    dataset, about = cifar10_or_fake(args.data_dir, download=args.download, fake_size=args.fake_size,
                                     read_latency_ms=args.read_latency_ms)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(args.seed))
    loader = image_loader(dataset, args.batch_size, device, args.variant, sampler, args.workers)
    print(f"{about}; world_size={world_size} device={device.type} variant={args.variant}", flush=True)
    monitor = start_monitor(args.monitor_dir)
    # 3. The model and its optimizer.
    model = resnet18_cifar().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # 4. Train, timing every step.
    times = StepTimes(device, args.warm_up)
    for epoch in range(args.epochs):
        loss = train_epoch(model, optimizer, loader, device, times, args.steps_per_epoch,
                           non_blocking=args.variant == "good")
        print(f"epoch {epoch}: loss {loss:.4f}", flush=True)
    # 5. Report: time per step waiting for data and computing, and images per second.
    wait, compute, steps = times.totals()
    per_step = f"data_wait={wait / steps:.4f}s compute={compute / steps:.4f}s"
    rate = world_size * args.batch_size * steps / (wait + compute)
    extra = f" {monitor.stop()}" if monitor else ""
    if device.type == "cuda":
        extra += f" max_memory_allocated={torch.cuda.max_memory_allocated(device) / 2**20:.0f}MiB"
    print(f"summary: world_size={world_size} rank={rank} variant={args.variant} steps={steps} "
          f"{per_step} throughput={rate:.0f} samples/s{extra}", flush=True)


if __name__ == "__main__":
    main()
