"""Chapter 12b: the batch per rank that makes DDP pay, against what the hardware allows.

ResNet-18 trains on batches already in memory (no loader: the step itself is what scales),
for every per-rank batch B of --batch-size, in two launches per N:
- one process alone: T1(B), the baseline;
- a DDP job of N ranks under torchrun that times, per batch and in turns (so that both see
  the same load), the ceiling: every rank trains its own plain copy at the same time, no
  communication, N copies side by side: Tc(B); then DDP: weak scaling TN(B), B per rank,
  efficiency T1/TN; strong scaling, the batch B split over the N ranks, T1(B) / (N * TN(B/N)).
DDP's weak efficiency against the ceiling, Tc/TN, is what DDP's own all-reduce costs: the
same gradient bytes every step, whatever the batch, against a computation that grows with
it. One run writes the table and the plot. On a CPU every process gets one intra-op thread
per core it stands for (OMP_NUM_THREADS).

Run it (one process: it launches the others):
    python scripts/12_scaling_and_performance/scaling_study.py --plot scaling.png
    python scripts/12_scaling_and_performance/scaling_study.py --ranks 8 --batch-size 32 64 128 256 \\
        --plot scaling.png                                               # on a node with 8 GPUs
"""

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch

from utils.cli import existing_file, make_parser, non_negative_int, output_file, positive_int, usage_error
from utils.comm import gradient_bytes
from utils.plots import saved_figure
from utils.timing import train_step_seconds
from utils.vision import resnet18_cifar

HERE = Path(__file__).resolve()
TARGET = 0.90  # the share of the ceiling this chapter asks DDP to reach


def parse_args():
    parser = make_parser(__doc__)
    gpus = torch.cuda.device_count()
    devices = gpus or len(os.sched_getaffinity(0))
    parser.add_argument("--ranks", type=positive_int, nargs="+", default=[max(2, devices)],
                        help="DDP world sizes to compare with one process (1 is left out: it is the "
                             "baseline; default: the devices here, %(default)s)")
    parser.add_argument("--batch-size", type=positive_int, nargs="+",
                        default=[32, 64, 128, 256] if gpus else [4, 8, 16],
                        help="per-rank batches of the sweep; each splits evenly over every N of --ranks "
                             "(default: %(default)s)")
    parser.add_argument("--steps", "--steps-per-epoch", dest="steps", type=positive_int, default=2,
                        help="timed steps per batch, run and turn (default: %(default)s)")
    parser.add_argument("--warm-up", type=non_negative_int, default=1,
                        help="steps before those in a batch's first turn, left out (default: %(default)s)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="intra-op threads per process on a CPU (default: the cores over the largest N)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="PNG", help="write the plots here")
    parser.add_argument("--replot", type=existing_file, default=None, metavar="OUTPUT",
                        help="no runs: draw --plot from the table a study printed (saved to OUTPUT), so "
                             "that a plot and its table come from one run")
    parser.add_argument("--measure", choices=["alone", "ddp"], default=None,
                        help="(what the study launches) time the steps of one process or of a DDP rank")
    args = parser.parse_args()
    args.ranks = sorted({n for n in args.ranks if n > 1})
    args.batch_size = sorted(set(args.batch_size))
    if args.replot and not args.plot:
        usage_error("--replot needs --plot: where to draw it", parser)
    if args.measure is None:
        if not args.ranks:
            usage_error("--ranks needs a world size of 2 or more: 1 is the baseline", parser)
        if bad := [(b, n) for b in args.batch_size for n in args.ranks if b % n]:
            usage_error(f"every --batch-size must split evenly over every --ranks: {bad[0][0]} over "
                        f"{bad[0][1]} does not", parser)
    args.devices = devices
    return args


# --8<-- [start:measure]
def measure(args) -> None:
    """A launched process: time the training steps of every batch of the sweep, on images
    already on the device. Alone: one process. Under DDP, per batch, in turns so that both
    see the same load: every rank trains its own plain copy at the same time, with no
    communication (the ceiling: N copies side by side), then the DDP model; the faster of
    two turns each (the first one after the warm-up steps), the mean over the ranks."""
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.distributed import cleanup_distributed, setup_distributed

    ctx = setup_distributed(args.backend, args.timeout) if args.measure == "ddp" else None
    alone = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # gpu-checked: its one GPU
    device = ctx.device if ctx else alone
    torch.manual_seed(args.seed)
    model = resnet18_cifar().to(device)
    runs = {"step": (model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))}
    if ctx:
        plain = copy.deepcopy(model)
        runs = {"ceiling": (plain, torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.9)),
                "step": (DDP(model, device_ids=[device.index] if device.type == "cuda" else None),
                         runs["step"][1])}
    for batch in args.batch_size:
        images = torch.randn(batch, 3, 32, 32, device=device)
        labels = torch.randint(0, 10, (batch,), device=device)
        best = dict.fromkeys(runs, float("inf"))
        for turn in range(2 if ctx else 1):
            for name, (net, optimizer) in runs.items():
                warm_up = args.warm_up if turn == 0 else 0  # the second turn is warm already
                seconds = train_step_seconds(net, optimizer, images, labels, args.steps, warm_up)
                if ctx:
                    seconds_t = torch.tensor([seconds], dtype=torch.float64, device=device)
                    torch.distributed.all_reduce(seconds_t)
                    seconds = seconds_t.item() / ctx.world_size
                best[name] = min(best[name], seconds)
        if not ctx or ctx.rank == 0:
            print(f"batch {batch}: " + " ".join(f"{name} {t:.6f} s" for name, t in best.items()), flush=True)
    if ctx:
        del runs
        cleanup_distributed()
# --8<-- [end:measure]


def environment(threads: int, gpu: int | None = None) -> dict[str, str]:
    """The parent's environment without a launcher's variables, with `threads` intra-op
    threads and, for a side-by-side copy, only its GPU visible (the job's own numbering)."""
    env = {k: v for k, v in os.environ.items()
           if not re.match(r"^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_|TORCHELASTIC_|OMPI_|PMI)", k)}
    env.update(OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    if gpu is not None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) and visible[gpu] else str(gpu)
    return env


def step_times(output: str, command: list[str], returncode: int, key: str = "step") -> dict[int, float]:
    """{batch: seconds per step} from a launch's lines; a failed launch stops the study."""
    lines = re.findall(rf"^batch (\d+): .*\b{key} ([\d.]+) s", output, flags=re.M)
    found = {int(b): float(s) for b, s in lines}
    if returncode or not found:
        raise SystemExit(f"scaling_study: `{' '.join(command)}` failed (exit {returncode}):\n{output}")
    return found


# --8<-- [start:launches]
def worker(args, role: str, batches: list[int]) -> list[str]:
    return [str(HERE), "--measure", role, "--batch-size", *map(str, batches), "--steps", str(args.steps),
            "--warm-up", str(args.warm_up), "--seed", str(args.seed), "--backend", args.backend,
            "--timeout", str(args.timeout)]


def ddp_run(args, n: int, batches: list[int], threads: int) -> tuple[dict[int, float], dict[int, float]]:
    """torchrun with n ranks, every batch of `batches` per rank in turn: (DDP's step, the
    ceiling's: n plain copies at once)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           *worker(args, "ddp", batches)]
    done = subprocess.run(cmd, env=environment(threads), capture_output=True, text=True,
                          timeout=args.timeout + 1800)
    output = done.stdout + done.stderr
    return (step_times(output, cmd, done.returncode), step_times(output, cmd, done.returncode, "ceiling"))


def one_process(args, threads: int) -> dict[int, float]:
    """The baseline: the one process alone, on the first GPU (or its cores), no DDP."""
    cmd = [sys.executable, *worker(args, "alone", args.batch_size)]
    done = subprocess.run(cmd, env=environment(threads, 0 if torch.cuda.is_available() else None),
                          capture_output=True, text=True, timeout=args.timeout + 1800)
    return step_times(done.stdout + done.stderr, cmd, done.returncode)
# --8<-- [end:launches]


def plot(path: Path, args, results: dict, title: str) -> None:
    with saved_figure(path, ncols=2, figsize=(10, 4)) as (figure, (left, right)):
        batches = args.batch_size
        for n in args.ranks:
            r = results[n]
            left.plot(batches, r["ceiling_eff"], "k--", label=f"{n} copies side by side (ceiling)")
            left.plot(batches, r["weak_eff"], "o-", label=f"DDP {n} ranks, weak")
            left.plot([b // n for b in batches], r["strong_eff"], "s-", label=f"DDP {n} ranks, strong")
            left.plot(batches, r["vs_ceiling"], "^-", label=f"DDP {n} ranks, weak / ceiling")
            right.plot(batches, [r["ceiling"][b] for b in batches], "k--", label=f"compute ({n} copies)")
            right.plot(batches, [r["ddp"][b] - r["ceiling"][b] for b in batches], "o-",
                       label=f"DDP's extra time ({n} ranks)")
        left.axhline(TARGET, color="gray", linestyle=":", label=f"{TARGET:.2f}")
        left.set_ylabel("scaling efficiency")
        shown = [v for r in results.values() for k in ("ceiling_eff", "weak_eff", "strong_eff", "vs_ceiling")
                 for v in r[k]]
        left.set_ylim(0, max(1.2, max(shown) + 0.1))
        right.set_ylabel("seconds per step")
        for axes in (left, right):
            axes.set_xscale("log", base=2)
            axes.set_xticks(batches, [str(b) for b in batches])
            axes.set_xlabel("batch per rank")
            axes.legend(fontsize=7)
        figure.suptitle(title, fontsize=10)


def title(megabytes: float, where: str) -> str:
    return f"ResNet-18, {megabytes:.1f} MB of gradients per step, {where}"


def replot(args) -> None:
    """The plot of a study's printed table (its step times), drawn again without running."""
    text = args.replot.read_text()
    results, alone = {}, {}
    for block in re.split(r"(?m)^(?=batch/rank)", text)[1:]:
        n = int(re.search(r"DDP, (\d+) ranks", block).group(1))
        rows = re.findall(r"(?m)^\s+(\d+)((?:\s+-?[\d.]+ s){5})$", block)
        table = {int(b): [float(t) for t in re.findall(r"-?[\d.]+", times)] for b, times in rows}
        alone.update({b: times[0] for b, times in table.items()})
        results[n] = {key: {b: times[i] for b, times in table.items()}
                      for i, key in ((1, "ceiling"), (2, "ddp"), (4, "split"))}
    args.batch_size, args.ranks = sorted(alone), sorted(results)
    for n, r in results.items():
        efficiencies(args, n, r, alone)
    megabytes = float(re.search(r"\(([\d.]+) MB\)", text).group(1))
    threads = re.search(r"(\d+) thread", text).group(1)
    where = "GPUs" if "on GPUs" in text else f"CPU, {threads} thread(s) per process"
    plot(args.plot, args, results, title(megabytes, where))
    print(f"plot: {args.plot} (from {args.replot})")


def efficiencies(args, n: int, r: dict, alone: dict) -> None:
    """weak T1/TN; strong T1(B)/(N*TN(B/N)); ceiling T1/Tc; DDP against the ceiling Tc/TN."""
    batches = args.batch_size
    r["weak_eff"] = [alone[b] / r["ddp"][b] for b in batches]
    r["strong_eff"] = [alone[b] / (n * r["split"][b]) for b in batches]
    r["ceiling_eff"] = [alone[b] / r["ceiling"][b] for b in batches]
    r["vs_ceiling"] = [r["ceiling"][b] / r["ddp"][b] for b in batches]


def main() -> None:
    args = parse_args()
    if args.measure:
        measure(args)
        return
    if args.replot:
        replot(args)
        return
    on_gpu = torch.cuda.is_available()
    most = args.ranks[-1]
    threads = 1 if on_gpu else args.threads or max(1, len(os.sched_getaffinity(0)) // most)
    grads = gradient_bytes(resnet18_cifar())
    print(f"scaling study: DDP on {','.join(map(str, args.ranks))} ranks against one process and copies "
          f"side by side; per-rank batches {','.join(map(str, args.batch_size))}; {args.steps} timed "
          f"steps per turn after {args.warm_up} warm-up; on {'GPUs' if on_gpu else 'CPU cores'}, {threads} "
          f"thread(s) per process; the target: DDP at {TARGET:.2f} of the ceiling", flush=True)
    print(f"ResNet-18: {grads // 4} parameters, {grads} bytes ({grads / 1e6:.1f} MB) of fp32 gradients "
          "all-reduced every step, whatever the batch", flush=True)
    # 1. The launches: one process alone; per N one DDP job that times, per batch, its ranks'
    #    plain copies side by side (the ceiling) and DDP in turns (weak; B/N per rank: strong).
    alone = one_process(args, threads)
    results = {}
    for n in args.ranks:
        batches = sorted(set(args.batch_size) | {b // n for b in args.batch_size})
        ddp, ceiling = ddp_run(args, n, batches, threads)
        results[n] = {"ceiling": ceiling, "ddp": ddp, "split": {b: ddp[b // n] for b in args.batch_size}}
    # 2. The table: seconds per step; then the efficiencies, per batch.
    for n in args.ranks:
        r = results[n]
        print(f"{'batch/rank':>10}  {'one process':>12}  {f'{n} copies':>12}  {f'DDP, {n} ranks':>14}  "
              f"{'DDP extra':>10}  {'DDP, batch split':>16}", flush=True)
        for b in args.batch_size:
            print(f"{b:>10}  {alone[b]:>10.4f} s  {r['ceiling'][b]:>10.4f} s  {r['ddp'][b]:>12.4f} s  "
                  f"{r['ddp'][b] - r['ceiling'][b]:>8.4f} s  {r['split'][b]:>14.4f} s", flush=True)
        efficiencies(args, n, r, alone)
        for i, b in enumerate(args.batch_size):
            print(f"batch {b}, {n} ranks: weak_efficiency={r['weak_eff'][i]:.2f} "
                  f"strong_efficiency={r['strong_eff'][i]:.2f} (batch {b} split) "
                  f"ceiling_efficiency={r['ceiling_eff'][i]:.2f} "
                  f"weak_vs_ceiling_efficiency={r['vs_ceiling'][i]:.2f}", flush=True)
    if args.plot is not None:
        plot(args.plot, args, results, title(grads / 1e6, "GPUs" if on_gpu else
                                             f"CPU, {threads} thread(s) per process"))
        print(f"plot: {args.plot}", flush=True)
    r = results[most]
    fmt = lambda values: ",".join(f"{v:.2f}" for v in values)  # noqa: E731
    print(f"summary: ranks={most} batches={','.join(map(str, args.batch_size))} grad_bytes={grads} "
          f"weak_efficiency={fmt(r['weak_eff'])} strong_efficiency={fmt(r['strong_eff'])} "
          f"ceiling_efficiency={fmt(r['ceiling_eff'])} weak_vs_ceiling_efficiency={fmt(r['vs_ceiling'])}",
          flush=True)


if __name__ == "__main__":
    main()
