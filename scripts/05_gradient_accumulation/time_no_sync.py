"""Chapter 05: what accumulating without no_sync() costs in time.

One training run alternates the two ways, step by step: an optimizer step without
no_sync() (every micro-batch all-reduces), then one with it (only the last micro-batch
does), and so on. Both give the same gradients (grad_accumulation.py checks that), so the
training is the same whichever runs. Alternating makes both see the same machine load: on
a shared machine, two separate runs a minute apart are not comparable.

Run it:
    python scripts/05_gradient_accumulation/time_no_sync.py                # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/05_gradient_accumulation/time_no_sync.py
    mpiexec -n 4 python scripts/05_gradient_accumulation/time_no_sync.py
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from grad_accumulation import accumulate_bad, accumulate_good, build_model
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.cli import add_training_args, make_parser, positive_int
from utils.comm import AllReduceCounter, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.timing import synchronized_clock


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=4, batch_size=16, lr=0.05)
    parser.add_argument("--accumulation-steps", type=positive_int, default=4, metavar="K",
                        help="micro-batches per optimizer step (default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    accumulation_steps = args.accumulation_steps

    # 1. Join the process group; data and model as in grad_accumulation.py. The model, the
    #    counting hook and both accumulation loops are imported from it (this file's folder
    #    is on sys.path when it runs), so the code timed here is the code the chapter shows.
    ctx = setup_distributed(args.backend, args.timeout)
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader) // accumulation_steps
    if steps_per_epoch < 2:
        raise SystemExit("fewer than 2 optimizer steps per epoch: use more --num-samples "
                         "or fewer --accumulation-steps.")
    torch.manual_seed(args.seed)
    model = DDP(build_model().to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    counter = AllReduceCounter()
    model.register_comm_hook(counter, counting_allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print0(f"world_size={ctx.world_size} backend={ctx.backend} device={ctx.device.type} "
           f"accumulation_steps={accumulation_steps} batch_size={args.batch_size}: "
           f"optimizer steps alternate between the two ways")

    # --8<-- [start:timing]
    # 2. Train, alternating: even steps without no_sync (bad), odd steps with it (good).
    #    A barrier first, so that no step inherits a wait left over from the one before.
    ways = {"bad": accumulate_bad, "good": accumulate_good}
    seconds: dict[str, list[float]] = {"bad": [], "good": []}
    calls: dict[str, int] = {"bad": 0, "good": 0}
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for step in range(steps_per_epoch):
            way = "bad" if step % 2 == 0 else "good"
            micro_batches = [tuple(t.to(ctx.device, non_blocking=True) for t in next(batches))
                             for _ in range(accumulation_steps)]
            dist.barrier()
            calls_before, start = counter.calls, synchronized_clock(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            ways[way](model, loss_fn, micro_batches)
            optimizer.step()
            seconds[way].append(synchronized_clock(ctx.device) - start)
            calls[way] += counter.calls - calls_before
    # --8<-- [end:timing]

    # 3. Report: the median step of each way (the first of each, a warm-up, left out).
    #    Rank 0's clock; every rank waits for the others at each all-reduce anyway.
    median = {way: statistics.median(times[1:] or times) for way, times in seconds.items()}
    per_step = {way: calls[way] / len(seconds[way]) for way in ways}
    for way, label in (("bad", "without no_sync"), ("good", "with no_sync   ")):
        print0(f"{label}: {len(seconds[way])} steps, {per_step[way]:g} all-reduce(s) per step, "
               f"median {median[way]:.4f} s per step")
    if ctx.world_size == 1:
        print0("(one process: the all-reduces move no data, so the difference is small)")
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"accumulation_steps={accumulation_steps} steps_each={len(seconds['good'])} "
           f"bad_allreduces_per_step={per_step['bad']:g} good_allreduces_per_step={per_step['good']:g} "
           f"bad_step_time={median['bad']:.4f}s good_step_time={median['good']:.4f}s")

    # 4. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()


if __name__ == "__main__":
    main()
