"""A ninth review's port shape where it is no pitfall (for tests/test_check_ddp.py): the
srun branch's fallback port offset by the job id, so two jobs differ; the mpiexec branch's
by an offset each job is given. Written for the tests;
never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def start_group(offset):
    if "SLURM_PROCID" in os.environ:
        rank = int(os.environ["SLURM_PROCID"])
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(23400 + int(os.environ["SLURM_JOB_ID"]) % 20000)
    elif "OMPI_COMM_WORLD_RANK" in os.environ:
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(23400 + offset)
    else:
        rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank)
    torch.manual_seed(rank)


def main(offset):
    start_group(offset)
    DistributedDataParallel(nn.Linear(8, 2))


if __name__ == "__main__":
    main(int(os.environ.get("PORT_OFFSET", "0")))
