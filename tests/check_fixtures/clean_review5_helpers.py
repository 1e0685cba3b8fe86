"""A file of helpers with no code of its own that calls them, for tests/test_check_ddp.py
(no finding, no note): setup() starts an nccl group and another function wraps the model,
so the caller may set the current GPU between them; setup_and_wrap() does both and returns
the model, which its caller trains (it may set the GPU first). Written for the
tests; never run: it only has to parse."""

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    dist.init_process_group("nccl")


def wrap(model, local_rank):
    return DDP(model.to(local_rank), device_ids=[local_rank])


def setup_and_wrap(model, local_rank):
    dist.init_process_group("nccl")
    return DDP(model.to(local_rank), device_ids=[local_rank])  # returns it: the caller trains


def cleanup():
    dist.destroy_process_group()
