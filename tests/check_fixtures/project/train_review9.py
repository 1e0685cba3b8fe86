"""The same helpers as project/clean_review9.py, used wrong (for tests/test_check_ddp.py): the
snapshot helper given the model on every rank saves on every rank; the epoch helper's save
waits on an option that is the same on every rank. Written for the tests; never run: it only
has to parse."""

import os

import torch
import torch.distributed as dist
from helpers.snapshots import run_epoch, snapshot
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(opts):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    opts.keep_snapshots = opts.folder is not None
    net = DistributedDataParallel(nn.Linear(8, 2).cuda(), device_ids=[local_rank])
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(opts.epochs):
        sampler.set_epoch(epoch)
        run_epoch(net, loader, optimizer, opts)  # expect: DDP040
        snapshot(opts.folder, "latest", net.module, epoch)  # expect: DDP040
