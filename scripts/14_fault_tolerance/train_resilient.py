"""Chapter 14: a training run that survives a dead rank, a save killed mid-write, and a
scheduler's stop signal, and resumes mid-epoch exactly where it left off.

Every few steps (--checkpoint-every) the run saves a checkpoint: the model, optimizer and
scheduler, the step, the position in the epoch, and every rank's random-number-generator
states. It always starts from the checkpoint in --checkpoint-dir when there is one, so a
restart (by torchrun, or by a requeued job) continues the run instead of starting over.

Run it (one process, torchrun, MPI):
    python scripts/14_fault_tolerance/train_resilient.py --checkpoint-dir /tmp/ck
    torchrun --standalone --nproc_per_node=2 scripts/14_fault_tolerance/train_resilient.py \\
        --checkpoint-dir /tmp/ck
    mpiexec -n 2 python scripts/14_fault_tolerance/train_resilient.py --checkpoint-dir /tmp/ck
A rank killed at step 10 (SIGKILL, once), torchrun restarts the group, the run resumes:
    torchrun --standalone --nproc_per_node=2 --max-restarts=1 scripts/14_fault_tolerance/train_resilient.py \\
        --checkpoint-dir /tmp/ck2 --fail-at-step 10
The pitfall: rank 0 killed while it writes the checkpoint of step 12 (--variant bad writes
straight to the checkpoint's path, and the restart finds a corrupt file):
    torchrun --standalone --nproc_per_node=2 --max-restarts=1 scripts/14_fault_tolerance/train_resilient.py \\
        --checkpoint-dir /tmp/ck3 --fail-during-save 12 --variant bad
Preemption: SIGTERM or SIGUSR1 makes every rank save at the same step boundary and exit
with code 75 (REQUEUE_EXIT_CODE), which scripts/14_fault_tolerance/slurm_preemptible.sh
reads to requeue the job.
Elastic: 1 to 2 nodes, run on each node (node0: the node that hosts the rendezvous); a
node may leave and join, and the global batch stays 32 whatever the world size:
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=1:2 --nproc_per_node=1 --max-restarts=3 \\
        --rdzv-backend=c10d \\
        --rdzv-endpoint=node0:29400 --rdzv-id=ch14 --rdzv-conf=last_call_timeout=5 \\
        scripts/14_fault_tolerance/train_resilient.py --checkpoint-dir /shared/ck4 --global-batch-size 32
"""

import itertools
import os
import signal
import sys
import threading
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, Sampler

from utils.checkpoint import atomic_torch_save, load_checkpoint, remove_partial_saves, save_checkpoint
from utils.checks import check_global_batch
from utils.cli import (
    add_training_args,
    add_variant_arg,
    make_parser,
    non_negative_float,
    non_negative_int,
    output_dir,
    positive_int,
)
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed

REQUEUE_EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): "try again later"; the job script requeues
KILL_AFTER_BYTES = 100_000  # --fail-during-save: the bytes written before the process dies


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=16, lr=0.05)
    parser.add_argument("--global-batch-size", type=positive_int, default=None, metavar="G",
                        help="keep the global batch at G samples whatever the world size: each "
                        "rank takes G / world size (default: each rank takes --batch-size)")
    parser.add_argument("--num-samples", type=positive_int, default=512,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--hidden", type=positive_int, default=512,
                        help="hidden units: the checkpoint is about 300 * hidden bytes (weights and "
                        "momentum), plus about 15 kB of RNG states per rank (default: %(default)s)")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints_ch14"),
                        help="where checkpoints go; on a cluster, a file system every node "
                        "sees (default: %(default)s)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=4, metavar="STEPS",
                        help="save every STEPS optimizer steps (default: %(default)s)")
    parser.add_argument("--fail-at-step", type=non_negative_int, default=None, metavar="K",
                        help="the last rank kills itself (SIGKILL) after step K, once")
    parser.add_argument("--fail-during-save", type=non_negative_int, default=None, metavar="K",
                        help=f"rank 0 kills itself (SIGKILL) {KILL_AFTER_BYTES} bytes into "
                        "writing the checkpoint of step K, once")
    parser.add_argument("--lose-node-at-step", type=non_negative_int, default=None, metavar="K",
                        help="under torchrun: the last rank SIGKILLs its torchrun and itself after "
                        "step K, once: its node is lost")
    parser.add_argument("--signal-at-step", type=non_negative_int, default=None, metavar="K",
                        help="the last rank sends itself SIGUSR1 after step K, as a scheduler "
                        "would (the other ranks hear nothing), once")
    parser.add_argument("--heartbeat", type=non_negative_float, default=0.0, metavar="SECONDS",
                        help="print a heartbeat line every SECONDS (default: off)")
    parser.add_argument("--sleep-per-step", type=non_negative_float, default=0.0, metavar="SECONDS",
                        help="sleep in every step, as a slower model would (default: 0)")
    add_variant_arg(parser, bad="torch.save straight onto the checkpoint's path",
                    good="temporary file, flush, fsync, rename over the previous checkpoint")
    args = parser.parse_args()
    if args.lose_node_at_step is not None and "TORCHELASTIC_RUN_ID" not in os.environ:
        parser.error("--lose-node-at-step kills the rank's torchrun: launch the script with torchrun")
    return args


def build_model(hidden: int) -> nn.Module:
    # Dropout draws random numbers on every step: an exact resume must restore the RNG.
    return nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, 4))


def weights_crc(model: nn.Module) -> str:
    """Eight hex digits of the exact bytes of every weight: equal only if bit for bit equal."""
    data = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    return f"{zlib.crc32(data):08x}"


def once(marker: Path) -> bool:
    """True the first time it is asked about `marker` (a file in the checkpoint directory):
    a fault injected once, not again after the restart."""
    if marker.exists():
        return False
    marker.touch()
    return True


# --8<-- [start:kill_mid_write]
class DiesMidWrite:
    """A file that SIGKILLs its process after `limit` bytes: a node that loses power, an
    out-of-memory kill, or a scheduler's SIGKILL, landing inside torch.save every time."""

    def __init__(self, path: Path, limit: int) -> None:
        self.file, self.limit, self.written = open(path, "wb"), limit, 0

    def write(self, data) -> int:
        room = self.limit - self.written
        if len(data) >= room:
            self.file.write(bytes(data)[:room])  # the first `limit` bytes reach the file...
            self.file.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # ...and the process dies in the write
        self.written += self.file.write(data)
        return len(data)

    def __getattr__(self, name):  # flush, fileno, close, __enter__/__exit__ go to the file
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()
# --8<-- [end:kill_mid_write]


class SkipFirst(Sampler):
    """The indices of `sampler` after the first `skip`: the rest of an epoch begun before."""

    def __init__(self, sampler: Sampler, skip: int = 0) -> None:
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)


# --8<-- [start:signals]
class StopRequest:
    """Remembers a SIGTERM (scancel, qdel, torchrun passing one on) or SIGUSR1 (Slurm's
    --signal=B:USR1@60, forwarded by the job script). The handler only sets a flag: the
    training loop decides where to stop."""

    def __init__(self) -> None:
        self.signal_name = ""
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name

    def agreed(self, device: torch.device) -> bool:
        """Does any rank want to stop? A collective: the signal reaches the ranks at
        different steps, so every rank asks at every step boundary, and they all stop at
        the first boundary where any one of them has seen it."""
        flag = torch.tensor([1.0 if self.signal_name else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
# --8<-- [end:signals]


# --8<-- [start:heartbeat]
class Heartbeat:
    """A line every `every` seconds from a background thread, while the training loop
    runs: the step it is in and how long since the last step ended. Slow progress shows a
    step count that moves; a hang shows one that stays while "since last step" grows."""

    def __init__(self, every: float, rank: int, step: int = 0) -> None:
        self.step, self.last, self.step_time = step, time.monotonic(), 0.0
        self.done = threading.Event()
        if every > 0 and rank == 0:
            threading.Thread(target=self._beat, args=(every,), daemon=True).start()

    def stepped(self, step: int) -> None:
        now = time.monotonic()
        self.step, self.step_time, self.last = step, now - self.last, now

    def _beat(self, every: float) -> None:
        while not self.done.wait(every):
            print(f"heartbeat: step {self.step}, last step took {self.step_time:.3f} s, "
                  f"{time.monotonic() - self.last:.1f} s since it ended", flush=True)
# --8<-- [end:heartbeat]


def main() -> None:
    args = parse_args()
    stop = StopRequest()  # before anything slow: a signal during set-up is remembered too
    # 1. Join the process group (chapter 01). Under torchrun, the restart count says
    #    whether this is a fresh start or torchrun restarting a failed group.
    ctx = setup_distributed(args.backend, args.timeout)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", os.environ.get("SLURM_RESTART_COUNT", "0")))
    print0(f"start: launcher={ctx.launcher} world_size={ctx.world_size} restart={restart} "
           f"variant={args.variant}")

    # --8<-- [start:global_batch]
    # 2. The batch. --batch-size is per rank, so the global batch grows with the world size.
    #    --global-batch-size G keeps the global batch at G instead, each rank taking
    #    G / world size: a run whose world size changes (elastic) keeps its learning rate,
    #    its schedule and its steps per epoch.
    if args.global_batch_size is None:
        batch_size = args.batch_size
    elif args.global_batch_size % ctx.world_size == 0:
        batch_size = args.global_batch_size // ctx.world_size
        print0(f"global batch {args.global_batch_size}: {ctx.world_size} rank(s) x {batch_size}")
    else:
        print0(f"--global-batch-size {args.global_batch_size} does not split evenly among "
               f"{ctx.world_size} ranks: pick a multiple of every world size the run may have")
        cleanup_distributed()
        sys.exit(2)
    global_batch = batch_size * ctx.world_size
    # --8<-- [end:global_batch]
    if args.global_batch_size is None:
        check_global_batch(ctx, args.num_samples, batch_size)
    else:
        check_global_batch(ctx, args.num_samples, global_batch, batch_flag="--global-batch-size",
                           per_rank=False)

    # 3. Data: DistributedSampler with set_epoch(), so an epoch's order depends on the epoch
    #    alone; a resumed epoch skips the batches it had already trained on.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed, drop_last=True)
    steps_per_epoch = len(sampler) // batch_size
    total_steps = steps_per_epoch * args.epochs

    # 4. Model, optimizer with momentum, a scheduler: all state a resume must restore.
    torch.manual_seed(args.seed)
    model = DDP(build_model(args.hidden).to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(args.seed + ctx.rank)  # each rank its own dropout masks

    # 5. How a checkpoint file gets written: the pitfall and the fix.
    path = args.checkpoint_dir / f"checkpoint_{args.variant}.pt"
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def open_file(file_path: Path):  # the fault injection: --fail-during-save
        if step == args.fail_during_save and once(args.checkpoint_dir / f".killed_in_save_{step}"):
            print(f"rank {ctx.rank}: killed while writing the checkpoint of step {step} "
                  f"(after {KILL_AFTER_BYTES} bytes)", flush=True)
            return DiesMidWrite(file_path, KILL_AFTER_BYTES)
        return open(file_path, "wb")

    if args.variant == "bad":
        # --8<-- [start:bad_write]
        # bad: straight onto the checkpoint's path. The old checkpoint is gone the moment
        # the file is opened; a process killed during the write leaves a truncated file.
        def write(checkpoint, file_path):
            with open_file(file_path) as file:
                torch.save(checkpoint, file)
        # --8<-- [end:bad_write]
    else:
        # --8<-- [start:good_write]
        # good: a temporary file in the same directory, flush, fsync, then a rename over the
        # previous checkpoint, which stays complete until the new one is (utils/checkpoint.py).
        def write(checkpoint, file_path):
            atomic_torch_save(checkpoint, file_path, open_file=open_file)
        # --8<-- [end:good_write]

    # --8<-- [start:resume]
    # 6. Resume from the last checkpoint if there is one: weights, optimizer, scheduler,
    #    this rank's RNG states (load_checkpoint), and the step and position in the epoch.
    step = 0
    if ctx.is_main and remove_partial_saves(args.checkpoint_dir):  # a save killed mid-write
        print("removed the temporary file of a save that never finished")
    if path.exists():
        checkpoint, why = None, ""
        try:
            checkpoint = load_checkpoint(path, model, optimizer, device=ctx.device, scheduler=scheduler)
        except (RuntimeError, OSError) as error:  # PyTorch's own words: what is wrong with the file
            why = str(error)  # (kept as text: the exception would keep the model alive)
        if checkpoint is None:
            print0(f"cannot resume: {path.name} is not a complete checkpoint: {why}")
            print0("the run is lost: nothing to resume from (the previous checkpoint was overwritten)")
            del model
            cleanup_distributed()
            sys.exit(1)
        step = checkpoint["extra"]["step"]
        # --8<-- [end:resume]
        # --8<-- [start:elastic_resume]
        # A checkpoint from another world size (a job back on fewer nodes, an elastic run
        # that lost or gained one): its step counts batches of its global batch, and its
        # learning rate and schedule were set for that batch. Go on only with the same one.
        saved_batch = checkpoint["extra"].get("global_batch", global_batch)
        if saved_batch != global_batch:
            print0(f"cannot resume: the checkpoint's step counts global batches of {saved_batch} "
                   f"({checkpoint['world_size']} ranks), this run's is {global_batch} "
                   f"({ctx.world_size} rank(s) x {batch_size}). Pass --global-batch-size {saved_batch}: "
                   "each rank then takes its share of the same global batch")
            del model
            cleanup_distributed()
            sys.exit(1)
        print0(f"resumed from {path.name}: step {step}, epoch {step // steps_per_epoch + 1}, "
               f"batch {step % steps_per_epoch} of the epoch, lr {scheduler.get_last_lr()[0]:.6f}, "
               f"rng_restored={'yes' if checkpoint['rng_restored'] else 'no'}")
        if checkpoint["world_size"] != ctx.world_size:  # RNG states: one per rank, not restored
            print0(f"world size {checkpoint['world_size']} -> {ctx.world_size} since the checkpoint: "
                   f"each rank takes {batch_size} of the global batch of {global_batch}; step, "
                   "learning rate and schedule go on")
        # --8<-- [end:elastic_resume]
    resumed_from = step

    # 7. Train, one step at a time, from wherever the checkpoint left off.
    heartbeat = Heartbeat(args.heartbeat, ctx.rank, step)
    preempted = ""
    for epoch in range(step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)
        in_epoch = step - epoch * steps_per_epoch  # > 0 only in the epoch a resume lands in
        # generator: starting an epoch's iterator draws a seed from it; from the global
        # RNG otherwise, one draw more in a resumed run than in an uninterrupted one.
        loader = make_loader(dataset, batch_size, ctx.device, drop_last=True,
                             sampler=SkipFirst(sampler, in_epoch * batch_size),
                             generator=torch.Generator().manual_seed(args.seed + epoch))
        for inputs, labels in loader:
            # --8<-- [start:stop_check]
            if stop.agreed(ctx.device):  # every rank, every step boundary: the same answer
                preempted = stop.signal_name or "a signal on another rank"
                break
            # --8<-- [end:stop_check]
            inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            time.sleep(args.sleep_per_step)
            heartbeat.stepped(step)
            if step % steps_per_epoch == 0 or step == resumed_from + 1:
                print0(f"step {step}/{total_steps}  loss {loss.item():.6f}")
            if step == args.fail_at_step and ctx.rank == ctx.world_size - 1 and \
                    once(args.checkpoint_dir / f".killed_at_step_{step}"):
                print(f"rank {ctx.rank}: killed (SIGKILL) after step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # no exception, no clean-up: a crash
            if step == args.lose_node_at_step and ctx.rank == ctx.world_size - 1 and \
                    once(args.checkpoint_dir / f".lost_node_at_step_{step}"):
                print(f"rank {ctx.rank}: its node is lost after step {step} (torchrun and rank "
                      "SIGKILLed)", flush=True)
                os.kill(os.getppid(), signal.SIGKILL)  # the node's torchrun (this rank's parent)
                os.kill(os.getpid(), signal.SIGKILL)  # and this rank: nothing left on the node
            if step == args.signal_at_step and ctx.rank == ctx.world_size - 1 and \
                    once(args.checkpoint_dir / f".signalled_at_step_{step}"):
                print(f"rank {ctx.rank}: got SIGUSR1 after step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGUSR1)  # this rank alone, as a late signal would
            if step % args.checkpoint_every == 0:
                save_checkpoint(path, model, optimizer, step // steps_per_epoch, scheduler=scheduler,
                                extra={"step": step, "global_batch": global_batch}, write=write)
        if preempted:
            break
    heartbeat.done.set()

    # --8<-- [start:preempted]
    # 8. Told to stop: save at this step boundary (every rank is here: save_checkpoint is
    #    collective), then exit with the code that asks the job script to requeue.
    if preempted:
        save_checkpoint(path, model, optimizer, step // steps_per_epoch, scheduler=scheduler,
                        extra={"step": step, "global_batch": global_batch}, write=write)
        print0(f"preempted: {preempted} at step {step}/{total_steps}: checkpoint saved, "
               f"exit code {REQUEUE_EXIT_CODE} asks for a requeue")
        del model
        cleanup_distributed()
        sys.exit(REQUEUE_EXIT_CODE)
    # --8<-- [end:preempted]

    # 9. The final weights, for comparison with another run, and the summary (rank 0).
    if ctx.is_main:
        torch.save(model.module.state_dict(), args.checkpoint_dir / "final_weights.pt")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} launcher={ctx.launcher} "
           f"restart={restart} resumed_from_step={resumed_from} steps={step}/{total_steps} "
           f"weights_crc={weights_crc(model)}")
    del model
    cleanup_distributed()


if __name__ == "__main__":
    main()
