"""Accumulation inside a trainer of the project (for tests/test_check_ddp.py): the script
wraps the model in DDP, then hands it to a class whose step runs backward() on every call
and steps every few; said at the call that reaches it. Written for the tests; never run:
it only has to parse."""

import torch
import torch.distributed as dist
from helpers.stepper import Stepper
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(loader):
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 1))
    stepper = Stepper(model, torch.optim.SGD(model.parameters(), lr=0.1), 4)
    stepper.train(loader)  # expect: DDP050
