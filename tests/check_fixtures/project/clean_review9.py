"""Right code that a sixth review found flagged (no finding): a snapshot helper called in
its load mode (no net given: it loads, it does not save); an epoch helper whose save waits on
an option set from the rank in this file (opts.keep_snapshots). Written for the tests; never
run: it only has to parse."""

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
    opts.keep_snapshots = opts.folder is not None and dist.get_rank() == 0
    resumed = snapshot(opts.folder, "latest") if opts.resume else None
    net = nn.Linear(8, 2).cuda()
    if resumed is not None:
        net.load_state_dict(resumed["net"])
    net = DistributedDataParallel(net, device_ids=[local_rank])
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(opts.epochs):
        sampler.set_epoch(epoch)
        run_epoch(net, loader, optimizer, opts)
