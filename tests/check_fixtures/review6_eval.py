"""An evaluation loader on a padding DistributedSampler, read through a reader wrapped around
it (a class that takes the next batch ahead), in a `while` loop of a validate() that switches
the model to eval mode (DDP031); the training loader, read the same way, is no evaluation. For
tests/test_check_ddp.py. Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class ReadAhead:
    """Holds the next batch ready while the current one is used."""

    def __init__(self, loader):
        self.batches = iter(loader)
        self.ready = next(self.batches, None)

    def next(self):
        batch, self.ready = self.ready, next(self.batches, None)
        return batch


def validate(model, loader):
    model.eval()
    reader = ReadAhead(loader)
    batch, correct = reader.next(), torch.zeros(1)
    while batch is not None:
        with torch.no_grad():
            correct += (model(batch[0]).argmax(1) == batch[1]).sum()
        batch = reader.next()
    dist.all_reduce(correct)
    return correct.item()


def train_epoch(model, optimizer, loader):
    model.train()
    reader = ReadAhead(loader)
    batch = reader.next()
    while batch is not None:
        loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch = reader.next()


def main(epochs):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    held_out = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    val_loader = DataLoader(held_out, batch_size=8, sampler=DistributedSampler(held_out))  # expect: DDP031
    model = DDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_sampler.set_epoch(epoch)
        train_epoch(model, optimizer, train_loader)
        validate(model, val_loader)


if __name__ == "__main__":
    main(3)
