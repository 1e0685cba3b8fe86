"""Chapter 12: effective batch and the linear learning-rate scaling rule, with warm-up.

Under DDP each optimizer step averages the gradients of every rank's batch: the effective
batch is --batch-size x world size, and one epoch takes world-size times fewer steps. With
the learning rate of a single process, the model then moves less per sample seen. The
linear scaling rule multiplies the learning rate by the world size, reaching it over the
first --warmup-steps steps (a large step size from random weights can diverge).

Three runs see the same samples, and their loss on held-out data is compared at the same
number of samples seen:
- reference: one process's view, a plain model (no DDP) with --batch-size and --lr, run by
  every rank alike;
- unscaled: DDP, effective batch --batch-size x world size, the same --lr;
- scaled: DDP, the same effective batch, lr = --lr x world size after a linear warm-up.

The data is the tutorial's synthetic "teacher" task (utils/data.py) and a small MLP: its
loss falls within seconds on a CPU, so the curves show the rule itself. (ResNet-18 on
FakeData would not: its labels are random, no learning rate brings its held-out loss below
chance, ln 10.) The training set is cut to a whole number of effective batches, so that the
three runs see the same samples for any world size.

Run it (--plot writes the loss curves):
    python scripts/12_scaling_and_performance/lr_scaling.py                # 1 process: all three alike
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/lr_scaling.py --plot lr.png
    torchrun --standalone --nproc_per_node=4 scripts/12_scaling_and_performance/lr_scaling.py
    mpiexec -n 2 python scripts/12_scaling_and_performance/lr_scaling.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from utils.cli import add_training_args, make_parser, non_negative_int, output_file, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.plots import saved_figure

HELD_OUT = 1024  # samples kept aside to measure the loss


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=16, lr=0.02)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="training samples (default: %(default)s)")
    parser.add_argument("--warmup-steps", type=non_negative_int, default=8,
                        help="steps over which the scaled run's lr rises to --lr x world size "
                        "(default: %(default)s)")
    parser.add_argument("--points", type=positive_int, default=8,
                        help="loss measurements per run (default: %(default)s)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="PNG",
                        help="write the loss curves here (rank 0)")
    args = parser.parse_args()
    return args


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights in every run and on every rank
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


# --8<-- [start:schedule]
def linear_scaling(optimizer: torch.optim.Optimizer, base_lr: float, world_size: int,
                   warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """lr rises linearly from base_lr to base_lr x world_size over warmup_steps, then stays
    (Goyal et al. 2017, "Accurate, Large Minibatch SGD"). Set the optimizer's lr to base_lr."""
    def factor(step: int) -> float:
        return 1 + (world_size - 1) * min(1.0, step / max(1, warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
# --8<-- [end:schedule]


def held_out_loss(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return nn.functional.cross_entropy(model(inputs), labels).item()


def train(model, loader, sampler, epochs, lr, schedule, held_out, samples_per_step, every, device):
    """[(samples seen, held-out loss)] at the start, every `every` samples, and at the end."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = schedule(optimizer) if schedule else None
    total = epochs * len(loader) * samples_per_step
    curve, seen = [(0, held_out_loss(model, *held_out))], 0
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(inputs), labels).backward()
            optimizer.step()
            if scheduler:
                scheduler.step()
            seen += samples_per_step
            if seen % every == 0 or seen == total:
                curve.append((seen, held_out_loss(model, *held_out)))
    return curve


def plot(path: Path, curves: dict[str, list[tuple[int, float]]], title: str) -> None:
    with saved_figure(path, figsize=(7, 4)) as (figure, axes):
        for name, curve in curves.items():
            axes.plot(*zip(*curve, strict=True), marker="o", label=name)
        axes.set_xlabel("training samples seen (all ranks)")
        axes.set_ylabel("held-out loss")
        axes.set_title(title, fontsize=10)
        axes.legend()


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01); the teacher data, a held-out part kept aside.
    ctx = setup_distributed(args.backend, args.timeout)
    #    The training set: a whole number of effective batches, so that the reference's
    #    batches and the DDP runs' split the same samples, for any world size.
    world, effective = ctx.world_size, args.batch_size * ctx.world_size
    used = args.num_samples // effective * effective
    if used == 0:
        cleanup_distributed()
        sys.exit(f"lr_scaling: --num-samples {args.num_samples} is less than one effective batch "
                 f"({args.batch_size} x {world} ranks = {effective}): raise --num-samples")
    data = synthetic_classification(args.num_samples + HELD_OUT, seed=args.seed)
    train_set = Subset(data, range(used))
    held_out = tuple(tensor[args.num_samples:].to(ctx.device) for tensor in data.tensors)
    # a loss measurement every `every` samples: a whole number of both runs' steps
    every = max(1, used * args.epochs // args.points // effective) * effective
    print0(f"launcher={ctx.launcher} world_size={world} backend={ctx.backend}: effective batch = "
           f"{args.batch_size} per rank x {world} ranks = {effective}; {args.epochs} epochs of "
           f"{used} samples in each run")

    # --8<-- [start:runs]
    # 2. reference: one process's batch and lr, no DDP (every rank computes the same).
    generator = torch.Generator().manual_seed(args.seed)
    single = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=generator,
                        drop_last=True)
    curves = {f"reference: batch {args.batch_size}, lr {args.lr:g}":
              train(build_model(args.seed).to(ctx.device), single, None, args.epochs, args.lr, None,
                    held_out, args.batch_size, every, ctx.device)}

    # 3. DDP with the effective batch: the same lr, then the linearly scaled lr with warm-up.
    sampler = DistributedSampler(train_set, num_replicas=world, rank=ctx.rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    for name, schedule in (
        (f"unscaled: batch {effective}, lr {args.lr:g}", None),
        (f"scaled: batch {effective}, lr {args.lr * world:g} after {args.warmup_steps} warm-up steps",
         lambda optimizer: linear_scaling(optimizer, args.lr, world, args.warmup_steps)),
    ):
        model = DDP(build_model(args.seed).to(ctx.device),
                    device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
        curves[name] = train(model, loader, sampler, args.epochs, args.lr, schedule, held_out,
                             effective, every, ctx.device)
        del model
    # --8<-- [end:runs]

    # 4. The curves, at the same numbers of samples seen.
    names = list(curves)
    print0(f"{'samples':>8}  {'reference':>10}  {'unscaled':>10}  {'scaled':>10}   (held-out loss)")
    by_samples = [dict(curve) for curve in curves.values()]
    for seen in sorted(set.intersection(*(set(c) for c in by_samples))):
        print0(f"{seen:>8}  " + "  ".join(f"{c[seen]:>10.4f}" for c in by_samples))
    for name in names:
        print0(f"  {name.split(':')[0]:>9}: {name.split(': ', 1)[1]}")
    if args.plot is not None and ctx.is_main:
        plot(args.plot, curves, f"Held-out loss, {world} rank(s), the same samples in each run")
        print0(f"plot: {args.plot}")
    final = [curve[-1][1] for curve in curves.values()]
    print0(f"summary: world_size={world} launcher={ctx.launcher} effective_batch={effective} "
           f"samples={curves[names[0]][-1][0]} reference_loss={final[0]:.4f} unscaled_loss={final[1]:.4f} "
           f"scaled_loss={final[2]:.4f}")

    # 5. Clean up.
    cleanup_distributed()


if __name__ == "__main__":
    main()
