"""A ninth review's shapes where they are no pitfall (for tests/test_check_ddp.py): a
function inside main() that trains on main()'s loader (no evaluation), and one that
evaluates a loader of its own, on rank 0 alone; a per-batch method that calls another
method that steps on every batch, and one whose step is skipped only on a bad loss. Written
for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=8, sampler=sampler)

    def fit():
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

    def score():
        model.eval()
        loader = DataLoader(data, batch_size=8)
        hits = 0
        with torch.no_grad():
            for x, y in loader:
                hits += (model(x).argmax(1) == y).sum().item()
        return hits / len(data)

    fit()
    if dist.get_rank() == 0:
        print(score())


class Trainer:
    def __init__(self):
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train_batch(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.apply(loss)

    def apply(self, loss):
        self.optimizer.step()
        self.optimizer.zero_grad()

    def guarded_batch(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.apply_if_finite(loss)

    def apply_if_finite(self, loss):
        if torch.isfinite(loss):
            self.optimizer.step()
        self.optimizer.zero_grad()


if __name__ == "__main__":
    main()
