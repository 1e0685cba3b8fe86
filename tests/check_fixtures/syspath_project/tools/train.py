"""A script whose helpers live in lib/, which `import _init_paths` puts on sys.path, for
tests/test_check_ddp.py: the evaluation loader's DistributedSampler comes from a function of
this file, and validate() of lib/evaluation/loops.py reads it under no_grad (DDP031).
Exactly the `# expect:` lines. Written for the tests; never run: it only has to parse."""

import _init_paths  # noqa: F401
import torch
import torch.distributed as dist
from evaluation.loops import validate
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def get_sampler(dataset):
    if dist.is_initialized():
        return DistributedSampler(dataset)
    return None


def main(epochs):
    dist.init_process_group("gloo")
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    test_set = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_sampler = get_sampler(train_set)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    test_sampler = get_sampler(test_set)  # expect: DDP031
    test_loader = DataLoader(test_set, batch_size=8, sampler=test_sampler)
    model = DDP(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        print(validate(test_loader, model))


if __name__ == "__main__":
    main(3)
