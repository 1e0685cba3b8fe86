"""Pitfalls of a fifth review's shapes (the `# expect:` comments): the helper told "slurm" takes
the branch that fixes the port; an epoch helper whose loss scaler steps every few
micro-batches, with no no_sync(); a padding sampler read by an evaluation that writes each
sample's id beside its result (a note: a merge may drop the repeats). Written for the tests;
never run: it only has to parse."""

import torch
import torch.distributed as dist
from helpers.epochs import train_one_epoch
from helpers.launchers import init_dist
from helpers.loss_scaling import LossScaler
from helpers.records import predict_to_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(steps):
    init_dist("slurm")  # expect: DDP130
    model = DistributedDataParallel(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = LossScaler()
    for _ in range(steps):
        loss = model(torch.randn(4, 8).cuda()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    for epoch in range(3):
        train_sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, scaler, accumulation=4)  # expect: DDP050
    test_set = TensorDataset(torch.randn(50, 8), torch.arange(50))
    test_sampler = DistributedSampler(test_set, shuffle=False)  # expect: DDP031 note
    test_loader = DataLoader(test_set, batch_size=8, sampler=test_sampler)
    predict_to_file(model, test_loader, f"predictions_{dist.get_rank()}.txt")


if __name__ == "__main__":
    main(10)
