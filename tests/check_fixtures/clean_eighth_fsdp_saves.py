"""An eighth review's false alarms of DDP160, each a shape of our own, where nothing is
wrong: the optimizer's plain state_dict() in the arm of a choice that serves the model
without FSDP, the other arm holding FSDP.optim_state_dict() (gathered); each rank's
optimizer shards saved to a file named by its rank and loaded back by that rank, the world
size checked (a resume of its own). Written for the tests; never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP


def save(args, model, optimizer, step):
    model_state, optimizer_state = None, None
    if args.fsdp:
        policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):
            model_state = model.state_dict()
            optimizer_state = FSDP.optim_state_dict(model, optimizer)
    if dist.get_rank() == 0:
        torch.save({"step": step, "model": model_state if args.fsdp else model.module.state_dict(),
                    "optimizer": optimizer_state if args.fsdp else optimizer.state_dict()}, "last.pt")


def save_shards(folder, optimizer):
    name = f"shard.{dist.get_rank():03d}-of-{dist.get_world_size():03d}.pt"
    torch.save(optimizer.state_dict(), os.path.join(folder, name))


def resume_shards(folder, optimizer):
    found = len([f for f in os.listdir(folder) if f.startswith("shard.")])
    if found != dist.get_world_size():
        raise SystemExit(f"{found} shards saved, {dist.get_world_size()} ranks now: resume on as many")
    name = f"shard.{dist.get_rank():03d}-of-{dist.get_world_size():03d}.pt"
    optimizer.load_state_dict(torch.load(os.path.join(folder, name), map_location="cpu"))


def main():
    args = argparse.ArgumentParser().parse_args()
    dist.init_process_group("gloo")
    model = FSDP(nn.Linear(8, 2)) if args.fsdp else DDP(nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    if args.resume:
        resume_shards(args.resume, optimizer)
    for _step in range(10):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).square().mean().backward()
        optimizer.step()
    save(args, model, optimizer, 10)
    save_shards("checkpoints", optimizer)


if __name__ == "__main__":
    main()
