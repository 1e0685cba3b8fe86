"""Chapter 19: a metric that is not a sum (F1, AUROC), computed across ranks.

An accuracy is a ratio of two sums (correct, total), and sums add up across ranks. F1 and
AUROC do not: the F1 of a set is not the mean of its parts' F1s, and an AUROC ranks every
positive sample against every negative one, across the parts too. Here the evaluation set
comes as --num-files files from different sources (different shares of positive samples,
different score offsets), and each rank evaluates its own block of files, as a streaming
loader hands them out. The shards then differ in size and in class balance.

The pitfall (--variant bad): each rank computes F1 and AUROC on its shard, and the ranks
average them (a sum of the scores divided by the world size). The fix (--variant good,
the default): all-reduce the confusion counts that F1 is made of; gather every score and
label (each sample once) for AUROC. Both print one process's scores of the same set.

Run it:
    python scripts/19_metrics_and_decisions/metric_across_ranks.py          # the reference
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/metric_across_ranks.py \\
        --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/metric_across_ranks.py
    mpiexec -n 3 python scripts/19_metrics_and_decisions/metric_across_ranks.py --shards sampler
    qsub scripts/19_metrics_and_decisions/torchrun_metrics_and_decisions.sh   # PBS cluster

--shards files (default): rank r of W evaluates the r-th of W blocks of consecutive files
(shards of different sizes and class balance). --shards sampler: DistributedSampler
(shuffle=False) over the whole set, which pads the shards to one size with repeated
samples; the good variant leaves those out.
"""

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler, TensorDataset

from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int, usage_error
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.metrics import auroc, confusion_counts, f1_from_counts, gather_ragged, precision_recall

NUM_FEATURES = 4


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=256, lr=None)
    parser.add_argument("--num-samples", type=positive_int, default=2000,
                        help="evaluation set size, all files together (default: %(default)s)")
    parser.add_argument("--num-files", type=positive_int, default=8,
                        help="files the evaluation set comes in (default: %(default)s)")
    parser.add_argument("--shards", choices=["files", "sampler"], default="files",
                        help="files: rank r evaluates the r-th block of files; sampler: "
                        "DistributedSampler(shuffle=False), padded shards (default: %(default)s)")
    add_variant_arg(parser, bad="each rank's F1 and AUROC, averaged over the ranks",
                    good="the confusion counts all-reduced (F1), every score gathered (AUROC)")
    args = parser.parse_args()
    if args.num_samples < 10 * args.num_files:
        parser.error(f"--num-samples {args.num_samples} is too small for {args.num_files} files: "
                     f"give at least {10 * args.num_files} (10 samples per file)")
    return args


# --8<-- [start:data]
def evaluation_files(num_samples: int, num_files: int, seed: int) -> tuple[TensorDataset, list[int]]:
    """The evaluation set, stored file after file in the order it was collected, and the
    files' sizes. The share of positive samples grows from 1% in the first file to 60% in
    the last (an outbreak), and each file has its own offset of the features (that day's
    sensor calibration). Identical on every rank."""
    generator = torch.Generator().manual_seed(seed)
    weights = 0.5 + torch.rand(num_files, generator=generator)
    sizes = (weights / weights.sum() * num_samples).long().tolist()
    sizes[-1] += num_samples - sum(sizes)  # what rounding down left over
    positive_share = torch.linspace(0.01, 0.6, num_files)
    offset = 1.5 * torch.rand(num_files, generator=generator) - 0.75
    labels = torch.cat([(torch.rand(n, generator=generator) < positive_share[f]).long()
                        for f, n in enumerate(sizes)])
    source_offset = torch.cat([offset[f].expand(n) for f, n in enumerate(sizes)])
    noise = torch.randn(num_samples, NUM_FEATURES, generator=generator)
    inputs = (labels + source_offset)[:, None] + noise
    return TensorDataset(inputs, labels), sizes
# --8<-- [end:data]


def fixed_classifier() -> nn.Module:
    """Stands in for a trained model: the score (a logit) is 3 x (mean feature - 0.5), so a
    sample is called positive when its features average above 0.5. Fixed weights: its
    answer for a sample is the same on any rank, in any batch."""
    model = nn.Linear(NUM_FEATURES, 1)
    with torch.no_grad():
        model.weight.fill_(3.0 / NUM_FEATURES)
        model.bias.fill_(-1.5)
    return model


@torch.no_grad()
def score(model: nn.Module, dataset: TensorDataset, indices: list[int], batch_size: int,
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's scores and the labels of dataset[indices], batch by batch, on `device`."""
    scores, labels = [], []
    for start in range(0, len(indices), batch_size):
        inputs, batch_labels = dataset[indices[start:start + batch_size]]
        scores.append(model(inputs.to(device)).squeeze(1))
        labels.append(batch_labels.to(device))
    empty = torch.zeros(0, device=device)
    return (torch.cat(scores) if scores else empty), (torch.cat(labels) if labels else empty.long())


def this_ranks_samples(args, sizes: list[int], rank: int, world_size: int) -> tuple[list[int], int]:
    """This rank's sample indices, and how many of them are real (the rest: the sampler's
    padded repeats, which only --shards sampler has)."""
    if args.shards == "files":
        starts = list(itertools.accumulate(sizes, initial=0))
        files = range(len(sizes) * rank // world_size, len(sizes) * (rank + 1) // world_size)
        indices = [i for f in files for i in range(starts[f], starts[f + 1])]
        return indices, len(indices)
    sampler = DistributedSampler(range(args.num_samples), num_replicas=world_size, rank=rank, shuffle=False)
    # DistributedSampler's shard r holds positions r, r + W, ... of the padded index list;
    # the positions from num_samples on are the repeats: the last entries of some shards.
    return list(sampler), len(range(rank, args.num_samples, world_size))


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01). Every rank builds the same evaluation set and
    #    the same model; there is no training here, only the evaluation.
    ctx = setup_distributed(args.backend, args.timeout)
    if args.shards == "files" and args.num_files < ctx.world_size:
        usage_error(f"--num-files {args.num_files} is fewer than the {ctx.world_size} ranks: every rank "
                    f"evaluates whole files, so give --num-files {ctx.world_size} or more.")
    dataset, sizes = evaluation_files(args.num_samples, args.num_files, args.seed)
    model = fixed_classifier().to(ctx.device)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant} shards={args.shards}")
    labels_all = dataset.tensors[1]
    starts = list(itertools.accumulate(sizes, initial=0))
    positives = [int(labels_all[starts[f]:starts[f + 1]].sum()) for f in range(len(sizes))]
    print0(f"{args.num_files} files of {commas(sizes)} samples, with {commas(positives)} positive")

    # 2. This rank's shard, scored by the model: no collective, every rank at its own pace.
    indices, real = this_ranks_samples(args, sizes, ctx.rank, ctx.world_size)
    scores, labels = score(model, dataset, indices, args.batch_size, ctx.device)
    predictions = scores > 0  # a logit above 0: called positive

    if args.variant == "bad":
        # --8<-- [start:bad]
        # bad: each rank scores its own shard; the ranks average the scores.
        f1 = f1_from_counts(confusion_counts(predictions, labels))
        area = auroc(scores, labels)
        mine = torch.tensor([f1, area], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(mine, op=dist.ReduceOp.SUM)
        f1, area = (mine / ctx.world_size).tolist()  # the mean of the ranks' scores
        # --8<-- [end:bad]
        counted = len(indices) * ctx.world_size if args.shards == "sampler" else args.num_samples
    else:
        # --8<-- [start:good]
        # good: F1 is a ratio of counts, and counts add up: all-reduce them, then divide.
        # Only the real samples count (the sampler's padded repeats are left out).
        counts = confusion_counts(predictions[:real], labels[:real])
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
        f1 = f1_from_counts(counts)
        # AUROC compares every positive with every negative, across the shards: gather
        # every real score and label (the shards differ in length: gather_ragged pads, trims).
        every_score = gather_ragged(scores[:real])
        every_label = gather_ragged(labels[:real])
        area = auroc(every_score, every_label)
        # --8<-- [end:good]
        counted = every_score.numel()

    # 3. What each rank saw, for the printout only (gathered from every rank to rank 0).
    own_counts = confusion_counts(predictions, labels)
    mine_view = (len(indices), int(labels.sum()), *precision_recall(own_counts),
                 f1_from_counts(own_counts), auroc(scores, labels))
    views: list = [None] * ctx.world_size
    dist.all_gather_object(views, mine_view)
    print0("rank  samples  positive  precision  recall  F1      AUROC")
    for rank, (n, pos, precision, recall, rank_f1, rank_auroc) in enumerate(views):
        print0(f"{rank:<4}  {n:<7}  {pos:<8}  {precision:<9.4f}  {recall:<6.4f}  {rank_f1:.4f}  "
               f"{rank_auroc:.4f}")

    # 4. The reference: the whole set in this one process (no collective), as
    #    `python metric_across_ranks.py` computes it; rank 0 prints it.
    ref_scores, ref_labels = score(model, dataset, list(range(args.num_samples)), args.batch_size, ctx.device)
    ref_counts = confusion_counts(ref_scores > 0, ref_labels)
    ref_f1, ref_auroc = f1_from_counts(ref_counts), auroc(ref_scores, ref_labels)
    how = "the mean of the ranks' scores" if args.variant == "bad" else "counts all-reduced, scores gathered"
    print0(f"distributed ({how}): F1 {f1:.4f}  AUROC {area:.4f}  over {counted} samples")
    print0(f"one process, the whole set ({args.num_samples} samples): F1 {ref_f1:.4f}  AUROC {ref_auroc:.4f}")
    f1_off, auroc_off = f1 - ref_f1, area - ref_auroc
    matches = abs(f1_off) < 1e-9 and abs(auroc_off) < 1e-9 and counted == args.num_samples
    if not matches:
        print0(f"WARNING: off by {f1_off:+.4f} (F1) and {auroc_off:+.4f} (AUROC): a mean of ratios is "
               "not the ratio of the sums, and each rank ranked its own samples only.")
    print0(f"summary: variant={args.variant} shards={args.shards} world_size={ctx.world_size} "
           f"backend={ctx.backend} samples={args.num_samples} counted={counted} f1={f1:.4f} "
           f"auroc={area:.4f} reference_f1={ref_f1:.4f} reference_auroc={ref_auroc:.4f} "
           f"f1_off_by={f1_off:+.4f} auroc_off_by={auroc_off:+.4f} "
           f"matches_reference={'yes' if matches else 'no'}")
    cleanup_distributed()


def commas(numbers: list[int]) -> str:
    """[28, 37] -> '28,37': how lists of numbers appear in the output."""
    return ",".join(map(str, numbers))


if __name__ == "__main__":
    main()
