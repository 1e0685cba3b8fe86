"""Chapter 12: the same model trained with nn.DataParallel and with DDP, on the GPUs present.

Both train the chapter's ResNet-18 (utils/vision.py) on the same global batch (--batch-size
per GPU x the GPUs) for --steps steps after --warmup steps, and print samples per second:

- DataParallel: one process drives every GPU. Each forward scatters the batch over the GPUs,
  copies the model from the first GPU to every other one, runs the copies in Python threads
  and gathers the outputs on the first GPU, where the loss is computed; backward sums every
  gradient back onto the first GPU.
- DDP: one process per GPU (started here with torch.multiprocessing, nccl), each with its own
  replica made once; backward all-reduces the gradients between the GPUs.

DataParallel needs two or more CUDA GPUs in one process. Where fewer are visible (a CPU
machine, one GPU), the script says so, says what it would compare, and exits 0: it prints
no number it did not measure.

Run it as one process: it starts DDP's processes itself.
    python scripts/12_scaling_and_performance/dataparallel_vs_ddp.py
    CUDA_VISIBLE_DEVICES=0,1 python scripts/12_scaling_and_performance/dataparallel_vs_ddp.py --batch-size 128
"""

import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
from torch import nn

from utils.cli import add_training_args, make_parser, positive_int
from utils.distributed import detect_launcher
from utils.vision import resnet18_cifar


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=128, lr=0.05)
    parser.add_argument("--steps", type=positive_int, default=20,
                        help="timed steps each way (default: %(default)s)")
    parser.add_argument("--warmup", type=positive_int, default=5,
                        help="untimed steps first, 1 or more (default: %(default)s)")
    return parser.parse_args()


def batch(size: int, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of CIFAR-10-shaped images, made on the device: the comparison is about the
    model's replication, not the input pipeline (the rest of the chapter is about that)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    images = torch.randn(size, 3, 32, 32, device=device, generator=generator)
    return images, torch.randint(0, 10, (size,), device=device, generator=generator)


def train_steps(model: nn.Module, inputs, labels, args, device: torch.device) -> float:
    """Seconds for --steps training steps, after --warmup, synchronised with the GPU."""
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize(device)
            start = time.perf_counter()  # gpu-checked: after the synchronize
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), labels).backward()
        optimizer.step()
    torch.cuda.synchronize(device)
    return time.perf_counter() - start  # gpu-checked: after the synchronize


# --8<-- [start:dataparallel]
def run_dataparallel(args, gpus: int) -> float:
    """Samples per second of nn.DataParallel over `gpus` GPUs, from one process."""
    torch.manual_seed(args.seed)
    model = nn.DataParallel(resnet18_cifar().cuda(0))  # replicas made anew in every forward
    device = torch.device("cuda", 0)
    inputs, labels = batch(args.batch_size * gpus, device, args.seed)
    return args.batch_size * gpus * args.steps / train_steps(model, inputs, labels, args, device)
# --8<-- [end:dataparallel]


# --8<-- [start:ddp]
def ddp_worker(rank: int, gpus: int, port: int, args, results) -> None:
    """One DDP process per GPU; rank 0 puts the samples per second in `results`."""
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=gpus,
                            timeout=datetime.timedelta(seconds=args.timeout), device_id=device)
    torch.manual_seed(args.seed)
    model = DDP(resnet18_cifar().to(device), device_ids=[rank])  # one replica, made once
    inputs, labels = batch(args.batch_size, device, args.seed + rank)
    seconds = train_steps(model, inputs, labels, args, device)
    if rank == 0:
        results.put(args.batch_size * gpus * args.steps / seconds)
    del model
    dist.barrier()
    dist.destroy_process_group()


def run_ddp(args, gpus: int) -> float:
    """Samples per second of DDP over `gpus` GPUs, one process each."""
    import torch.multiprocessing as mp

    with socket.socket() as sock:  # a free port on this machine for the processes to meet
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    results = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(ddp_worker, args=(gpus, port, args, results), nprocs=gpus, start_method="spawn")
    return results.get()
# --8<-- [end:ddp]


def main() -> None:
    args = parse_args()

    # 1. One process: DataParallel is single-process, and this script starts DDP's processes.
    info = detect_launcher()
    if info.world_size > 1:
        raise SystemExit(f"dataparallel_vs_ddp.py: started as {info.world_size} processes by "
                         f"{info.launcher}; run it as one process (python ...): DataParallel drives "
                         "every GPU from one process, and the script starts DDP's processes itself.")

    # --8<-- [start:gpus]
    # 2. DataParallel needs two or more CUDA GPUs: without them, say so, and measure nothing.
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        print(f"visible CUDA GPUs: {gpus}. DataParallel needs two or more in one process: with fewer "
              "it runs the model unchanged on one device, so there is nothing to compare here.")
        print("With N GPUs this script trains ResNet-18 on the same global batch both ways and prints "
              "samples per second: nn.DataParallel (one process; every forward scatters the batch, "
              "copies the model to every GPU and gathers the outputs on GPU 0) against DDP (N processes, "
              "replicas made once, gradients all-reduced during backward).")
        print(f"summary: gpus={gpus} dataparallel=not_run ddp=not_run")
        return
    # --8<-- [end:gpus]

    # 3. Both ways, on the same GPUs and global batch.
    print(f"visible CUDA GPUs: {gpus}; global batch {args.batch_size * gpus} ({args.batch_size} per GPU), "
          f"{args.steps} timed steps after {args.warmup}")
    dp = run_dataparallel(args, gpus)
    print(f"DataParallel: {dp:.0f} samples/s", flush=True)
    torch.cuda.empty_cache()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # for the spawned processes
    ddp = run_ddp(args, gpus)
    print(f"DDP         : {ddp:.0f} samples/s", flush=True)
    print(f"summary: gpus={gpus} dataparallel={dp:.0f}samples/s ddp={ddp:.0f}samples/s", flush=True)


if __name__ == "__main__":
    main()
