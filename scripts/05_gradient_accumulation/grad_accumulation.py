"""Chapter 05: gradient accumulation with DDP, and model.no_sync().

Gradient accumulation runs K micro-batches through forward() and backward(), adding up
their gradients, and takes one optimizer step: the step sees an effective batch of
batch size x K x world size samples, with the memory of one micro-batch. Under DDP every
backward() also all-reduces the gradients, which is only needed once, at the last
micro-batch: model.no_sync() switches it off for the others.

A communication hook counts DDP's all-reduces (and their bytes), and after the first
optimizer step the accumulated gradient is compared with the gradient of the whole
effective batch computed in one process by a plain model from the same start.

Run it:
    python scripts/05_gradient_accumulation/grad_accumulation.py                # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/05_gradient_accumulation/grad_accumulation.py
    mpiexec -n 4 python scripts/05_gradient_accumulation/grad_accumulation.py
    qsub scripts/05_gradient_accumulation/torchrun_grad_accumulation.sh        # PBS cluster

The pitfall (--variant bad): accumulate without no_sync(). The gradients come out the
same, but every micro-batch's backward() all-reduces them: K times the all-reduces and
K times the bytes for every optimizer step. time_no_sync.py measures what that costs.
"""

import contextlib
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.comm import AllReduceCounter, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed

GRAD_TOLERANCE = 1e-6  # float32 sums in another order differ by ~1e-8 here; a real error is far larger


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=16, lr=0.05)
    parser.add_argument("--accumulation-steps", type=positive_int, default=4, metavar="K",
                        help="micro-batches per optimizer step (default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    add_variant_arg(parser, bad="every micro-batch all-reduces",
                    good="no_sync() on all but the last micro-batch")
    args = parser.parse_args()
    if args.accumulation_steps < 1:
        parser.error("--accumulation-steps must be at least 1")
    return args


def build_model() -> nn.Module:
    # 75,268 parameters (294 KiB of float32 gradients): less than DDP's first bucket
    # (1 MiB), so every gradient travels in one bucket and one backward = one all-reduce.
    return nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 4))


# --8<-- [start:bad_accumulate]
def accumulate_bad(model, loss_fn, micro_batches) -> torch.Tensor:
    """bad: a plain loop. Every backward() all-reduces every bucket, K times per step."""
    total = 0.0
    for inputs, labels in micro_batches:
        loss = loss_fn(model(inputs), labels) / len(micro_batches)  # K micro-means -> 1 mean
        loss.backward()  # all-reduce here, for every micro-batch
        total += loss.detach()
    return total
# --8<-- [end:bad_accumulate]


# --8<-- [start:good_accumulate]
def accumulate_good(model, loss_fn, micro_batches) -> torch.Tensor:
    """good: no_sync() on all but the last micro-batch. Gradients add up locally; the
    last backward() all-reduces the sum once."""
    total = 0.0
    for index, (inputs, labels) in enumerate(micro_batches):
        is_last = index == len(micro_batches) - 1
        # no_sync() must wrap forward() as well as backward(): DDP decides in forward().
        with contextlib.nullcontext() if is_last else model.no_sync():
            loss = loss_fn(model(inputs), labels) / len(micro_batches)  # K micro-means -> 1 mean
            loss.backward()  # all-reduce only when is_last
        total += loss.detach()
    return total
# --8<-- [end:good_accumulate]


# --8<-- [start:check]
def max_grad_difference(model, initial_state, micro_batches, loss_fn, device) -> float:
    """Largest |gradient difference| between DDP's accumulated gradient and the gradient
    of the whole effective batch (every rank's micro-batches) in one plain model."""
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, [(x.cpu(), y.cpu()) for x, y in micro_batches])
    inputs = torch.cat([x for rank_batches in everyone for x, _ in rank_batches]).to(device)
    labels = torch.cat([y for rank_batches in everyone for _, y in rank_batches]).to(device)
    reference = build_model().to(device)
    reference.load_state_dict(initial_state)  # the same start as the DDP model
    loss_fn(reference(inputs), labels).backward()  # one batch of K x B x world_size samples
    difference = max((p.grad - r.grad).abs().max() for p, r in
                     zip(model.module.parameters(), reference.parameters(), strict=True))
    dist.all_reduce(difference, op=dist.ReduceOp.MAX)  # the worst rank
    return difference.item()
# --8<-- [end:check]


def main() -> None:
    args = parse_args()
    accumulation_steps = args.accumulation_steps

    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    # --8<-- [start:effective_batch]
    # 2. The effective batch: what one optimizer step averages over.
    effective_batch = args.batch_size * accumulation_steps * ctx.world_size
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    print0(f"effective batch = {args.batch_size} per micro-batch x {accumulation_steps} "
           f"micro-batches x {ctx.world_size} rank(s) = {effective_batch} samples per optimizer step")
    # --8<-- [end:effective_batch]

    # 3. Data: each rank its shard; drop_last keeps every micro-batch the same size, so
    #    the K losses / K average to the effective batch's mean loss.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader) // accumulation_steps  # a partial last window is skipped
    if steps_per_epoch == 0:
        raise SystemExit(f"{len(loader)} micro-batches per rank per epoch is fewer than "
                         f"--accumulation-steps {accumulation_steps}: use more --num-samples.")

    # --8<-- [start:model]
    # 4. Model, wrapped; the hook counts every all-reduce DDP makes from now on.
    torch.manual_seed(args.seed)
    model = DDP(build_model().to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    counter = AllReduceCounter()
    model.register_comm_hook(counter, counting_allreduce_hook)
    initial_state = copy.deepcopy(model.module.state_dict())  # for the gradient check
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    accumulate = accumulate_good if args.variant == "good" else accumulate_bad
    # --8<-- [end:model]

    # --8<-- [start:train]
    # 5. Train: K micro-batches, then one optimizer step.
    grad_difference = None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        calls_before, loss_sum = counter.calls, torch.zeros((), device=ctx.device)
        for _ in range(steps_per_epoch):
            micro_batches = [tuple(t.to(ctx.device, non_blocking=True) for t in next(batches))
                             for _ in range(accumulation_steps)]
            optimizer.zero_grad(set_to_none=True)
            loss_sum += accumulate(model, loss_fn, micro_batches)
            if grad_difference is None:  # the very first step: compare with one large batch
                grad_difference = max_grad_difference(model, initial_state, micro_batches,
                                                      loss_fn, ctx.device)
            optimizer.step()
        dist.all_reduce(loss_sum)  # a plain collective, not DDP's: the hook does not count it
        calls_per_step = (counter.calls - calls_before) / steps_per_epoch
        print0(f"epoch {epoch + 1}/{args.epochs}  {steps_per_epoch} optimizer steps  "
               f"{calls_per_step:g} all-reduce(s) per step  "
               f"loss {loss_sum.item() / (steps_per_epoch * ctx.world_size):.4f}")
    # --8<-- [end:train]

    # 6. Report: all-reduces and bytes per optimizer step, and the gradient check.
    total_steps = steps_per_epoch * args.epochs
    buckets = len(counter.buckets)
    per_step, bytes_per_step = counter.calls / total_steps, counter.bytes // total_steps
    print0(f"all-reduces: {counter.calls} in {total_steps} optimizer steps = {per_step:g} per step "
           f"({buckets} bucket(s) x {per_step / buckets:g} synchronized backward(s)), "
           f"{bytes_per_step} bytes per step per rank")
    if ctx.world_size == 1:
        print0("(one process: DDP still calls the hook and the all-reduce, which moves no data)")
    if per_step > buckets:
        print0(f"WARNING: {per_step:g} all-reduces per optimizer step where {buckets} would do: "
               f"all {accumulation_steps} micro-batches synchronized their gradients. "
               "Wrap all but the last in model.no_sync().")
    equal = grad_difference <= GRAD_TOLERANCE
    print0(f"gradient after {accumulation_steps} micro-batches vs one batch of {effective_batch} "
           f"samples: max |difference| {grad_difference:.10f} (tolerance {GRAD_TOLERANCE:g}): "
           f"{'equal' if equal else 'DIFFERENT'}")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} accumulation_steps={accumulation_steps} "
           f"effective_batch={effective_batch} buckets={buckets} allreduces={counter.calls} "
           f"allreduces_per_step={per_step:g} allreduce_bytes_per_step={bytes_per_step} "
           f"grad_max_abs_diff={grad_difference:.10f} grads_equal={'yes' if equal else 'no'}")

    # 7. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    if not equal:
        raise SystemExit(f"the accumulated gradient differs from the large batch's by "
                         f"{grad_difference:.3g} > {GRAD_TOLERANCE:g}")


if __name__ == "__main__":
    main()
