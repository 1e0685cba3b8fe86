"""Right code that a fifth review found flagged, for tests/test_check_ddp.py (no finding, no
note): an FSDP1 model (FullyShardedDataParallel) whose state_dict() is left at FSDP1's
default, the whole model gathered on every rank, saved by rank 0. Written for the tests; never
run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel


def export(model, path):
    weights = model.state_dict()  # FSDP1's default: the full state dict, on every rank
    if dist.get_rank() == 0:
        torch.save({"weights": weights}, path)


def main(steps):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = FullyShardedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8).cuda()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    export(model, "teacher.pt")


if __name__ == "__main__":
    main(10)
