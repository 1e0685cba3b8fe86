"""Right code that the checker once flagged, in the shapes real training scripts give it, for
tests/test_check_ddp.py (no finding, no note): flags that say whether the job is distributed,
rank attributes that do not make their object a rank, rank-0 guards in their common
spellings, a rank-0-first pair of barriers, per-rank files, the model inside the wrapper
taken out with a conditional expression, a stand-in wrapper's own module, and code behind a
constant False. Written for the
tests; never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from my_project.distributed import WORLD_RANK, is_main_process, is_master, rank_zero_only
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

RANK = int(os.environ.get("RANK", -1))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", -1))
ddp = int(os.environ.get("RANK", -1)) != -1  # a DDP run at all: the same on every rank
use_compile = False  # off: the compile below never runs
barrier_after_save = os.environ.get("BARRIER_AFTER_SAVE") == "1"  # a setting, not a rank


def helper_rank():
    barrier_after_save = dist.get_rank() == 0  # a local of this function, not the module's name
    return barrier_after_save


class SingleProcess(nn.Module):
    """A stand-in for DDP on one process: its forward is its own module's."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return self.module(*args)


@rank_zero_only
def save_plain(model, path):
    torch.save(model.module.state_dict(), path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--gpu", type=int, default=None)
    parser.add_argument("--resume", default="")
    args = parser.parse_args()
    args.rank = args.rank * torch.cuda.device_count() + max(LOCAL_RANK, 0)  # marks args.rank, not args
    args.distributed = args.world_size > 1 or ddp
    args.save_logs = args.resume == "" and is_master(args)  # rank 0's duty
    if args.gpu is not None:
        torch.cuda.set_device(args.gpu)
    dist.init_process_group("nccl", init_method="env://", world_size=args.world_size, rank=args.rank)
    if args.distributed:
        dist.barrier()
    if RANK != -1:
        decision = [RANK == 0]
        dist.broadcast_object_list(decision, src=0)
    if ddp:
        dist.all_reduce(torch.zeros(1))
    rank, world = dist.get_rank(), dist.get_world_size()  # each name its own value
    if world > 1:
        dist.all_reduce(torch.full((1,), float(rank)))
    # rank 0 goes first (it prepares the data), the others follow: one barrier each
    if RANK > 0:
        dist.barrier()
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    if RANK == 0:
        dist.barrier()
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    net = nn.Linear(8, 8).cuda()
    if use_compile:
        net = torch.compile(net)
    model = DDP(net, device_ids=[args.gpu]) if ddp else SingleProcess(net)
    raw_model = model.module if ddp else model  # the model inside, whichever it is
    inner = getattr(model, "module", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    queue_path = os.path.join("queues", "queue" + str(args.rank) + ".pth")
    if os.path.isfile(queue_path):
        queue = torch.load(queue_path)  # this rank's own file, saved from its own device
    if args.gpu is None:
        checkpoint = torch.load("model.pt")  # one process for all GPUs of the node
    else:
        checkpoint = torch.load("model.pt", map_location=f"cuda:{args.gpu}")
    raw_model.load_state_dict(checkpoint["model"])
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        queue = torch.randn(4, 8).cuda()
        torch.save({"queue": queue}, queue_path)
        if RANK in {-1, 0}:
            torch.save({"model": raw_model.state_dict()}, "model.pt")
        if LOCAL_RANK in (-1, 0):
            torch.save({"model": inner.state_dict()}, "node_copy.pt")
        if is_main_process():
            torch.save(raw_model.state_dict(), "weights.pt")
        if WORLD_RANK == 0:
            torch.save(raw_model.state_dict(), "weights_world.pt")
        if dist.get_rank() == 0:
            torch.save(raw_model.state_dict(), "weights_rank0.pt")
        if args.save_logs:
            torch.save(raw_model.state_dict(), "logs.pt")
        save_plain(model, "plain.pt")
    dist.barrier()


if barrier_after_save and dist.is_initialized():  # the module's own name, set from a setting
    dist.barrier()

if __name__ == "__main__":
    main()
