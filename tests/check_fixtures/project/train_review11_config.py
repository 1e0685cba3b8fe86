"""An eighth review's miss (for tests/test_check_ddp.py): MASTER_PORT from a key of a JSON
config, which every config file of the project sets to a number. Written for the tests;
never run."""

import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp
from lab11.config import load_config


def run(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def main():
    hps = load_config(sys.argv[1])
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = hps.train.port  # expect: DDP130
    mp.spawn(run, args=(2,), nprocs=2)


if __name__ == "__main__":
    main()
