"""A model made by a factory of the project, then a method of it that loads weights two calls
down, in a base class (deeplib/models/nets.py); and a launch helper picked by name with getattr,
whose Slurm one sets the port from an option. Written for the tests; never run: it only has to
parse."""

import argparse

import torch
from deeplib.dist import launchers
from deeplib.models.nets import define_model
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launcher", choices=["pytorch", "slurm"], default="pytorch")
    parser.add_argument("--tcp_port", type=int, default=18888)  # expect: DDP130
    args = parser.parse_args()
    getattr(launchers, "init_dist_%s" % args.launcher)(args.tcp_port)  # noqa: UP031 (the shape under test)
    model = define_model({"kind": "plain", "pretrained": "weights.pt"})
    model.init_train()  # expect: DDP042
    net = DistributedDataParallel(model.net.cuda())
    loss = net(torch.randn(4, 8).cuda()).square().mean()
    loss.backward()


if __name__ == "__main__":
    main()
