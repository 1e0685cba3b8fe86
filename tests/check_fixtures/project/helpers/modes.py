"""Helpers of the project for project/train_review10_modes.py and clean_review10_modes.py: an
options class whose parser holds the port's default; a start under srun that sets
MASTER_PORT from it; a runner that wraps its model in DDP and whose methods the entry picks
by name at run time. Written for the tests; never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Settings:
    def __init__(self):
        self.parser = argparse.ArgumentParser()
        self.parser.add_argument("--rendezvous_port", type=int, default=12411)
        self.parser.add_argument("--mode", default="fit")
        self.parser.add_argument("--accumulate", type=int, default=4)

    def parse(self):
        return self.parser.parse_args()


def start_under_srun(params):
    if "SLURM_PROCID" in os.environ:
        params.rank = int(os.environ["SLURM_PROCID"])
        params.local_rank = int(os.environ["SLURM_LOCALID"])
        os.environ["MASTER_PORT"] = str(params.rendezvous_port)
    torch.cuda.set_device(params.local_rank)
    dist.init_process_group("nccl")


class Runner:
    def __init__(self, params):
        self.params = params
        self.net = DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[params.local_rank])
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def fit(self, batches):
        for step, (x, y) in enumerate(batches):
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            loss.backward()
            if (step + 1) % self.params.accumulate == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()

    def _unused(self):
        return None
