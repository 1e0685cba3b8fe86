"""Start the group the way the caller names: torchrun's variables, or Slurm's with a port."""

import os

import torch
import torch.distributed as dist


def init_dist(launcher, backend="nccl"):
    if launcher == "torchrun":
        _init_torchrun(backend)
    elif launcher == "slurm":
        _init_slurm(backend)
    else:
        raise ValueError(f"unknown launcher {launcher!r}: give 'torchrun' or 'slurm'")


def _init_torchrun(backend):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)


def _init_slurm(backend):
    rank = int(os.environ["SLURM_PROCID"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    os.environ["MASTER_PORT"] = "29561"
    os.environ["RANK"] = str(rank)
    dist.init_process_group(backend)


def init_from_options(args):
    if args.launcher == "mpi":
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        os.environ.setdefault("MASTER_PORT", "29562")
        os.environ["RANK"] = str(rank)
    elif args.launcher != "torchrun":
        return
    torch.cuda.set_device(int(os.environ["RANK"]) % torch.cuda.device_count())
    dist.init_process_group("nccl")
