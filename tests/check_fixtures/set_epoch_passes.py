"""Shuffling DistributedSamplers read again and again with no set_epoch (DDP030), in a
script without an epoch loop, as GAN and diffusion scripts count steps: an endless generator
over the loader, an iterator made again when it runs out, a `while True` around the loop.
For tests/test_check_ddp.py: exactly the `# expect:` lines. Written for the tests; never
run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def forever(loader):
    while True:
        for inputs, targets in loader:
            yield inputs.float(), targets


def train(total_steps):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    model = DDP(nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = DistributedSampler(data, shuffle=True)  # expect: DDP030
    batches = forever(DataLoader(data, batch_size=8, sampler=sampler))
    for _step in range(total_steps):
        x, y = next(batches)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    refill_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))  # expect: DDP030
    it = iter(refill_loader)
    for _step in range(total_steps):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(refill_loader)
            x, y = next(it)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    looped = DistributedSampler(data)  # expect: DDP030
    loop_loader = DataLoader(data, batch_size=8, sampler=looped)
    done = 0
    while done < total_steps:
        for x, y in loop_loader:
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            done += 1
    # one pass, or an order that never changes: nothing to reshuffle
    once = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    for x, y in once:
        nn.functional.mse_loss(model(x), y).backward()
    fixed = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    while True:
        for x, y in fixed:
            nn.functional.mse_loss(model(x), y).backward()


if __name__ == "__main__":
    train(1000)
