"""Chapter 12: how fast the process group moves bytes: a communication benchmark.

For each collective DDP and its relatives use (all_reduce, all_gather into one tensor,
reduce_scatter from one tensor, broadcast) and each message size from a few bytes up to
--max-bytes, it times --iters calls after --warmup calls, and reports the time per call and
two bandwidths as NVIDIA's nccl-tests define them (bandwidths() below): algbw = S / t, and
busbw = algbw x a factor that depends on the collective, so that busbw can be compared with
the link's speed whatever the number of ranks.

Large messages get fewer calls (each measurement moves about --iter-bytes), so the default
run reaches the sizes where busbw flattens: 8 MiB on CPUs in seconds, 256 MiB on GPUs.
Beside the result it prints the device's memory-copy bandwidth (a large tensor copied),
the ceiling of any transport inside one host: it moves bytes by copying memory.

In the same run it times a bare ``dist.all_reduce`` loop, written out by hand and timed
another way (the device synchronized, then time.perf_counter() around the whole loop; no
CUDA events, no helper shared with the benchmark), interleaved with the benchmark's own
all_reduce. On small messages the median ratio of the pairs is within 5% of 1 when all is
well; a busy machine can move it further (a warning, exit 0); a ratio beyond 2x means the
benchmark measures its own machinery, or on a GPU its event clock measures something else
than the wall clock (exit 1).

Run it:
    python scripts/12_scaling_and_performance/comm_bench.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/comm_bench.py
    torchrun --standalone --nproc_per_node=4 scripts/12_scaling_and_performance/comm_bench.py \\
        --max-bytes 1073741824 --csv comm.csv --plot comm.png            # GPUs, nccl
    mpiexec -n 2 python scripts/12_scaling_and_performance/comm_bench.py --csv comm.csv
"""

import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist

from utils.cli import int_range, make_parser, non_negative_int, output_file, positive_int, usage_error
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.plots import saved_figure
from utils.timing import Clock, synchronized_clock

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
SMALL_BYTES = 64 * 1024  # the bare loop's check: messages up to 64 KiB, where a call's fixed cost counts
WRONG = 2.0  # a median ratio beyond 2x (or under 1/2) is no longer noise: the benchmark is wrong
MIB = 1024 * 1024


def parse_args():
    parser = make_parser(__doc__)
    parser.add_argument("--min-bytes", type=int_range(4), default=8,
                        help="smallest message (default: %(default)s)")
    parser.add_argument("--max-bytes", type=int_range(4), default=None,
                        help="largest message, in bytes (default: 8 MiB on CPUs, 256 MiB on GPUs)")
    parser.add_argument("--factor", type=int_range(2), default=4,
                        help="each size is this many times the last (default: %(default)s)")
    parser.add_argument("--iters", type=positive_int, default=10,
                        help="timed calls per measurement, fewer on large sizes (default: %(default)s)")
    parser.add_argument("--iter-bytes", type=positive_int, default=8 * MIB,
                        help="a measurement of a large size makes about this many bytes' worth of calls "
                             "(at least 1; default: %(default)s)")
    parser.add_argument("--warmup", type=non_negative_int, default=5,
                        help="untimed calls first, once per size (default: %(default)s)")
    parser.add_argument("--repeats", type=positive_int, default=15,
                        help="measurements per size and op; the fastest counts (default: %(default)s)")
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="collectives to time")
    parser.add_argument("--csv", type=output_file, default=None, help="write every measurement here (rank 0)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="PNG",
                        help="plot busbw per size here (rank 0)")
    args = parser.parse_args()
    if args.max_bytes is None:
        args.max_bytes = (256 if torch.cuda.is_available() else 8) * MIB
    if args.min_bytes > args.max_bytes:
        usage_error(f"--min-bytes {args.min_bytes} is more than --max-bytes {args.max_bytes}", parser)
    return args


# --8<-- [start:bandwidths]
BUS_FACTOR = {  # nccl-tests' correction from algbw to busbw, for n ranks
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def bandwidths(op: str, size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes), as nccl-tests computes them. size_bytes is S, the
    whole array: for all_gather the gathered output, for reduce_scatter the input that is
    reduced and scattered (n times what each rank sends or keeps), else the tensor."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * BUS_FACTOR[op](world_size)
# --8<-- [end:bandwidths]


def make_call(op: str, size_bytes: int, world_size: int, device: torch.device):
    """(a function that makes one call of `op` on S = size_bytes, S actually used): float32
    tensors; all_gather and reduce_scatter need S to be n equal parts, so S is rounded
    down to a multiple of 4*n bytes (at least one element per rank)."""
    count = max(1, size_bytes // 4)
    if op in ("all_gather", "reduce_scatter"):
        count = max(world_size, count // world_size * world_size)
    whole = torch.ones(count, device=device)
    part = torch.ones(count // world_size, device=device)
    # the tensor-in, tensor-out forms (torch before 2.14: all_gather_into_tensor and
    # reduce_scatter_tensor), no Python list of n tensors to build per call
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    call = {
        "all_reduce": lambda: dist.all_reduce(whole),
        "all_gather": lambda: all_gather(whole, part),
        "reduce_scatter": lambda: reduce_scatter(part, whole),
        "broadcast": lambda: dist.broadcast(whole, src=0),
    }[op]
    return call, count * 4


# --8<-- [start:timed]
def time_calls(call, clock: Clock, iters: int, warmup: int) -> float:
    """Seconds per call: warm-up calls first, then all ranks start together (barrier), and
    the clock runs around `iters` calls. On gloo a call returns once the CPU has waited for
    the result. On nccl it returns once the collective is queued on the current CUDA stream
    (called without async_op=True, the work is not waited for in Python: "the backend has
    sync'ed at CPP level"), so a CUDA event recorded on that stream after the last call
    (Clock.mark) is reached when the last collective has finished."""
    for _ in range(warmup):
        call()
    dist.barrier()
    start = clock.mark()
    for _ in range(iters):
        call()
    return clock.seconds(start, clock.mark()) / iters
# --8<-- [end:timed]


# --8<-- [start:bare]
def bare_all_reduce_loop(tensor: torch.Tensor, iters: int, warmup: int) -> float:
    """The reference: dist.all_reduce in a plain loop, nothing in between, timed another way:
    the wall clock, read after the device has finished everything queued (no CUDA events)."""
    cuda = tensor.device.type == "cuda"
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(tensor.device)
    start = time.perf_counter()  # gpu-checked: after the synchronize
    for _ in range(iters):
        dist.all_reduce(tensor)
    if cuda:
        torch.cuda.synchronize(tensor.device)
    return (time.perf_counter() - start) / iters  # gpu-checked: after the synchronize
# --8<-- [end:bare]


# --8<-- [start:memcpy]
def memcpy_bandwidth(device: torch.device, size_bytes: int = 64 * MIB, repeats: int = 5) -> float:
    """GB/s of one large tensor copied into another on this device (bytes copied per second,
    the fastest of `repeats`), all ranks at once: the ceiling of a transport inside one host."""
    source = torch.ones(size_bytes // 4, device=device)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up: the pages are touched
    best = float("inf")
    for _ in range(repeats):
        dist.barrier()
        start = synchronized_clock(device)
        target.copy_(source)
        best = min(best, synchronized_clock(device) - start)
    return size_bytes / best / 1e9
# --8<-- [end:memcpy]


# --8<-- [start:verdict]
def agrees(ratios: list[float]) -> bool:
    """The bare loop's check: the median ratio benchmark / bare loop within 2x of 1. On a quiet
    machine it is within a few percent; other processes on the cores move it, never by 2x: a
    benchmark that measured its own machinery, or only the queueing of a GPU's work, would."""
    return not ratios or 1 / WRONG <= statistics.median(ratios) <= WRONG
# --8<-- [end:verdict]


def plateau(rows: list[dict], op: str = "all_reduce") -> tuple[float, float]:
    """(busbw of the largest size, of the size before it): flat when they are close."""
    busbw = [row["busbw_GBps"] for row in rows if row["op"] == op]
    return busbw[-1], busbw[-2] if len(busbw) > 1 else busbw[-1]


def supported(ops: list[str], world_size: int, device: torch.device) -> list[str]:
    """The collectives this backend runs: each called once on a small tensor. A backend that
    lacks one (an older torch's gloo and the one-tensor reduce_scatter, say) raises the same
    error on every rank, so every rank drops the same ones."""
    kept = []
    for op in ops:
        try:
            make_call(op, 64 * world_size, world_size, device)[0]()
            kept.append(op)
        except (RuntimeError, NotImplementedError, ValueError) as error:
            reason = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            print0(f"{op}: not supported by this backend here ({reason}): skipped")
    return kept


def mean_over_ranks(seconds: float, device: torch.device) -> float:
    """The time averaged over the ranks (nccl-tests' default, -a 1)."""
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def plot(path: Path, rows: list[dict], title: str, copy: float) -> None:
    with saved_figure(path, figsize=(7, 4)) as (figure, axes):
        for op in OPS:
            points = [(row["bytes"], row["busbw_GBps"]) for row in rows if row["op"] == op]
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", label=op)
        axes.axhline(copy, color="gray", linestyle="--", label=f"memory copy ({copy:.1f} GB/s)")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("message size S (bytes)")
        axes.set_ylabel("bus bandwidth (GB/s)")
        axes.set_title(title, fontsize=10)
        axes.legend()


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01); the clock of this device (utils/timing.py).
    ctx = setup_distributed(args.backend, args.timeout)
    clock = Clock(ctx.device)
    args.ops = supported(args.ops, ctx.world_size, ctx.device)
    sizes = []
    while not sizes or sizes[-1] * args.factor <= args.max_bytes:
        sizes.append(args.min_bytes * args.factor ** len(sizes))
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type}: {len(sizes)} sizes from {sizes[0]} to {sizes[-1]} bytes, "
           f"{args.warmup} warm-up + {args.iters} timed calls (above {SMALL_BYTES} bytes: 1 warm-up, calls "
           f"of about {args.iter_bytes} bytes in all), fastest of {args.repeats}")

    # --8<-- [start:loop]
    # 2. Every size: each collective `repeats` times, and after each all_reduce measurement
    #    the bare loop on the same tensor size, so both see the same machine load. The
    #    fastest measurement counts (as Python's timeit advises: other processes on the
    #    machine only ever add time), averaged over the ranks.
    #    Above SMALL_BYTES: fewer calls (about --iter-bytes per measurement).
    rows, agreement = [], []
    for size in sizes:
        measured: dict[str, list[float]] = {op: [] for op in args.ops}
        bare: list[float] = []
        calls = {op: make_call(op, size, ctx.world_size, ctx.device) for op in args.ops}
        tensor = torch.ones(max(1, size // 4), device=ctx.device)
        small = size <= SMALL_BYTES
        iters = args.iters if small else max(1, min(args.iters, args.iter_bytes // size))
        for repeat in range(args.repeats):
            warmup = (args.warmup if small else min(args.warmup, 1)) if repeat == 0 else 0  # once per size
            for op, (call, _) in calls.items():
                if op == "all_reduce" and repeat % 2:  # a pair, in alternating order
                    bare.append(bare_all_reduce_loop(tensor, iters, warmup))
                measured[op].append(time_calls(call, clock, iters, warmup))
                if op == "all_reduce" and not repeat % 2:
                    bare.append(bare_all_reduce_loop(tensor, iters, warmup))
        for op, (_, used_bytes) in calls.items():
            seconds = mean_over_ranks(min(measured[op]), ctx.device)
            algbw, busbw = bandwidths(op, used_bytes, seconds, ctx.world_size)
            rows.append({"op": op, "bytes": used_bytes, "seconds": seconds,
                         "algbw_GBps": algbw, "busbw_GBps": busbw})
        if "all_reduce" in calls:
            ours = next(row for row in rows[-len(calls):] if row["op"] == "all_reduce")
            ratios = [b / r for b, r in zip(measured["all_reduce"], bare, strict=True)]
            agreement.append((size, ours["seconds"], mean_over_ranks(min(bare), ctx.device), ratios))
    # --8<-- [end:loop]

    # 3. Report: all_reduce's time, algbw and busbw per size, the other collectives' busbw
    #    (their times are in the CSV); then the memory copy, the ceiling inside one host.
    others = [op for op in args.ops if op != "all_reduce"]
    first = "all_reduce" if "all_reduce" in args.ops else None
    head = f"{'all_reduce: time':>18}  {'algbw':>11}  {'busbw':>11}" if first else ""
    print0(f"{'bytes':>9}  {head}" + "".join(f"  {op + ' busbw':>19}" for op in others))
    for size_index, size in enumerate(sizes):
        line = {row["op"]: row for row in rows[size_index * len(args.ops):(size_index + 1) * len(args.ops)]}
        text = f"{size:>9}  "
        if first:
            row = line[first]
            text += (f"{row['seconds']:>16.6f} s  {row['algbw_GBps']:>6.4f} GB/s  "
                     f"{row['busbw_GBps']:>6.4f} GB/s")
        print0(text + "".join(f"  {line[op]['busbw_GBps']:>14.4f} GB/s" for op in others))
    requested = [size for size in sizes for _ in args.ops]  # rows run size by size, op by op
    for size, row in zip(requested, rows, strict=True):
        if row["bytes"] == size:
            continue  # all_gather, reduce_scatter: S in n equal float32 parts, so rounded
        print0(f"  {row['op']} at {size} bytes: S = {row['bytes']} bytes, a multiple of 4 x {ctx.world_size} "
               "(the CSV's bytes and the bandwidths use it)")
    copy = mean_over_ranks(memcpy_bandwidth(ctx.device), ctx.device)
    print0(f"memory copy on this {ctx.device.type}: {copy:.2f} GB/s (a 64 MiB tensor, every rank at once): "
           "a transport inside one host moves bytes by copying memory, so its busbw stays below this")
    if first and len(sizes) > 1 and ctx.world_size > 1:
        last, before = plateau(rows)
        print0(f"all_reduce busbw at the two largest sizes: {before:.4f} GB/s, then {last:.4f} GB/s: "
               f"busbw_of_memcpy_share={100 * last / copy:.1f}%")
    # --8<-- [start:agreement]
    # The agreement on small sizes: each benchmark measurement against the bare loop's next
    # to it (the pair sees the same machine load), the median of those ratios over every
    # pair of every small size, and of all ranks. Other processes on the cores move it: a
    # warning; only a median beyond 2x fails the run (agrees() above).
    small = [(bench, ref) for size, bench, ref, _ in agreement if size <= SMALL_BYTES]
    pairs = [ratio for size, _, _, ratios in agreement if size <= SMALL_BYTES for ratio in ratios]
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, pairs)
    pairs = [ratio for ranks_pairs in everyone for ratio in ranks_pairs]
    agreed = agrees(pairs)
    bench_total, bare_total = sum(b for b, _ in small), sum(r for _, r in small)
    if agreement:
        print0("the same all_reduce as a bare dist.all_reduce loop, interleaved with the benchmark's:")
        for size, bench, ref, _ in agreement:
            print0(f"{size:>9}  benchmark {bench:.6f} s  bare loop {ref:.6f} s")
        median = statistics.median(pairs) if pairs else 1.0
        print0(f"sizes up to {SMALL_BYTES} bytes: {len(pairs)} pairs of measurements (all ranks), median "
               f"bench_bare_timing_ratio={median:.2f} (about 1 on a quiet machine; beyond {WRONG:g}x the run "
               f"fails); fastest times summed: benchmark {bench_total:.6f} s, bare loop {bare_total:.6f} s")
    # --8<-- [end:agreement]
    if ctx.is_main and args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=["op", "world_size", "bytes", "seconds",
                                                      "algbw_GBps", "busbw_GBps"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "world_size": ctx.world_size})
        print0(f"csv: {args.csv}")
    if ctx.is_main and args.plot is not None:
        plot(args.plot, rows, f"busbw per size, {ctx.world_size} rank(s), {ctx.backend} on {ctx.device.type}",
             copy)
        print0(f"plot: {args.plot}")
    last, _ = plateau(rows) if first else (0.0, 0.0)
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"ops={','.join(args.ops)} sizes={len(sizes)} max_bytes={sizes[-1]} "
           f"bare_loop_agrees={'yes' if agreed else 'no'} small_sizes={len(small)} pairs={len(pairs)} "
           f"small_bench_total={bench_total:.6f}s small_bare_total={bare_total:.6f}s "
           f"busbw={last:.4f}GB/s memcpy={copy:.2f}GB/s")

    # 4. Clean up.
    cleanup_distributed()
    if not agreed:
        print0(f"comm_bench: the benchmark's all_reduce and the bare loop disagree by more than {WRONG:g}x: "
               "the benchmark measures its own machinery, or its clock measures something else",
               file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
