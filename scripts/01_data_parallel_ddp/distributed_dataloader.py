"""Chapter 01: what DistributedSampler hands each rank, and the DataLoader around it.

The data set here is the numbers 0..N-1, so each sample *is* its index and the output
shows exactly which samples every rank draws: disjoint shards that cover the data set,
reshuffled each epoch by set_epoch(), and what happens when N does not divide evenly
by the world size (padding with repeats, or drop_last).

Run it:
    python scripts/01_data_parallel_ddp/distributed_dataloader.py
    torchrun --standalone --nproc_per_node=4 scripts/01_data_parallel_ddp/distributed_dataloader.py
    mpiexec -n 4 python scripts/01_data_parallel_ddp/distributed_dataloader.py
"""

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from utils.cli import add_training_args, make_parser, non_negative_int, positive_int
from utils.distributed import cleanup_distributed, print0, setup_distributed


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=2, lr=None)
    parser.add_argument("--num-samples", type=positive_int, default=11,
                        help="data set size; 11 divides evenly by few world sizes, so padding "
                        "shows (default: %(default)s)")
    parser.add_argument("--num-workers", type=non_negative_int, default=None,
                        help="DataLoader worker processes per rank (default: up to 4 on GPU, 0 on CPU)")
    return parser.parse_args()


def gather_indices(loader: DataLoader, world_size: int) -> list[list[int]]:
    """Every rank's sample indices for one pass over its loader, collected on all ranks."""
    mine = [index for (batch,) in loader for index in batch.tolist()]
    everyone: list = [None] * world_size
    dist.all_gather_object(everyone, mine)
    return everyone


def main() -> None:
    args = parse_args()
    # 1. Join the process group (see multinode_ddp_basic.py).
    ctx = setup_distributed(args.backend, args.timeout)
    dataset = TensorDataset(torch.arange(args.num_samples))

    # --8<-- [start:loader]
    # 2. The loader settings that matter on GPUs: worker processes prepare batches while
    #    the GPU computes, and pinned (page-locked) memory makes host-to-GPU copies faster.
    #    Workers start with forkserver, not fork: NCCL is not fork-safe (DDP's docs).
    on_gpu = ctx.device.type == "cuda"
    num_workers = args.num_workers if args.num_workers is not None else (2 if on_gpu else 0)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=num_workers, pin_memory=on_gpu,
                        persistent_workers=num_workers > 0,
                        multiprocessing_context="forkserver" if num_workers > 0 else None)
    # --8<-- [end:loader]
    print0(f"world_size={ctx.world_size} samples={len(dataset)} batch_size={args.batch_size} "
           f"num_workers={loader.num_workers} pin_memory={loader.pin_memory}")

    # --8<-- [start:epochs]
    # 3. Shards per epoch: set_epoch(e) seeds the shuffle with seed + e, so every rank
    #    draws the same permutation, takes its own slice, and gets a new one each epoch.
    orders = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        shards = gather_indices(loader, ctx.world_size)
        orders.append(shards)
        print0(f"epoch {epoch}: " + "  ".join(f"rank {r}: {s}" for r, s in enumerate(shards)))
    # --8<-- [end:epochs]

    # --8<-- [start:uneven]
    # 4. N not divisible by the world size: by default the sampler pads with repeats so
    #    every rank gets the same number of samples (ranks must take the same number of
    #    steps, or DDP's all-reduces would not pair up). drop_last=True trims instead.
    outcome = {}
    for drop_last in (False, True):
        even_sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                          shuffle=False, drop_last=drop_last)
        shards = gather_indices(DataLoader(dataset, batch_size=args.batch_size,
                                           sampler=even_sampler), ctx.world_size)
        counts = Counter(index for shard in shards for index in shard)
        repeated = sorted(i for i, c in counts.items() if c > 1)
        missing = sorted(set(range(len(dataset))) - set(counts))
        outcome[drop_last] = (len(shards[0]), sum(counts.values()) - len(counts), len(missing))
        print0(f"drop_last={drop_last}: {len(shards[0])} samples per rank; "
               f"seen twice: {repeated or 'none'}; never seen: {missing or 'none'}")
    # --8<-- [end:uneven]

    # 5. Summary: the shards of every epoch are disjoint and cover the data set (up to
    #    padding), and epochs differ.
    reshuffled = len(orders) > 1 and orders[0] != orders[1]
    (per_rank_pad, padded, _), (per_rank_drop, _, dropped) = outcome[False], outcome[True]
    print0(f"summary: world_size={ctx.world_size} samples={len(dataset)} "
           f"padded_per_rank={per_rank_pad} padded={padded} "
           f"drop_last_per_rank={per_rank_drop} dropped={dropped} "
           f"reshuffled_each_epoch={'yes' if reshuffled else 'no'}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
