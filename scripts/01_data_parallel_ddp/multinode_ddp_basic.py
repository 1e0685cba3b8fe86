"""Chapter 01: a minimal, complete DistributedDataParallel (DDP) training job.

One process per GPU (or per CPU slot); each trains a replica of the model on its own
shard of the data, and DDP averages the gradients so every replica takes the same step.

Run it (the same file, unchanged, everywhere):
    python scripts/01_data_parallel_ddp/multinode_ddp_basic.py           # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/01_data_parallel_ddp/multinode_ddp_basic.py
    mpiexec -n 4 python scripts/01_data_parallel_ddp/multinode_ddp_basic.py
    mpiexec -n 8 --ppn 4 python scripts/01_data_parallel_ddp/multinode_ddp_basic.py  # MPICH, PALS
    qsub scripts/01_data_parallel_ddp/torchrun_multigpu_ddp.sh           # PBS cluster

The pitfall (--variant bad): no DistributedSampler, so every rank trains on the whole
data set. N ranks do N times the work: each still goes through all of it, every epoch.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.replicas import parameter_checksum
from utils.timing import synchronized_clock


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    add_variant_arg(parser, bad="every rank trains on all of it",
                    good="DistributedSampler shards the data")
    return parser.parse_args()


def main() -> None:
    args = parse_args()

    # --8<-- [start:setup]
    # 1. Join the process group. setup_distributed() reads the launcher's variables
    #    (torchrun, mpiexec, srun, or none), picks nccl+GPU or gloo+CPU, and returns
    #    rank, local_rank, world_size, device, backend.
    ctx = setup_distributed(args.backend, args.timeout)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    # --8<-- [end:setup]
    check_global_batch(ctx, args.num_samples, args.batch_size)

    # 2. The same data set on every rank (same seed); the sampler decides who gets what.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    # --8<-- [start:good_loader]
    # good: each rank draws a different 1/world_size of the data set every epoch.
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler)
    # --8<-- [end:good_loader]
    if args.variant == "bad":
        # --8<-- [start:bad_loader]
        # bad: a plain shuffling loader. Every rank iterates over the whole data set.
        sampler = None
        loader = make_loader(dataset, args.batch_size, ctx.device, shuffle=True)
        # --8<-- [end:bad_loader]

    # --8<-- [start:model]
    # 3. Build the model on this rank's device, then wrap it. DDP broadcasts rank 0's
    #    parameters to every rank, and all-reduces gradients during backward().
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(ctx.device)
    model = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # --8<-- [end:model]

    # --8<-- [start:train]
    # 4. Train. set_epoch() reshuffles the shards differently each epoch (chapter 03).
    epoch_losses, epoch_seconds = [], []
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        loss_sum, samples_this_rank = torch.zeros((), device=ctx.device), 0
        start = synchronized_clock(ctx.device)
        # --8<-- [start:step]
        for inputs, labels in loader:
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            # --8<-- [end:step]
            loss_sum += loss.detach() * len(labels)
            samples_this_rank += len(labels)
        epoch_seconds.append(synchronized_clock(ctx.device) - start)
        # The epoch's mean loss over all ranks: sum (loss, count) across ranks, then divide.
        totals = torch.stack([loss_sum, torch.tensor(float(samples_this_rank), device=ctx.device)])
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        epoch_losses.append((totals[0] / totals[1]).item())
        print0(f"epoch {epoch + 1}/{args.epochs}  loss {epoch_losses[-1]:.4f}  "
               f"samples on rank 0 {samples_this_rank}  time {epoch_seconds[-1]:.3f} s")
    # --8<-- [end:train]

    # --8<-- [start:summary]
    # 5. What did each rank do? Gather every rank's sample count to rank 0.
    samples_per_rank = [None] * ctx.world_size
    dist.all_gather_object(samples_per_rank, samples_this_rank)
    work = sum(samples_per_rank) / len(dataset)  # 1.0 = the data set once per epoch
    print0(f"samples per rank per epoch: {samples_per_rank} (data set: {len(dataset)})")
    # Each rank's weights reduced to one number: DDP's averaged gradients give every
    # replica the same step, so the numbers agree (chapter 11 shows when they do not).
    checksums = [None] * ctx.world_size
    dist.all_gather_object(checksums, f"{parameter_checksum(model).item():.10f}")
    print0(f"weights checksum per rank: {', '.join(checksums)}")
    if work > 1.0:
        print0(f"WARNING: the ranks processed {work:.1f}x the data set each epoch: every "
               "rank trained on all of it, so adding ranks added work, not speed.")
    mean_epoch_s = sum(epoch_seconds[1:] or epoch_seconds) / len(epoch_seconds[1:] or epoch_seconds)
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} samples_per_rank={samples_per_rank[0]} work={work:.2f}x "
           f"epoch_time={mean_epoch_s:.3f}s throughput={len(dataset) / mean_epoch_s:.0f} "
           f"samples/s first_loss={epoch_losses[0]:.4f} final_loss={epoch_losses[-1]:.4f} "
           f"checksum={checksums[0]}")
    # --8<-- [end:summary]

    # --8<-- [start:cleanup]
    # 6. Clean up. DDP holds the process group: release it first, so the group is torn
    #    down now, while every rank is still here, not at exit.
    del model
    cleanup_distributed()
    # --8<-- [end:cleanup]


if __name__ == "__main__":
    main()
