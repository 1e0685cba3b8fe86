"""A backend made from a dict of classes by name (deeplib/dist/): the script itself names
nothing of torch.distributed, yet it runs under DDP, so its every-rank save is one. Written for
the tests; never run: it only has to parse."""

import argparse

import torch
from deeplib import dist as backends
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    args = parser.parse_args()
    backend = backends.make_backend(args)
    model = backend.wrap(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 8).cuda()).square().mean()
    loss.backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), "optimizer.pt")  # expect: DDP040


if __name__ == "__main__":
    main()
