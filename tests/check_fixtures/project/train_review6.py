"""The loaders come as a tuple from a method of a project class (helpers/loaders.py), whose
private methods build their DistributedSamplers: the evaluation loader's pads the shards
(DDP031 at the line that binds it). For tests/test_check_ddp.py. Written for the tests;
never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from helpers.loaders import LoaderMaker
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros(1)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum()
    dist.all_reduce(correct)
    return correct.item()


def main(epochs):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    maker = LoaderMaker(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))),
                        TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,))), 8)
    (
        train_loader,
        val_loader,  # expect: DDP031
    ) = maker.loaders(dist.get_rank(), dist.get_world_size())
    model = DDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        evaluate(model, val_loader)


if __name__ == "__main__":
    main(3)
