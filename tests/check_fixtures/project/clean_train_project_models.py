"""Models built from classes of the project that need no SyncBatchNorm (for
tests/test_check_ddp.py): BatchNorm frozen in eval mode, GroupNorm, no norm; a model built
by a registry from a config string, out of sight; a model whose BatchNorm the script
keeps in eval mode. Written for the tests; never run: it only has to parse."""

import torch.distributed as dist
from nets import FrozenNet, GroupNet, PlainNet, TinyNet
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

MODELS = {}


def main(cfg):
    dist.init_process_group("gloo")
    frozen = DDP(FrozenNet(8))
    grouped = DDP(GroupNet(8).to("cpu"))
    tiny = DDP(TinyNet())
    built = DDP(MODELS[cfg.model](cfg))
    return frozen, grouped, tiny, built


def frozen_here():
    dist.init_process_group("gloo")
    model = PlainNet(8)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eval()
    return DDP(model)
