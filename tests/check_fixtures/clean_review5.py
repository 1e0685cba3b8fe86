"""Right code that a fresh review found flagged, for tests/test_check_ddp.py (no finding, no
note): `local_rank >= 0` says whether the job was launched at all (the same on every rank);
a step counter restored from a file every rank reads, where a loss is also written with the
json module; a checkpoint saved in the branch where the model was never compiled; a batch
skipped whole with `continue`, before its backward(); a helper given the wrapper that saves
`model.state_dict()` only in the else of `isinstance(model, DDP)`. Written
for the tests; never run: it only has to parse."""

import argparse
import json

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def save_weights(model, path):
    weights = model.module.state_dict() if isinstance(model, DDP) else model.state_dict()
    torch.save(weights, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", type=int, default=-1)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    distributed = args.local_rank >= 0  # -1: no launcher; every launched rank has 0 or more
    if distributed:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl")
    if distributed:
        dist.barrier()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = nn.Linear(8, 2).cuda()
    if args.compile:
        model = torch.compile(model)
    model = DDP(model, device_ids=[args.local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with open("state.json") as f:
        state = json.load(f)  # every rank reads the same file
    update_step = state["update_step"]
    for epoch in range(args.steps):
        sampler.set_epoch(epoch)
        for x, y in loader:
            update_step += 1
            if update_step > args.steps:
                break
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if dist.get_rank() == 0:
                with open("log.json", "w") as log:
                    json.dump({"loss": loss.item(), "update_step": update_step}, log)
    for i, (x, y) in enumerate(loader):  # every other batch, whole: no micro-batches
        if i % 2 != 0:
            continue
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
        optimizer.zero_grad()
    if dist.get_rank() == 0:
        if args.compile:
            weights = model.module._orig_mod.state_dict()
        else:
            weights = model.module.state_dict()
        torch.save({"model": weights, "update_step": update_step}, "final.pt")
        save_weights(model, "weights.pt")
    dist.barrier()


if __name__ == "__main__":
    main()
