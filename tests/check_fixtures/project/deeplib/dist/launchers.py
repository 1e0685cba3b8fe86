"""Launch helpers, one per launcher; a script picks one with getattr by name."""

import os

import torch
import torch.distributed as dist


def init_dist_slurm(tcp_port, backend="nccl"):
    os.environ["MASTER_PORT"] = str(tcp_port)
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    dist.init_process_group(backend)
    torch.cuda.set_device(int(os.environ["SLURM_LOCALID"]))


def init_dist_pytorch(tcp_port, backend="nccl"):
    dist.init_process_group(backend)
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
