"""The workers of train_seventh_review.py (for tests/test_check_ddp.py): one that starts the
group on a fixed port unless its rank is a device word (one process), and a trial that sets
its rank to a device word itself and saves on whatever runs it. Never run: it only has to
parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["run_worker", "run_trial"]


def start(rank, world_size):
    if rank in ("cpu", "cuda"):
        return
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def run_worker(rank, world_size):
    start(rank, world_size)
    model = nn.Linear(8, 2)
    if rank not in ("cpu", "cuda"):
        model = DistributedDataParallel(model)
    return model


def run_trial(config):
    rank = "cpu"
    if torch.cuda.is_available():
        rank = "cuda"
    model = nn.Linear(8, 2).to(rank)
    torch.save(model.state_dict(), os.path.join(config["folder"], "trial.pt"))
