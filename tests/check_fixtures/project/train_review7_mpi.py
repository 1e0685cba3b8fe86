"""A fifth review's miss (the `# expect:` comment): an option picks the helper's mpiexec branch,
which reads Open MPI's variables and falls back to a fixed port; mpiexec sets none, so the
fallback always applies there. Written for the tests; never run: it only has to parse."""

import argparse

import torch
from helpers.launchers import init_from_options
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launcher", choices=["torchrun", "mpi"], default="torchrun")
    args = parser.parse_args()
    init_from_options(args)  # expect: DDP130
    model = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 8).cuda()).square().mean()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    main()
