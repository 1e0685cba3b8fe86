"""Pitfalls of shapes a fourth review found missed, for tests/test_check_ddp.py: the
rendezvous URL given as init_process_group's second positional argument (DDP130); the plain
model's output reaching backward() through a name (DDP110); a loop left on a name that held a
counter first and this rank's loss later, read after the change (DDP191). Written for the
tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(epochs, limit):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", "tcp://127.0.0.1:23456", world_size=2, rank=local_rank)  # expect: DDP130
    model = DDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        x, y = torch.randn(8, 8).cuda(), torch.randint(0, 2, (8,)).cuda()
        logits = model.module(x)  # expect: DDP110
        loss = nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    watched = epochs
    for _ in range(epochs):
        x, y = torch.randn(8, 8).cuda(), torch.randint(0, 2, (8,)).cuda()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        watched = loss.item()
        if watched < limit:
            break  # expect: DDP191


class SyncEnvPool:
    """A pool of environments stepped in lockstep: a class, whose name says Sync."""

    def reset(self):
        return torch.randn(4, 8)


def policy_updates(rounds, threshold):
    """No DDP: the gradients are all-reduced by hand. The policy (`agent`) is known as the
    module whose parameters the optimizer holds; its method's output gives a rank's own KL."""
    envs = SyncEnvPool()
    agent = nn.Linear(8, 2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for _ in range(rounds):
        states = envs.reset()
        scores = agent.forward(states)
        drift = (scores - scores.detach().mean()).pow(2).mean()
        optimizer.zero_grad()
        drift.backward()
        for param in agent.parameters():
            dist.all_reduce(param.grad)
        optimizer.step()
        if drift.item() > threshold:
            break  # expect: DDP191


def start_group(rank, world):
    """The URL built in two steps, its port the default of an environment read: a note."""
    url = "tcp://"
    url += os.getenv("MASTER_ADDR", "localhost") + ":"
    url += os.getenv("MASTER_PORT", "23500")  # expect: DDP130 note
    dist.init_process_group("nccl", init_method=url, world_size=world, rank=rank)
