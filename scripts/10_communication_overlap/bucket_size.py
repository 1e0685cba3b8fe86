"""Chapter 10: gradient buckets, and how DDP overlaps their all-reduce with backward().

DDP does not all-reduce each gradient on its own. It packs the gradients into buckets
of at most bucket_cap_mb MiB (default 25; with the default, the first bucket is capped
at 1 MiB), in the order backward() produces them, and launches a bucket's all-reduce as
soon as the last gradient in it is ready, while backward() goes on computing the rest.
backward() returns once every bucket's all-reduce has finished.

This script trains a deep, narrow model (many small layers: many gradient tensors) and
prints what DDP did: the buckets, the all-reduces per step (counted by a communication
hook, exactly), when each bucket's all-reduce was launched and finished relative to the
last gradient backward() computed, and the time per step.

Run it:
    python scripts/10_communication_overlap/bucket_size.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/10_communication_overlap/bucket_size.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/10_communication_overlap/bucket_size.py --variant good
    mpiexec -n 2 python scripts/10_communication_overlap/bucket_size.py --variant bad
    qsub scripts/10_communication_overlap/torchrun_bucket_size.sh        # PBS cluster

The pitfall (--variant bad): bucket_cap_mb far below the default (0.00001 MiB, 10
bytes), so every gradient tensor is a bucket of its own: one small all-reduce per tensor,
each paying the fixed cost of a collective, and slower steps. --variant good keeps DDP's
default buckets. bucket_sweep.py measures the step time over a range of bucket sizes.
"""

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_float, positive_int
from utils.comm import AllReduceCounter, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.timing import Clock, synchronized_clock

TINY_BUCKET_CAP_MB = 0.00001  # 10 bytes: smaller than any gradient tensor, so one bucket each
WARM_UP_STEPS = 2  # before DDP has its final buckets (see step 5)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=1, batch_size=32, lr=0.01)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--depth", type=positive_int, default=32,
                        help="hidden layers: 2 gradient tensors each (default: %(default)s)")
    parser.add_argument("--width", type=positive_int, default=128,
                        help="width of each hidden layer (default: %(default)s)")
    parser.add_argument("--bucket-cap-mb", type=positive_float, default=None, metavar="MIB",
                        help="bucket cap for DDP, overriding the variant's "
                        f"(bad: {TINY_BUCKET_CAP_MB:g}; good: DDP's default)")
    parser.add_argument("--gradient-as-bucket-view", action="store_true",
                        help="make each .grad a view into its bucket (no second copy)")
    parser.add_argument("--static-graph", action="store_true",
                        help="tell DDP the graph is the same in every step")
    add_variant_arg(parser, bad=f"tiny buckets (bucket_cap_mb={TINY_BUCKET_CAP_MB:g}): one all-reduce "
                    "per gradient tensor", good="DDP's default buckets (25 MiB, the first 1 MiB)")
    args = parser.parse_args()
    if args.depth < 1 or args.width < 1:
        parser.error("--depth and --width must be at least 1")
    if args.bucket_cap_mb is not None and args.bucket_cap_mb <= 0:
        parser.error("--bucket-cap-mb must be positive (leave it out for the variant's cap)")
    return args


def build_model(depth: int, width: int) -> nn.Module:
    """depth + 1 Linear layers, a weight and a bias each: with the defaults 66 gradient
    tensors of 2 MB in all, small enough that the number of buckets depends on the cap."""
    layers: list[nn.Module] = [nn.Linear(32, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


# --8<-- [start:hook]
@dataclass
class BucketTimes:
    """When each bucket's all-reduce was launched and when it finished: marks of a
    utils/timing.py Clock (CUDA events on a GPU, perf_counter on a CPU)."""

    clock: Clock
    counter: AllReduceCounter = field(default_factory=AllReduceCounter)
    launched: dict = field(default_factory=dict)
    finished: dict = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)


def timed_allreduce_hook(state: BucketTimes, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP calls this when a bucket's gradients are all ready: note the time, count the
    all-reduce (utils/comm.py), and note the time again when it has finished. On a GPU
    both marks are CUDA events: the callback runs when nccl has *queued* the all-reduce,
    but its stream waits for it, so an event recorded there marks its end on the GPU."""
    index = bucket.index()
    state.launched[index] = state.clock.mark()
    state.sizes[index] = bucket.buffer().numel() * bucket.buffer().element_size()
    future = counting_allreduce_hook(state.counter, bucket)

    def note_finish(done: torch.futures.Future) -> torch.Tensor:
        state.finished[index] = state.clock.mark()
        return done.value()

    return future.then(note_finish)
# --8<-- [end:hook]


def main() -> None:
    args = parse_args()

    # 1. Join the process group, and shard the data (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)
    if len(loader) * args.epochs <= WARM_UP_STEPS:
        raise SystemExit(f"{len(loader) * args.epochs} steps per rank are too few to see DDP's final "
                         f"buckets (they settle after step {WARM_UP_STEPS}): use more --num-samples "
                         "or --epochs.")

    # 2. The bucket cap: the variant's, unless --bucket-cap-mb gives one.
    if args.bucket_cap_mb is not None:
        bucket_cap_mb = args.bucket_cap_mb
    elif args.variant == "bad":
        # --8<-- [start:bad]
        # bad: a cap below the size of every gradient tensor. Each tensor becomes a bucket
        # of its own, and each bucket an all-reduce that pays a collective's fixed cost.
        bucket_cap_mb = TINY_BUCKET_CAP_MB  # 0.00001 MiB
        # --8<-- [end:bad]
    else:
        # --8<-- [start:good]
        # good: DDP's default (None): 25 MiB buckets, and a first bucket of 1 MiB that the
        # last layers' gradients, ready first, fill and send early. Or a cap that
        # bucket_sweep.py measured to be faster on your model and machine.
        bucket_cap_mb = None
        # --8<-- [end:good]

    # --8<-- [start:model]
    # 3. The model, wrapped with that cap; the hook times and counts every all-reduce.
    torch.manual_seed(args.seed)
    module = build_model(args.depth, args.width).to(ctx.device)
    model = DDP(module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=args.gradient_as_bucket_view,
                static_graph=args.static_graph)
    times = BucketTimes(Clock(ctx.device))
    model.register_comm_hook(times, timed_allreduce_hook)
    # --8<-- [end:model]
    tensors = list(module.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in tensors)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    cap = "default (25 MiB, first bucket 1 MiB)" if bucket_cap_mb is None else f"{bucket_cap_mb:g} MiB"
    print0(f"model: {len(tensors)} gradient tensors, {grad_bytes} bytes of gradients; bucket_cap_mb: {cap}")

    # --8<-- [start:train]
    # 4. Train. Around each backward(): when its last gradient was computed (a hook on
    #    every parameter's gradient, mode="all"), and when backward() returned.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    last_grad = {}
    torch.autograd.graph.register_multi_grad_hook(
        tensors, lambda grads: last_grad.update(at=times.clock.mark()), mode="all")
    steps = []  # per step: all-reduces, step time, and the bucket timeline
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            calls_before = times.counter.calls
            times.launched.clear()
            times.finished.clear()
            start = synchronized_clock(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            backward_start = times.clock.mark()
            loss.backward()  # DDP launches each bucket's all-reduce inside this call
            backward_end = times.clock.mark()
            optimizer.step()
            seconds = synchronized_clock(ctx.device) - start
            # Every mark as seconds since backward() started (on a GPU: read from the events).
            clock, t0 = times.clock, backward_start
            steps.append({"calls": times.counter.calls - calls_before, "seconds": seconds,
                          "backward": (0.0, clock.seconds(t0, last_grad["at"]),
                                       clock.seconds(t0, backward_end)),
                          "launched": {i: clock.seconds(t0, m) for i, m in times.launched.items()},
                          "finished": {i: clock.seconds(t0, m) for i, m in times.finished.items()}})
    # --8<-- [end:train]

    # 5. Report. The first steps are special: in step 1 DDP puts every gradient in one
    #    bucket while it records the order they arrive in, then rebuilds the buckets in that
    #    order (after step 2 with static_graph, which spends step 1 learning the graph).
    settled = steps[WARM_UP_STEPS:]
    calls_per_step = "/".join(map(str, sorted({s["calls"] for s in settled})))
    buckets = len(times.sizes)
    first_calls = ",".join(str(s["calls"]) for s in steps[:WARM_UP_STEPS + 1])
    sizes = ", ".join(str(times.sizes[i]) for i in sorted(times.sizes)[:5]) + (" ..." if buckets > 5 else "")
    print0(f"all-reduces in steps 1-{WARM_UP_STEPS + 1}: {first_calls}; in steps {WARM_UP_STEPS + 1}-"
           f"{len(steps)}: {calls_per_step} per step, in buckets of {sizes} bytes")
    # --8<-- [start:timeline]
    # The last step's timeline, from the start of backward(): each bucket's all-reduce
    # (the first few), the last gradient computed, and backward() returning.
    last = settled[-1]
    _, grads_done, backward_end = last["backward"]
    for index in sorted(last["launched"])[:4]:
        print0(f"  bucket {index:>2} ({times.sizes[index]:>7} bytes): all-reduce launched at "
               f"{last['launched'][index]:.4f} s, finished at {last['finished'][index]:.4f} s")
    print0(f"  last gradient computed at {grads_done:.4f} s; backward() returned at {backward_end:.4f} s")
    overlapped = sum(1 for t in last["launched"].values() if t < grads_done)
    print0(f"{overlapped} of {len(last['launched'])} all-reduce(s) launched while backward() was "
           "still computing gradients")
    # --8<-- [end:timeline]
    median_step = statistics.median(s["seconds"] for s in settled)
    tail = statistics.median(s["backward"][2] - s["backward"][1] for s in settled)
    print0(f"median step {median_step:.4f} s, of which backward() spent {tail:.4f} s waiting for "
           "all-reduces after its last gradient")
    # gradient_as_bucket_view: each .grad is a view into its bucket, so they share storages.
    storages = len({p.grad.untyped_storage().data_ptr() for p in tensors})
    kind = "one per tensor" if storages == len(tensors) else "views into the buckets"
    print0(f"gradient storages: {storages} ({kind})")
    cap_name = "default" if bucket_cap_mb is None else f"{bucket_cap_mb:g}"
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} bucket_cap_mb={cap_name} tensors={len(tensors)} buckets={buckets} "
           f"first_steps_allreduces={first_calls} allreduces_per_step={calls_per_step} "
           f"allreduce_bytes_per_step={times.counter.bytes // len(steps)} "
           f"launched_during_backward={overlapped} grad_storages={storages} "
           f"step_time={median_step:.4f}s tail_time={tail:.4f}s")

    # 6. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()


if __name__ == "__main__":
    main()
