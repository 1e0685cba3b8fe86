"""A metric that syncs itself across the ranks when computed (torchmetrics' dist_reduce_fx), on
an evaluation set that every rank reads whole (a sixth round, the `# expect:` comments). Written
for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
import torchmetrics
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


class SummedError(torchmetrics.Metric):
    def __init__(self):
        super().__init__()
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, error):
        self.total += error.sum()

    def compute(self):
        return self.total


class LocalError:  # no sync: each rank its own
    def __init__(self):
        self.total = 0.0

    def update(self, error):
        self.total += float(error.sum())

    def compute(self):
        return self.total


def train_epoch(model, data, optimizer, epoch):  # a loader of the same name, with a sampler
    sampler = DistributedSampler(data)
    sampler.set_epoch(epoch)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for x, y in loader:
        loss = (model(x) - y).square().mean()
        loss.backward()
        optimizer.step()


def evaluate(model, data):
    loader = DataLoader(data, batch_size=8)
    metric = torchmetrics.MeanAbsoluteError()
    with torch.no_grad():
        for x, y in loader:
            metric.update(model(x), y)
    return metric.compute()  # expect: DDP032


def evaluate_own(model, data):
    loader = DataLoader(data, batch_size=8)
    metric = SummedError()
    with torch.no_grad():
        for x, y in loader:
            metric(model(x) - y)
    return metric.compute()  # expect: DDP032


def evaluate_local(model, data):
    loader = DataLoader(data, batch_size=8)
    metric = LocalError()
    with torch.no_grad():
        for x, y in loader:  # expect: DDP032 note
            metric.update(model(x) - y)
    return metric.compute()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = DistributedDataParallel(torch.nn.Linear(8, 1).cuda())
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    train_epoch(model, data, torch.optim.SGD(model.parameters(), lr=0.1), 0)
    print(evaluate(model, data), evaluate_own(model, data), evaluate_local(model, data))


if __name__ == "__main__":
    main()
