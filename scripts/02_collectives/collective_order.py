"""Chapter 02: every rank must make the same collective calls, in the same order.

Collectives are matched by the order in which each rank calls them, not by name or by
line of code: the 3rd collective of rank 0 meets the 3rd collective of every other rank.
Here each rank counts the samples it processed at each of 3 steps and all_reduces the
count. The last rank has no samples at step 2 (its shard ran out: uneven data).

The pitfall (--variant bad): the last rank skips the all_reduce when it has nothing to
add. Its all_reduce of step 3 then meets the others' step 2 (a wrong total, silently),
and the others' step 3 waits for a partner that never comes: the job hangs. The
process-group timeout turns the hang into an error; the script explains it and exits 1.
The fix (--variant good): every rank calls every all_reduce, with 0 when it has nothing.

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/02_collectives/collective_order.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/02_collectives/collective_order.py --variant good
    mpiexec -n 3 python scripts/02_collectives/collective_order.py --variant bad
    python scripts/02_collectives/collective_order.py     # 1 process: nothing to wait for

--timeout (how long the steps' collectives may wait) defaults to 5 s with --variant bad,
so that the hang ends in seconds, and to $DDP_TIMEOUT or 120 s with --variant good.
"""

import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist

from utils.cli import add_variant_arg, make_parser
from utils.distributed import (
    DEFAULT_TIMEOUT_S,
    DistributedContext,
    cleanup_distributed,
    print0,
    setup_distributed,
    timeout_group,
)

BAD_VARIANT_TIMEOUT_S = 5.0
STEPS, EMPTY_STEP, SAMPLES_PER_STEP = 3, 2, 4


def parse_args():
    parser = make_parser(__doc__)
    add_variant_arg(parser, bad="a rank with nothing to add skips one",
                    good="every rank calls every all_reduce",
                    bad_timeout_s=BAD_VARIANT_TIMEOUT_S)
    return parser.parse_args()


def samples_at(step: int, rank: int, world_size: int) -> int:
    """How many samples `rank` processes at `step`: the last rank has none at EMPTY_STEP."""
    return 0 if (rank == world_size - 1 and step == EMPTY_STEP) else SAMPLES_PER_STEP


def main() -> None:
    args = parse_args()

    # --8<-- [start:setup]
    # 1. Join the process group. Start-up can take long on a busy machine, so joining gets
    #    at least the usual timeout; the steps run in a group of their own (same ranks)
    #    whose collectives give up after --timeout: 5 s by default in the bad variant.
    #    (Under nccl the bad variant's group is a gloo one, on CPU tensors: see the chapter.)
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    steps_group, device = timeout_group(ctx, args.timeout, expect_failure=args.variant == "bad")
    # --8<-- [end:setup]
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant} timeout={args.timeout:g} s")
    expected = [sum(samples_at(s, r, ctx.world_size) for r in range(ctx.world_size))
                for s in range(1, STEPS + 1)]
    if args.variant == "bad" and ctx.world_size == 1:
        print0("note: with one process there is no other rank to wait for, so a skipped "
               "all_reduce cannot hang. Run it with 2 or more processes to see the hang.")

    # --8<-- [start:loop]
    # 2. The steps. Each rank all_reduces its sample count, so every rank learns the total.
    totals: list[int] = []
    call, started = "", time.monotonic()
    try:
        for step in range(1, STEPS + 1):
            count = torch.tensor([samples_at(step, ctx.rank, ctx.world_size)], device=device)
            call, started = f"all_reduce #{step}", time.monotonic()
            if args.variant == "bad":
                # --8<-- [start:bad]
                # bad: a rank with nothing to add skips the call. The other ranks still make
                # it, so from here on the ranks' calls no longer pair up.
                if count.item() > 0:
                    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=steps_group)
                # --8<-- [end:bad]
            else:
                # --8<-- [start:good]
                # good: every rank makes every call; a rank with nothing adds 0, which
                # leaves the sum unchanged.
                dist.all_reduce(count, op=dist.ReduceOp.SUM, group=steps_group)
                # --8<-- [end:good]
            totals.append(int(count.item()))
            mark = "" if totals[-1] == expected[step - 1] else "   <- WRONG"
            print0(f"step {step}: total samples {totals[-1]} (expected {expected[step - 1]}){mark}")
        # Meet at the end, as cleanup_distributed() does: the last call every rank makes.
        call, started = "the final barrier", time.monotonic()
        dist.barrier(group=steps_group)
    except RuntimeError as error:  # gloo raises on timeout; nccl's watchdog ends the process
        explain_and_exit(ctx, args, call, time.monotonic() - started, totals, expected, error)
    # --8<-- [end:loop]

    # 3. Done: every rank made the same calls, so the totals are right.
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"outcome={'completed' if totals == expected else 'wrong_totals'} "
           f"totals={','.join(map(str, totals))} expected={','.join(map(str, expected))}")
    cleanup_distributed()
    if totals != expected:
        raise SystemExit("collective_order: the totals are wrong")


def explain_and_exit(ctx: DistributedContext, args, call: str, waited: float,
                     totals: list[int], expected: list[int], error: RuntimeError) -> None:
    """`call` failed after `waited` s: say why, and exit 1 on every rank.

    After a timeout the process group is broken: no more collectives, not even the
    cleanup barrier. Rank 0 explains; every rank says where it stopped, and exits 1.
    """
    skipper = next(r for r in range(ctx.world_size) if samples_at(EMPTY_STEP, r, ctx.world_size) == 0)
    # A wait as long as the timeout was ended by it: on this rank, or on the partner that
    # gave up first and closed the connection (gloo then says "Connection closed by peer").
    outcome = "timeout" if waited >= 0.9 * args.timeout else "error"
    ended_by = f"the timeout (--timeout {args.timeout:g})" if outcome == "timeout" else "an error"
    print0(f"rank 0: {call} found no partner; after {waited:.1f} s {ended_by} ended the wait "
           f"with a {type(error).__name__}.")
    print0(f"cause: rank {skipper} skipped all_reduce #{EMPTY_STEP}. Collectives are matched by "
           f"the order of the calls: its all_reduce #{EMPTY_STEP + 1} met the others' "
           f"#{EMPTY_STEP} (so step {EMPTY_STEP}'s total is wrong), and the others' "
           f"#{EMPTY_STEP + 1} had nothing left to meet.")
    print0("fix: call every collective on every rank, in the same order (add 0 when there "
           "is nothing to add).")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"outcome={outcome} failed_call={call.replace(' ', '_')} waited={waited:.1f}s "
           f"totals={','.join(map(str, totals))} expected={','.join(map(str, expected))}")
    gloo_says = re.sub(r"^\[[^\]]*\]\s*", "", (str(error).strip().splitlines() or [""])[0])
    print(f"rank {ctx.rank}: {call} failed after {waited:.1f} s (rank {skipper} skipped "
          f"all_reduce #{EMPTY_STEP}): {gloo_says}", file=sys.stderr, flush=True)
    time.sleep(1.0)  # a launcher stops all ranks once one exits: give each time to say the above
    raise SystemExit(1)


if __name__ == "__main__":
    main()
