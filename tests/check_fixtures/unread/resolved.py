"""Picks at run time that need no reading by hand: an optimizer class of torch.optim, a
method or an attribute of an object picked by name, an activation, a backend from a command-line option
whose default the checker reads, the rank's shard of a dict. A run lists nothing
(fixture of our own)."""
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Runner:
    def __init__(self, model, optimizer, loader):
        self.model, self.optimizer, self.loader = model, optimizer, loader

    def train(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--optimizer", default="SGD")
    parser.add_argument("--activation", default="ReLU")
    parser.add_argument("--mode", default="train")
    args = parser.parse_args()
    dist.init_process_group(backend=args.backend)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), getattr(torch.nn, args.activation)()))
    optimizer = getattr(torch.optim, args.optimizer)(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    for key in ("batch_size", "num_workers"):
        loader_setting = getattr(loader, key)  # an attribute of an object, read by name
        print(key, loader_setting)
    runner = Runner(model, optimizer, loader)
    getattr(runner, args.mode)()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
