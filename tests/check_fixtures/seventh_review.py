"""A seventh review's shapes where the checker must speak (for tests/test_check_ddp.py): a
port default replaced only under a test (the default still runs where the test fails); a
rank read as a string of digits (`os.environ["RANK"] == "0"`, a test on the rank); a
DistributedSampler whose loader is read through tqdm() (a progress bar never calls
set_epoch); a loss that the DDP model's forward returns, left on (`break`) on this rank's
value after SyncBatchNorm's conversion; a name that holds DDP(compiled) where the job is
distributed and the compiled model alone where it is not, saved and resumed into the same
name (DDP041's note, not DDP150). Written for the tests; never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from tqdm import tqdm


class Trainer:
    def __init__(self, args, world_size):
        model = torch.compile(nn.Linear(8, 1))
        if world_size > 1:
            self.model = DDP(model)
        else:
            self.model = model
        if args.resume:
            self.model.load_state_dict(torch.load(args.resume, map_location="cpu"))

    def save(self, rank):
        if rank == 0:
            torch.save(self.model.state_dict(), "model.pt")  # expect: DDP041 note


def main(args):
    dist.init_process_group("gloo", init_method=args.dist_url)
    if os.environ["RANK"] == "0":
        dist.barrier()  # expect: DDP020
    model = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Linear(8, 1), nn.BatchNorm1d(1)))
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8))
    sampler = DistributedSampler(data)  # expect: DDP030
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for _epoch in range(args.epochs):
        total = 0.0
        for (x,) in tqdm(loader):
            loss = model(x).mean()
            total += loss.detach()
            loss.backward()
            optimizer.step()
            if torch.isnan(total):
                break  # expect: DDP191
    Trainer(args, dist.get_world_size()).save(dist.get_rank())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456")  # expect: DDP130
    parser.add_argument("--free-port", action="store_true")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--resume", default="")
    args = parser.parse_args()
    if args.free_port:
        args.dist_url = "tcp://127.0.0.1:" + str(args.port)
    main(args)
