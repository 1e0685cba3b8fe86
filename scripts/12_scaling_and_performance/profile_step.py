"""Chapter 12: where the time of a DDP training step goes, from torch.profiler's trace.

It trains the chapter's workload (torchvision's ResNet-18 for 32x32 images, on CIFAR-10 or
FakeData, utils/vision.py) under DDP for a few steps, records --steps of them with
torch.profiler after --warmup steps, and exports the trace (open it in
https://ui.perfetto.dev or chrome://tracing). From the trace's events it prints, per step:

- data: waiting for the next batch and copying it to the device;
- compute: forward, backward, the optimizer (and on a GPU the wait for it at the end of the
  step), less the communication they waited for;
- communication the step waited for (exposed), and the communication that ran while
  backward() was still computing gradients (overlapped: DDP all-reduces each gradient
  bucket as soon as it is full, on the backend's own thread or CUDA stream).

data + compute + exposed communication is the step, but for zero_grad and the Python between
the phases. On a GPU the forward, backward and optimizer ranges only queue kernels; the
"synchronize" range at the end of each step is where the CPU waits for the GPU to run them,
so compute there is time the GPU spent on the step's kernels (or idle between them), less
the communication kernels the step waited for.

Run it (CPU steps of ResNet-18 take about a second: the defaults are a few tiny batches):
    python scripts/12_scaling_and_performance/profile_step.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/profile_step.py \\
        --trace trace.json
    torchrun --standalone --nproc_per_node=4 scripts/12_scaling_and_performance/profile_step.py \\
        --batch-size 256 --steps 5 --data-dir ~/data/cifar10                # GPUs, nccl
    mpiexec -n 2 python scripts/12_scaling_and_performance/profile_step.py --trace trace.json
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # before torch: no profiler start/stop lines on stderr
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.data import DataLoader, DistributedSampler

from utils.cli import add_training_args, existing_dir, make_parser, output_file, positive_int
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.vision import cifar10_or_fake, resnet18_cifar

PHASES = ("data", "forward", "backward", "optimizer", "synchronize")


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=4, lr=0.05)
    parser.add_argument("--steps", type=positive_int, default=3, help="profiled steps (default: %(default)s)")
    parser.add_argument("--warmup", type=positive_int, default=2,
                        help="steps before profiling, 1 or more: DDP builds its real buckets after "
                        "step 1, so step 1 is not a typical step (default: %(default)s)")
    parser.add_argument("--data-dir", type=existing_dir, default=None,
                        help="a CIFAR-10 copy (default: FakeData)")
    parser.add_argument("--trace", type=output_file, default=Path("profile_trace.json"),
                        help="where rank 0 writes the Chrome/Perfetto trace (default: %(default)s)")
    return parser.parse_args()


# --8<-- [start:intervals]
def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals merged: [(0, 2), (1, 3), (5, 6)] -> [(0, 3), (5, 6)]."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union(intervals))


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(s1, s2), min(e1, e2)) for s1, e1 in union(a) for s2, e2 in union(b)
            if max(s1, s2) < min(e1, e2)]
# --8<-- [end:intervals]


# --8<-- [start:classify]
def is_communication(event: dict) -> bool:
    """A collective as it ran: on gloo, the "gloo:all_reduce" (broadcast, ...) annotations
    that gloo's worker thread records around each collective it executes; on nccl, the
    NCCL kernels on the GPU ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", cat "kernel").
    Not "c10d::allreduce_": that is only the call that queues it, on the thread that runs
    backward() (the training thread on a CPU; on CUDA, the autograd engine's device thread)."""
    name = event.get("name", "")
    return name.startswith("gloo:") or (event.get("cat") == "kernel" and name.startswith("nccl"))


def step_table(events: list[dict], main_tid: int, cuda: bool) -> list[dict[str, float]]:
    """Per profiled step, seconds of: step, data, compute, exposed and overlapped communication."""
    spans = [e for e in events if e.get("ph") == "X" and e.get("tid") == main_tid]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and is_communication(e)]
    rows = []
    ranges = [e for e in spans if e.get("cat") == "user_annotation"]  # record_function's ranges
    for step in (e for e in ranges if e["name"] == "step"):
        lo, hi = step["ts"], step["ts"] + step["dur"]
        inside = [e for e in spans if lo <= e["ts"] <= hi]
        phase = {e["name"]: e for e in inside if e.get("cat") == "user_annotation" and e["name"] in PHASES}
        backward = phase["backward"]
        if cuda:  # the GPU's own timeline: kernels other than NCCL's were computing
            computing = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel"
                         and not is_communication(e) and lo <= e["ts"] <= hi]
        else:  # the autograd engine computing gradients, from backward()'s start to its last one
            autograd = [e for e in inside if e["name"].startswith("autograd::engine::evaluate_function")
                        and backward["ts"] <= e["ts"] <= backward["ts"] + backward["dur"]]
            computing = [(backward["ts"], max(e["ts"] + e["dur"] for e in autograd))]
        step_comm = intersection(comm, [(lo, hi)])
        overlapped = length(intersection(step_comm, computing))
        exposed = length(step_comm) - overlapped
        busy = sum(phase[name]["dur"] for name in PHASES[1:] if name in phase)
        rows.append({"step": step["dur"], "data": phase["data"]["dur"], "compute": busy - exposed,
                     "exposed": exposed, "overlapped": overlapped})
    return [{key: value / 1e6 for key, value in row.items()} for row in rows]  # trace times are in us
# --8<-- [end:classify]


# --8<-- [start:step]
def train_step(model, optimizer, loss_fn, batches, device: torch.device) -> None:
    """One training step, each phase in a named range of the trace (record_function)."""
    with record_function("step"):
        with record_function("data"):
            inputs, labels = next(batches)
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with record_function("forward"):
            loss = loss_fn(model(inputs), labels)
        with record_function("backward"):
            loss.backward()  # DDP all-reduces the gradient buckets as backward fills them
        with record_function("optimizer"):
            optimizer.step()
        if device.type == "cuda":
            with record_function("synchronize"):  # the step ends when the GPU has finished
                torch.cuda.synchronize(device)
# --8<-- [end:step]


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01); the chapter's model and data, a DistributedSampler.
    ctx = setup_distributed(args.backend, args.timeout)
    dataset, description = cifar10_or_fake(args.data_dir, fake_size=args.batch_size * ctx.world_size
                                           * (args.warmup + args.steps), seed=args.seed)
    print0(description)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    torch.manual_seed(args.seed)
    model = DDP(resnet18_cifar().to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    cuda = ctx.device.type == "cuda"
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type}: ResNet-18, batch {args.batch_size} per rank, "
           f"{args.warmup} warm-up + {args.steps} profiled steps")

    # --8<-- [start:profile]
    # 2. Warm up, then profile --steps steps (CUDA activity too, on a GPU).
    batches = iter(loader)
    for _ in range(args.warmup):
        train_step(model, optimizer, loss_fn, batches, ctx.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as profiler:
        for _ in range(args.steps):
            train_step(model, optimizer, loss_fn, batches, ctx.device)
    # --8<-- [end:profile]

    # 3. Rank 0 exports the trace, reads it back, and prints the table.
    if ctx.is_main:
        args.trace.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(args.trace))
        events = json.loads(args.trace.read_text())["traceEvents"]
        # the training thread: its "step" range (on a GPU, kineto also writes "step" ranges
        # of cat "gpu_user_annotation" on the GPU's timeline)
        main_tid = next(e["tid"] for e in events if e.get("name") == "step" and e.get("ph") == "X"
                        and e.get("cat") == "user_annotation")
        rows = step_table(events, main_tid, cuda)
        print(f"trace: {args.trace}", flush=True)
        print(f"{'step':>4} {'step time':>10} {'data':>10} {'compute':>10} {'comm exposed':>13} "
              f"{'sum':>10} {'comm overlapped':>16}", flush=True)
        for number, row in enumerate(rows, start=1):
            total = row["data"] + row["compute"] + row["exposed"]
            print(f"{number:>4} {row['step']:>8.4f} s {row['data']:>8.4f} s {row['compute']:>8.4f} s "
                  f"{row['exposed']:>11.4f} s {total:>8.4f} s {row['overlapped']:>14.4f} s", flush=True)
        mean = {key: sum(row[key] for row in rows) / len(rows) for key in rows[0]}
        comm = mean["exposed"] + mean["overlapped"]
        print(f"communication per step: {comm:.4f} s, of which {mean['overlapped']:.4f} s ran while "
              f"backward() was still computing", flush=True)
        print(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
              f"steps={len(rows)} step={mean['step']:.4f}s data={mean['data']:.4f}s "
              f"compute={mean['compute']:.4f}s comm_exposed={mean['exposed']:.4f}s "
              f"comm_overlapped={mean['overlapped']:.4f}s trace={args.trace}", flush=True)

    # 4. Clean up: release the DDP model first (chapter 01, step 6).
    del model, optimizer, profiler
    cleanup_distributed()


if __name__ == "__main__":
    main()
