"""Chapter 02: the collective operations, one at a time, with what every rank holds.

A collective is a call that every rank of the process group makes, and that moves or
combines tensors between them: all_reduce, broadcast, all_gather, reduce_scatter, and
barrier. send/recv move a tensor between two ranks only. Each section below starts from
small tensors that differ by rank and prints, per rank, the tensor before and after.

Run it (the same file, unchanged, everywhere):
    python scripts/02_collectives/collectives_tour.py           # 1 process: a world of one
    torchrun --standalone --nproc_per_node=3 scripts/02_collectives/collectives_tour.py
    mpiexec -n 3 python scripts/02_collectives/collectives_tour.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist

from utils.cli import make_parser, non_negative_float
from utils.distributed import (
    DistributedContext,
    cleanup_distributed,
    p2p_device,
    print0,
    setup_distributed,
)


def parse_args():
    parser = make_parser(__doc__)
    parser.add_argument("--barrier-delay", type=non_negative_float, default=0.1, metavar="SECONDS",
                        help="rank r works r times this long before the barrier (default: %(default)s)")
    return parser.parse_args()


def values(tensor: torch.Tensor, sep: str = ",") -> str:
    """1,2.5,3: a tensor's values, short enough for a table or a summary line."""
    return sep.join(f"{value:g}" for value in tensor.flatten().tolist())


def fmt(tensor: torch.Tensor) -> str:
    """[1, 2.5, 3]"""
    return f"[{values(tensor, ', ')}]"


# --8<-- [start:show]
def show(ctx: DistributedContext, title: str, before: torch.Tensor, after: torch.Tensor,
         expected: torch.Tensor) -> bool:
    """Print what every rank held before and after an operation, one row per rank.

    Printing from every rank would interleave the lines at random, so each rank sends its
    row to the others with all_gather_object (itself a collective, made by every rank)
    and rank 0 prints the table. Returns True when every rank got `expected`.
    """
    row = (fmt(before), fmt(after), torch.equal(after.cpu(), expected.cpu()))
    rows: list = [None] * ctx.world_size
    dist.all_gather_object(rows, row)
    print0(title)
    for rank, (held_before, held_after, ok) in enumerate(rows):
        print0(f"  rank {rank}: {held_before:<16} -> {held_after}{'' if ok else '   WRONG'}")
    return all(ok for _, _, ok in rows)
# --8<-- [end:show]


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01). Every rank then makes the same calls below,
    #    in the same order: that is the one rule of collectives.
    ctx = setup_distributed(args.backend, args.timeout)
    rank, world = ctx.rank, ctx.world_size
    print0(f"launcher={ctx.launcher} world_size={world} backend={ctx.backend} device={ctx.device.type}")
    checks: dict[str, bool] = {}
    # Rank r starts from (r + 1) * [1, 2]: rank 0 holds [1, 2], rank 1 [2, 4], rank 2 [3, 6].
    start = (rank + 1) * torch.tensor([1.0, 2.0], device=ctx.device)
    ranks_sum = world * (world + 1) / 2  # 1 + 2 + ... + world_size

    # --8<-- [start:all_reduce]
    # 2. all_reduce: every rank ends with the element-wise reduction over all ranks, in
    #    place. ReduceOp.SUM, MAX, MIN, PRODUCT work on every backend.
    total = start.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    largest = start.clone()
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    # The average: SUM, then divide by the world size. (DDP divides each gradient by the
    # world size first, as it fills its buckets, then all-reduces with SUM.)
    # (nccl also offers ReduceOp.AVG; gloo only from torch 2.8 on.)
    mean = start.clone()
    dist.all_reduce(mean, op=dist.ReduceOp.SUM)
    mean /= world
    # --8<-- [end:all_reduce]
    checks["all_reduce_sum"] = show(ctx, "all_reduce SUM: everyone gets the sum", start, total,
                                    ranks_sum * torch.tensor([1.0, 2.0]))
    checks["all_reduce_max"] = show(ctx, "all_reduce MAX: everyone gets the largest", start, largest,
                                    world * torch.tensor([1.0, 2.0]))
    checks["all_reduce_avg"] = show(ctx, "all_reduce SUM / world_size: everyone gets the mean", start,
                                    mean, ranks_sum / world * torch.tensor([1.0, 2.0]))

    # --8<-- [start:broadcast]
    # 3. broadcast: rank `src` sends its tensor; every other rank's tensor is overwritten.
    #    DDP does this once, when it wraps the model, so all replicas start equal.
    shared = start.clone() if rank == 0 else torch.zeros(2, device=ctx.device)
    before = shared.clone()
    dist.broadcast(shared, src=0)
    # --8<-- [end:broadcast]
    checks["broadcast"] = show(ctx, "broadcast from rank 0: everyone gets rank 0's tensor", before,
                               shared, torch.tensor([1.0, 2.0]))

    # --8<-- [start:all_gather]
    # 4. all_gather: every rank contributes one tensor and receives everyone's, in rank order.
    mine = torch.tensor([10.0 * rank], device=ctx.device)
    gathered = [torch.zeros(1, device=ctx.device) for _ in range(world)]
    dist.all_gather(gathered, mine)
    # --8<-- [end:all_gather]
    checks["all_gather"] = show(ctx, "all_gather: everyone gets every rank's tensor", mine,
                                torch.cat(gathered), 10.0 * torch.arange(world, dtype=torch.float))

    # --8<-- [start:reduce_scatter]
    # 5. reduce_scatter: each rank holds world_size chunks; chunk i is summed over all ranks
    #    and rank i keeps that sum. An all_reduce is a reduce_scatter plus an all_gather.
    chunks = list(((rank + 1) * torch.arange(1.0, world + 1, device=ctx.device)).split(1))
    my_sum = torch.zeros(1, device=ctx.device)
    try:
        dist.reduce_scatter(my_sum, chunks, op=dist.ReduceOp.SUM)
    except RuntimeError as error:  # gloo before torch 2.8 has no reduce_scatter
        if "does not support" not in str(error):
            raise
        summed = torch.cat(chunks)  # the same result for twice the traffic: sum all, keep mine
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        my_sum.copy_(summed[rank:rank + 1])
    # --8<-- [end:reduce_scatter]
    checks["reduce_scatter"] = show(ctx, "reduce_scatter SUM: rank i gets the sum of everyone's chunk i",
                                    torch.cat(chunks), my_sum, torch.tensor([ranks_sum * (rank + 1)]))

    # --8<-- [start:send_recv]
    # 6. send/recv: point to point, not collective. A ring: each rank sends its number to
    #    the next rank and receives from the previous one. batch_isend_irecv posts the send
    #    and the receive together, as one batch: no rank's send waits behind its own
    #    receive or the other way round (under nccl, separate isend/irecv calls can hang).
    #    p2p_device: ctx.device, or the CPU where gloo runs on GPUs (--backend gloo-cuda).
    if world > 1:
        outgoing = torch.tensor([float(rank)], device=p2p_device(ctx))
        incoming = torch.full((1,), -1.0, device=p2p_device(ctx))
        requests = dist.batch_isend_irecv([  # gpu-checked: batched, safe on nccl
            dist.P2POp(dist.isend, outgoing, (rank + 1) % world),
            dist.P2POp(dist.irecv, incoming, (rank - 1) % world),
        ])
        for request in requests:
            request.wait()
        # --8<-- [end:send_recv]
        checks["send_recv"] = show(ctx, "send/recv ring: everyone gets the previous rank's number",
                                   outgoing, incoming, torch.tensor([float((rank - 1) % world)]))
    else:
        print0("send/recv ring: skipped, a world of one has no other rank to send to")

    # --8<-- [start:barrier]
    # 7. barrier: no data, only a meeting point: nobody leaves until everyone has arrived.
    #    Here rank r works r * --barrier-delay seconds first, so the early ranks wait.
    time.sleep(rank * args.barrier_delay)
    arrived = time.perf_counter()  # gpu-checked: nccl barrier blocks the CPU
    dist.barrier()
    waited = time.perf_counter() - arrived  # gpu-checked
    # --8<-- [end:barrier]
    waits: list = [None] * world
    dist.all_gather_object(waits, round(waited, 2))
    print0("barrier: the ranks that arrived first waited for the last one")
    for r, seconds in enumerate(waits):
        print0(f"  rank {r}: worked {r * args.barrier_delay:.2f} s, then waited {seconds:.2f} s")

    # --8<-- [start:async]
    # 8. async_op=True: the call returns a Work handle at once and the communication runs
    #    in the background. Do independent work meanwhile; call wait() before you touch the
    #    tensor. (With nccl, wait() makes the current CUDA stream wait, not the CPU.)
    pending = start.clone()
    work = dist.all_reduce(pending, op=dist.ReduceOp.SUM, async_op=True)
    expected_sum = ranks_sum * torch.tensor([1.0, 2.0])  # work that does not need the result
    work.wait()  # from here on, `pending` holds the sum
    # --8<-- [end:async]
    checks["async_all_reduce"] = show(ctx, "all_reduce SUM with async_op=True, then wait()", start,
                                      pending, expected_sum)

    # 9. Summary. Every rank holds the same checks (show() gathered them), so every rank
    #    agrees on the outcome and the exit code.
    passed = sum(checks.values())
    print0(f"summary: world_size={world} backend={ctx.backend} launcher={ctx.launcher} "
           f"sum={values(total)} max={values(largest)} mean={values(mean)} "
           f"checks_passed={passed}/{len(checks)}")
    cleanup_distributed()
    if passed != len(checks):
        failed = ", ".join(name for name, ok in checks.items() if not ok)
        raise SystemExit(f"collectives_tour: wrong results from {failed}")


if __name__ == "__main__":
    main()
