"""Chapter 16: FSDP2 next to DDP: the same training, and the memory each rank holds.

Trains the same model (repeated blocks, utils/fsdp.py) from the same initial weights on the
same global batches twice: once with DDP, once sharded with FSDP2's fully_shard. Prints both
loss curves, and each rank's bytes of parameters, gradients and Adam state for both, next to
the arithmetic: 16 bytes per parameter under DDP, 16/N under FSDP2 (N ranks).

Run it:
    python scripts/16_fsdp/fsdp_vs_ddp.py                                       # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/16_fsdp/fsdp_vs_ddp.py
    torchrun --standalone --nproc_per_node=4 scripts/16_fsdp/fsdp_vs_ddp.py
    mpiexec -n 2 python scripts/16_fsdp/fsdp_vs_ddp.py
Mixed precision (bf16 compute, fp32 gradient reduction) and parameters kept gathered from
forward to backward:
    torchrun --standalone --nproc_per_node=2 scripts/16_fsdp/fsdp_vs_ddp.py \\
        --precision bf16 --reshard-after-forward no
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

from utils.checks import check_divisible, check_global_batch
from utils.cli import make_parser
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.fsdp import (
    add_fsdp_args,
    build_model,
    global_batch_slice,
    memory_row,
    shard_model,
    unsharded_bytes,
)

BYTES_PER_PARAM = 16  # fp32 Adam: 4 parameter + 4 gradient + 4 exp_avg + 4 exp_avg_sq
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2}  # largest |FSDP2 loss - DDP loss| accepted


def parse_args():
    parser = add_fsdp_args(make_parser(__doc__), epochs=2)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="FSDP2's MixedPrecisionPolicy: fp32, or bf16 parameters and compute "
                        "with fp32 gradient reduction (default: %(default)s)")
    parser.add_argument("--reshard-after-forward", choices=["yes", "no"], default="yes",
                        help="free each block's gathered parameters after its forward (yes) or "
                        "keep them until backward (no) (default: %(default)s)")
    return parser.parse_args()


def train(model, optimizer, dataset, args, ctx, *, measure_between=False):
    """Adam on the global batches; returns (loss per step, bytes held unsharded between the
    first forward and its backward)."""
    inputs, labels = dataset.tensors
    steps_per_epoch = args.num_samples // args.global_batch_size
    losses, between = [], None
    for epoch in range(args.epochs):
        for step in range(steps_per_epoch):
            index = global_batch_slice(step, args.global_batch_size, args.num_samples, ctx.rank,
                                       ctx.world_size, args.seed, epoch)
            x, y = inputs[index].to(ctx.device), labels[index].to(ctx.device)
            loss = nn.functional.cross_entropy(model(x).float(), y)
            if measure_between and between is None:
                between = unsharded_bytes(model)
            loss.backward()
            optimizer.step()
            if not (epoch == args.epochs - 1 and step == steps_per_epoch - 1):
                optimizer.zero_grad(set_to_none=True)  # keep the last gradients: measured below
            mean = loss.detach().clone()
            dist.all_reduce(mean)  # the loss of the whole global batch (equal slices)
            losses.append(mean.item() / ctx.world_size)
    return losses, between


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01); one dimension of ranks for FSDP2 to shard over.
    ctx = setup_distributed(args.backend, args.timeout)
    check_divisible(ctx, "--global-batch-size", args.global_batch_size)
    check_global_batch(ctx, args.num_samples, args.global_batch_size, batch_flag="--global-batch-size",
                       per_rank=False)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} precision={args.precision} "
           f"reshard_after_forward={args.reshard_after_forward}")

    # 2. DDP: every rank holds the whole model, its gradients and Adam's state.
    ddp_model = DDP(build_model(args.seed, ctx.device), gradient_as_bucket_view=True,
                    device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    num_params = sum(p.numel() for p in ddp_model.parameters())
    ddp_optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)
    ddp_losses, _ = train(ddp_model, ddp_optimizer, dataset, args, ctx)
    ddp_memory = memory_row(ddp_model, ddp_optimizer)
    del ddp_model, ddp_optimizer

    # 3. FSDP2: the same initial weights, sharded block by block; the optimizer is built on
    #    the sharded parameters (DTensors), so its state is sharded the same way.
    # --8<-- [start:fsdp]
    model = shard_model(build_model(args.seed, ctx.device), mesh, precision=args.precision,
                        reshard_after_forward=args.reshard_after_forward == "yes")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # --8<-- [end:fsdp]
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    fsdp_losses, between = train(model, optimizer, dataset, args, ctx, measure_between=True)
    fsdp_memory = memory_row(model, optimizer)

    # 4. The losses side by side.
    diffs = [abs(a - b) for a, b in zip(ddp_losses, fsdp_losses, strict=True)]
    print0("step  ddp_loss   fsdp2_loss  |difference|")
    for step, (a, b, d) in enumerate(zip(ddp_losses, fsdp_losses, diffs, strict=True), start=1):
        print0(f"{step:>4}  {a:.6f}   {b:.6f}    {d:.1e}")
    tolerance = TOLERANCE[args.precision]
    match = max(diffs) <= tolerance

    # 5. Memory per rank: measured bytes against the arithmetic.
    # --8<-- [start:memory_table]
    totals = [None] * ctx.world_size
    dist.all_gather_object(totals, fsdp_memory["total"])  # every rank's, not only rank 0's
    expected = {"ddp": BYTES_PER_PARAM * num_params,
                "fsdp2": BYTES_PER_PARAM * num_params // ctx.world_size}
    print0(f"memory per rank, bytes ({num_params} parameters, world size {ctx.world_size}):")
    print0(f"{'':<6}{'params':>10}{'grads':>10}{'adam':>10}{'total':>10}{'expected':>10}")
    for name, row in (("ddp", ddp_memory), ("fsdp2", fsdp_memory)):
        print0(f"{name:<6}" + "".join(f"{row[k]:>10}" for k in ("params", "grads", "adam", "total"))
               + f"{expected[name]:>10}")
    # --8<-- [end:memory_table]
    print0(f"fsdp2 total on each rank: {','.join(map(str, totals))}")
    print0(f"held whole between forward and backward (fsdp2): {between} bytes")
    if ctx.device.type == "cuda":  # what the allocator saw: shards + gathered blocks + activations
        print0(f"torch.cuda.max_memory_allocated (fsdp2, rank 0): "
               f"{torch.cuda.max_memory_allocated(ctx.device)} bytes")

    # 6. Summary (rank 0).
    print0(f"summary: launcher={ctx.launcher} world_size={ctx.world_size} precision={args.precision} "
           f"params={num_params} ddp_bytes={ddp_memory['total']} fsdp2_bytes={fsdp_memory['total']} "
           f"expected_fsdp2={expected['fsdp2']} fsdp2_bytes_per_rank={','.join(map(str, totals))} "
           f"between_fwd_bwd={between} max_loss_diff={max(diffs):.1e} tolerance={tolerance:g} "
           f"losses_match={'yes' if match else 'no'}")

    # 7. Leave the process group.
    del model, optimizer
    cleanup_distributed()


if __name__ == "__main__":
    main()
