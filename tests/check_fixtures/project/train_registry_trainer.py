"""A trainer that a config picks from a registry of the project (for tests/test_check_ddp.py):
every class the name can pick runs the same train(), which accumulates without no_sync:
DDP050 at the call. The runners differ in fit(), and only one accumulates: which runs is out
of sight, so nothing is said. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from zoo.registry import RUNNERS, TRAINERS


def main(cfg, loader):
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = TRAINERS.build(dict(type=cfg["trainer"], model=model, optimizer=optimizer))
    trainer.train(loader)  # expect: DDP050
    runner = RUNNERS.get(cfg["runner"])(model, optimizer)
    runner.fit(loader)
