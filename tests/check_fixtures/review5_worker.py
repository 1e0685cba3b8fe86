"""A file of one per-rank worker and no `__main__`: another file runs it with
`mp.spawn(train_fn, ...)`, in a fresh process for each rank, for tests/test_check_ddp.py.
The worker starts an nccl group (through setup()) and wraps the model in DDP, but sets no
current GPU, and no caller can set it first (DDP131). Exactly the `# expect:` lines.
Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)  # expect: DDP131


def train_fn(rank, world_size, port, steps=10):
    setup(rank, world_size, port)
    model = DDP(nn.Linear(8, 2).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(8, 8, device=rank), torch.randint(0, 2, (8,), device=rank)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
