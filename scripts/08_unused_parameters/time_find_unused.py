"""Chapter 08: what find_unused_parameters=True costs in time.

Two replicas of the same model from the same start, one wrapped in a plain DDP, one in
DDP(find_unused_parameters=True). Both add the auxiliary loss on every step, so every
parameter gets a gradient and the plain wrapper works too: the only difference is the
flag's extra work, a walk over the autograd graph after every forward(). The optimizer
steps alternate between the two, so both see the same machine load: on a shared
machine, two separate runs a minute apart are not comparable.

Run it:
    python scripts/08_unused_parameters/time_find_unused.py                 # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/08_unused_parameters/time_find_unused.py
    mpiexec -n 2 python scripts/08_unused_parameters/time_find_unused.py

PyTorch prints a warning for the flagged replica (every parameter was used: the walk
found nothing), once per process, on stderr; so may the profiler that counts the
all-reduces at the end.
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler
from unused_parameters import AuxHeadNet, train_step

from utils.checks import check_global_batch
from utils.cli import add_training_args, make_parser, positive_int
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.timing import synchronized_clock


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    return args


def main() -> None:
    args = parse_args()

    # 1. Join the process group; data as in unused_parameters.py; two identical replicas.
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)
    if len(loader) < 4:
        raise SystemExit("fewer than 4 steps per epoch: use more --num-samples or a smaller --batch-size.")
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    models, optimizers = {}, {}
    for way, find_unused in (("plain", False), ("find_unused", True)):
        torch.manual_seed(args.seed)  # the same start for both
        models[way] = DDP(AuxHeadNet().to(ctx.device), device_ids=device_ids,
                          find_unused_parameters=find_unused)
        optimizers[way] = torch.optim.SGD(models[way].parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print0(f"world_size={ctx.world_size} backend={ctx.backend} device={ctx.device.type} "
           f"batch_size={args.batch_size}: optimizer steps alternate between the two wrappers")

    # --8<-- [start:timing]
    # 2. Train, alternating: even steps the plain wrapper, odd steps find_unused_parameters.
    #    A barrier first, so that no step inherits a wait left over from the one before.
    seconds: dict[str, list[float]] = {way: [] for way in models}
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for step, (inputs, labels) in enumerate(loader):
            way = "plain" if step % 2 == 0 else "find_unused"
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            dist.barrier()
            start = synchronized_clock(ctx.device)
            train_step(models[way], optimizers[way], loss_fn, inputs, labels, with_aux=True)
            seconds[way].append(synchronized_clock(ctx.device) - start)
    # --8<-- [end:timing]

    # 3. Count the all-reduces of one more step each: the profiler sees DDP's own ones too.
    all_reduces = {}
    for way, model in models.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            train_step(model, optimizers[way], loss_fn, inputs, labels, with_aux=True)
        all_reduces[way] = sum(e.count for e in profiler.key_averages() if e.key == "c10d::allreduce_")

    # 4. Report: the median step of each (the first of each, a warm-up, left out), and
    #    their ratio. Rank 0's clock; every rank waits for the others at each all-reduce.
    median = {way: statistics.median(times[1:]) for way, times in seconds.items()}
    ratio = median["find_unused"] / median["plain"]
    for way, flag in (("plain", "False"), ("find_unused", "True ")):
        print0(f"find_unused_parameters={flag}: {len(seconds[way])} steps, "
               f"median {median[way]:.4f} s per step, {all_reduces[way]} all-reduce(s) per step")
    print0(f"cost: find_unused_parameters=True took {ratio:.2f}x the time per step (this run, this "
           "machine; noisy where the machine is shared)")
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"steps_each={len(seconds['plain'])} plain_allreduces_per_step={all_reduces['plain']} "
           f"find_unused_allreduces_per_step={all_reduces['find_unused']} "
           f"plain_step_time={median['plain']:.4f}s find_unused_step_time={median['find_unused']:.4f}s "
           f"time_ratio={ratio:.2f}")

    # 5. Clean up: release the DDP models first (chapter 01, step 6).
    del models, model
    cleanup_distributed()


if __name__ == "__main__":
    main()
