"""Saves guarded as Hugging Face's Trainer guards them: `if self.is_world_process_zero():`,
and `state.is_world_process_zero` in a callback. Nothing to say. Written for the tests; never
run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        self.model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())

    def is_world_process_zero(self):
        return dist.get_rank() == 0

    def save_model(self, path):
        if self.is_world_process_zero():
            self._save(path)

    def _save(self, path):
        torch.save(self.model.module.state_dict(), path)


def on_train_end(trainer, state):
    if state.is_world_process_zero:
        torch.save(trainer.model.module.state_dict(), "final.pt")


if __name__ == "__main__":
    trainer = Trainer()
    trainer.save_model("model.pt")
    on_train_end(trainer, trainer)
