"""Chapter 10: time DDP's training step over a range of bucket sizes, and plot it.

One DDP model per bucket cap, all started from the same weights, trained side by side in
one run: each step, every model in turn trains on the same batch, after a barrier. On a
shared machine, separate runs a minute apart see different loads and cannot be compared;
interleaved steps see the same. The communication hook of utils/comm.py counts each
model's all-reduces per step.

Run it (--plot writes a PNG of steps per second per bucket cap):
    python scripts/10_communication_overlap/bucket_sweep.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/10_communication_overlap/bucket_sweep.py --plot sweep.png
    torchrun --standalone --nproc_per_node=4 scripts/10_communication_overlap/bucket_sweep.py \\
        --bucket-caps 1 5 default 25 100 --depth 48 --width 2048       # a larger model, on GPUs
    mpiexec -n 2 python scripts/10_communication_overlap/bucket_sweep.py --plot sweep.png

--bucket-caps takes MiB values and "default" (DDP's default: 25 MiB, the first bucket
1 MiB). The first two steps of each model are left out: in step 1 DDP puts every gradient
in one bucket while it learns their order, and it builds the real buckets after it.
"""

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from bucket_size import WARM_UP_STEPS, build_model
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, make_parser, output_file, positive_int
from utils.comm import AllReduceCounter, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.plots import saved_figure
from utils.timing import synchronized_clock


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=32, lr=0.01)
    parser.add_argument("--steps", type=positive_int, default=14,
                        help="training steps per bucket cap, 2 warm-up steps included (default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--depth", type=positive_int, default=32, help="hidden layers (default: %(default)s)")
    parser.add_argument("--width", type=positive_int, default=128,
                        help="width of each hidden layer (default: %(default)s)")
    parser.add_argument("--bucket-caps", nargs="+", metavar="MIB",
                        default=["0.00001", "0.01", "0.1", "0.5", "default", "25"],
                        help="bucket caps to compare, in MiB, or 'default' (default: %(default)s)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="PNG",
                        help="write a bar chart of steps per second per bucket cap here (rank 0)")
    args = parser.parse_args()
    try:
        args.caps = [None if cap == "default" else float(cap) for cap in args.bucket_caps]
    except ValueError:
        parser.error(f"--bucket-caps takes numbers of MiB or 'default', not {args.bucket_caps}")
    if any(cap is not None and not 0 < cap < math.inf for cap in args.caps):
        parser.error(f"--bucket-caps must be positive numbers of MiB, not {' '.join(args.bucket_caps)}")
    if args.steps <= WARM_UP_STEPS:
        parser.error(f"--steps must be more than the {WARM_UP_STEPS} warm-up steps")
    return args


def label(cap: float | None) -> str:
    return "default" if cap is None else f"{cap:g}"


# --8<-- [start:plot]
def plot(path: Path, labels: list[str], seconds: list[float], allreduces: list[float], title: str) -> None:
    """A bar per bucket cap: steps per second, with the all-reduces per step on top."""
    with saved_figure(path, figsize=(7, 4)) as (figure, axes):
        bars = axes.bar(labels, [1 / s for s in seconds], color="tab:blue")
        for bar, count in zip(bars, allreduces, strict=True):
            axes.annotate(f"{count:g} all-reduces", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                          ha="center", va="bottom", fontsize=8)
        axes.set_xlabel("bucket_cap_mb (MiB)")
        axes.set_ylabel("training steps per second")
        axes.set_title(title, fontsize=10)
# --8<-- [end:plot]


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01); the data as in bucket_size.py.
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"--num-samples {args.num_samples} gives no full batch of {args.batch_size} "
                         f"on each of {ctx.world_size} ranks: use more samples.")

    # 2. One model per bucket cap, the same weights in each, each with its own counter.
    models, optimizers, counters = [], [], []
    for cap in args.caps:
        torch.manual_seed(args.seed)
        model = DDP(build_model(args.depth, args.width).to(ctx.device), bucket_cap_mb=cap,
                    device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
        counters.append(AllReduceCounter())
        model.register_comm_hook(counters[-1], counting_allreduce_hook)
        models.append(model)
        optimizers.append(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9))
    loss_fn = nn.CrossEntropyLoss()
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type}: {len(models)} bucket caps, {args.steps} steps each, interleaved")

    # --8<-- [start:sweep]
    # 3. Interleave: each step, every model in turn, on the same batch, from a barrier.
    seconds: list[list[float]] = [[] for _ in models]
    calls = [0] * len(models)
    batches, epoch = iter(loader), 0
    for step in range(args.steps):
        try:
            inputs, labels = next(batches)
        except StopIteration:  # a new epoch when the data runs out
            epoch += 1
            sampler.set_epoch(epoch)
            batches = iter(loader)
            inputs, labels = next(batches)
        inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
        labels = labels.to(ctx.device, non_blocking=True)
        for index, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            dist.barrier()
            calls_before, start = counters[index].calls, synchronized_clock(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), labels).backward()
            optimizer.step()
            if step >= WARM_UP_STEPS:
                seconds[index].append(synchronized_clock(ctx.device) - start)
                calls[index] += counters[index].calls - calls_before
    # --8<-- [end:sweep]

    # 4. Report the median step of each cap (rank 0's clock: every rank waits for the
    #    others at each all-reduce anyway), and plot steps per second.
    timed_steps = args.steps - WARM_UP_STEPS
    labels = [label(cap) for cap in args.caps]
    medians = [statistics.median(times) for times in seconds]
    per_step = [count / timed_steps for count in calls]
    print0(f"{'bucket_cap_mb':>13} {'all-reduces/step':>16}  median step")
    for name, count, median in zip(labels, per_step, medians, strict=True):
        print0(f"{name:>13} {count:>16g}  {median:.4f} s")
    if args.plot is not None and ctx.is_main:
        plot(args.plot, labels, medians, per_step,
             f"{args.depth + 1}-layer MLP, width {args.width}, {ctx.world_size} process(es), "
             f"{ctx.backend} on {ctx.device.type}")
        print0(f"plot: {args.plot}")
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"steps_each={timed_steps} caps={','.join(labels)} "
           f"allreduces_per_step={','.join(f'{c:g}' for c in per_step)} "
           f"step_times={','.join(f'{m:.4f}s' for m in medians)}")

    # 5. Clean up: release the DDP models first (chapter 01, step 6).
    del model, models, optimizers
    cleanup_distributed()


if __name__ == "__main__":
    main()
