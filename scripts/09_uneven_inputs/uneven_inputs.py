"""Chapter 09: ranks with different numbers of batches, and the Join context manager.

Every backward() of a DDP model all-reduces the gradients, and an all-reduce needs every
rank. When the ranks hold different numbers of batches (data sharded by file, with files
of different lengths; samples filtered after sharding; variable-length data packed into
batches), the ranks with more batches call backward() after the others have left the
loop, and their all-reduce waits for partners that never come: the job hangs.

Here the synthetic data set comes as --num-files files of different lengths, and each rank
reads every world_size-th file, as a streaming data loader would (one process reads all).

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/09_uneven_inputs/uneven_inputs.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/09_uneven_inputs/uneven_inputs.py --fix join
    torchrun --standalone --nproc_per_node=2 scripts/09_uneven_inputs/uneven_inputs.py --fix even
    mpiexec -n 3 python scripts/09_uneven_inputs/uneven_inputs.py --variant bad
    python scripts/09_uneven_inputs/uneven_inputs.py          # 1 process: nothing is uneven
    qsub scripts/09_uneven_inputs/torchrun_uneven_inputs.sh   # PBS cluster

The pitfall (--variant bad): a plain training loop. The ranks with more batches wait in the
gradient all-reduce of the first step the others do not have. The timeout ends the wait;
the script says which ranks waited, at which step, and how many batches each rank had, and
exits 1. --timeout (how long the training's collectives may wait) defaults to 5 s with
--variant bad, so that the hang ends in seconds, and to $DDP_TIMEOUT or 120 s otherwise.

The fixes (--variant good, the default):
    --fix join  `with Join([model]):` a rank that ran out of batches joins the others'
                all-reduces with zero gradients until every rank is done; no sample is left out.
    --fix even  every rank stops after as many batches as the shortest shard has; the
                samples beyond are dropped (the script counts them).
"""

import contextlib
import itertools
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import (
    DEFAULT_TIMEOUT_S,
    DistributedContext,
    cleanup_distributed,
    print0,
    setup_distributed,
    timeout_group,
)
from utils.replicas import verify_replicas

BAD_VARIANT_TIMEOUT_S = 5.0


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set, all files together (default: %(default)s)")
    parser.add_argument("--num-files", type=positive_int, default=8,
                        help="files the data set is split into; at least one per rank (default: %(default)s)")
    add_variant_arg(parser, bad="a plain loop: the ranks with more batches hang in an all-reduce",
                    good="--fix join or --fix even", bad_timeout_s=BAD_VARIANT_TIMEOUT_S)
    parser.add_argument("--fix", choices=["join", "even"], default=None,
                        help="with --variant good: join = the Join context manager, even = every "
                        "rank stops after the shortest shard's batches (default: join)")
    args = parser.parse_args()
    if args.variant == "bad" and args.fix is not None:
        parser.error("--fix chooses the fix of --variant good; --variant bad has none")
    args.fix = "none" if args.variant == "bad" else (args.fix or "join")
    if args.epochs < 1 or args.batch_size < 1 or args.num_files < 1:
        parser.error("--epochs, --batch-size and --num-files must be at least 1")
    if args.num_samples < 3 * args.num_files:
        parser.error("--num-samples must be at least 3 x --num-files, so that no file is empty")
    return args


# --8<-- [start:files]
def file_sizes(num_samples: int, num_files: int, seed: int) -> list[int]:
    """The lengths of the data set's files: between about half and one and a half times
    the mean, at random (the same on every rank), adding up to num_samples."""
    weights = 0.5 + torch.rand(num_files, generator=torch.Generator().manual_seed(seed))
    sizes = (weights / weights.sum() * num_samples).long().tolist()
    sizes[-1] += num_samples - sum(sizes)  # what rounding down left over
    return sizes


def this_ranks_files(dataset, sizes: list[int], rank: int, world_size: int) -> Subset:
    """Files rank, rank + world_size, ...: a shard as long as those files happen to be."""
    starts = list(itertools.accumulate(sizes, initial=0))
    indices = [i for f in range(rank, len(sizes), world_size) for i in range(starts[f], starts[f + 1])]
    return Subset(dataset, indices)
# --8<-- [end:files]


def main() -> None:
    args = parse_args()

    # --8<-- [start:setup]
    # 1. Join the process group (at least the usual timeout: start-up can be slow on a busy
    #    machine). Training runs in a group of its own, the same ranks, whose collectives
    #    give up after --timeout: DDP takes it as process_group, so its all-reduces do too.
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    train_group, device = timeout_group(ctx, args.timeout, expect_failure=args.variant == "bad")
    # --8<-- [end:setup]
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant} fix={args.fix} timeout={args.timeout:g} s")
    if args.num_files < ctx.world_size:
        cleanup_distributed()
        raise SystemExit(f"--num-files {args.num_files} is fewer than the {ctx.world_size} ranks: "
                         f"every rank reads whole files, so set --num-files to at least {ctx.world_size}.")

    # --8<-- [start:data]
    # 2. Data: this rank's files. Every rank's sample count is gathered, to print how
    #    uneven the shards are (and, for --fix even, where to stop).
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sizes = file_sizes(args.num_samples, args.num_files, args.seed)
    shard = this_ranks_files(dataset, sizes, ctx.rank, ctx.world_size)
    loader = DataLoader(shard, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed + ctx.rank))
    samples_per_rank = [0] * ctx.world_size
    dist.all_gather_object(samples_per_rank, len(shard))
    batches_per_rank = [math.ceil(n / args.batch_size) for n in samples_per_rank]
    # --8<-- [end:data]
    print0(f"{args.num_files} files of {commas(sizes)} samples; rank r reads files "
           f"r, r+{ctx.world_size}, r+{2 * ctx.world_size}, ...")
    print0("per rank and epoch: " + ", ".join(
        f"rank {r} {n} samples = {b} batches"
        for r, (n, b) in enumerate(zip(samples_per_rank, batches_per_rank, strict=True))))
    shortest = min(batches_per_rank)
    if ctx.world_size == 1 and args.variant == "bad":
        print0("note: with one process there is no other rank to wait for, so nothing can hang. "
               "Run it with 2 or more processes to see the hang.")

    # 3. Model, wrapped; DDP's all-reduces run in train_group, under its timeout.
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device),
                device_ids=[device.index] if device.type == "cuda" else None,
                process_group=train_group)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # 4. Train. The three variants differ only in the context around the loop and in the
    #    batches it takes.
    epoch_losses: list[float] = []
    steps_per_rank = [0] * ctx.world_size  # over all epochs, every rank's count
    samples_used = 0  # per epoch, all ranks together
    for epoch in range(1, args.epochs + 1):
        if args.variant == "bad":
            # --8<-- [start:bad]
            # bad: each rank runs through its own batches; the ranks with more of them call
            # backward() after the others have left the loop.
            context, batches = contextlib.nullcontext(), loader
            # --8<-- [end:bad]
        elif args.fix == "join":
            # --8<-- [start:join]
            # good: inside Join, a rank that ran out of batches answers the others'
            # all-reduces with zero gradients until every rank has run out. True (the
            # default): those steps still divide the gradient sum by the full world size.
            context, batches = Join([model], divide_by_initial_world_size=True), loader
            # --8<-- [end:join]
        else:
            # --8<-- [start:even]
            # good: every rank takes as many batches as the shortest shard has, and drops
            # the rest of its shard for this epoch.
            context, batches = contextlib.nullcontext(), itertools.islice(loader, shortest)
            # --8<-- [end:even]

        # --8<-- [start:train]
        loss_sum, samples, steps = torch.zeros((), device=device), 0, 0
        call, started = "", time.monotonic()
        try:
            with context:
                for inputs, labels in batches:
                    inputs, labels = inputs.to(device), labels.to(device)
                    call, started = f"step {steps + 1}", time.monotonic()
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_fn(model(inputs), labels)
                    loss.backward()  # DDP all-reduces the gradients: every rank must take part
                    optimizer.step()
                    loss_sum += loss.detach() * len(labels)
                    samples, steps = samples + len(labels), steps + 1
            # Meet at the end of the epoch, before the epoch's all-reduce below: a rank that
            # is done waits here (under the timeout) while another may still be in a step.
            call, started = "the end-of-epoch barrier", time.monotonic()
            dist.barrier(group=train_group)
        except RuntimeError as error:  # gloo raises on timeout; nccl's watchdog ends the process
            explain_and_exit(ctx, args, epoch, call, time.monotonic() - started, steps,
                             batches_per_rank, error)
        # --8<-- [end:train]

        # 5. The epoch's mean loss over every sample any rank trained on, and each rank's
        #    step count in its own slot: one all-reduce, outside Join (which only answers
        #    DDP's own collectives).
        totals = torch.zeros(2 + ctx.world_size, device=device)
        totals[0], totals[1], totals[2 + ctx.rank] = loss_sum, samples, steps
        dist.all_reduce(totals, group=train_group)
        epoch_steps = [int(s) for s in totals[2:].tolist()]
        steps_per_rank = [a + b for a, b in zip(steps_per_rank, epoch_steps, strict=True)]
        samples_used = int(totals[1].item())
        epoch_losses.append(totals[0].item() / samples_used)
        print0(f"epoch {epoch}/{args.epochs}  steps per rank {commas(epoch_steps)}  "
               f"samples {samples_used}  loss {epoch_losses[-1]:.4f}")

    # 6. Report: every rank's steps, the samples left out, and whether the replicas agree.
    #    Not under Join: it ends by copying the model of the last rank to finish to every
    #    other rank, so the replicas agree after it whatever happened before.
    dropped = args.num_samples - samples_used
    replicas = verify_replicas(model, group=train_group) if args.fix != "join" else None
    identical = "unchecked" if replicas is None else "yes" if replicas.identical else "no"
    print0(f"steps per rank over {args.epochs} epochs: {commas(steps_per_rank)}; "
           f"samples dropped per epoch: {dropped} of {args.num_samples} "
           f"({100 * dropped / args.num_samples:.1f}%); replicas identical: "
           + ("not checked (Join copied the last rank's model to every rank)"
              if replicas is None else "yes" if replicas.identical else "NO"))
    print0(f"summary: variant={args.variant} fix={args.fix} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} outcome=completed "
           f"batches_per_rank={commas(batches_per_rank)} "
           f"steps_per_rank={commas(steps_per_rank)} "
           f"samples_dropped_per_epoch={dropped} first_loss={epoch_losses[0]:.4f} "
           f"last_loss={epoch_losses[-1]:.4f} replicas_identical={identical}")

    # 7. Clean up: release the DDP model first (chapter 01, step 6), and the Join that holds it.
    del model, context
    cleanup_distributed()
    if identical == "no":
        raise SystemExit(f"the replicas differ after training: {replicas}")


# --8<-- [start:explain]
def explain_and_exit(ctx: DistributedContext, args, epoch: int, call: str, waited: float,
                     steps: int, batches_per_rank: list[int], error: RuntimeError) -> None:
    """`call` failed after `waited` s: say who waited for whom, and exit 1 on every rank.

    After a timeout the training group is broken: no more collectives in it. Rank 0
    explains from every rank's batch count; every rank says where it stopped (stderr).
    """
    shortest = min(batches_per_rank)
    waiting = [r for r, b in enumerate(batches_per_rank) if b > shortest]
    done = [r for r, b in enumerate(batches_per_rank) if b == shortest]
    # A wait as long as the timeout was ended by it: on this rank, or on the partner that
    # gave up first and closed the connection (gloo then says "Connection closed by peer").
    outcome = "timeout" if waited >= 0.9 * args.timeout else "error"
    ended_by = f"the timeout (--timeout {args.timeout:g})" if outcome == "timeout" else "an error"
    print0(f"epoch {epoch}: rank(s) {commas(done)} ran out of batches after step {shortest} and "
           f"waited at the end of the epoch; rank(s) {commas(waiting)} went on to step {shortest + 1} "
           f"and waited in its gradient all-reduce, in backward(), for rank(s) {commas(done)}.")
    print0(f"rank 0 waited in {call}; after {waited:.1f} s {ended_by} ended the wait with a "
           f"{type(error).__name__}.")
    print0(f"cause: the ranks had {commas(batches_per_rank)} batches. Every backward() "
           "of a DDP model all-reduces the gradients, and an all-reduce needs every rank.")
    print0("fix: --variant good: --fix join (ranks that ran out join the others' all-reduces with "
           "zero gradients) or --fix even (every rank stops after the shortest shard's batches).")
    print0(f"summary: variant={args.variant} fix={args.fix} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} outcome={outcome} "
           f"batches_per_rank={commas(batches_per_rank)} hung_epoch={epoch} "
           f"rank0_steps_done={steps} waited={waited:.1f}s")
    gloo_says = re.sub(r"^\[[^\]]*\]\s*", "", (str(error).strip().splitlines() or [""])[0])
    print(f"rank {ctx.rank}: {call} of epoch {epoch} failed after {waited:.1f} s, with "
          f"{steps} of its {batches_per_rank[ctx.rank]} batches done: {gloo_says}",
          file=sys.stderr, flush=True)
    time.sleep(1.0)  # a launcher stops all ranks once one exits: give each time to say the above
    raise SystemExit(1)
# --8<-- [end:explain]


def commas(numbers: list[int]) -> str:
    """[28, 37] -> '28,37': how lists of numbers appear in the output."""
    return ",".join(map(str, numbers))


if __name__ == "__main__":
    main()
