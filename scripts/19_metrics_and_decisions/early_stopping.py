"""Chapter 19: a decision every rank must share (early stopping).

Early stopping ends training once the validation loss has not improved for --patience
epochs. Under DDP every rank must stop at the same epoch: a rank that leaves the training
loop no longer takes part in the gradient all-reduce of the next step, and the ranks that
go on wait in it for ever. Here the validation set comes as --num-files files (4) from
annotators who mislabel 0% to 60% of their samples (0%, 20%, 40%, 60% for 4 files), and
rank r validates the r-th block of files. The loss on the noisier files turns upward first.

The pitfall (--variant bad): each rank decides from the loss of its own validation files.
The ranks disagree: one leaves the loop, the others wait in the next step's all-reduce
until the timeout (--timeout: 5 s by default with --variant bad) ends the wait; the script
says which rank left when, and exits 1.
The fixes (--variant good, the default), one decision for every rank:
    --fix all-reduce  each rank validates its files; the ranks all-reduce the sums (loss,
                      count), so every rank sees the loss of the whole validation set;
    --fix broadcast   rank 0 validates the whole set and decides; it broadcasts the decision.

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/early_stopping.py \\
        --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/early_stopping.py
    mpiexec -n 3 python scripts/19_metrics_and_decisions/early_stopping.py --fix broadcast
    python scripts/19_metrics_and_decisions/early_stopping.py      # 1 process: nobody to disagree
    qsub scripts/19_metrics_and_decisions/torchrun_metrics_and_decisions.sh   # PBS cluster
"""

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch._dynamo  # noqa: F401 - DDP's constructor imports it, seconds of work: see step 2
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int, usage_error
from utils.data import make_loader
from utils.distributed import (
    DEFAULT_TIMEOUT_S,
    DistributedContext,
    cleanup_distributed,
    print0,
    setup_distributed,
    timeout_group,
)

BAD_VARIANT_TIMEOUT_S = 5.0
NUM_FEATURES, NUM_CLASSES = 32, 4
MOST_MISLABELLED = 0.6  # the share of wrong labels in the last validation file (0 in the first)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=30, batch_size=32, lr=0.02)
    parser.add_argument("--patience", type=positive_int, default=2,
                        help="stop after this many epochs without a new best validation loss "
                        "(default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=512,
                        help="training samples; the validation set has as many (default: %(default)s)")
    parser.add_argument("--num-files", type=positive_int, default=4,
                        help="validation files, at least one per rank (default: %(default)s)")
    add_variant_arg(parser, bad="each rank decides from its own validation files: the ranks part",
                    good="one decision for every rank (--fix)", bad_timeout_s=BAD_VARIANT_TIMEOUT_S)
    parser.add_argument("--fix", choices=["all-reduce", "broadcast"], default=None,
                        help="with --variant good: all-reduce = every rank sees the loss of the whole "
                        "validation set; broadcast = rank 0 decides and tells the others "
                        "(default: all-reduce)")
    args = parser.parse_args()
    if args.variant == "bad" and args.fix is not None:
        parser.error("--fix chooses the fix of --variant good; --variant bad has none")
    args.fix = "none" if args.variant == "bad" else (args.fix or "all-reduce")
    if args.num_samples < 10 * args.num_files:
        parser.error(f"--num-samples {args.num_samples} is too small for {args.num_files} validation files: "
                     f"give at least {10 * args.num_files} (10 samples per file)")
    return args


def file_bounds(num_samples: int, num_files: int) -> list[int]:
    """Where each validation file starts (and the last one ends): files of equal size, the
    last one taking what does not divide."""
    per_file = num_samples // num_files
    return [f * per_file for f in range(num_files)] + [num_samples]


def make_data(num_samples: int, num_files: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Training and validation sets, labelled by a fixed random linear 'teacher'. 10% of the
    training labels are wrong (so that the model can overfit them). The validation set comes
    as `num_files` files from different annotators: the share of wrong labels grows from 0 in
    the first file to MOST_MISLABELLED in the last."""
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(NUM_FEATURES, NUM_CLASSES, generator=generator)
    inputs = torch.randn(2 * num_samples, NUM_FEATURES, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    bounds = file_bounds(num_samples, num_files)
    wrong_share = torch.full((2 * num_samples,), 0.1)
    for f in range(num_files):
        share = MOST_MISLABELLED * f / max(num_files - 1, 1)
        wrong_share[num_samples + bounds[f]:num_samples + bounds[f + 1]] = share
    wrong = torch.rand(2 * num_samples, generator=generator) < wrong_share
    labels = torch.where(wrong, torch.randint(0, NUM_CLASSES, labels.shape, generator=generator), labels)
    return (TensorDataset(inputs[:num_samples], labels[:num_samples]),
            TensorDataset(inputs[num_samples:], labels[num_samples:]))


def validation_block(val_set: TensorDataset, num_files: int, rank: int, world_size: int) -> TensorDataset:
    """Rank r's block of the validation files: the r-th of world_size blocks of consecutive files."""
    bounds = file_bounds(len(val_set), num_files)
    first, last = num_files * rank // world_size, num_files * (rank + 1) // world_size
    return TensorDataset(*val_set[bounds[first]:bounds[last]])


@torch.no_grad()
def validation_sums(model: nn.Module, val_set: TensorDataset, device: torch.device) -> tuple[float, int]:
    """(summed loss, samples) of `model` on `val_set`: sums, which add up across ranks."""
    model.eval()
    inputs, labels = (t.to(device) for t in val_set.tensors)
    loss = nn.functional.cross_entropy(model(inputs), labels, reduction="sum")
    model.train()
    return loss.item(), len(labels)


@dataclass
class Patience:
    """Early stopping's rule: stop after `patience` epochs without a new best loss."""

    patience: int
    best: float = float("inf")
    epochs_without_improvement: int = 0

    def says_stop(self, val_loss: float) -> bool:
        if val_loss < self.best:
            self.best, self.epochs_without_improvement = val_loss, 0
        else:
            self.epochs_without_improvement += 1
        return self.epochs_without_improvement >= self.patience


def main() -> None:
    args = parse_args()
    # 1. Join the process group (under the longer of --timeout and the default timeout).
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    if args.num_files < ctx.world_size:
        usage_error(f"--num-files {args.num_files} is fewer than the {ctx.world_size} ranks: every rank "
                    f"validates whole files, so give --num-files {ctx.world_size} or more.")
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant} fix={args.fix} patience={args.patience} timeout={args.timeout:g} s")
    if ctx.world_size == 1 and args.variant == "bad":
        print0("note: with one process there is no other rank to disagree with, so nothing can hang. "
               "Run it with 2 or more processes to see the hang.")

    # 2. Training runs in a group of its own whose collectives give up after --timeout
    #    (chapter 09); DDP takes it as process_group, and its gradient all-reduces run in it.
    #    The group's own set-up and DDP's first collectives wait under that timeout too:
    #    timeout_group lets every rank meet first, under the job's longer one, with the slow
    #    work done (DDP's constructor imports torch._dynamo, imported above): on a loaded
    #    machine a rank that lags by more than --timeout would otherwise end them early.
    train_group, device = timeout_group(ctx, args.timeout, expect_failure=args.variant == "bad")
    torch.manual_seed(args.seed)
    plain = nn.Sequential(nn.Linear(NUM_FEATURES, 256), nn.ReLU(), nn.Linear(256, NUM_CLASSES)).to(device)
    model = DDP(plain, device_ids=[device.index] if device.type == "cuda" else None,
                process_group=train_group)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    patience = Patience(args.patience)

    # 3. Data: the training set through DistributedSampler; this rank's validation files.
    train_set, val_set = make_data(args.num_samples, args.num_files, args.seed)
    sampler = DistributedSampler(train_set, num_replicas=ctx.world_size, rank=ctx.rank, seed=args.seed)
    loader = make_loader(train_set, args.batch_size, device, sampler=sampler)
    my_val = validation_block(val_set, args.num_files, ctx.rank, ctx.world_size)

    # 4. Train, validate, decide, every epoch.
    print0(table_header(ctx.world_size, args))
    steps, epoch, stop, views = 0, 0, False, []
    where, started = "", time.monotonic()
    try:
        for epoch in range(1, args.epochs + 1):
            sampler.set_epoch(epoch)
            for step, (inputs, labels) in enumerate(loader, start=1):
                where, started = f"step {step} of epoch {epoch}", time.monotonic()
                optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(inputs.to(device)), labels.to(device))
                loss.backward()  # DDP all-reduces the gradients: every rank must take part
                optimizer.step()
                steps += 1
            where, started = f"the decision of epoch {epoch}", time.monotonic()
            if args.variant == "bad":
                # --8<-- [start:bad]
                # bad: each rank decides from the loss of its own validation files.
                loss_sum, count = validation_sums(model.module, my_val, device)  # no collective
                val_loss = loss_sum / count
                stop = patience.says_stop(val_loss)
                # --8<-- [end:bad]
            elif args.fix == "all-reduce":
                # --8<-- [start:all_reduce]
                # good: add up the sums of every rank: every rank sees the loss of the whole
                # validation set, and takes the same decision from it.
                loss_sum, count = validation_sums(model.module, my_val, device)
                totals = torch.tensor([loss_sum, count], dtype=torch.float64, device=device)
                dist.all_reduce(totals, group=train_group)
                val_loss = (totals[0] / totals[1]).item()
                stop = patience.says_stop(val_loss)
                # --8<-- [end:all_reduce]
            else:
                # --8<-- [start:broadcast]
                # good: rank 0 validates the whole set and decides; every rank follows it.
                decision = torch.zeros(1, device=device)
                if ctx.rank == 0:
                    loss_sum, count = validation_sums(model.module, val_set, device)
                    val_loss = loss_sum / count
                    decision[0] = patience.says_stop(val_loss)
                dist.broadcast(decision, src=0, group=train_group)
                stop = bool(decision.item())
                # --8<-- [end:broadcast]
            # For the printout only: every rank's loss, epochs without improvement, decision.
            where, started = f"the printout of epoch {epoch}", time.monotonic()
            views = [None] * ctx.world_size
            mine = (val_loss if args.fix != "broadcast" or ctx.rank == 0 else None,
                    patience.epochs_without_improvement if args.fix != "broadcast" or ctx.rank == 0
                    else "-", stop)
            dist.all_gather_object(views, mine, group=train_group)
            print0(epoch_line(epoch, views))
            # --8<-- [start:loop_end]
            if stop:
                break  # leave the training loop
            # --8<-- [end:loop_end]
        # Meet when training is over, under the timeout: a rank that left the loop early
        # waits here while the others may still train.
        where, started = "the end-of-training barrier", time.monotonic()
        dist.barrier(group=train_group)
    except RuntimeError as error:  # gloo raises on timeout; nccl's watchdog ends the process
        explain_and_exit(ctx, args, epoch, where, time.monotonic() - started, steps, views, error)

    # 5. Every rank's own count of epochs and steps: equal when the ranks decided as one.
    done = [None] * ctx.world_size
    dist.all_gather_object(done, (epoch, steps), group=train_group)
    epochs_per_rank, steps_per_rank = [e for e, _ in done], [s for _, s in done]
    stopped = "early" if stop else "at --epochs"
    print0(f"every rank stopped after epoch {commas(epochs_per_rank)} ({stopped}), "
           f"after {commas(steps_per_rank)} steps")
    print0(f"summary: variant={args.variant} fix={args.fix} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} outcome=completed stopped={stopped} "
           f"stop_epoch_per_rank={commas(epochs_per_rank)} steps_per_rank={commas(steps_per_rank)} "
           f"best_val_loss={patience.best:.4f}")
    del model  # DDP holds the process group: release it first (chapter 01, step 6)
    cleanup_distributed()


def table_header(world_size: int, args) -> str:
    """The heading of rank 0's table: one column per rank."""
    seen = {"none": "its own files", "all-reduce": "the whole set, all-reduced",
            "broadcast": "the whole set, on rank 0 alone"}[args.fix]
    return (f"validation loss ({seen}), epochs without improvement, decision; per rank:\n"
            + "epoch  " + "".join(f"{f'rank {rank}':<22}" for rank in range(world_size)).rstrip())


def epoch_line(epoch: int, views: list) -> str:
    """Rank 0's line for an epoch: what each rank saw and decided."""
    cells = [f"{'-' if loss is None else f'{loss:.4f}'} {waited} {'stop' if stop else 'go on'}"
             for loss, waited, stop in views]
    return f"{epoch:<5}  " + "".join(f"{cell:<22}" for cell in cells).rstrip()


# --8<-- [start:explain]
def explain_and_exit(ctx: DistributedContext, args, epoch: int, where: str, waited: float,
                     steps: int, views: list, error: RuntimeError) -> None:
    """The wait in `where` failed after `waited` s: say who left and who waited, exit 1.

    After a timeout the training group is broken: no more collectives in it. Rank 0 explains
    from the decisions every rank sent at the last epoch; every rank says where it waited."""
    leavers = [rank for rank, (_, _, stop) in enumerate(views) if stop]
    stayers = [rank for rank, (_, _, stop) in enumerate(views) if not stop]
    outcome = "timeout" if waited >= 0.9 * args.timeout else "error"
    ended_by = f"the timeout (--timeout {args.timeout:g})" if outcome == "timeout" else "an error"
    left_after = epoch - 1 if ctx.rank in stayers else epoch  # the epoch the leavers decided at
    print0(f"rank(s) {commas(leavers)} left the training loop after epoch {left_after} and waited at the "
           f"end-of-training barrier; rank(s) {commas(stayers)} went on to epoch {left_after + 1} and "
           f"waited in the gradient all-reduce of its first step.")
    print0(f"rank 0 waited in {where}; after {waited:.1f} s {ended_by} ended the wait with a "
           f"{type(error).__name__}.")
    print0("cause: each rank decided from the validation loss of its own files. The losses differ, so "
           "the decisions did: a rank that leaves the loop no longer joins the others' all-reduces.")
    print0("fix: --variant good: one decision for all (--fix all-reduce: the loss of the whole "
           "validation set on every rank; --fix broadcast: rank 0 decides and tells the others).")
    print0(f"summary: variant={args.variant} fix={args.fix} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} outcome={outcome} left_after_epoch={left_after} "
           f"left={commas(leavers)} went_on={commas(stayers)} waited={waited:.1f}s")
    gloo_says = re.sub(r"^\[[^\]]*\]\s*", "", (str(error).strip().splitlines() or [""])[0])
    print(f"rank {ctx.rank}: waited in {where} after {steps} steps, failed after {waited:.1f} s: "
          f"{gloo_says}", file=sys.stderr, flush=True)
    # A launcher stops every rank once one exits, and an exiting rank closes its connections:
    # a rank still waiting would read "Connection closed by peer", not its own timeout. Stay
    # one more --timeout, so every rank that waits reaches its own (a loaded machine starts
    # the ranks' waits seconds apart).
    time.sleep(max(1.0, args.timeout))
    raise SystemExit(1)
# --8<-- [end:explain]


def commas(values: list) -> str:
    """[6, 7] -> '6,7': how lists appear in the output."""
    return ",".join(map(str, values))


if __name__ == "__main__":
    main()
