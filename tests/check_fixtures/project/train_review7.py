"""A pitfall of a fifth review's shapes (the `# expect:` comment): the helper told "slurm" takes
the branch that fixes the port. Written for the tests; never run: it only has to parse."""

import torch
from helpers.launchers import init_dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(steps):
    init_dist("slurm")  # expect: DDP130
    model = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8).cuda()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(10)
