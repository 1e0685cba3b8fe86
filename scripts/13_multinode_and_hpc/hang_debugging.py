"""Chapter 13: a rank that hangs, a rank that crashes, and the tools that find it.

A short data-parallel training loop. With --variant bad one rank (--faulty-rank, default the last)
goes wrong at step 3, in the way --fault says:

  hang      it is stuck reading its batch (think of a stalled file system) while the
            others wait in the all-reduce of the gradients. The process-group timeout
            (--timeout) ends the wait with an error; `py-spy dump --pid` shows where each
            rank is; TORCH_DISTRIBUTED_DEBUG=DETAIL names the rank that did not arrive.
  mismatch  the ranks all_reduce their per-class label counts from torch.bincount(labels),
            whose length is the largest label seen + 1: the faulty rank's batch holds no
            sample of the last class, so it passes a shorter tensor.
            TORCH_DISTRIBUTED_DEBUG=DETAIL names the ranks and the shapes.
  crash     it raises an exception. main() is decorated with @record, so torchrun's
            failure summary names the rank and shows its traceback.

--variant good: no rank goes wrong, and the counts have a fixed length (minlength).

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/13_multinode_and_hpc/hang_debugging.py \\
        --variant bad --fault hang
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 \\
        scripts/13_multinode_and_hpc/hang_debugging.py --variant bad --fault mismatch
    torchrun --standalone --nproc_per_node=2 scripts/13_multinode_and_hpc/hang_debugging.py \\
        --variant bad --fault crash
    mpiexec -n 2 python scripts/13_multinode_and_hpc/hang_debugging.py --variant bad --fault hang
    python scripts/13_multinode_and_hpc/hang_debugging.py          # 1 process, --variant good

--timeout (how long a training step's collectives may wait) defaults to 5 s with
--variant bad, so that the hang ends in seconds, and to $DDP_TIMEOUT or 120 s otherwise.
Rank 0 prints every rank's process id and host to stderr: what `py-spy dump --pid` needs.
"""

import os
import re
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from utils.cli import add_training_args, add_variant_arg, make_parser, non_negative_int
from utils.distributed import DEFAULT_TIMEOUT_S, cleanup_distributed, print0, setup_distributed, timeout_group

BAD_VARIANT_TIMEOUT_S = 5.0
STEPS, FAULT_STEP = 4, 3
NUM_FEATURES, NUM_CLASSES = 8, 4
STALL_TIMEOUTS = 3  # the stuck rank stalls this many timeouts: the others give up first


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=32, lr=0.1)
    parser.add_argument("--fault", choices=["hang", "mismatch", "crash"], default="hang",
                        help="what goes wrong with --variant bad (default: %(default)s)")
    parser.add_argument("--faulty-rank", type=non_negative_int, default=None, metavar="RANK",
                        help="the rank that goes wrong (default: the last)")
    add_variant_arg(parser, bad="one rank hangs, crashes or passes another shape (--fault)",
                    good="every rank makes the same calls", bad_timeout_s=BAD_VARIANT_TIMEOUT_S)
    return parser.parse_args()


# --8<-- [start:load_batch]
def load_batch(step: int, rank: int, args, faulty: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch for this step (synthetic, seeded by rank and step)."""
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank * 100 + step)
    inputs = torch.randn(args.batch_size, NUM_FEATURES, generator=generator)
    labels = torch.arange(args.batch_size) % NUM_CLASSES  # every class, on every rank
    if faulty and args.fault == "hang":
        time.sleep(STALL_TIMEOUTS * args.timeout)  # stuck: the others wait in all_reduce
    if faulty and args.fault == "crash":
        raise ValueError(f"rank {rank}: sample {step * args.batch_size} of step {step} is corrupt")
    if faulty and args.fault == "mismatch":
        keep = labels != NUM_CLASSES - 1  # this batch happens to hold no sample of the last class
        inputs, labels = inputs[keep], labels[keep]
    return inputs, labels
# --8<-- [end:load_batch]


def train_step(model, optimizer, inputs, labels, args, group) -> torch.Tensor:
    """One training step, then the step's label counts summed over the ranks."""
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(inputs), labels).backward()
    # --8<-- [start:average]
    # Average the gradients over the ranks, as DDP does inside backward(); written out so
    # that the collective shows in tracebacks and stack dumps. (Building a DDP model under
    # TORCH_DISTRIBUTED_DEBUG=DETAIL crashed with a segmentation fault in torch 2.14.1, gloo.)
    gradients = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(gradients, group=group)  # every rank must arrive: the others wait here
    torch.nn.utils.vector_to_parameters(gradients / dist.get_world_size(group),
                                        [p.grad for p in model.parameters()])
    # --8<-- [end:average]
    optimizer.step()
    if args.variant == "bad" and args.fault == "mismatch":
        # --8<-- [start:bad_counts]
        # bad: as long as the largest label seen + 1, which can differ from rank to rank
        class_counts = torch.bincount(labels)
        # --8<-- [end:bad_counts]
    else:
        # --8<-- [start:good_counts]
        # good: NUM_CLASSES long on every rank, whatever the batch holds
        class_counts = torch.bincount(labels, minlength=NUM_CLASSES)
        # --8<-- [end:good_counts]
    dist.all_reduce(class_counts, group=group)  # every rank passes its counts
    return class_counts


def pytorch_says(error: BaseException) -> str:
    """The first line of PyTorch's message, without the C++ source location, and with
    the long device description of DETAIL's fingerprints shortened to '...'."""
    text = (str(error).strip().splitlines() or [""])[0]
    text = re.sub(r"^\[[^\]]*\.(cc|cpp):\d+\]\s*", "", text)
    return re.sub(r"TensorOptions\(.*?\(nullopt\)\)", "...", text)


@record  # an uncaught exception goes into torchrun's error file: its summary shows it
def main() -> None:
    args = parse_args()

    # --8<-- [start:setup]
    # 1. Join the process group (at least the usual timeout, for a slow start); the steps
    #    run in a group of their own whose collectives give up after --timeout.
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    steps_group, device = timeout_group(ctx, args.timeout, expect_failure=args.variant == "bad")
    # --8<-- [end:setup]
    faulty_rank = ctx.world_size - 1 if args.faulty_rank is None else args.faulty_rank
    if not 0 <= faulty_rank < ctx.world_size:
        raise SystemExit(f"--faulty-rank {faulty_rank}: a rank must lie in 0..{ctx.world_size - 1}")
    fault = args.fault if args.variant == "bad" else "none"
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant} fault={fault} "
           f"timeout={args.timeout:g} s")

    # --8<-- [start:where]
    # 2. Where every rank runs (process id, host): what `py-spy dump --pid` needs. On
    #    stderr, because process ids change from run to run.
    where: list = [None] * ctx.world_size
    dist.all_gather_object(where, (os.getpid(), socket.gethostname()))
    print0("ranks: " + ", ".join(f"rank {r} pid {pid} on {host}" for r, (pid, host) in enumerate(where)),
           file=sys.stderr)
    # --8<-- [end:where]

    # 3. The model: the same seed on every rank, so every replica starts the same.
    torch.manual_seed(args.seed)
    model = nn.Linear(NUM_FEATURES, NUM_CLASSES).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    # 4. Train. A RuntimeError from a collective (a timeout, a mismatch, a peer that died)
    #    is reported by rank 0 and raised again, so that @record puts it in the error file.
    steps_done, started = 0, time.monotonic()
    try:
        for step in range(1, STEPS + 1):
            faulty = args.variant == "bad" and ctx.rank == faulty_rank and step == FAULT_STEP
            inputs, labels = load_batch(step, ctx.rank, args, faulty)
            started = time.monotonic()
            class_counts = train_step(model, optimizer, inputs.to(device), labels.to(device),
                                      args, steps_group)
            print0(f"step {step}: label counts over all ranks {class_counts.tolist()}")
            steps_done = step
    except RuntimeError as error:
        waited = time.monotonic() - started
        message = pytorch_says(error)
        outcome = ("mismatch" if "mismatch" in message else
                   "timeout" if "Timed out" in message or "failed to pass monitoredBarrier" in message
                   else "error")
        print0(f"rank 0: step {steps_done + 1} failed after {waited:.1f} s: {message}")
        print0(f"summary: variant={args.variant} fault={fault} world_size={ctx.world_size} "
               f"backend={ctx.backend} outcome={outcome} failed_step={steps_done + 1} "
               f"steps_done={steps_done} faulty_rank={faulty_rank}")
        time.sleep(1.0)  # a launcher stops all ranks once one exits: let rank 0 say the above
        raise
    except Exception:  # this rank's own crash (--fault crash): nothing of the group is in flight
        # Leave the group before the error ends the process: left to the interpreter's exit,
        # gloo's teardown can abort it ("terminate called without an active exception", exit
        # code -6 where torchrun's summary should show this error's 1; seen about once in 8).
        dist.destroy_process_group()
        raise

    # 5. Done: every rank made the same calls.
    print0(f"summary: variant={args.variant} fault={fault} world_size={ctx.world_size} "
           f"backend={ctx.backend} outcome=completed steps_done={steps_done}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
