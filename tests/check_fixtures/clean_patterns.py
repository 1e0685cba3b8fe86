"""Right ways the rules must not flag, in the shapes real scripts give them, for
tests/test_check_ddp.py (no finding): a save in a method called on rank 0 only, a sampler
handed to a training function of another file, FSDP's full state dict saved by rank 0, and
a loss over padded sequences divided by the all-reduced global token count.
Never run: it only has to parse."""

import torch
import torch.distributed as dist
from my_project.training import train_one_epoch  # set_epoch is called in there
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import StateDictType
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class Trainer:
    def __init__(self, model, gpu_id):
        self.gpu_id = gpu_id
        self.model = DDP(model, device_ids=[gpu_id])

    def _save_checkpoint(self):
        torch.save(self.model.module.state_dict(), "checkpoint.pt")

    def train(self, epochs):
        for epoch in range(epochs):
            self.epoch = epoch
            if self.gpu_id == 0:
                self._save_checkpoint()


def save_full(model, rank):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = model.state_dict()
    if rank == 0:
        torch.save(state, "model.pt")


def token_mean_global(model, loader, optimizer, pad, world_size):
    """Chapter 18's fix: the token sum over the global token count, times the world size."""
    for tokens, targets in loader:
        flat = targets.flatten()
        global_tokens = (flat != pad).sum()
        dist.all_reduce(global_tokens)
        logits = model(tokens).flatten(0, 1)
        total = torch.nn.functional.cross_entropy(logits, flat, ignore_index=pad, reduction="sum")
        (total / global_tokens * world_size).backward()
        optimizer.step()


def main(dataset, model, rank, local_rank, epochs):
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset, shuffle=True)
    settings = {"batch_size": 32, "sampler": sampler}
    loader = DataLoader(dataset, **settings)
    for epoch in range(epochs):
        train_one_epoch(model, loader, epoch)
    Trainer(model, local_rank).train(epochs)
    save_full(FSDP(model), rank)
    token_mean_global(model, loader, None, -100, 2)


if __name__ == "__main__":
    main(None, None, 0, 0, 1)
