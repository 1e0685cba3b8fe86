"""A seventh review's misses, each a shape of real scripts (for tests/test_check_ddp.py): a
shuffling sampler made by a helper of the project, its loader kept by a solver class that
reads it through a progress wrapper and sets `loader.epoch` in place of set_epoch; a padding
sampler three helpers deep, its loader kept in a scorer's field, read in the solver's
evaluate(); the solver's autocast dtype a config property that returns float16 in one
branch, no GradScaler in reach, the same property passed to a function's parameter, and a
dataclass field whose default is float16; a dtype named at run time (getattr), out of
sight: a note. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from lab.config import AmpSettings, DataSettings, RunConfig
from lab.data import make_loader
from lab.evaluation import make_scorers
from lab.solver import Solver
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset


def warm_up(model, x, dtype):
    with torch.autocast("cuda", dtype=dtype):  # expect: DDP060
        loss = model(x).sum()
    loss.backward()


def tune(model, x, cfg):
    with torch.autocast("cuda", dtype=getattr(torch, cfg.dtype_name)):  # expect: DDP060 note
        loss = model(x).sum()
    loss.backward()


def step_with(model, x, amp):
    dtype = amp.autocast_dtype
    with torch.autocast("cuda", dtype=dtype):  # expect: DDP060
        loss = model(x).sum()
    loss.backward()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    cfg = RunConfig("amp_fp16")
    model = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    train_loader = make_loader(data, shuffle=True)  # expect: DDP030
    loaders = {"train": train_loader}
    held_out = TensorDataset(torch.randn(30, 8), torch.randn(30, 2))
    scorers = make_scorers({"held_out": held_out}, DataSettings())  # expect: DDP031
    warm_up(model, torch.randn(4, 8).cuda(), cfg.amp_dtype)
    tune(model, torch.randn(4, 8).cuda(), cfg)
    step_with(model, torch.randn(4, 8).cuda(), AmpSettings())
    solver = Solver(loaders, model, optimizer, cfg, scorers)
    solver.fit()  # expect: DDP060


if __name__ == "__main__":
    main()
