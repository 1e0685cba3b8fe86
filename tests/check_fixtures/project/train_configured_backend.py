"""A group whose backend comes from a config file (for tests/test_check_ddp.py): the model
goes to cuda, and no set_device anywhere. Every value the project's files give the key is
nccl: DDP131 as a warning. A backend from an option with no default: a note; one whose
default is nccl, passed to a function's parameter: a warning. Written for the tests; never
run: it only has to parse."""

import argparse
import json

import torch
import torch.distributed as dist
from torch import nn


def main(config, local_rank):
    with open(config) as f:
        settings = json.load(f)
    dist.init_process_group(backend=settings["launch_backend"],  # expect: DDP131
                            init_method=settings["launch_url"])
    return nn.Linear(8, 1).to(torch.device(f"cuda:{local_rank}"))


def other(args):
    dist.init_process_group(backend=args.group_kind)  # expect: DDP131 note
    return nn.Linear(8, 1).cuda()


def start(kind):
    dist.init_process_group(kind)  # expect: DDP131
    return nn.Linear(8, 1).to("cuda")


def on_nodes(settings):
    dist.init_process_group(settings["node_backend"])  # expect: DDP131
    return nn.Linear(8, 1).to("cuda")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--group-kind")
    parser.add_argument("--local-rank", type=int, default=0)
    parser.add_argument("--start-backend", default="nccl")
    args = parser.parse_args()
    main(args.config, args.local_rank)
    other(args)
    start(args.start_backend)
    on_nodes(vars(args))
