"""Models picked at run time from the project's classes (for tests/test_check_ddp.py): by a
registry that classes join with a decorator, by a factory over that registry, by a dict of
classes, by eval of a config's name. Where every class the name may pick builds BatchNorm:
DDP070; where only some do: a note that names them. Written for the tests; never run: it
only has to parse."""

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from zoo import LinearNet, NormedNet, WideNormedNet
from zoo.data import *  # noqa: F403
from zoo.factory import build_head, build_model
from zoo.registry import HEADS, MODELS

EVERY_NORMED = {"narrow": NormedNet, "wide": WideNormedNet}
SOME_NORMED = {"normed": NormedNet, "linear": LinearNet}


def registry(cfg):
    dist.init_process_group("gloo")
    model = MODELS.build(cfg["model"])
    every = DDP(model)  # expect: DDP070
    some = DDP(HEADS.get(cfg["head"])())  # expect: DDP070 note
    return every, some


def factory(cfg):
    dist.init_process_group("gloo")
    every = DDP(build_model(cfg).to("cpu"))  # expect: DDP070
    some = DDP(build_head(cfg))  # expect: DDP070 note
    return every, some


def table(cfg):
    dist.init_process_group("gloo")
    every = DDP(EVERY_NORMED[cfg["model"]]())  # expect: DDP070
    some = DDP(SOME_NORMED.get(cfg["model"])())  # expect: DDP070 note
    return every, some


def named(cfg):
    dist.init_process_group("gloo")
    model = eval(cfg["MODEL"])(8)
    return DDP(model)  # expect: DDP070 note
