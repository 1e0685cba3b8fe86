"""A runner class whose constructor binds the rank's GPU (tests/check_fixtures/project/
clean_review6.py makes one right after the group starts). Written for the tests; never run."""

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Runner:
    def __init__(self, local_rank):
        self.device = torch.device("cuda", local_rank)
        self.bind(local_rank)
        self.model = DDP(nn.Linear(8, 2).to(self.device), device_ids=[local_rank])

    @staticmethod
    def bind(local_rank):
        torch.cuda.set_device(local_rank)
