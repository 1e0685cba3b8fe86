"""Chapter 12: a convolutional network on 32x32 images in one process on one device.

The starting point: train_ddp.py is this script with the few lines DDP changes (the page
shows the diff). The same flags. --variant picks the input pipeline: bad and good load and
augment one image at a time in a DataLoader; device keeps the data set on the device and
augments a batch at a time there. The data set: scikit-learn's digits (default), FakeData
(--data fake) or CIFAR-10 (--data-dir). After training, steps on one batch already on the
device measure the step's own ceiling.
The model: --model resnet18 or small; without it, ResNet-18 on GPUs and the small one on CPUs.

Run it:
    python scripts/12_scaling_and_performance/train_single.py --model small --variant device --batch-size 64
    python scripts/12_scaling_and_performance/train_single.py --epochs 1 --steps-per-epoch 8
    python scripts/12_scaling_and_performance/train_single.py --data-dir ~/data/cifar10 --batch-size 256 \\
        --variant device --channels-last --bf16                                   # on a GPU
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
from utils.timing import synchronized_clock
from utils.vision import (
    MODELS,
    StepTimes,
    add_workload_args,
    batch_race,
    build_pipeline,
    ceiling_step,
    check_steps,
    evaluate,
    linear_decay,
    load_images,
    resolve_data,
    train_epoch,
)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=8, lr=0.01)
    add_variant_arg(parser, bad="num_workers=0: each batch made between steps, blocking copies",
                    good="loader workers, pinned memory, persistent workers, non-blocking copies")
    args = add_workload_args(parser).parse_args()
    resolve_data(args)  # --data from --data-dir or --fake-size when not given
    return args


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
    # 2. The data (a training and a held-out split), and the pipeline of --variant.
    train, held_out, about = load_images(args.data, args.data_dir, download=args.download,
                                         fake_size=args.fake_size, seed=args.seed)
    sampler = RandomSampler(train, generator=torch.Generator().manual_seed(args.seed))
    batches, how = build_pipeline(args, train, device, sampler, args.seed + rank)
    total_steps = check_steps(args, len(batches))
    print(f"{about}; world_size={world_size} device={device.type} variant={args.variant}: {how}", flush=True)
    monitor = start_monitor(args.monitor_dir)
    # 3. The model, its optimizer and the learning rate's decay to 0.
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = MODELS[args.model]().to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    schedule = linear_decay(optimizer, total_steps)
    # 4. Train, timing every step; the held-out accuracy after every whole epoch.
    times, began = StepTimes(device, args.warm_up), synchronized_clock(device)
    whole_epochs, accuracy = (args.steps_per_epoch or len(batches)) >= len(batches), ""
    for epoch in range(args.epochs):
        loss = train_epoch(model, optimizer, batches, device, times, args.steps_per_epoch,
                           non_blocking=args.variant == "good", bf16=args.bf16, schedule=schedule)
        if whole_epochs:
            accuracy = f" accuracy={evaluate(model, held_out, device, rank, world_size):.4f}"
        elapsed = synchronized_clock(device) - began
        print(f"epoch {epoch}: loss {loss:.4f}{accuracy} time={elapsed:.1f}s", flush=True)
    # 5. The ceiling: steps on one batch already on the device; device: one batch made both ways.
    ceiling = ceiling_step(model, optimizer, next(iter(batches)), device, args.ceiling_steps, args.bf16)
    race = f" {batch_race(train, batches, args.batch_size, device)}" if args.variant == "device" else ""
    # 6. Report: time per step waiting for data and computing, and images per second.
    wait, compute, steps = times.totals()
    per_step = (f"data_wait={wait / steps:.4f}s compute={compute / steps:.4f}s "
                f"data_wait_share={100 * wait / (wait + compute):.1f}%")
    rate = world_size * args.batch_size * steps / (wait + compute)
    most = world_size * args.batch_size / ceiling
    extra = f" {monitor.stop()}" if monitor else ""
    if device.type == "cuda":
        extra += f" max_memory_allocated={torch.cuda.max_memory_allocated(device) / 2**20:.0f}MiB"
    print(f"summary: world_size={world_size} rank={rank} variant={args.variant} steps={steps} "
          f"{per_step} throughput={rate:.0f} samples/s ceiling={most:.0f} samples/s "
          f"ceiling_share={100 * rate / most:.1f}%{accuracy} "
          f"time={elapsed:.1f}s{race}{extra}", flush=True)


if __name__ == "__main__":
    main()
