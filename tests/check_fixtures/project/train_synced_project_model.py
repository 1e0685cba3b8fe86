"""A model of the project with BatchNorm, converted to SyncBatchNorm by a helper of the
project before DDP (for tests/test_check_ddp.py): nothing to say. Written for the tests;
never run: it only has to parse."""

import torch.distributed as dist
from helpers.norms import synced
from nets import PlainNet
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = PlainNet(8)
    model = synced(model)
    return DDP(model)
