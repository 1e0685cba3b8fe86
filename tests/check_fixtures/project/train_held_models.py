"""Models of the project whose BatchNorm is in a block they hold to build later, or in a block
re-exported with `*` (for tests/test_check_ddp.py): DDP070 for each. Written for the tests;
never run: it only has to parse."""

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from zoo.held import PartsNet, StackNet


def main():
    dist.init_process_group("gloo")
    stacked = DDP(StackNet())  # expect: DDP070
    parts = DDP(PartsNet())  # expect: DDP070
    return stacked, parts
