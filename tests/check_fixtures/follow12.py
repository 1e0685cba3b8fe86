"""A ninth review's shapes in one file (for tests/test_check_ddp.py): an evaluation
function defined inside main() that reads main()'s loader on a padding DistributedSampler
(no_grad inside the loop), and sums the results across the ranks; a trainer whose
per-batch method runs backward() and calls another method that steps only when enough
batches passed since the last step (`step - self.last_step >= k`). Written for the tests;
never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 2))
    held_out = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    scoring_sampler = DistributedSampler(held_out, shuffle=False)  # expect: DDP031
    scoring_loader = DataLoader(held_out, batch_size=8, sampler=scoring_sampler)

    def score():
        model.eval()
        hits = torch.zeros(2)
        for x, y in scoring_loader:
            with torch.no_grad():
                hits += torch.stack([(model(x).argmax(1) == y).sum(), torch.tensor(len(y))])
        dist.all_reduce(hits)
        return hits[0] / hits[1]

    print(score())


class Trainer:
    def __init__(self, every):
        self.net = DistributedDataParallel(nn.Linear(8, 2))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.every, self.last_step = every, -1

    def train_batch(self, x, y, step):
        nn.functional.cross_entropy(self.net(x), y).backward()  # expect: DDP050
        self.maybe_step(step)

    def maybe_step(self, step):
        if step - self.last_step >= self.every:
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.last_step = step


if __name__ == "__main__":
    main()
