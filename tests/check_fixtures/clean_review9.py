"""Right code that a sixth review found flagged, for tests/test_check_ddp.py (no finding, no
note): a save under `if rank0_only() and ...:`, a function named as a
rank-0 guard; a save under `self.writes`, set from the rank in another method; float16
autocast around an evaluation that runs no backward; a training and an evaluation function
that each name their own sampler `sampler`; a per-sequence mean (a per-row count). Written for
the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def rank0_only():
    return dist.get_rank() == 0


def evaluate(model, data):
    rank, world = dist.get_rank(), dist.get_world_size()
    sampler = list(range(rank, len(data), world))  # each sample once: no padding
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    total = torch.zeros(2, device="cuda")
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            total[0] += nn.functional.mse_loss(model(x.cuda()), y.cuda(), reduction="sum")
            total[1] += len(x)
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def tune(model, x, y, optimizer, alone):
    net = model
    if alone:  # a run without DDP: the wrapper is a stand-in; which one it is, a reader cannot tell
        net = model.module
    loss = (net(x.cuda()) - y.cuda()).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def warm_up(model, sharded, x):
    net = model.module if isinstance(model, DistributedDataParallel) else model
    net(x.cuda())  # fills a cache: keeps nothing that a backward could reach
    inner = sharded.module  # another wrapper's inside, not DDP's
    out = inner(x.cuda())
    out.sum().backward()


class Runner:
    def __init__(self, model, data, half):
        self.model, self.data, self.half, self.best = model, data, half, None

    def fit(self, epochs):
        self.writes = dist.get_rank() == 0
        sampler = DistributedSampler(self.data)
        loader = DataLoader(self.data, batch_size=8, sampler=sampler)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            self.model.train()
            for x, y, mask in loader:
                per_token = (self.model(x.cuda()) - y.cuda()).square()
                per_row = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
                loss = per_row.mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            self.check(epoch)
            tune(self.model, x, y, optimizer, alone=False)
            if rank0_only() and epoch % 5 == 0:
                torch.save({"epoch": epoch, "weights": self.model.module.state_dict()}, "progress.pt")

    def check(self, epoch):
        net = self.model.module if isinstance(self.model, DistributedDataParallel) else self.model
        with torch.no_grad():
            sample = net(torch.randn(1, 8).cuda())
        print(sample)
        score = evaluate(self.model, self.data)
        with torch.autocast("cuda", dtype=torch.float16):
            evaluate(self.model, self.data)
        if (self.best is None or score < self.best) and self.writes:
            self.best = score
            torch.save(self.model.module.state_dict(), "best.pt")


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DistributedDataParallel(nn.Linear(8, 8).cuda(), device_ids=[local_rank])
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8), torch.ones(64, 8))
    warm_up(model, nn.DataParallel(nn.Linear(8, 8)), torch.randn(8, 8))
    Runner(model, data, half=False).fit(10)


if __name__ == "__main__":
    main()
