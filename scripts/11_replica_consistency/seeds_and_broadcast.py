"""Chapter 11: what DDP makes identical by itself, and which randomness should differ.

Part 1: every rank builds its model with a different seed, so the replicas start out
different (checksums compared with utils/replicas.py's verify_replicas). DDP(model)
broadcasts rank 0's parameters and buffers: right after it, every checksum is rank 0's.

Part 2: the model has a Dropout layer on its inputs. Training runs twice, once with the
same seed on every rank, once with one seed per rank (seed + rank), and the script compares
the dropout masks the ranks drew in the first step. With the same seed every rank draws
the same masks: the effective batch holds each mask world-size times. Either way the
replicas stay identical, because the wrapper averages the gradients.

Run it:
    python scripts/11_replica_consistency/seeds_and_broadcast.py                # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/11_replica_consistency/seeds_and_broadcast.py
    mpiexec -n 4 python scripts/11_replica_consistency/seeds_and_broadcast.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, fraction, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.replicas import ReplicaReport, verify_replicas


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=1, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=256,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--dropout", type=fraction, default=0.5,
                        help="probability that Dropout hides an input feature (default: %(default)s)")
    return parser.parse_args()  # fraction: 0 <= --dropout < 1 (0 keeps every feature)


def build_model(dropout: float) -> nn.Module:
    # Dropout on the inputs, which are never exactly 0: a 0 in its output is a dropped feature.
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def checksums_line(when: str, report: ReplicaReport) -> str:
    verdict = "identical" if report.identical else (
        f"DIFFER in {len(report.differing_tensors)} of {report.tensor_counts[0]} tensors")
    return f"{when}: checksums " + ", ".join(f"rank {r} {c:.10f}" for r, c in
                                          zip(report.ranks, report.checksums, strict=True)) + f"  {verdict}"


def compare_masks(masks: torch.Tensor, world_size: int) -> tuple[list[float], int]:
    """Every rank's first-step dropout masks, gathered: the share of each rank's mask
    elements equal to rank 0's, and the number of distinct masks in the effective batch."""
    gathered = [torch.empty_like(masks) for _ in range(world_size)]
    dist.all_gather(gathered, masks)
    agreement = [100.0 * (rank_masks == gathered[0]).float().mean().item() for rank_masks in gathered]
    distinct = torch.unique(torch.cat(gathered).cpu(), dim=0).shape[0]
    return agreement, distinct


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} dropout={args.dropout:g}")

    # --8<-- [start:broadcast]
    # 2. A different seed on every rank, on purpose: different initial weights. DDP's
    #    constructor broadcasts rank 0's parameters and buffers to every rank.
    torch.manual_seed(args.seed + ctx.rank)
    plain = build_model(args.dropout).to(ctx.device)
    before = verify_replicas(plain)  # plain modules work too
    model = DDP(plain, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    after = verify_replicas(model)
    print0(checksums_line("before DDP(model)", before))
    print0(checksums_line("after DDP(model) ", after))
    # --8<-- [end:broadcast]

    # 3. Data, sharded as usual; the sampler's own seed is the same on every rank (it must
    #    be: it decides which rank gets which sample), whatever the global seed is.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    first_masks: list[torch.Tensor] = []  # the masks of the first step, read by a hook
    model.module[0].register_forward_hook(
        lambda module, inputs, output: first_masks.append(output != 0) if not first_masks else None)

    # 4. Train twice, with the two ways of seeding the randomness of training.
    results = {}
    for seeding in ("same", "per-rank"):
        # --8<-- [start:seeds]
        if seeding == "same":
            torch.manual_seed(args.seed)  # every rank: the same dropout masks
        else:
            torch.manual_seed(args.seed + ctx.rank)  # one stream per rank: its own masks
        # --8<-- [end:seeds]
        first_masks.clear()
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for inputs, labels in loader:
                optimizer.zero_grad(set_to_none=True)
                loss_fn(model(inputs.to(ctx.device)), labels.to(ctx.device)).backward()
                optimizer.step()
        agreement, distinct = compare_masks(first_masks[0], ctx.world_size)
        replicas = verify_replicas(model)
        results[seeding] = agreement, distinct, replicas
        others = ", ".join(f"rank {r} {share:.1f}%" for r, share in enumerate(agreement) if r > 0)
        print0(f"{seeding} seed: first-step dropout masks equal to rank 0's: {others or 'no other rank'}; "
               f"distinct masks in the effective batch: {distinct} of {args.batch_size * ctx.world_size}")
        print0(f"{seeding} seed: after training, {replicas}")

    # 5. Report.
    (same_agreement, same_distinct, same_replicas), (own_agreement, own_distinct, own_replicas) = (
        results["same"], results["per-rank"])
    all_identical = after.identical and same_replicas.identical and own_replicas.identical
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"init_before_ddp={'identical' if before.identical else 'differ'} "
           f"init_after_ddp={'identical' if after.identical else 'differ'} "
           f"same_seed_mask_agreement={min(same_agreement):.1f}% "
           f"same_seed_distinct_masks={same_distinct}/{args.batch_size * ctx.world_size} "
           f"per_rank_mask_agreement={min(own_agreement):.1f}% "
           f"per_rank_distinct_masks={own_distinct}/{args.batch_size * ctx.world_size} "
           f"replicas_after_training={'identical' if all_identical else 'differ'}")

    # 6. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    if not all_identical:
        raise SystemExit("the replicas differ although every step called the wrapper")


if __name__ == "__main__":
    main()
