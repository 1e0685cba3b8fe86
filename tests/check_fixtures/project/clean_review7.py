"""Right code that a fifth review found flagged (no finding, no note): the group started by
a helper told the launcher with a constant, so its Slurm branch, which fixes the port, never
runs; a shuffling loader in the else of a distributed flag kept in a dict (the run without
DDP). Written for the tests; never run: it only has to parse."""

import torch
from helpers.launchers import init_dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(opt):
    if opt["dist"]:
        init_dist("torchrun")
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    model = nn.Linear(8, 2).cuda()
    if opt["dist"]:
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        model = DistributedDataParallel(model)
    else:
        sampler = None
        loader = DataLoader(data, batch_size=8, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(opt["epochs"]):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main({"dist": True, "epochs": 2})
