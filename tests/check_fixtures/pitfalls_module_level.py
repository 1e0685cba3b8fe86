"""A DDP script with no function: its training loop and its evaluation at module level, for
tests/test_check_ddp.py. A line that must be flagged ends with `# expect: CODE`. Never run:
it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
num_epochs = 3
train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
heldout = TensorDataset(torch.randn(10, 8), torch.randn(10, 1))
sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # expect: DDP030
loader = DataLoader(train_set, batch_size=8, sampler=sampler)
steps = len(loader)  # len(): the loader is not handed to code that may call set_epoch
test_loader = DataLoader(heldout, sampler=DistributedSampler(heldout, shuffle=False))  # expect: DDP031
full_loader = DataLoader(heldout, batch_size=8)
model = nn.Linear(8, 1).cuda()
for _ep in range(num_epochs):  # an epoch loop whose variable is not named epoch
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for x, _ in DataLoader(heldout, sampler=DistributedSampler(heldout, shuffle=False)):  # expect: DDP031
            model(x)
        for x, _ in test_loader:
            model(x)
        total = torch.zeros(2)
        for x, y in full_loader:
            total += torch.stack([nn.functional.mse_loss(model(x), y, reduction="sum"), torch.tensor(len(y))])
    dist.all_reduce(total)  # expect: DDP032
