"""Chapter 07: BatchNorm under DDP: per-rank statistics, broadcast_buffers, SyncBatchNorm.

A BatchNorm layer normalizes each channel with the mean and variance of its batch while it
trains, and keeps running averages of them, buffers that evaluation uses instead. DDP
averages gradients, not statistics: with plain BatchNorm each rank normalizes with its own
batch's statistics and averages them into its own buffers.

Here the training set is stored class by class and each rank reads its own contiguous
part, so the ranks see different classes, as when each rank reads its own files of a data
set kept in order (by class, date, site). After training every rank evaluates the same
held-out samples; the script gathers each rank's running statistics and results and prints
them side by side. At the first step it also compares the DDP model with one process that
runs plain BatchNorm on the global batch (every rank's batch, concatenated).

Run it:
    python scripts/07_batchnorm_and_buffers/batchnorm_ddp.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/07_batchnorm_and_buffers/batchnorm_ddp.py \\
        --variant bad --broadcast-buffers yes
    torchrun --standalone --nproc_per_node=4 scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant good
    mpiexec -n 4 python scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant good
    qsub scripts/07_batchnorm_and_buffers/torchrun_batchnorm.sh             # PBS cluster

The pitfall (--variant bad): plain BatchNorm. With broadcast_buffers=False the running
statistics differ by rank, so the same model evaluates differently on each rank. With DDP's
default, broadcast_buffers=True (--broadcast-buffers yes), a forward through the wrapper
first copies rank 0's buffers to every rank (when the forward before it was a training one):
the ranks agree, on rank 0's shard's statistics.
The fix (--variant good): SyncBatchNorm, whose statistics are the global batch's. On GPUs
that is torch.nn.SyncBatchNorm; it refuses CPU tensors, so on CPUs the script uses
AllReduceBatchNorm from utils/batchnorm.py, which computes the same, and says which ran.
"""

import copy
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset

from utils.batchnorm import convert_all_reduce_batchnorm
from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed

# torch 2.13 renamed DDP's broadcast_buffers to forward_sync_buffers (the old name warns).
SYNC_BUFFERS_ARG = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP).parameters
                    else "broadcast_buffers")
REFERENCE_TOLERANCE = 1e-5  # float32 sums in another order differ by ~1e-7 here; per-rank statistics by ~0.1


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="training samples, one contiguous shard per rank (default: %(default)s)")
    parser.add_argument("--eval-samples", type=positive_int, default=512,
                        help="held-out samples every rank evaluates (default: %(default)s)")
    parser.add_argument("--broadcast-buffers", choices=["no", "yes"], default="no",
                        help="DDP's broadcast_buffers: yes copies rank 0's buffers to every rank "
                        "before each training forward (DDP's own default); no leaves each rank its "
                        "own (default: %(default)s)")
    add_variant_arg(parser, bad="plain BatchNorm: each rank its own statistics",
                    good="SyncBatchNorm: the global batch's statistics")
    args = parser.parse_args()
    if args.num_samples < 1 or args.eval_samples < 1:
        parser.error("--num-samples and --eval-samples must be at least 1")
    return args


# --8<-- [start:bad]
def build_model(num_features: int = 32, hidden: int = 64, num_classes: int = 4) -> nn.Module:
    """bad, as it is under DDP: plain BatchNorm layers, each rank its own batch's statistics."""
    # The first BatchNorm normalizes the raw inputs, so its running mean of a feature is
    # that feature's mean in the data it saw: easy to compare with the data.
    return nn.Sequential(nn.BatchNorm1d(num_features), nn.Linear(num_features, hidden),
                         nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
# --8<-- [end:bad]


# --8<-- [start:good]
def use_global_batch_statistics(model: nn.Module, device: torch.device) -> tuple[nn.Module, str]:
    """good: every BatchNorm layer normalizes with the statistics of the global batch."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model), "SyncBatchNorm"
    # nn.SyncBatchNorm refuses CPU tensors: the same arithmetic from utils/batchnorm.py.
    return convert_all_reduce_batchnorm(model), "AllReduceBatchNorm"
# --8<-- [end:good]


def running_stats(model: nn.Module) -> dict[str, torch.Tensor]:
    """This rank's BatchNorm buffers: running_mean and running_var of every layer, on the CPU."""
    return {name: buffer.detach().cpu().clone() for name, buffer in model.named_buffers()
            if name.endswith(("running_mean", "running_var"))}


def gather(obj):
    """Every rank's `obj`, in rank order, on every rank."""
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone


def largest_spread(per_rank: list[dict[str, torch.Tensor]]) -> float:
    """The largest |difference| between any rank's buffers and rank 0's (0.0: identical)."""
    return max((stats[name] - per_rank[0][name]).abs().max().item()
               for stats in per_rank for name in stats)


# --8<-- [start:check]
def compare_with_global_batch(model, reference, inputs, labels, outputs, loss_fn, rank) -> dict[str, float]:
    """After the first step's backward(): the largest |difference| between the DDP model
    (its outputs on this rank's batch, its running statistics, its averaged gradients) and
    a plain-BatchNorm model from the same start, run once on every rank's batch together."""
    batches = gather((inputs.cpu(), labels.cpu()))
    global_inputs = torch.cat([x for x, _ in batches]).to(inputs.device)
    global_labels = torch.cat([y for _, y in batches]).to(inputs.device)
    reference_outputs = reference(global_inputs)  # training mode: the global batch's statistics
    loss_fn(reference_outputs, global_labels).backward()
    start = rank * len(inputs)  # this rank's rows of the global batch (equal batches: drop_last)
    ours, theirs = running_stats(model.module), running_stats(reference)
    difference = torch.tensor([
        (outputs - reference_outputs[start:start + len(inputs)]).abs().max().item(),
        max((ours[n] - theirs[n]).abs().max().item() for n in ours if n.endswith("mean")),
        max((ours[n] - theirs[n]).abs().max().item() for n in ours if n.endswith("var")),
        max((p.grad - r.grad).abs().max().item()
            for p, r in zip(model.module.parameters(), reference.parameters(), strict=True)),
    ], device=inputs.device)
    dist.all_reduce(difference, op=dist.ReduceOp.MAX)  # the worst rank
    names = ("outputs", "running_mean", "running_var", "gradients")
    return dict(zip(names, difference.tolist(), strict=True))
# --8<-- [end:check]


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    broadcast_buffers = args.broadcast_buffers == "yes"

    # --8<-- [start:data]
    # 2. Data: held-out samples, the same on every rank, and a training set stored class by
    #    class, cut into one contiguous shard per rank. Equal shards and drop_last give every
    #    rank the same number of steps: with SyncBatchNorm every forward is a collective.
    dataset = synthetic_classification(args.num_samples + args.eval_samples, seed=args.seed)
    inputs, labels = dataset.tensors
    eval_inputs = inputs[args.num_samples:].to(ctx.device)
    eval_labels = labels[args.num_samples:].to(ctx.device)
    by_class = labels[:args.num_samples].argsort(stable=True)  # as ImageFolder lists its files
    shard_size = args.num_samples // ctx.world_size
    shard = by_class[ctx.rank * shard_size:(ctx.rank + 1) * shard_size]
    loader = DataLoader(Subset(dataset, shard.tolist()), batch_size=args.batch_size, shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(args.seed + ctx.rank))
    # --8<-- [end:data]
    if len(loader) == 0:
        raise SystemExit(f"a shard of {shard_size} samples holds no batch of {args.batch_size}: "
                         "use more --num-samples or a smaller --batch-size.")
    shard_classes = gather(",".join(map(str, labels[shard].unique().tolist())))
    shard_means = torch.stack(gather(inputs[shard].mean(dim=0)))  # (ranks, features)
    training_set = inputs[by_class[:shard_size * ctx.world_size]]
    # The table below shows the feature whose mean differs most between the shards.
    feature = int((shard_means.amax(dim=0) - shard_means.amin(dim=0)).argmax())

    # --8<-- [start:model]
    # 3. Model: plain BatchNorm (bad) or the global batch's statistics (good), then DDP.
    #    `reference` is a plain copy from the same start, for the check at the first step.
    torch.manual_seed(args.seed)
    model = build_model().to(ctx.device)
    reference = copy.deepcopy(model)
    norm = "BatchNorm1d"
    if args.variant == "good":
        model, norm = use_global_batch_statistics(model, ctx.device)
    model = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                **{SYNC_BUFFERS_ARG: broadcast_buffers})  # broadcast_buffers= before torch 2.13
    # --8<-- [end:model]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant} norm={norm} "
           f"broadcast_buffers={args.broadcast_buffers}")
    if norm == "AllReduceBatchNorm":
        print0("norm: AllReduceBatchNorm (utils/batchnorm.py): torch.nn.SyncBatchNorm runs on GPUs only; "
               "this computes the same global-batch statistics with an all_reduce")
    elif norm == "SyncBatchNorm":
        print0("norm: torch.nn.SyncBatchNorm (the device is a GPU)")
    print0(f"data: {shard_size * ctx.world_size} training samples stored class by class, {shard_size} "
           f"per rank; classes per rank: {' | '.join(shard_classes)}")

    # 4. Train. At the first step, compare with one process on the global batch.
    reference_difference = None
    for epoch in range(args.epochs):
        loss_sum = torch.zeros((), device=ctx.device)
        for batch_inputs, batch_labels in loader:
            batch_inputs, batch_labels = batch_inputs.to(ctx.device), batch_labels.to(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            outputs = model(batch_inputs)
            loss = loss_fn(outputs, batch_labels)
            loss.backward()
            if reference_difference is None:
                reference_difference = compare_with_global_batch(
                    model, reference, batch_inputs, batch_labels, outputs.detach(), loss_fn, ctx.rank)
            optimizer.step()
            loss_sum += loss.detach()
        dist.all_reduce(loss_sum)
        mean_loss = loss_sum.item() / (len(loader) * ctx.world_size)
        print0(f"epoch {epoch + 1}/{args.epochs}  loss {mean_loss:.4f}")
    after_training = gather(running_stats(model.module))

    # --8<-- [start:evaluate]
    # 5. Evaluate: every rank, the same held-out samples, through the wrapper in eval mode
    #    (BatchNorm uses its running statistics). With broadcast_buffers=True this forward
    #    first copies rank 0's buffers to every rank.
    model.eval()
    with torch.no_grad():
        logits = model(eval_inputs)
    accuracy = (logits.argmax(dim=1) == eval_labels).float().mean().item()
    at_eval = gather(running_stats(model.module))  # the buffers this evaluation used
    per_rank_logits, per_rank_accuracy = gather(logits.cpu()), gather(accuracy)
    # --8<-- [end:evaluate]

    # 6. Report: per-rank buffers and results side by side, and the reference check.
    eval_difference = max((other - per_rank_logits[0]).abs().max().item() for other in per_rank_logits)
    disagreements = max(int((other.argmax(dim=1) != per_rank_logits[0].argmax(dim=1)).sum())
                        for other in per_rank_logits)  # samples some rank classifies unlike rank 0
    spread_after_training, spread_at_eval = largest_spread(after_training), largest_spread(at_eval)
    input_norm = "0."  # buffer names of layer 0, the input BatchNorm: its channel i is input feature i
    print0(f"evaluation of the same {args.eval_samples} held-out samples on every rank; the input "
           f"BatchNorm's running statistics of feature {feature}, next to the data's:")
    print0("  rank   classes   data mean   running_mean   running_var   accuracy")
    for rank, (stats, acc) in enumerate(zip(at_eval, per_rank_accuracy, strict=True)):
        print0(f"  {rank:>4}   {shard_classes[rank]:>7}   {shard_means[rank, feature]:+9.2f}   "
               f"{stats[input_norm + 'running_mean'][feature]:+12.2f}   "
               f"{stats[input_norm + 'running_var'][feature]:11.2f}   {100 * acc:7.1f}%")
    print0(f"  all data         {training_set[:, feature].mean():+9.2f}   {'':12}   "
           f"{training_set[:, feature].var():11.2f}")
    print0(f"buffers: ranks differ from rank 0 by up to {spread_after_training:.4f} after training, "
           f"{spread_at_eval:.4f} at evaluation; outputs on the same samples differ by up to "
           f"{eval_difference:.4f}, predicted classes on {disagreements} of {args.eval_samples}")
    matches = all(d <= REFERENCE_TOLERANCE for d in reference_difference.values())
    print0(f"first step vs one process with plain BatchNorm on the global batch of "
           f"{args.batch_size * ctx.world_size}: max |difference| "
           + ", ".join(f"{k} {v:.10f}" for k, v in reference_difference.items())
           + f" (tolerance {REFERENCE_TOLERANCE:g}): {'equal' if matches else 'DIFFERENT'}")
    if ctx.world_size == 1:
        print0("(one process: its batch is the global batch, so plain BatchNorm computes the same)")
    elif spread_at_eval > 0:
        print0("WARNING: the ranks evaluated with different running statistics, so the same model gave "
               "different outputs: each rank averaged its own shard's. Use SyncBatchNorm.")
    elif not matches:
        print0("WARNING: the ranks agree only because rank 0's buffers were copied to all: they hold "
               "rank 0's shard's statistics, not the global batch's. Use SyncBatchNorm.")
    identical = eval_difference == 0.0
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} norm={norm} broadcast_buffers={args.broadcast_buffers} "
           f"buffers_spread_after_training={spread_after_training:.4f} "
           f"buffers_spread_at_eval={spread_at_eval:.4f} "
           f"eval_max_abs_diff={eval_difference:.4f} eval_identical={'yes' if identical else 'no'} "
           f"predictions_differing={disagreements} "
           f"accuracy={','.join(f'{100 * a:.1f}%' for a in per_rank_accuracy)} "
           + " ".join(f"ref_{k}_diff={v:.10f}" for k, v in reference_difference.items())
           + f" matches_reference={'yes' if matches else 'no'}")

    # 7. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    # (A tolerance for the evaluations too: GPUs of different kinds in one job may round differently.)
    if args.variant == "good" and not (matches and eval_difference <= REFERENCE_TOLERANCE):
        raise SystemExit("the global-batch statistics were not computed: the model differs from the "
                         "single-process reference, or from rank to rank")


if __name__ == "__main__":
    main()
