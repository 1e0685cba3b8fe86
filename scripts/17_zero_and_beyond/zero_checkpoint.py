"""Chapter 17: checkpoints of a ZeroRedundancyOptimizer, and an exact resume.

Trains a model under DDP with ZeroRedundancyOptimizer(Adam) for --steps steps and saves a
checkpoint after step --save-at. Then it restarts, as a new job would: a new model and
optimizer, built from another seed, load the checkpoint from the file and train the
remaining steps. Their losses are compared with the uninterrupted run's, step by step.

Run it:
    python scripts/17_zero_and_beyond/zero_checkpoint.py                       # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/17_zero_and_beyond/zero_checkpoint.py
    torchrun --standalone --nproc_per_node=2 scripts/17_zero_and_beyond/zero_checkpoint.py --variant bad
    mpiexec -n 2 python scripts/17_zero_and_beyond/zero_checkpoint.py

The pitfall (--variant bad): rank 0 alone saves the optimizer, as a DDP script does
(chapter 04). ZeroRedundancyOptimizer.state_dict() refuses with PyTorch's error, since
rank 0 holds only its shard of the state. Saving that shard instead (zero.optim) gives a
checkpoint without the other ranks' state: its load fails, after it has put rank 0's
moments on other parameters, and the resumed run's first step crashes.
The fix (--variant good): consolidate_state_dict(to=0) on every rank, then rank 0 saves;
every rank loads the file and keeps its shard. The resumed losses equal the uninterrupted
run's. (torch.distributed.checkpoint is the fix after moving to FSDP2: it cannot read a
ZeroRedundancyOptimizer that was not consolidated.)
"""

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from utils.checkpoint import atomic_torch_save
from utils.cli import add_training_args, add_variant_arg, make_parser, output_dir, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=16, lr=1e-2)
    parser.add_argument("--steps", type=positive_int,
                        default=8, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--save-at", type=positive_int, default=4, metavar="K",
                        help="save after step K, then restart from it (default: %(default)s)")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints"),
                        help="where the checkpoint goes; on a cluster, a file system every node "
                        "sees (default: %(default)s)")
    add_variant_arg(parser, bad="rank 0 saves its optimizer shard alone",
                    good="consolidate_state_dict(to=0), then rank 0 saves the whole state")
    args = parser.parse_args()
    if args.save_at >= args.steps:
        parser.error(f"--save-at {args.save_at} leaves no step to resume: give less than "
                     f"--steps {args.steps}")
    return args


def build(ctx, seed: int, lr: float) -> tuple[DDP, ZeroRedundancyOptimizer]:
    """The model under DDP, and ZeroRedundancyOptimizer(Adam) over its parameters."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=lr)


def train(ctx, ddp: DDP, optimizer, batches) -> list[float]:
    """Train on `batches`; return the loss of each step, averaged over every rank's batch."""
    losses = []
    for inputs, labels in batches:
        inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(ddp(inputs), labels)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / ctx.world_size)
    return losses


def count_states(state: dict) -> int:
    """Parameters whose Adam state (exp_avg, exp_avg_sq, step) a state dict holds."""
    return sum(1 for s in state.values() if s and "exp_avg" in s)


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    path = args.checkpoint_dir / f"zero_{args.variant}.pt"

    # 2. The same batches for every run: step k always sees batch k.
    dataset = synthetic_classification(args.batch_size * ctx.world_size * args.steps, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size,
                        sampler=DistributedSampler(dataset, ctx.world_size, ctx.rank, shuffle=False))

    # 3. The uninterrupted run, with a checkpoint after step --save-at.
    ddp, optimizer = build(ctx, args.seed, args.lr)
    n_params = len(list(ddp.parameters()))
    losses = train(ctx, ddp, optimizer, itertools.islice(loader, args.save_at))
    held: list = [None] * ctx.world_size
    dist.all_gather_object(held, count_states(optimizer.optim.state))
    print0(f"after step {args.save_at}: Adam state held per rank (parameters of {n_params}): "
           f"{','.join(map(str, held))}")
    if args.variant == "bad":
        # --8<-- [start:bad_save]
        # bad: rank 0 alone saves, as a DDP script does (chapter 04).
        if ctx.rank == 0:
            try:
                optimizer_state = optimizer.state_dict()
            except RuntimeError as error:  # PyTorch refuses: rank 0 holds one shard
                print0(f"rank 0: optimizer.state_dict() failed: RuntimeError: {error}")
                # The way around the error that looks harmless: save what rank 0 holds.
                optimizer_state = optimizer.optim.state_dict()
            atomic_torch_save({"model": ddp.module.state_dict(), "optimizer": optimizer_state,
                               "step": args.save_at}, path)
        dist.barrier()
        # --8<-- [end:bad_save]
    else:
        # --8<-- [start:good_save]
        # good: every rank sends its shard to rank 0 (a collective: every rank calls it),
        # then rank 0 saves the whole state; the others wait until the file is complete.
        optimizer.consolidate_state_dict(to=0)
        if ctx.rank == 0:
            atomic_torch_save({"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict(),
                               "step": args.save_at}, path)
        dist.barrier()
        # --8<-- [end:good_save]
    saved = torch.load(path, map_location="cpu", weights_only=True)["optimizer"]  # gpu-checked: read to count
    print0(f"saved {path.name}: Adam state for {count_states(saved['state'])} of {n_params} parameters")
    losses += train(ctx, ddp, optimizer, itertools.islice(loader, args.save_at, None))

    # 4. The restart: a new model and optimizer (another seed), loaded from the file.
    del ddp, optimizer
    ddp, optimizer = build(ctx, args.seed + 1, args.lr)
    checkpoint = torch.load(path, map_location=ctx.device, weights_only=True)
    ddp.module.load_state_dict(checkpoint["model"])
    if args.variant == "bad":
        # --8<-- [start:bad_resume]
        # bad: every rank loads the file, which holds rank 0's shard alone, its parameters
        # numbered as rank 0's own Adam numbers them (0, 1, ...). PyTorch refuses it, but
        # only after it has put that state on the parameters that have those numbers in
        # the whole model: a resume that goes on (as one inside try/except does) crashes.
        try:
            optimizer.load_state_dict(checkpoint["optimizer"])
        except ValueError as error:
            print0(f"resume: optimizer.load_state_dict() failed on rank 0: ValueError: {error}")
        # --8<-- [end:bad_resume]
    else:
        # --8<-- [start:good_resume]
        # good: every rank loads the whole state; each keeps its own shard.
        optimizer.load_state_dict(checkpoint["optimizer"])
        # --8<-- [end:good_resume]
    # --8<-- [start:check]
    # What each rank's Adam now holds: state of its parameter's shape (the right state, or
    # another parameter's of the same shape), or state of another shape.
    mine = [sum(1 for p, st in optimizer.optim.state.items() if st["exp_avg"].shape == p.shape),
            sum(1 for p, st in optimizer.optim.state.items() if st["exp_avg"].shape != p.shape)]
    restored: list = [None] * ctx.world_size
    dist.all_gather_object(restored, mine)
    print0(f"resume: Adam state per rank, of its parameter's shape: "
           f"{','.join(str(r[0]) for r in restored)} (held before: {','.join(map(str, held))}); "
           f"of another shape: {','.join(str(r[1]) for r in restored)}")
    # --8<-- [end:check]
    try:
        resumed = train(ctx, ddp, optimizer, itertools.islice(loader, checkpoint["step"], None))
    except RuntimeError as error:  # every rank's Adam holds a moment of the wrong shape
        print0(f"resume: step {checkpoint['step'] + 1} failed on rank 0: RuntimeError: {error}")
        resumed = []

    # 5. Compare with the uninterrupted run, step by step.
    if resumed:
        print0(f"{'step':>4} {'uninterrupted':>14} {'resumed':>10}")
        for step in range(checkpoint["step"], args.steps):
            print0(f"{step + 1:>4} {losses[step]:>14.6f} {resumed[step - checkpoint['step']]:>10.6f}")
    equal = resumed == losses[checkpoint["step"]:]
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} launcher={ctx.launcher} "
           f"params={n_params} held={','.join(map(str, held))} "
           f"saved_states={count_states(saved['state'])}/{n_params} "
           f"right_shape_states={sum(r[0] for r in restored)}/{n_params} "
           f"wrong_shape_states={sum(r[1] for r in restored)} "
           f"resumed_steps={len(resumed)}/{args.steps - checkpoint['step']} "
           f"resume_equal={'yes' if equal else 'no'}")

    # 6. Release the DDP model, then leave the process group.
    del ddp
    cleanup_distributed()


if __name__ == "__main__":
    main()
