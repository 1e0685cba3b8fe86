"""Quiet twins of train_review10_lab.py's shapes (for tests/test_check_ddp.py): a solver that
sets the sampler's `epoch` itself (what set_epoch does), and reads the scorers' loaders only
to train; autocast dtypes from a config property that is never float16, passed in or read in
the solver, and from a field whose default is bfloat16; bfloat16 named in sight. Written for
the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from lab.config import AmpSettings, DataSettings, RunConfig
from lab.data import make_loader
from lab.evaluation import make_scorers
from lab.steady_solver import SteadySolver
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset


def warm_up(model, x, dtype):
    with torch.autocast("cuda", dtype=dtype):
        loss = model(x).sum()
    loss.backward()


def tune(model, x, cfg):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).sum()
    loss.backward()


def step_with(model, x, amp):
    dtype = amp.steady_dtype
    with torch.autocast("cuda", dtype=dtype):
        loss = model(x).sum()
    loss.backward()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    cfg = RunConfig("amp_fp16")
    model = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    train_loader = make_loader(data, shuffle=True)
    loaders = {"train": train_loader}
    held_out = TensorDataset(torch.randn(30, 8), torch.randn(30, 2))
    scorers = make_scorers({"held_out": held_out}, DataSettings())
    warm_up(model, torch.randn(4, 8).cuda(), cfg.wide_dtype)
    tune(model, torch.randn(4, 8).cuda(), cfg)
    step_with(model, torch.randn(4, 8).cuda(), AmpSettings())
    solver = SteadySolver(loaders, model, optimizer, cfg, scorers)
    solver.fit()


if __name__ == "__main__":
    main()
