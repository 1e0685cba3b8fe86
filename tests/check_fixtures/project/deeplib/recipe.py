"""A whole training recipe in one function of the library: a thin script calls it."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(epochs):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            loss = (model(x.cuda()) - y.cuda()).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save(model.module.state_dict(), "model.pt")
