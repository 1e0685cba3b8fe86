"""A training loader whose batches are taken with next() under no_grad (moved to the device
there) is no evaluation: its sampler, never told the epoch, gets DDP030. For
tests/test_check_ddp.py. Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(epochs):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))  # expect: DDP030
    model = DDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        batches = iter(loader)
        for _ in range(len(loader)):
            with torch.no_grad():
                batch = next(batches)
                batch = [part.cuda() for part in batch]
            loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main(3)
