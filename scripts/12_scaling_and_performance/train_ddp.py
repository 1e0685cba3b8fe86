"""Chapter 12: ResNet-18 on CIFAR-10 (or FakeData) with DDP, and the starved input pipeline.

train_single.py with the few lines DDP changes. --variant bad: the batches are made by the
training process between two steps (num_workers=0), copied with blocking copies; good:
loader workers, pinned memory (GPU), persistent workers, non-blocking copies. Every step is
timed: waiting for data against computing. --monitor-dir DIR: nvitop samples each node's GPUs
and host (local rank 0) into DIR/monitor_<host>.csv and a plot.

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/train_ddp.py --variant good
    mpiexec -n 2 python scripts/12_scaling_and_performance/train_ddp.py --monitor-dir monitor/
    torchrun --standalone --nproc_per_node=4 scripts/12_scaling_and_performance/train_ddp.py \\
        --data-dir ~/data/cifar10 --batch-size 256 --monitor-dir monitor/       # on GPUs
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


def start_monitor(directory: str | None, local_rank: int) -> Monitor | None:
    """An nvitop sampler on each node's first rank, watching this node's ranks."""
    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, (socket.gethostname(), os.getpid()))
    if directory is None or local_rank != 0:
        return None
    here = [pid for host, pid in pids if host == socket.gethostname()]
    return Monitor(Path(directory) / f"monitor_{socket.gethostname()}.csv", here)


def average_over_ranks(totals: tuple[float, float, int], device: torch.device) -> tuple[float, float, int]:
    """The ranks' mean seconds waiting and computing (a slow rank makes the others wait
    inside the all-reduce, which counts as computing)."""
    wait, compute, steps = totals
    tensor = torch.tensor([wait, compute], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor[0].item() / dist.get_world_size(), tensor[1].item() / dist.get_world_size(), steps


def main() -> None:
    args = parse_args()
    # 1. One process per device: join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    device, world_size, rank = ctx.device, ctx.world_size, ctx.rank
    torch.manual_seed(args.seed)
    # 2. The data, and the loader of --variant.
    dataset, about = cifar10_or_fake(args.data_dir, download=args.download, fake_size=args.fake_size,
                                     read_latency_ms=args.read_latency_ms)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=args.seed)
    loader = image_loader(dataset, args.batch_size, device, args.variant, sampler, args.workers,
                          ctx.local_world_size)
    print0(f"{about}; world_size={world_size} device={device.type} variant={args.variant}")
    monitor = start_monitor(args.monitor_dir, ctx.local_rank)
    # 3. The model and its optimizer.
    model = DDP(resnet18_cifar().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # 4. Train, timing every step.
    times = StepTimes(device, args.warm_up)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss = train_epoch(model, optimizer, loader, device, times, args.steps_per_epoch,
                           non_blocking=args.variant == "good")
        print0(f"epoch {epoch}: loss {loss:.4f} (rank 0)")
    # 5. Report: time per step waiting for data and computing, and images per second.
    wait, compute, steps = average_over_ranks(times.totals(), device)
    per_step = (f"data_wait={wait / steps:.4f}s compute={compute / steps:.4f}s "
                f"data_wait_share={100 * wait / (wait + compute):.1f}%")
    rate = world_size * args.batch_size * steps / (wait + compute)
    extra = f" {monitor.stop()}" if monitor else ""
    if device.type == "cuda":
        extra += f" max_memory_allocated={torch.cuda.max_memory_allocated(device) / 2**20:.0f}MiB"
    print0(f"summary: world_size={world_size} rank={rank} variant={args.variant} steps={steps} "
          f"{per_step} throughput={rate:.0f} samples/s{extra}")
    del model  # DDP holds the process group: release it first (chapter 01)
    del loader  # its workers stop now, not at exit (there, now and then, a "leaked semaphore" warning)
    cleanup_distributed()


if __name__ == "__main__":
    main()
