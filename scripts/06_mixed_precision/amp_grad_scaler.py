"""Chapter 06: mixed precision with torch.autocast, and why fp16 needs a GradScaler.

Under autocast the parameters stay fp32, but the forward pass runs its matrix products in
fp16 or bf16, and so does the backward pass. fp16's smallest positive number is 5.96e-08:
a gradient up to half of that rounds to exactly 0 on its way back through the network. GradScaler
multiplies the loss by a large scale before backward() (so the gradients stay inside fp16's
range) and divides the fp32 gradients by it again before the optimizer step. bf16 has
fp32's range and needs no scaler.

Run it (the same file, unchanged, on CPU/gloo and GPU/nccl):
    python scripts/06_mixed_precision/amp_grad_scaler.py                    # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/06_mixed_precision/amp_grad_scaler.py
    torchrun --standalone --nproc_per_node=2 scripts/06_mixed_precision/amp_grad_scaler.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/06_mixed_precision/amp_grad_scaler.py --precision bf16
    mpiexec -n 4 python scripts/06_mixed_precision/amp_grad_scaler.py
    qsub scripts/06_mixed_precision/mixed_precision.sh                      # PBS cluster

The pitfall (--variant bad): fp16 without a GradScaler. The gradients are small (this toy
model's loss is weighted by --loss-weight 1e-7 to make them as small as a deep network's),
fp16 rounds them to zero, every gradient is 0 and the loss never moves. At 1e-7 the largest
gradient is about 10 times below half of 5.96e-08: it rounds to 0 on a CPU and a GPU alike.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_float, positive_int
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed

LOW_PRECISION = {"fp16": torch.float16, "bf16": torch.bfloat16}
FP16_SMALLEST = 2.0**-24  # 5.96e-08: fp16's smallest positive number (a subnormal)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--precision", choices=["fp16", "bf16", "fp32"], default="fp16",
                        help="autocast dtype; fp32 turns autocast off (default: %(default)s)")
    add_variant_arg(parser, bad="plain backward() and step()",
                    good="a GradScaler for fp16")
    parser.add_argument("--loss-weight", type=positive_float, default=1e-7,
                        help="the loss is multiplied by this and the learning rate divided by it: "
                        "the same training in fp32, gradients this many times smaller; "
                        "1 = a toy model's large gradients (default: %(default)s)")
    return parser.parse_args()


def zero_gradient_count(model: nn.Module) -> tuple[int, int]:
    """(gradient elements that are exactly 0, all gradient elements) of the model."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return sum(int((g == 0).sum()) for g in grads), sum(g.numel() for g in grads)


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01); the device decides autocast's device type.
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} precision={args.precision} variant={args.variant} "
           f"loss_weight={args.loss_weight:g}")

    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler)

    # 2. The model stays fp32: autocast casts on the fly, inside the forward pass only.
    #    The learning rate is divided by --loss-weight, so the updates equal those of an
    #    unweighted loss: only the size of the gradients changes.
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(ctx.device)
    model = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr / args.loss_weight, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # --8<-- [start:scaler]
    # 3. good: a GradScaler for fp16 only. bf16 has fp32's exponent range, and fp32 needs
    #    none: enabled=False makes the scaler a pass-through, so one loop serves all three.
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=args.precision == "fp16")
    # --8<-- [end:scaler]

    # 4. Train. Count, at every step, how many gradient elements are exactly zero.
    epoch_losses, zero_elements, all_elements, skipped_steps = [], 0, 0, 0
    largest_logit_grad: list[float] = []
    loss_grad: list[float] = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum, samples_this_rank = torch.zeros((), device=ctx.device), 0
        for inputs, labels in loader:
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            # --8<-- [start:autocast]
            # Forward pass and loss under autocast: matmuls in fp16/bf16, the loss in fp32.
            with torch.autocast(ctx.device.type, dtype=LOW_PRECISION.get(args.precision),
                                enabled=args.precision != "fp32"):
                logits = model(inputs)
                loss = loss_fn(logits, labels)
            # --8<-- [end:autocast]
            if not largest_logit_grad:  # first step: what reaches the logits in backward,
                logits.register_hook(lambda grad: largest_logit_grad.append(grad.abs().max().item()))
                # and by what the loss was multiplied before backward (the gradient scale).
                loss.register_hook(lambda grad: loss_grad.append(grad.item()))
            weighted_loss = loss * args.loss_weight
            if args.variant == "bad":
                # --8<-- [start:bad_step]
                # bad: plain backward() in fp16. A gradient below 5.96e-08 becomes 0.
                weighted_loss.backward()
                zeros, elements = zero_gradient_count(model)
                optimizer.step()
                # --8<-- [end:bad_step]
            else:
                # --8<-- [start:good_step]
                # good: backward() on loss * scale keeps the gradients inside fp16's range;
                # unscale_() divides the fp32 gradients by the scale again.
                scaler.scale(weighted_loss).backward()
                scaler.unscale_(optimizer)
                zeros, elements = zero_gradient_count(model)
                scale_before = scaler.get_scale()
                scaler.step(optimizer)  # skipped if a gradient is inf or NaN
                scaler.update()  # halves the scale after an overflow, grows it after 2000 good steps
                skipped_steps += int(scaler.get_scale() < scale_before)
                # --8<-- [end:good_step]
            zero_elements, all_elements = zero_elements + zeros, all_elements + elements
            loss_sum += loss.detach().float() * len(labels)
            samples_this_rank += len(labels)
        totals = torch.stack([loss_sum, torch.tensor(float(samples_this_rank), device=ctx.device)])
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        epoch_losses.append((totals[0] / totals[1]).item())
        print0(f"epoch {epoch + 1}/{args.epochs}  loss {epoch_losses[-1]:.4f}  "
               f"zero gradients {100 * zeros / elements:.1f}% (last step)")

    # --8<-- [start:summary]
    # 5. Report: the share of exactly-zero gradient elements over the run, and the loss.
    zero_share = 100 * zero_elements / all_elements
    scale = f"{loss_grad[0] / args.loss_weight:g}"  # what backward() saw: 1 = not scaled
    dtype_name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    weight = next(model.parameters())
    print0(f"dtypes: parameters {dtype_name[weight.dtype]}, logits {dtype_name[logits.dtype]}, "
           f"loss {dtype_name[loss.dtype]}, gradients {dtype_name[weight.grad.dtype]}")
    print0(f"step 1: largest gradient of the logits {largest_logit_grad[0]:.3g} (gradient scale: "
           f"{scale}; fp16's smallest positive number: {FP16_SMALLEST:.3g})")
    probe = torch.tensor([4e-8, 2.5e-8], device=ctx.device).half().tolist()  # rounds to nearest
    print0(f"fp16 on {ctx.device.type}: 4e-08 -> {probe[0]:.3g}, 2.5e-08 -> {probe[1]:.3g} "
           "(a nonzero fp16 number, or 0 below half of the smallest)")
    if zero_share > 50 and epoch_losses[-1] >= epoch_losses[0] - 1e-3:
        print0(f"WARNING: {zero_share:.1f}% of the gradient elements were exactly zero and the loss "
               f"did not move: the {args.precision} backward pass rounded the small gradients to "
               "zero. Use a GradScaler (--variant good) or bf16.")
    print0(f"summary: variant={args.variant} precision={args.precision} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} zero_grads={zero_share:.1f}% "
           f"scale={scale} skipped_steps={skipped_steps} first_loss={epoch_losses[0]:.4f} "
           f"final_loss={epoch_losses[-1]:.4f}")
    # --8<-- [end:summary]

    # 6. Release the DDP model before the process group (chapter 01, step 6).
    del model
    cleanup_distributed()


if __name__ == "__main__":
    main()
