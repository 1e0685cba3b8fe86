"""The right ways with the same helpers (helpers/), for tests/test_check_ddp.py: no finding,
no note. The launcher sets the port, the sampler is told the epoch, each rank evaluates its
own share of the held-out set (every sample once), rank 0 saves; every rank may save to
memory. Written for the tests; never run: it only has to parse."""

import io
import os

import torch
import torch.distributed as dist
from helpers import is_main_process, save_checkpoint, save_on_master
from helpers.data import make_loader, make_split_loader
from helpers.dist import wrap
from helpers.engine import evaluate
from helpers.io import to_bytes
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset


def main(epochs):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    val_set = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_loader = make_loader(train_set, batch_size=8)
    model = wrap(nn.Linear(8, 2), local_rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        save_on_master({"model": model.module.state_dict()}, "last.pt")
        snapshot = to_bytes(model.module)  # in memory, on every rank
        buffer = io.BytesIO()
        torch.save(snapshot, buffer)
        if is_main_process():
            save_checkpoint(model.module, "best.pt")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    my_share = Subset(val_set, range(rank, len(val_set), world_size))
    accuracy = evaluate(model, DataLoader(my_share, batch_size=8))  # it adds up the shares
    split_loader = make_split_loader(val_set, "val")  # the exact split: no padding
    print(accuracy, evaluate(model, split_loader))


if __name__ == "__main__":
    main(3)
