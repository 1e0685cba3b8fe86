"""A miss of a fifth review (the `# expect:` comment): nccl as the default of a setup
function's parameter, and no torch.cuda.set_device anywhere. Written for the tests; never run:
it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def setup(backend="nccl"):
    dist.init_process_group(backend=backend)  # expect: DDP131
    local_rank = int(os.environ["LOCAL_RANK"])
    return torch.device("cuda", local_rank)


def main(steps):
    device = setup()
    model = DistributedDataParallel(nn.Linear(8, 2).to(device), device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8, device=device)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(10)
