"""An endless generator over a loader whose sampler is told the pass, for
tests/test_check_ddp.py (no finding, no note). Never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def forever(loader, sampler):
    passes = 0
    while True:
        sampler.set_epoch(passes)
        yield from loader
        passes += 1


def evaluate(model, batches):
    """Every rank its own batches; each batch's samples scored one by one (an index, no stream)."""
    correct = 0
    with torch.no_grad():
        for x, y in batches:
            outputs = model(x)
            for i in range(len(outputs)):
                correct += int(outputs[i].argmax() == y[i])
    return correct


def train(total_steps):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    model = DDP(nn.Linear(8, 8))
    sampler = DistributedSampler(data, shuffle=True)
    batches = forever(DataLoader(data, batch_size=8, sampler=sampler), sampler)
    for _step in range(total_steps):
        x, y = next(batches)
        nn.functional.mse_loss(model(x), y).backward()
    print(evaluate(model, [next(batches)]))


if __name__ == "__main__":
    train(1000)
