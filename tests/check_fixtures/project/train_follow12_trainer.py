"""A ninth review's stylegan2 shape (for tests/test_check_ddp.py): a trainer object of a class
of the project, resumed with trainer.load() and saved with trainer.save() after the loop, on
every rank. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from lab12.gan import Trainer


def run(rank, world_size, resume_from, steps):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    trainer = Trainer(rank=rank, folder="runs")
    if resume_from is not None:
        trainer.load(resume_from)  # expect: DDP042
    while trainer.steps < steps:
        trainer.train_step(torch.randn(8, 8), torch.randint(0, 2, (8,)))
    trainer.save(trainer.steps)  # expect: DDP040


if __name__ == "__main__":
    run(0, 1, None, 10)
