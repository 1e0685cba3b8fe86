"""A group whose backend comes from a config file, with the device set (for
tests/test_check_ddp.py): nothing to say. Written for the tests; never run: it only has to
parse."""

import json
import os

import torch
import torch.distributed as dist
from torch import nn


def main(config):
    with open(config) as f:
        settings = json.load(f)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=settings["launch_backend"])
    return nn.Linear(8, 1).cuda()
