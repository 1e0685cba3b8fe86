"""A ninth review's port shape (for tests/test_check_ddp.py): a start helper whose srun
branch sets MASTER_PORT, where none is set, to a number plus the node's GPU count: the same
port for every job on nodes of one kind. Written for the tests; never run: it only has to
parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def start_group():
    gpus_here = torch.cuda.device_count()
    if "SLURM_PROCID" in os.environ:
        rank = int(os.environ["SLURM_PROCID"])
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(23400 + gpus_here)  # expect: DDP130
    else:
        rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank)


def main():
    start_group()
    DistributedDataParallel(nn.Linear(8, 2))


if __name__ == "__main__":
    main()
