"""The shapes of project/train_review10.py where they are right (no finding): the group
started by the same helper, then the GPU picked here; the cached-features epoch under a
script that holds no_sync() for it; the evaluation sampler's helper told the job is not
distributed (so it makes no DistributedSampler); the training data read through a sampler
of its own. Written for the tests; never run: it only has to parse."""

import os

import torch
from helpers.workdir import cached_epoch, group_batches, pick_sampler, start_run
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(cfg):
    folder = start_run(cfg)
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    net = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    train = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    loader = DataLoader(train, batch_size=8, sampler=DistributedSampler(train))
    with net.no_sync():  # the helper's micro-batches accumulate locally (a sketch of the fix)
        cached_epoch(net, loader, optimizer, 4)
    held_out = TensorDataset(torch.randn(30, 8), torch.randn(30, 2))
    held_out_batches = group_batches(pick_sampler(held_out, False, False), 8, drop_last=False)
    held_out_loader = DataLoader(held_out, batch_sampler=held_out_batches)
    total = torch.zeros(2).cuda()
    with torch.no_grad():
        for x, y in held_out_loader:
            total += (net(x.cuda()) - y.cuda()).abs().sum(0)
    print(folder, total.tolist())
