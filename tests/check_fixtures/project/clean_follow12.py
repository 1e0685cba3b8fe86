"""A ninth review's shapes where they are no pitfall (for tests/test_check_ddp.py): the
snapshot helper of the project given the model inside the DDP wrapper, by keyword and by
position, the wrapper given to a helper that unwraps it, and a name that holds the model
inside the wrapper in one arm and the plain model in the other; both loaders that a helper of
the project returns kept by a class of this file that trains on them (no evaluation reads
them); a trainer of the project restored with map_location and saved on rank 0, and loaded
without it in the parent process, before the spawn; a held-out loader on no sampler, from a
helper that puts one on the other loader it returns, read whole by an evaluation inside the
function. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lab12.data import make_loaders, make_split_loaders
from lab12.gan import Trainer
from lab12.snapshots import save_snapshot, save_unwrapped
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(folder):
    dist.init_process_group("gloo")
    net = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    if dist.get_rank() == 0:
        save_snapshot(folder=folder, net=net.module, optimizer=optimizer, step=0)
        save_snapshot(folder, net.module, optimizer, 1)
        save_unwrapped(folder, net, 1)


class TwoStageRunner:
    def __init__(self, first_loader, second_loader):
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.first_loader = first_loader
        self.second_loader = second_loader

    def fit(self, epoch):
        self.net.train()
        self.first_loader.sampler.set_epoch(epoch)
        self.second_loader.sampler.set_epoch(epoch)
        for x, y in self.first_loader:
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(self.net(x), y).backward()
            self.optimizer.step()
        for x, y in self.second_loader:
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(self.net(x), y).backward()
            self.optimizer.step()


def save_inner(folder, distributed):
    dist.init_process_group("gloo")
    net = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    if distributed:
        net = DistributedDataParallel(net)
        inner = net.module
    else:
        inner = net
    if dist.get_rank() == 0:
        save_snapshot(folder, inner, optimizer, 0)


def two_stages():
    dist.init_process_group("gloo")
    first_loader, second_loader = make_loaders(8)
    TwoStageRunner(first_loader, second_loader).fit(0)


def run_trainer(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    trainer = Trainer(rank=rank, folder="runs")
    trainer.restore(0)
    trainer.train_step(torch.randn(8, 8), torch.randint(0, 2, (8,)))
    if rank == 0:
        trainer.save(1)


def launch(world_size, preview):
    if preview:
        trainer = Trainer(rank=0, folder="runs")
        trainer.load(0)
        return
    mp.spawn(run_trainer, args=(world_size,), nprocs=world_size)


def fit_and_score(epochs):
    dist.init_process_group("gloo")
    net = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    fit_loader, held_out_loader = make_split_loaders(8)

    def score():
        net.eval()
        with torch.no_grad():
            return sum((net(x).argmax(1) == y).sum().item() for x, y in held_out_loader)

    for epoch in range(epochs):
        fit_loader.sampler.set_epoch(epoch)
        net.train()
        for x, y in fit_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            optimizer.step()
        print(score())


if __name__ == "__main__":
    main("runs")
    two_stages()
    launch(2, False)
    fit_and_score(2)
    save_inner("runs", True)
