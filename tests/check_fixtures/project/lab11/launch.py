"""The function a script spawns: it starts the group, wraps the critic, builds the worker."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lab11.worker import Worker


def run_worker(local_rank, world_size, steps):
    dist.init_process_group("gloo", rank=local_rank, world_size=world_size)
    global_rank = dist.get_rank()
    critic = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
    batches = torch.randn(steps, 4, 16, 8)
    worker = Worker(critic, optimizer, batches, 4)
    for step in range(steps):
        worker.train_critic(step)
        worker.train_actor(step)
        if global_rank == 0:
            worker.save("critic.pt")
    dist.destroy_process_group()
