"""Chapter 03: DistributedSampler reshuffles only when you call set_epoch().

DistributedSampler shuffles with a generator seeded by seed + epoch, and its epoch is
whatever set_epoch() last set: 0 if it was never called. Without set_epoch() every rank
draws the same shard, in the same order, every epoch. The script prints a fingerprint
(a short hash) of the sample order each rank draws in each epoch, so the repeat shows.

Run it (add --variant bad for the pitfall):
    python scripts/03_distributed_sampler/set_epoch_shuffling.py
    torchrun --standalone --nproc_per_node=2 scripts/03_distributed_sampler/set_epoch_shuffling.py
    mpiexec -n 4 python scripts/03_distributed_sampler/set_epoch_shuffling.py
    qsub scripts/03_distributed_sampler/torchrun_distributed_sampler.sh   # PBS cluster

--variant bad: the epoch loop never calls set_epoch(); --variant good (default) does.
"""

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.distributed import cleanup_distributed, print0, setup_distributed

SHOWN_INDICES = 4  # how many of each rank's first indices an epoch line shows


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=8, lr=None)
    parser.add_argument("--num-samples", type=positive_int, default=64,
                        help="data set size (default: %(default)s)")
    add_variant_arg(parser, bad="never calls set_epoch",
                    good="set_epoch(epoch) before each epoch")
    return parser.parse_args()


def fingerprint(order: list[int]) -> str:
    """8 hex digits that change whenever the order of the indices changes."""
    return hashlib.sha256(",".join(map(str, order)).encode()).hexdigest()[:8]


# --8<-- [start:bad]
def epochs_without_set_epoch(loader: DataLoader, epochs: int) -> list[list[int]]:
    """bad: the sampler's epoch stays 0, so it shuffles with the same seed every epoch."""
    orders = []
    for _epoch in range(epochs):
        order = []
        for (batch,) in loader:  # a training step would use the batch here
            order.extend(batch.tolist())
        orders.append(order)
    return orders
# --8<-- [end:bad]


# --8<-- [start:good]
def epochs_with_set_epoch(loader: DataLoader, sampler: DistributedSampler,
                          epochs: int) -> list[list[int]]:
    """good: set_epoch(epoch) before the loader is iterated: the seed becomes seed + epoch."""
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        order = []
        for (batch,) in loader:  # a training step would use the batch here
            order.extend(batch.tolist())
        orders.append(order)
    return orders
# --8<-- [end:good]


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)

    # --8<-- [start:sampler]
    # 2. The data set is the numbers 0..N-1, so a sample is its own index. Every rank
    #    passes the same seed: the ranks must agree on one permutation to cut it into
    #    disjoint shards (a seed that differs by rank makes the shards overlap).
    dataset = TensorDataset(torch.arange(args.num_samples))
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    # --8<-- [end:sampler]
    print0(f"variant={args.variant} world_size={ctx.world_size} samples={len(dataset)} "
           f"batch_size={args.batch_size} seed={args.seed} epochs={args.epochs} "
           f"set_epoch={'yes' if args.variant == 'good' else 'no'}")

    # 3. Run the epochs: the two variants differ in one line, sampler.set_epoch(epoch).
    if args.variant == "bad":
        orders = epochs_without_set_epoch(loader, args.epochs)
    else:
        orders = epochs_with_set_epoch(loader, sampler, args.epochs)

    # 4. Collect every rank's orders on every rank and print one line per epoch: each
    #    rank's fingerprint and the first indices it drew.
    everyone: list = [None] * ctx.world_size
    dist.all_gather_object(everyone, orders)
    for epoch in range(args.epochs):
        cells = []
        for rank, rank_orders in enumerate(everyone):
            order = rank_orders[epoch]
            cells.append(f"rank {rank}: {fingerprint(order)} {order[:SHOWN_INDICES]}")
        print0(f"epoch {epoch}: " + "  ".join(cells))

    # 5. Summary: how many different orders each rank drew over the epochs.
    orders_per_rank = [len({fingerprint(order) for order in rank_orders}) for rank_orders in everyone]
    repeated = all(count == 1 for count in orders_per_rank) and args.epochs > 1
    if repeated:
        print0(f"WARNING: every rank drew the same shard in the same order in all {args.epochs} "
               "epochs: without set_epoch() the sampler reuses the seed of epoch 0.")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} epochs={args.epochs} "
           f"orders_per_rank={min(orders_per_rank)} "
           f"same_order_every_epoch={'yes' if repeated else 'no'}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
