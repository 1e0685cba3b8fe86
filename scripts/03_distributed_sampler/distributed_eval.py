"""Chapter 03: a distributed evaluation that counts every sample exactly once.

When the evaluation set's size N does not divide by the world size, DistributedSampler
pads: it repeats the first samples so that every rank gets the same number. Counted as
if they were real, those repeats change the metric, and by an amount that depends on
the number of ranks. The good variant gives each rank its shard without the padded tail
and all-reduces the sums (correct, total), so its accuracy equals the single-process
accuracy exactly, whatever the world size. Both variants print that reference too.

Run it (add --variant bad for the pitfall):
    python scripts/03_distributed_sampler/distributed_eval.py
    torchrun --standalone --nproc_per_node=4 scripts/03_distributed_sampler/distributed_eval.py
    mpiexec -n 4 python scripts/03_distributed_sampler/distributed_eval.py
    qsub scripts/03_distributed_sampler/torchrun_distributed_sampler.sh   # PBS cluster

--variant bad: DistributedSampler(shuffle=False), its padded duplicates counted;
--variant good (default): every sample once, sums all-reduced. 1001 samples (the default)
do not divide by 2, 3, 4, 5, 6 or 8 ranks.
"""

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.distributed import cleanup_distributed, print0, setup_distributed

NUM_CLASSES = 4


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=64, lr=None)
    parser.add_argument("--num-samples", type=positive_int, default=1001,
                        help="evaluation set size (default: %(default)s)")
    add_variant_arg(parser, bad="padded duplicates counted",
                    good="every sample once, sums all-reduced")
    return parser.parse_args()


def sorted_eval_set(num_samples: int, seed: int) -> TensorDataset:
    """An evaluation set stored sorted by class, as torchvision's ImageFolder lists its
    files. Feature k is the evidence for class k; the noise grows with the class, so the
    classes range from easy (class 0) to hard, as in real data sets."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_samples) * NUM_CLASSES // num_samples  # 0,0,..,1,1,..,3
    noise_scale = 0.1 + 0.5 * labels.float()
    noise = torch.randn(num_samples, NUM_CLASSES, generator=generator)
    inputs = F.one_hot(labels, NUM_CLASSES).float() + noise_scale[:, None] * noise
    return TensorDataset(inputs, labels)


def fixed_classifier() -> nn.Module:
    """Stands in for a trained model: fixed weights, class k scored by feature k. Its
    answer for a sample does not depend on which batch the sample is in, so any correct
    sharding must reproduce the single-process count exactly."""
    model = nn.Linear(NUM_CLASSES, NUM_CLASSES, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(NUM_CLASSES))
    return model


# --8<-- [start:count]
@torch.no_grad()
def count_correct(model: nn.Module, loader: DataLoader, device: torch.device) -> torch.Tensor:
    """[correct, total] over what this loader yields: sums, which add up across ranks
    (per-rank accuracies do not: their mean weighs a short shard like a long one)."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.long, device=device)
    for inputs, labels in loader:
        predictions = model(inputs.to(device)).argmax(dim=1)
        counts[0] += (predictions == labels.to(device)).sum()
        counts[1] += len(labels)
    return counts
# --8<-- [end:count]


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01). Every rank builds the same evaluation set
    #    and the same model. In a DDP job, evaluate the plain model (ddp_model.module):
    #    the loop below then runs no collective, so ranks may take different numbers of steps.
    ctx = setup_distributed(args.backend, args.timeout)
    eval_set = sorted_eval_set(args.num_samples, args.seed)
    model = fixed_classifier().to(ctx.device)
    print0(f"variant={args.variant} world_size={ctx.world_size} samples={len(eval_set)} "
           f"(stored sorted by class) batch_size={args.batch_size}")

    # 2. Which samples this rank evaluates.
    if args.variant == "bad":
        # --8<-- [start:bad_sampler]
        # bad: the training sampler. Its shards are equal in size: when N does not divide
        # by the world size, the first samples are repeated at the end to fill them up.
        sampler = DistributedSampler(eval_set, num_replicas=ctx.world_size, rank=ctx.rank,
                                     shuffle=False)
        # --8<-- [end:bad_sampler]
    else:
        # --8<-- [start:good_sampler]
        # good: the same shard without the padded tail: rank r takes samples r, r + W,
        # r + 2W, ... below N. Shards differ in size by at most one; none is counted twice.
        sampler = range(ctx.rank, len(eval_set), ctx.world_size)
        # --8<-- [end:good_sampler]
    loader = DataLoader(eval_set, batch_size=args.batch_size, sampler=sampler)

    # --8<-- [start:reduce]
    # 3. Count on this rank, then add the counts of all ranks: one all-reduce of the sums.
    counts = count_correct(model, loader, ctx.device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    correct, total = counts.tolist()
    accuracy = 100.0 * correct / total
    # --8<-- [end:reduce]

    # 4. What was evaluated: every rank's indices, gathered to find samples counted twice.
    shards: list = [None] * ctx.world_size
    dist.all_gather_object(shards, list(sampler))
    times_seen = Counter(index for shard in shards for index in shard)
    twice = sorted(index for index, seen in times_seen.items() if seen > 1)
    print0(f"samples evaluated per rank: {[len(shard) for shard in shards]} -> {total} in all")
    if twice:
        classes = sorted({int(eval_set.tensors[1][index]) for index in twice})
        print0(f"counted twice: samples {twice}, of class {', '.join(map(str, classes))}")

    # 5. The reference: the whole set in one process, as `python distributed_eval.py`
    #    computes it. No collective here, so each rank can afford it; rank 0 prints it.
    ref_correct, ref_total = count_correct(
        model, DataLoader(eval_set, batch_size=args.batch_size), ctx.device).tolist()
    reference = 100.0 * ref_correct / ref_total
    label = "padded duplicates counted" if args.variant == "bad" else f"exactly {total} samples"
    print0(f"distributed accuracy ({label}): {correct}/{total} = {accuracy:.2f}%")
    print0(f"single-process reference (exactly {ref_total} samples): "
           f"{ref_correct}/{ref_total} = {reference:.2f}%")
    matches = (correct, total) == (ref_correct, ref_total)
    if not matches:
        print0(f"WARNING: the distributed accuracy is off by {accuracy - reference:+.2f} points: "
               f"{total - ref_total} padded duplicate(s) were counted, so the metric depends on "
               "the number of ranks.")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} samples={ref_total} "
           f"evaluated={total} counted_twice={len(twice)} correct={correct} "
           f"accuracy={accuracy:.2f} reference_correct={ref_correct} "
           f"reference_accuracy={reference:.2f} matches_reference={'yes' if matches else 'no'}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
