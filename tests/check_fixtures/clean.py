"""A DDP script that does each thing the rules look for the right way, for
tests/test_check_ddp.py: the checker must find nothing in it. Never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    return sum(model(x).sum() for x, _ in loader)


def main(dataset, epochs, accumulation):
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    reference = DataLoader(dataset, batch_size=32)  # no shuffle: the same batches on every rank
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).cuda()
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            last = (step + 1) % accumulation == 0
            with torch.autocast("cuda", dtype=torch.float16):
                with model.no_sync() if not last else torch.enable_grad():
                    loss = nn.functional.mse_loss(model(x), y) / accumulation
                    scaler.scale(loss).backward()
            if last:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        if rank == 0:
            torch.save(model.module.state_dict(), "model.pt")
            print("saved")
        dist.barrier()
        if rank == 0:
            dist.broadcast(torch.ones(1), src=0)
        else:
            dist.broadcast(torch.zeros(1), src=0)
        if rank == 0:
            dist.send(torch.ones(1), dst=1)
        elif rank == 1:
            dist.recv(torch.zeros(1), src=0)
        state = torch.load("model.pt", map_location=f"cuda:{local_rank}")
        model.module.load_state_dict(state)
        with torch.no_grad():
            model.module(x)
        evaluate(model.module, reference)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(None, 2, 4)
