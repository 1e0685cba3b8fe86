"""The module-level script of pitfalls_module_level.py done right, for tests/test_check_ddp.py:
the checker must find nothing in it. Never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
rank, world_size = dist.get_rank(), dist.get_world_size()
train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
test_set = TensorDataset(torch.randn(10, 8), torch.randn(10, 1))
sampler = DistributedSampler(train_set, shuffle=True, seed=0)
loader = DataLoader(train_set, batch_size=8, sampler=sampler)
shard = Subset(test_set, range(rank, len(test_set), world_size))  # no padding
model = nn.Linear(8, 1).cuda()
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
    for x, y in DataLoader(train_set, sampler=DistributedSampler(train_set, shuffle=False)):
        nn.functional.mse_loss(model(x), y).backward()  # training: a repeated sample does no harm
    with torch.no_grad():
        total = torch.zeros(2)
        for x, y in DataLoader(shard, batch_size=8):  # this rank's shard: the all_reduce adds shards
            total += torch.stack([nn.functional.mse_loss(model(x), y, reduction="sum"), torch.tensor(len(y))])
    dist.all_reduce(total)
    with torch.no_grad():
        unpadded = DistributedSampler(test_set, shuffle=False, drop_last=True)
        for x, _ in DataLoader(test_set, sampler=unpadded):
            model(x)
