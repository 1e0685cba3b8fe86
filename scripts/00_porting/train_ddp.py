"""Train a small model on many devices with DDP: one process per device.

Plain PyTorch, nothing from this repository: copy it and make it yours.
It is train_single.py with the lines DDP changes: diff -u train_single.py train_ddp.py

Run it (--batch-size is per process: 2 x 16 samples per step, as train_single.py's 32):
    python scripts/00_porting/train_ddp.py
    torchrun --standalone --nproc_per_node=2 scripts/00_porting/train_ddp.py --batch-size 16
    CUDA_VISIBLE_DEVICES= torchrun ...   (on a machine with GPUs: CPU processes with gloo)
    torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 \
        --rdzv-id=myjob scripts/00_porting/train_ddp.py     (on each of the two nodes)
    sbatch scripts/00_porting/slurm_job.sh   /   qsub scripts/00_porting/pbs_job.sh
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - imported before the group exists: see step 6
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def whole_number(minimum, maximum=None):
    """An argparse type: a whole number from `minimum` (to `maximum`); if not, exit 2 with a message."""
    def parse(text):
        if not text.isdigit() or int(text) < minimum or (maximum is not None and int(text) > maximum):
            limits = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            raise argparse.ArgumentTypeError(f"expected a whole number {limits}, got {text!r}")
        return int(text)
    return parse


def positive_number(text):
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def writable_file(text):
    """An argparse type: a file path in a folder that exists and can be written."""
    if os.path.isdir(text) or not os.access(os.path.dirname(os.path.abspath(text)), os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write a file at {text!r}: give a file in a writable folder")
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=whole_number(1), default=5)
    parser.add_argument("--batch-size", type=whole_number(1), default=32)
    parser.add_argument("--lr", type=positive_number, default=0.02)
    parser.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    parser.add_argument("--checkpoint", type=writable_file, default="model.pt", metavar="FILE",
                        help="where to save the trained weights")
    return parser.parse_args(argv)


def make_dataset(seed, size=2048):
    """A regression task made from the seed: y = sin((x1 + x2 + x3 + x4) / 2) + noise, 16 features."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 16, generator=generator)
    y = torch.sin(0.5 * x[:, :4].sum(dim=1, keepdim=True)) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def make_model():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))


def check_launch():
    """Exit 1 with a message for a launch that would hang, train N copies each alone, or start
    more processes on a node than it has GPUs."""
    if "WORLD_SIZE" not in os.environ:  # no torchrun: did mpiexec or srun start several copies?
        size = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or (
            os.environ.get("SLURM_NTASKS") if "SLURM_STEP_ID" in os.environ else None)
        if int(size or 1) > 1:
            sys.exit(f"{size} processes started without torchrun would each train alone: start one "
                     "torchrun per node (or see chapter 13 for mpiexec and srun alone)")
    elif int(os.environ["WORLD_SIZE"]) > 1 and not {"MASTER_ADDR", "MASTER_PORT"} <= os.environ.keys():
        sys.exit("WORLD_SIZE > 1 without MASTER_ADDR and MASTER_PORT: launch with torchrun "
                 "(torchrun --nproc_per_node=N train_ddp.py), which sets them")
    processes = max(int(os.environ.get("LOCAL_WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)) + 1)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if 0 < gpus < processes:  # set_device would fail with "invalid device ordinal"
        sys.exit(f"{processes} processes on this node, but it has {gpus} GPU(s): start one process per "
                 f"GPU (torchrun --nproc_per_node={gpus}), or train on the CPUs with gloo: hide the "
                 "GPUs with CUDA_VISIBLE_DEVICES= in front of the command")


def main():
    args = parse_args()
    # 1. The device, and the process group of all the processes.
    check_launch()  # no torchrun's variables where they are needed: a message, not a hang
    local_rank = int(os.environ.get("LOCAL_RANK", 0))  # torchrun sets these three;
    rank = int(os.environ.get("RANK", 0))  # without a launcher: rank 0 of 1
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # this process's GPU, before init_process_group
    device = (torch.device("cuda", local_rank) if torch.cuda.is_available()
              else torch.device("cpu"))  # gpu-checked: each process its own GPU (set above)
    backend = "nccl" if device.type == "cuda" else "gloo"
    store = None if world_size > 1 else dist.HashStore()  # no launcher: a group of one, no address
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            device_id=device if device.type == "cuda" else None,  # this rank's GPU
                            timeout=datetime.timedelta(minutes=5))  # a lost rank: an error, no hang
    # 2. The data: a loader that shuffles every epoch.
    torch.manual_seed(args.seed)
    dataset = make_dataset(args.seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)  # this rank's share
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    # 3. The model and its optimizer.
    model = make_model().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()
    # 4. Train.
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        totals = torch.zeros(2, device=device)  # sum of the losses, number of samples
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            totals[0] += loss.detach() * len(x)
            totals[1] += len(x)
        dist.all_reduce(totals)  # summed over the ranks: every sample's loss
        epoch_loss = (totals[0] / totals[1]).item()
        if rank == 0:
            print(f"epoch {epoch}: loss {epoch_loss:.4f} over {int(totals[1])} samples", flush=True)
    # 5. Save the weights: rank 0 alone, the plain model inside the wrapper. Then leave the group.
    if rank == 0:
        torch.save(model.module.state_dict(), args.checkpoint)
        print(f"summary: world_size={world_size} device={device.type} epochs={args.epochs} "
              f"final_loss={epoch_loss:.4f} checkpoint={args.checkpoint} backend={backend}", flush=True)
    # 6. Leave the group together, and free it here: gloo torn down at exit, after another rank
    # has gone, can abort the process. DDP holds the group, so delete it first. (So does
    # torch.distributed.nn, imported by the first DDP, unless it was imported before the group.)
    del model
    dist.barrier()  # every rank waits for rank 0's save
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
