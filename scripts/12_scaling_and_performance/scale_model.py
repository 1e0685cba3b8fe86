"""Chapter 12b: from two ranks to a thousand, on paper: a model of DDP's step.

The model (alpha-beta, a ring all-reduce that overlaps backward):
- DDP all-reduces G gradient bytes per step in buckets: the first one 1 MiB, then 25 MiB each
  (DDP's defaults), the last one holding the first layers' gradients, ready last;
- a ring all-reduce of b bytes over N ranks takes 2(N-1) latency steps and moves 2(N-1)/N bytes
  per byte: t(b, N) = 2(N-1) alpha + 2(N-1)/N b / busbw;
- the buckets' all-reduces overlap backward (about 2/3 of the compute), by a fraction
  `overlap`; the last bucket always waits: exposed = max(t(last), sum(t) - overlap * backward);
- efficiency(N) = compute / (compute + exposed): weak scaling against N devices alone.

Run under 2 ranks it measures its inputs here (compute per step with every rank stepping alone
at once, G counted from the model, alpha from 8-byte all_reduces, busbw from 25 MiB ones),
checks the model against DDP's measured step, and predicts 8 to 1024 ranks of the same kind.
Then the same model for a GPU cluster (--gpu-* flags; defaults: PyTorch's DDP benchmark,
ResNet-50, batch 32 per V100), next to that benchmark's published numbers.

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/scale_model.py \\
        --plot model.png
    python scripts/12_scaling_and_performance/scale_model.py --gpu-step 0.2 --gpu-busbw 25  # on paper only
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
import torchvision

from utils.cli import float_range, make_parser, output_file, positive_float, positive_int
from utils.comm import gradient_bytes
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.plots import saved_figure
from utils.timing import synchronized_clock, train_step_seconds
from utils.vision import resnet18_cifar

MIB = 1024 * 1024
SIZES = [2, 8, 16, 64, 256, 1024]
TARGET = 0.90
# PyTorch's DDP benchmark (benchmarks/distributed/ddp/README.md in the pytorch repository):
# its example output: ResNet-50, batch 32 per V100, PyTorch 1.4, 8 GPUs on one machine, 16 on two.
PUBLISHED = {"one GPU, no DDP": (1, 329), "one GPU, DDP": (1, 319), "8 GPUs": (8, 307), "16 GPUs": (16, 306)}


def parse_args():
    parser = make_parser(__doc__)
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="per-rank batch of the measured steps (default: 16 on CPUs, 64 on GPUs)")
    parser.add_argument("--steps", type=positive_int, default=2,
                        help="timed steps per turn, two turns each alone and with DDP, the first after a "
                             "warm-up step (default: %(default)s)")
    parser.add_argument("--overlap", type=float_range(0.0, 1.0), default=None,
                        help="share of the all-reduce that hides behind backward here (default: 0 on "
                             "CPUs, where gloo's threads share the cores with backward; 1 on GPUs)")
    parser.add_argument("--gpu-step", type=positive_float, default=0.097,
                        help="seconds per step on one GPU without DDP (default: %(default)s, ResNet-50, "
                             "batch 32, V100: 329 images/s)")
    parser.add_argument("--gpu-model", default="resnet50", metavar="NAME",
                        choices=sorted(torchvision.models.list_models(module=torchvision.models)),
                        help="torchvision classification model whose gradients are counted "
                             "(default: %(default)s)")
    parser.add_argument("--gpu-busbw", type=positive_float, default=50.0,
                        help="GB/s of busbw between GPUs (default: %(default)s, an InfiniBand-class network; "
                             "assumed, not measured)")
    parser.add_argument("--gpu-latency-us", type=positive_float, default=10.0,
                        help="microseconds per ring step (default: %(default)s; assumed)")
    parser.add_argument("--gpu-overlap", type=float_range(0.0, 1.0), default=1.0,
                        help="share of the all-reduce that hides behind backward (default: %(default)s)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="PNG", help="write the plot here")
    return parser.parse_args()


# --8<-- [start:model]
def buckets(grad_bytes: int, cap: int = 25 * MIB, first: int = MIB) -> list[int]:
    """DDP's buckets in the order they are all-reduced: 1 MiB, then 25 MiB ones, the rest last."""
    sizes = [min(first, grad_bytes)]
    while sum(sizes) < grad_bytes:
        sizes.append(min(cap, grad_bytes - sum(sizes)))
    return sizes


def ring_seconds(size: int, n: int, alpha: float, busbw: float) -> float:
    """A ring all-reduce of `size` bytes over n ranks: 2(n-1) steps of latency, 2(n-1)/n bytes
    sent per byte at busbw (bytes/s)."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / busbw if n > 1 else 0.0


def efficiency(n: int, compute: float, grad_bytes: int, alpha: float, busbw: float, overlap: float) -> float:
    """compute / (compute + exposed): what DDP keeps of N devices computing alone."""
    times = [ring_seconds(b, n, alpha, busbw) for b in buckets(grad_bytes)]
    backward = 2 / 3 * compute
    exposed = max(times[-1], sum(times) - overlap * backward) if n > 1 else 0.0
    return compute / (compute + exposed)
# --8<-- [end:model]


def busbw_for(target: float, n: int, compute: float, grad_bytes: int, alpha: float, overlap: float) -> float:
    """The busbw (bytes/s) at which the model reaches `target` (bisection); inf if latency alone
    keeps it below."""
    if efficiency(n, compute, grad_bytes, alpha, 1e18, overlap) < target:
        return math.inf
    low, high = 1e3, 1e18
    for _ in range(200):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if efficiency(n, compute, grad_bytes, alpha, middle, overlap) < target \
            else (low, middle)
    return high


def table(title: str, compute: float, grad_bytes: int, alpha: float, busbw: float, overlap: float,
          needs: bool) -> list:
    """The model at SIZES ranks: the all-reduce per step, the efficiency, and (needs) the busbw
    it would take to reach TARGET."""
    print0(f"{title}: compute {compute:.4f} s per step, {grad_bytes} gradient bytes in "
           f"{len(buckets(grad_bytes))} buckets, alpha {alpha:.6f} s, busbw {busbw / 1e9:.3f} GB/s, "
           f"overlap {overlap:g}")
    rows = []
    for n in SIZES:
        comm = sum(ring_seconds(b, n, alpha, busbw) for b in buckets(grad_bytes))
        value = efficiency(n, compute, grad_bytes, alpha, busbw, overlap)
        line = f"{n:>7} ranks: all-reduce {comm:.4f} s per step, model_efficiency={value:.3f}"
        if needs:
            need = busbw_for(TARGET, n, compute, grad_bytes, alpha, overlap)
            line += (f", {TARGET:.2f} needs {need / 1e9:.3f} GB/s" if math.isfinite(need)
                     else f", {TARGET:.2f} out of reach: latency alone is too much")
        print0(line)
        rows.append((n, value))
    return rows


def measure(ctx, batch: int, steps: int) -> dict[str, float]:
    """Compute per step (every rank alone at once: the ceiling) and DDP's step, measured in
    turns so that both see the same load (the faster of two turns each); alpha and busbw."""
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = resnet18_cifar().to(ctx.device)
    plain = copy.deepcopy(model)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    runs = {"alone": (plain, torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.9)),
            "ddp": (ddp, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))}
    images = torch.randn(batch, 3, 32, 32, device=ctx.device)
    labels = torch.randint(0, 10, (batch,), device=ctx.device)
    best = {"alone": math.inf, "ddp": math.inf}
    for turn in range(2):
        for name, (net, optimizer) in runs.items():
            dist.barrier()
            seconds = train_step_seconds(net, optimizer, images, labels, steps, 1 if turn == 0 else 0)
            best[name] = min(best[name], mean(seconds, ctx))
    del ddp, runs
    small = all_reduce_seconds(8, 20, ctx.device)
    bucket = all_reduce_seconds(25 * MIB, 3, ctx.device)
    n = ctx.world_size
    alpha = small / (2 * (n - 1))  # an 8-byte all-reduce is all latency
    busbw = 2 * (n - 1) / n * 25 * MIB / max(bucket - 2 * (n - 1) * alpha, 1e-9)
    return {"compute": best["alone"], "ddp": best["ddp"], "alpha": alpha, "busbw": busbw,
            "grad_bytes": gradient_bytes(model)}


def all_reduce_seconds(size: int, iters: int, device: torch.device) -> float:
    tensor = torch.ones(size // 4, device=device)
    dist.all_reduce(tensor)  # warm-up
    best = math.inf
    for _ in range(3):
        dist.barrier()
        start = synchronized_clock(device)
        for _ in range(iters):
            dist.all_reduce(tensor)
        best = min(best, (synchronized_clock(device) - start) / iters)
    return mean(best, None, device)


def mean(seconds: float, ctx, device: torch.device | None = None) -> float:
    value = torch.tensor([seconds], dtype=torch.float64, device=device or ctx.device)
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def plot(path: Path, here: list | None, gpu: list, measured: float | None) -> None:
    with saved_figure(path, figsize=(7, 4)) as (figure, axes):
        if here:
            axes.plot(*zip(*here, strict=True), "o-", label="model, this machine's ranks")
        if measured is not None:
            axes.plot([2], [measured], "k*", markersize=12, label="measured here, 2 ranks")
        axes.plot(*zip(*gpu, strict=True), "s-", label="model, the GPU cluster (--gpu-*)")
        published = [PUBLISHED[key] for key in ("8 GPUs", "16 GPUs")]
        axes.plot([n for n, _ in published], [rate / 329 for _, rate in published], "rD",
                  label="PyTorch's DDP benchmark (V100)")
        axes.axhline(TARGET, color="gray", linestyle=":")
        axes.set_xscale("log", base=2)
        axes.set_xticks(SIZES, [str(n) for n in SIZES])
        axes.set_ylim(0, 1.05)
        axes.set_xlabel("ranks (N)")
        axes.set_ylabel("predicted weak-scaling efficiency")
        axes.legend(fontsize=8)


def main() -> None:
    args = parse_args()
    ctx = setup_distributed(args.backend, args.timeout)
    on_gpu = ctx.device.type == "cuda"
    overlap = args.overlap if args.overlap is not None else (1.0 if on_gpu else 0.0)
    here, predicted, measured = None, None, None
    # 1. Measured here (2 or more ranks): the inputs, and the check at this world size.
    if ctx.world_size > 1:
        batch = args.batch_size or (64 if on_gpu else 16)
        m = measure(ctx, batch, args.steps)
        n = ctx.world_size
        predicted = efficiency(n, m["compute"], m["grad_bytes"], m["alpha"], m["busbw"], overlap)
        measured = m["compute"] / m["ddp"]
        print0(f"measured on {n} ranks ({ctx.backend}, {ctx.device.type}), ResNet-18, batch {batch} per "
               f"rank: alone {m['compute']:.4f} s per step, DDP {m['ddp']:.4f} s")
        print0(f"check at {n} ranks: predicted_efficiency={predicted:.2f} measured_efficiency={measured:.2f}")
        here = table("this machine's ranks, on paper", m["compute"], m["grad_bytes"], m["alpha"], m["busbw"],
                     overlap, needs=False)
    # 2. The GPU cluster, on paper, beside the published numbers.
    grads = gradient_bytes(getattr(torchvision.models, args.gpu_model)())
    gpu = table(f"{args.gpu_model} on GPUs, on paper", args.gpu_step, grads, args.gpu_latency_us * 1e-6,
                args.gpu_busbw * 1e9, args.gpu_overlap, needs=True)
    print0("published, PyTorch's DDP benchmark (ResNet-50, batch 32, V100, NCCL, PyTorch 1.4; 8 GPUs on "
           "one machine, 16 on two): "
           + ", ".join(f"{what} {rate} images/s per GPU" for what, (_, rate) in PUBLISHED.items())
           + f": published_efficiency={PUBLISHED['8 GPUs'][1] / 329:.2f},{PUBLISHED['16 GPUs'][1] / 329:.2f}"
           " at 8,16 GPUs")
    if args.plot is not None and ctx.rank == 0:
        plot(args.plot, here, gpu, measured)
        print0(f"plot: {args.plot}")
    gpu_values = dict(gpu)
    check = f"predicted_efficiency={predicted:.2f} measured_efficiency={measured:.2f} " if predicted else ""
    print0(f"summary: world_size={ctx.world_size} overlap={overlap:g} {check}gpu_ranks="
           f"{','.join(map(str, SIZES))} gpu_efficiency={','.join(f'{gpu_values[n]:.3f}' for n in SIZES)}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
