"""A model of the project with BatchNorm, converted by apex's convert_syncbn_model before the
wrap, under a sync_bn option (for tests/test_check_ddp.py): nothing to say. Written for the
tests; never run: it only has to parse."""

import apex
import torch.distributed as dist
from nets import PlainNet
from torch.nn.parallel import DistributedDataParallel as DDP


def main(sync_bn):
    dist.init_process_group("gloo")
    model = PlainNet(8)
    if sync_bn:
        model = apex.parallel.convert_syncbn_model(model)
    return DDP(model)
