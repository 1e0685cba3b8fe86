"""Chapter 04: rank-0 logging, checkpoints of a DDP model, and an exact resume.

Trains a small model with DDP, saves a checkpoint after every epoch, can stop early (as if
the job had been killed) and resume from the checkpoint, and at the end loads the
checkpoint into a plain model, as an inference script in one process would.

Run it:
    python scripts/04_logging_and_checkpoints/train_with_checkpoints.py          # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/04_logging_and_checkpoints/train_with_checkpoints.py
    mpiexec -n 2 python scripts/04_logging_and_checkpoints/train_with_checkpoints.py
Interrupted and resumed (the same losses as one uninterrupted run):
    torchrun --standalone --nproc_per_node=2 scripts/04_logging_and_checkpoints/train_with_checkpoints.py \\
        --stop-after-epoch 2
    torchrun --standalone --nproc_per_node=2 scripts/04_logging_and_checkpoints/train_with_checkpoints.py \\
        --resume

The pitfall (--variant bad): every rank prints every line and writes the same checkpoint
file; what it saves is the DDP wrapper's state_dict, whose keys start with "module.", so a
plain model cannot load it; its resume forgets map_location and the RNG states.
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checkpoint import (
    fingerprint_states,
    generator_states,
    load_checkpoint,
    save_checkpoint,
    unwrap_model,
)
from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, output_dir, positive_int
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.logging_utils import get_logger


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=4, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=1024,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints"),
                        help="where checkpoints go; on a cluster, a file system every node "
                        "sees (default: %(default)s)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in --checkpoint-dir if there is one")
    parser.add_argument("--stop-after-epoch", type=positive_int, default=None, metavar="K",
                        help="stop after epoch K, as if the job had been killed there "
                        "(default: run all --epochs)")
    add_variant_arg(parser, bad="every rank prints and saves the wrapper",
                    good="rank 0 logs and saves model.module atomically, exact resume")
    args = parser.parse_args()
    if args.stop_after_epoch is not None and args.stop_after_epoch > args.epochs:
        parser.error(f"--stop-after-epoch {args.stop_after_epoch} is after the last epoch: give 1 to "
                     f"--epochs {args.epochs}")
    return args


def build_model() -> nn.Module:
    # Dropout draws random numbers on every step: an exact resume must restore the RNG.
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 4))


def rng_fingerprint(device: torch.device, world_size: int) -> str:
    """Eight hex digits that change whenever any generator this run draws from moves on any
    rank: the CPU's and, on a GPU, the GPU's (a collective: every rank must call it)."""
    states_per_rank = [None] * world_size
    dist.all_gather_object(states_per_rank, generator_states(device))
    return fingerprint_states(states_per_rank)


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)

    # 2. How lines get out. log(...) is the one call the rest of the script makes.
    if args.variant == "bad":
        # --8<-- [start:bad_logging]
        # bad: the logging setup of a one-GPU script, now run by every rank: every line
        # comes out once per rank (the rank in the format only shows who wrote each copy).
        logging.basicConfig(level=logging.INFO, format=f"[rank {ctx.rank}] %(message)s",
                            stream=sys.stdout)
        log = logging.getLogger("train").info
        # --8<-- [end:bad_logging]
    else:
        # --8<-- [start:good_logging]
        # good: a logger that lets rank 0's lines through only. When every rank's line is
        # wanted (debugging), get_logger("train", all_ranks=True) prefixes each with its rank.
        log = get_logger("train").info
        # --8<-- [end:good_logging]
    log(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
        f"device={ctx.device.type} variant={args.variant}")

    # 3. Data: DistributedSampler + set_epoch(), so the data order is a function of the
    #    epoch alone, and a resumed run draws the same batches as an uninterrupted one.
    #    The loader draws its workers' base seed from a generator of its own, not from the
    #    global one: with persistent workers (on GPUs) it draws when the first epoch starts,
    #    so a resumed run would draw once more than the uninterrupted one.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler,
                         generator=torch.Generator().manual_seed(args.seed))

    # 4. The model, wrapped; the optimizer keeps state (momentum) a resume must restore.
    torch.manual_seed(args.seed)
    model = DDP(build_model().to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(args.seed + ctx.rank)  # each rank its own dropout masks

    # 5. Resume: continue where the checkpoint left off.
    checkpoint_path = args.checkpoint_dir / f"checkpoint_{args.variant}.pt"
    start_epoch = 0
    if args.resume and checkpoint_path.exists():
        if args.variant == "bad":
            # --8<-- [start:bad_resume]
            # bad: no map_location: tensors go back to the device that saved them (on GPUs,
            # one rank's GPU, the same for every rank). No RNG states were saved.
            checkpoint = torch.load(checkpoint_path, weights_only=True)
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            start_epoch = checkpoint["epoch"]
            # --8<-- [end:bad_resume]
        else:
            # --8<-- [start:good_resume]
            # good: onto this rank's device, into model.module; optimizer, epoch, and this
            # rank's RNG states (torch, Python, numpy; CUDA on GPUs) restored.
            checkpoint = load_checkpoint(checkpoint_path, model, optimizer, device=ctx.device)
            start_epoch = checkpoint["epoch"]
            # --8<-- [end:good_resume]
        log(f"resumed from {checkpoint_path.name}: {start_epoch} epoch(s) done")
    elif args.resume:
        log(f"no {checkpoint_path.name} in the checkpoint directory yet: starting at epoch 1")

    # 6. Train, and save a checkpoint after every epoch. rng_states: a fingerprint of every
    #    rank's generators (CPU; GPU on GPUs) as each epoch starts; an exact resume starts
    #    with the same ones.
    losses, rng_states = [], []
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # the data order depends on the epoch, not on history
        rng_states.append(rng_fingerprint(ctx.device, ctx.world_size))
        model.train()
        loss_sum, count = torch.zeros((), device=ctx.device), 0
        for inputs, labels in loader:
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(labels)
            count += len(labels)
        totals = torch.stack([loss_sum, torch.tensor(float(count), device=ctx.device)])
        dist.all_reduce(totals)  # the loss over every rank's samples
        losses.append((totals[0] / totals[1]).item())
        log(f"epoch {epoch + 1}/{args.epochs}  loss {losses[-1]:.6f}")

        if args.variant == "bad":
            # --8<-- [start:bad_save]
            # bad: every rank writes the same file, in place, with the wrapper's keys.
            args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, checkpoint_path)
            # --8<-- [end:bad_save]
        else:
            # --8<-- [start:good_save]
            # good: every rank calls it; rank 0 alone writes model.module's state, atomically;
            # the others wait at a barrier until the file is complete.
            save_checkpoint(checkpoint_path, model, optimizer, epoch=epoch + 1)
            # --8<-- [end:good_save]
        log(f"saved {checkpoint_path.name} after epoch {epoch + 1}")
        if epoch + 1 == args.stop_after_epoch:
            log(f"stopping after epoch {epoch + 1} of {args.epochs}, as if the job had been "
                "killed: run the same command with --resume to continue")
            break
    # The bad variant's ranks may still be writing the file: let every rank finish first
    # (in the good variant, save_checkpoint's barrier has already seen to that).
    dist.barrier()

    # --8<-- [start:inference]
    # 7. Later, for inference: a plain model (no DDP, one process) loads the checkpoint.
    plain_load = "skipped"
    if ctx.is_main and checkpoint_path.exists():
        plain_model = build_model().to(ctx.device).eval()
        saved = torch.load(checkpoint_path, map_location=ctx.device, weights_only=True)
        try:
            plain_model.load_state_dict(saved["model"])
        except RuntimeError as error:  # keys do not match: PyTorch's message says which
            plain_load = "failed"
            log(f"inference: loading {checkpoint_path.name} into a plain model failed:")
            for line in f"{type(error).__name__}: {error}".splitlines():
                log(f"  {line.strip()}")
        else:
            inputs = dataset.tensors[0].to(ctx.device)
            with torch.no_grad():
                same = torch.allclose(plain_model(inputs), unwrap_model(model).eval()(inputs))
            plain_load = "ok" if same else "mismatch"
            log(f"inference: the plain model loaded {checkpoint_path.name}; its outputs "
                f"{'equal' if same else 'DIFFER FROM'} the trained model's")
    # --8<-- [end:inference]

    # 8. Summary (rank 0): the losses this run computed and the RNG states it started them with.
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} start_epoch={start_epoch} epochs_done={start_epoch + len(losses)} "
           f"losses={','.join(f'{x:.6f}' for x in losses)} "
           f"rng_states={','.join(rng_states)} "
           f"plain_load={plain_load}")

    # 9. Release the DDP model, then leave the process group (chapter 01, step 6).
    del model
    cleanup_distributed()


if __name__ == "__main__":
    main()
