"""Chapter 12: how DDP training scales, against what the hardware allows.

For N = 1, 2, ... ranks (up to the GPUs, or else the CPU cores, this process may use), real
launches of train_ddp.py under torchrun:
- weak scaling: the same batch per rank (the effective batch grows with N);
  efficiency T1/TN, T the time per step;
- strong scaling: the same effective batch split over N ranks; efficiency T1/(N*TN);
- the ceiling: N independent copies of train_single.py side by side, at the same time, no
  DDP: what N devices (or cores) deliver without any communication. Its weak-scaling
  efficiency T1/T(copies) is the most DDP can reach on this machine; DDP's own overhead is
  the gap between the two.
On a CPU every process gets one intra-op thread per core it stands for (OMP_NUM_THREADS).

Run it (one process: it launches the others):
    python scripts/12_scaling_and_performance/scaling_study.py --plot scaling.png
    python scripts/12_scaling_and_performance/scaling_study.py --ranks 1 2 4 8 --batch-size 128 \\
        --steps-per-epoch 30 --plot scaling.png                       # on a node with 8 GPUs
"""

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch

from utils.cli import make_parser
from utils.plots import saved_figure

HERE = Path(__file__).resolve().parent


def parse_args():
    parser = make_parser(__doc__)
    devices = torch.cuda.device_count() or len(os.sched_getaffinity(0))
    parser.add_argument("--ranks", type=int, nargs="+", default=list(range(1, devices + 1)),
                        help="world sizes to run (default: 1 to %(default)s's last, the devices here)")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="batch per rank of the weak-scaling runs; the effective batch of the "
                             "strong-scaling runs (default: %(default)s)")
    parser.add_argument("--steps-per-epoch", type=int, default=8, help="steps per run (default: %(default)s)")
    parser.add_argument("--warm-up", type=int, default=2, help="steps left out (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads per process on a CPU (default: the cores over the largest N)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG", help="write the plots here")
    args = parser.parse_args()
    if args.ranks[0] != 1 or sorted(set(args.ranks)) != args.ranks:
        parser.error("--ranks must start at 1 and increase (T1 is the baseline)")
    if args.steps_per_epoch <= args.warm_up:
        parser.error("--steps-per-epoch must be more than --warm-up")
    if any(args.batch_size % n for n in args.ranks):
        parser.error(f"--batch-size {args.batch_size} must split evenly over --ranks {args.ranks}")
    args.devices = devices
    return args


def common(args, batch: int) -> list[str]:
    fake = args.batch_size * args.ranks[-1] * args.steps_per_epoch
    return ["--epochs", "1", "--batch-size", str(batch), "--steps-per-epoch", str(args.steps_per_epoch),
            "--warm-up", str(args.warm_up), "--fake-size", str(fake), "--seed", str(args.seed),
            "--backend", args.backend, "--timeout", str(args.timeout)]


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


def summary(output: str, command: str) -> dict[str, float]:
    """Step time and throughput from a run's summary line; a failed run stops the study."""
    line = next((ln for ln in output.splitlines() if ln.startswith("summary:")), None)
    if line is None:
        raise SystemExit(f"scaling_study: `{command}` printed no summary:\n{output}")
    fields = dict(re.findall(r"(\w+)=([\d.]+)", line))
    return {"step": float(fields["data_wait"]) + float(fields["compute"]),
            "throughput": float(fields["throughput"])}


# --8<-- [start:launches]
def ddp_run(args, n: int, batch: int, threads: int) -> dict[str, float]:
    """torchrun with n ranks, `batch` images per rank."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           str(HERE / "train_ddp.py"), *common(args, batch)]
    done = subprocess.run(cmd, env=environment(threads), capture_output=True, text=True,
                          timeout=args.timeout + 600)
    return summary(done.stdout + done.stderr, " ".join(cmd[2:]))


def side_by_side(args, n: int, threads: int) -> list[dict[str, float]]:
    """n copies of the one-process script at once, each on its own GPU (or cores), no DDP."""
    cmd = [sys.executable, str(HERE / "train_single.py"), *common(args, args.batch_size)]
    gpus = args.devices if torch.cuda.is_available() else 0
    copies = [subprocess.Popen(cmd, env=environment(threads, i % gpus if gpus else None),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for i in range(n)]
    return [summary(copy.communicate(timeout=args.timeout + 600)[0], "train_single.py") for copy in copies]
# --8<-- [end:launches]


def plot(path: Path, ranks: list[int], rows: dict, title: str) -> None:
    with saved_figure(path, ncols=2, figsize=(10, 4)) as (figure, (left, right)):
        base = rows["weak"][0]["throughput"]
        left.plot(ranks, [base * n for n in ranks], ":", color="gray", label="linear (N x one rank)")
        for key, label, style in (("ceiling", "side-by-side copies (ceiling)", "k--"),
                                  ("weak", "DDP, same batch per rank (weak)", "o-"),
                                  ("strong", "DDP, same effective batch (strong)", "s-")):
            left.plot(ranks, [r["throughput"] for r in rows[key]], style, label=label)
            right.plot(ranks, rows[f"{key}_eff"], style, label=label)
        right.axhline(1.0, color="gray", linestyle=":")
        left.set_ylabel("images per second (all ranks)")
        right.set_ylabel("scaling efficiency")
        right.set_ylim(0, 1.2)
        for axes in (left, right):
            axes.set_xlabel("ranks (N)")
            axes.set_xticks(ranks)
            axes.legend(fontsize=8)
        figure.suptitle(title, fontsize=10)


def main() -> None:
    args = parse_args()
    on_gpu = torch.cuda.is_available()
    threads = 1 if on_gpu else args.threads or max(1, len(os.sched_getaffinity(0)) // args.ranks[-1])
    print(f"scaling study: ranks {args.ranks}, batch {args.batch_size}, {args.steps_per_epoch} steps "
          f"({args.warm_up} warm-up) per run, on {'GPUs' if on_gpu else 'CPU cores'}, "
          f"{threads} thread(s) per process", flush=True)
    # 1. The runs: weak, strong, and the side-by-side copies, for every N.
    rows: dict[str, list] = {"weak": [], "strong": [], "ceiling": []}
    print(f"{'ranks':>5}  {'run':<14}{'batch/rank':>10}  {'step':>9}  throughput", flush=True)
    for n in args.ranks:
        weak = ddp_run(args, n, args.batch_size, threads)
        strong = weak if n == 1 else ddp_run(args, n, args.batch_size // n, threads)
        copies = [weak] if n == 1 else side_by_side(args, n, threads)
        ceiling = {"step": sum(c["step"] for c in copies) / n,
                   "throughput": sum(c["throughput"] for c in copies)}
        for key, row, batch in (("weak", weak, args.batch_size), ("strong", strong, args.batch_size // n),
                                ("ceiling", ceiling, args.batch_size)):
            rows[key].append(row)
            print(f"{n:>5}  {key:<14}{batch:>10}  {row['step']:.4f} s  {row['throughput']:.0f} samples/s",
                  flush=True)
    # 2. Efficiencies: weak T1/TN, strong T1/(N*TN), and DDP's weak against the ceiling's.
    t1 = rows["weak"][0]["step"]
    rows["weak_eff"] = [t1 / r["step"] for r in rows["weak"]]
    rows["strong_eff"] = [t1 / (n * r["step"]) for n, r in zip(args.ranks, rows["strong"], strict=True)]
    rows["ceiling_eff"] = [t1 / r["step"] for r in rows["ceiling"]]
    vs_ceiling = [w / c for w, c in zip(rows["weak_eff"], rows["ceiling_eff"], strict=True)]
    if args.plot is not None:
        plot(args.plot, args.ranks, rows, f"ResNet-18, batch {args.batch_size} per rank, "
             f"{'GPUs' if on_gpu else f'CPU, {threads} thread(s) per rank'}")
        print(f"plot: {args.plot}", flush=True)
    fmt = lambda values: ",".join(f"{v:.2f}" for v in values)  # noqa: E731
    print(f"summary: ranks={','.join(map(str, args.ranks))} weak_efficiency={fmt(rows['weak_eff'])} "
          f"strong_efficiency={fmt(rows['strong_eff'])} ceiling_efficiency={fmt(rows['ceiling_eff'])} "
          f"weak_vs_ceiling_efficiency={fmt(vs_ceiling)}", flush=True)


if __name__ == "__main__":
    main()
