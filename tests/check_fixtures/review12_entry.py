"""A ninth review's shape (for tests/test_check_ddp.py): no `__main__` block; a console script
runs main(), which hands train() to fire. The functions it reaches are the script's, checked as
the `__main__` block's are: a shuffling sampler with no set_epoch (DDP030), nccl with no
set_device (DDP131). Written for the tests; never run."""

import fire
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(epochs=2):
    dist.init_process_group("nccl")  # expect: DDP131
    model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))  # expect: DDP030
    for _epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
            optimizer.step()


def main():
    fire.Fire(train)
