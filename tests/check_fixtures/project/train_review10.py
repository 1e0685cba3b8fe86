"""A seventh round's misses, each a shape of real scripts (for tests/test_check_ddp.py): the
nccl group started by a helper of the project that picks no GPU, and no set_device anywhere;
an endless loader over a DataLoader subclass that shuffles with no sampler (a note: the data
may be split where this file cannot see); an evaluation sampler made by a helper reached
through a star import, batched by another helper and given as batch_sampler=; an epoch that
caches features, then runs backward over the cached micro-batches, and steps once. Written
for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from helpers.workdir import *  # noqa: F403
from helpers.workdir import cached_epoch, endless, endless_noise, start_run
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def main(cfg):
    folder = start_run(cfg)  # expect: DDP131
    net = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    train = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    batches = endless(train, 8)  # expect: DDP010 note
    cached_epoch(net, batches, optimizer, 4)  # expect: DDP050
    cached_epoch(net, endless_noise(8), optimizer, 1)  # expect: DDP010 note
    held_out = TensorDataset(torch.randn(30, 8), torch.randn(30, 2))
    held_out_sampler = pick_sampler(held_out, False, cfg.distributed)  # noqa: F405  # expect: DDP031
    held_out_batches = group_batches(held_out_sampler, 8, drop_last=False)  # noqa: F405
    held_out_loader = DataLoader(held_out, batch_sampler=held_out_batches)
    total = torch.zeros(2).cuda()
    with torch.no_grad():
        for x, y in held_out_loader:
            total += (net(x.cuda()) - y.cuda()).abs().sum(0)
    dist.all_reduce(total)
    print(folder, total.tolist())
