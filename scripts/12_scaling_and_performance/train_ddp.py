"""Chapter 12: a convolutional network on 32x32 images with DDP, and the starved input pipeline.

train_single.py with the few lines DDP changes. --variant bad: the batches are made by the
training process between two steps (num_workers=0), copied with blocking copies; good:
loader workers, pinned memory (GPU), persistent workers, non-blocking copies; device: the data
set on the device, each rank's batch cut from it by the DistributedSampler's indices and
augmented there. Every step is timed (waiting for data against computing); after training,
steps on one batch already on the device measure the step's own ceiling. --monitor-dir DIR:
nvitop samples each node's GPUs and host (local rank 0) into DIR/monitor_<host>.csv and a plot.

The model: --model resnet18 or small; without it, ResNet-18 on GPUs and the small one on CPUs.

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py --variant good
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py \\
        --model small --variant device --batch-size 16 --lr 0.05 --epochs 5
    mpiexec -n 2 python scripts/12_scaling_and_performance/train_ddp.py --monitor-dir monitor/
    torchrun --standalone --nproc_per_node=4 scripts/12_scaling_and_performance/train_ddp.py \\
        --data-dir ~/data/cifar10 --batch-size 256 --variant device --channels-last --bf16 \\
        --monitor-dir monitor/                                                  # on GPUs
The pitfall as the chapter shows it on CPUs: ResNet-18, and every image read waits 30 ms:
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py \\
        --model resnet18 --variant bad --epochs 1 --steps-per-epoch 5 --ceiling-steps 2 --read-latency-ms 30
"""

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.cli import add_training_args, add_variant_arg, make_parser
from utils.distributed import cleanup_distributed, print0, setup_distributed
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


def start_monitor(directory: str | None, local_rank: int) -> Monitor | None:
    """An nvitop sampler on each node's first rank, watching this node's ranks."""
    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, (socket.gethostname(), os.getpid()))
    if directory is None or local_rank != 0:
        return None
    here = [pid for host, pid in pids if host == socket.gethostname()]
    return Monitor(Path(directory) / f"monitor_{socket.gethostname()}.csv", here)


def mean_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """The ranks' mean of each value (seconds: a slow rank makes the others wait inside the
    all-reduce, which counts as computing)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def main() -> None:
    args = parse_args()
    # 1. One process per device: join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    device, world_size, rank = ctx.device, ctx.world_size, ctx.rank
    torch.manual_seed(args.seed)
    # 2. The data (a training and a held-out split), and the pipeline of --variant.
    train, held_out, about = load_images(args.data, args.data_dir, download=args.download,
                                         fake_size=args.fake_size, seed=args.seed)
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, seed=args.seed)
    batches, how = build_pipeline(args, train, device, sampler, args.seed + rank, ctx.local_world_size)
    total_steps = check_steps(args, len(batches))
    print0(f"{about}; world_size={world_size} device={device.type} variant={args.variant}: {how}")
    monitor = start_monitor(args.monitor_dir, ctx.local_rank)
    # 3. The model, its optimizer and the learning rate's decay to 0.
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = DDP(MODELS[args.model]().to(device, memory_format=memory_format),
                device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    schedule = linear_decay(optimizer, total_steps)
    # 4. Train, timing every step; the held-out accuracy after every whole epoch.
    times, began = StepTimes(device, args.warm_up), synchronized_clock(device)
    whole_epochs, accuracy = (args.steps_per_epoch or len(batches)) >= len(batches), ""
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss = train_epoch(model, optimizer, batches, device, times, args.steps_per_epoch,
                           non_blocking=args.variant == "good", bf16=args.bf16, schedule=schedule)
        if whole_epochs:
            accuracy = f" accuracy={evaluate(model, held_out, device, rank, world_size):.4f}"
        elapsed = synchronized_clock(device) - began
        print0(f"epoch {epoch}: loss {loss:.4f} (rank 0){accuracy} time={elapsed:.1f}s")
    # 5. The ceiling: steps on one batch already on the device; device: one batch made both ways.
    ceiling = ceiling_step(model, optimizer, next(iter(batches)), device, args.ceiling_steps, args.bf16)
    race = f" {batch_race(train, batches, args.batch_size, device)}" if args.variant == "device" else ""
    # 6. Report: time per step waiting for data and computing, and images per second.
    wait, compute, steps = times.totals()
    wait, compute, ceiling = mean_over_ranks([wait, compute, ceiling], device)
    per_step = (f"data_wait={wait / steps:.4f}s compute={compute / steps:.4f}s "
                f"data_wait_share={100 * wait / (wait + compute):.1f}%")
    rate = world_size * args.batch_size * steps / (wait + compute)
    most = world_size * args.batch_size / ceiling
    extra = f" {monitor.stop()}" if monitor else ""
    if device.type == "cuda":
        extra += f" max_memory_allocated={torch.cuda.max_memory_allocated(device) / 2**20:.0f}MiB"
    print0(f"summary: world_size={world_size} rank={rank} variant={args.variant} steps={steps} "
           f"{per_step} throughput={rate:.0f} samples/s ceiling={most:.0f} samples/s "
           f"ceiling_share={100 * rate / most:.1f}%{accuracy} "
           f"time={elapsed:.1f}s{race}{extra}")
    del model  # DDP holds the process group: release it first (chapter 01)
    del batches  # a loader's workers stop now, not at exit (there, now and then, a "leaked semaphore")
    cleanup_distributed()


if __name__ == "__main__":
    main()
