"""The shapes behind a fresh review's false alarms and misses that live in the project's
helpers (helpers/pipelines.py), for tests/test_check_ddp.py. An evaluation loader on an
exact split, returned beside a training loader on a DistributedSampler (no DDP031), but one
on `DistributedSampler(...) if distributed else None` pads (DDP031). A loader helper that
makes its own DistributedSampler (no DDP010), but one that makes a RandomSampler is no split
(DDP010). A wrapper returned in a tuple, its state_dict() saved by a function it is given
to (DDP041). A step helper told to step every few micro-batches (DDP050). Exactly the
`# expect:` lines. Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from helpers.engine import evaluate
from helpers.pipelines import (
    apply_gradients,
    build_train_and_eval,
    eval_loader,
    parallelize,
    sharded_loader,
    shuffled_loader,
)
from torch import nn
from torch.utils.data import TensorDataset


def save_final(model, path):
    torch.save({"model": model.state_dict()}, path)  # expect: DDP041


def main(epochs, accumulation):
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    val_set = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_set, val_set, train_loader, val_loader = build_train_and_eval(train_set, val_set, world_size, rank)
    extra_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    extra_sampler, extra_loader = sharded_loader(extra_set, 8, rank, world_size, shuffle=True)
    whole_loader = shuffled_loader(extra_set, 8, shuffle=True)  # expect: DDP010
    padded_loader = eval_loader(val_set, distributed=True)  # expect: DDP031
    net = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    model, optimizer = parallelize(net, optimizer, int(os.environ["LOCAL_RANK"]))
    step = 0
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        extra_sampler.set_epoch(epoch)
        for x, y in train_loader:
            step += 1
            loss = nn.functional.cross_entropy(model(x), y) / accumulation
            update = step % accumulation == 0
            apply_gradients(loss, optimizer, model, do_step=update)  # expect: DDP050
        for x, y in list(extra_loader) + list(whole_loader):
            apply_gradients(nn.functional.cross_entropy(model(x), y), optimizer, model)
        print(evaluate(model, val_loader), evaluate(model, padded_loader))
    if rank == 0:
        save_final(model, "final.pt")


if __name__ == "__main__":
    main(3, 4)
