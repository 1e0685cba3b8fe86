"""Start the group, wrap the model: the port comes from the caller's options."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def setup_dist(args):
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = str(args.master_port)
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    torch.cuda.set_device(args.local_rank)


def setup_fallback(args):
    if "MASTER_PORT" not in os.environ:  # only where no launcher set one
        os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)


def init_distributed(port=40111):
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def wrap(model, device):
    return DistributedDataParallel(model.to(device), device_ids=[device])


def is_main_process():
    return dist.get_rank() == 0
