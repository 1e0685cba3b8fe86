"""A model picked by eval of a config's name among the project's classes it imports (for
tests/test_check_ddp.py): every model class the name can be builds BatchNorm, so DDP070; the
data set classes beside them are no models. Written for the tests; never run: it only has to
parse."""

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from zoo.data import *  # noqa: F403
from zoo.normed import NormedNet, WideNormedNet  # noqa: F401 (eval names them)


def main(cfg):
    dist.init_process_group("gloo")
    data = eval(cfg["DATA"])()
    model = eval(cfg["MODEL"])(8)
    return data, DDP(model)  # expect: DDP070
