"""A group whose backend comes from a config file, on scripts that need no DDP131 (for
tests/test_check_ddp.py): the option's default is gloo; a config line that names gloo beside nccl.
Written for the tests; never run: it only has to parse."""

import argparse

import torch
import torch.distributed as dist
from torch import nn


def main(args):
    dist.init_process_group(backend=args.group_backend)
    return nn.Linear(8, 1).to("cuda")


def from_yaml(settings):
    dist.init_process_group(backend=settings["mixed_backend"])
    return nn.Linear(8, 1).cuda()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--group-backend", default="gloo")
    main(parser.parse_args())
    from_yaml(vars(parser.parse_args()))
    torch.cuda.empty_cache()
