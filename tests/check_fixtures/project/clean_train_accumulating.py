"""The same trainer of the project, in a script that also reaches a helper using no_sync()
(for tests/test_check_ddp.py): the checker cannot tell which micro-batches it covers, so it
says nothing. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from helpers.quiet_steps import micro_batch_context
from helpers.stepper import Stepper
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(loader):
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 1))
    with micro_batch_context(model, last=True):
        stepper = Stepper(model, torch.optim.SGD(model.parameters(), lr=0.1), 4)
    stepper.train(loader)
