"""A trainer and a model built by registries that are not the project's (for
tests/test_check_ddp.py): the project's classes that register with registries of the same
names are no candidates, so nothing is said. Written for the tests; never run: it only has to
parse."""

import torch.distributed as dist
from registry_package import MODELS, TRAINERS  # installed: not the project's
from torch.nn.parallel import DistributedDataParallel as DDP


def main(cfg):
    dist.init_process_group("gloo")
    model = DDP(MODELS.build(cfg["model"]))
    trainer = TRAINERS.build(dict(type=cfg["trainer"], model=model))
    trainer.train(cfg["loader"])
