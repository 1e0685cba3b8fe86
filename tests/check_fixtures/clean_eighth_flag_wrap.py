"""An eighth review's false alarm of DDP041, and a DDP040 it hid, each a shape of our own,
where nothing is wrong: the DDP wrap chosen by a flag, then `model.module.state_dict() if
cfg["DDP"] else model.state_dict()` (the else arm holds the plain model, the same flag), and
an if/else on that flag; a save under `if args.write_files:`, a flag every caller set from
the rank before it passed `args` in. Written for the tests; never run: it only has to parse."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(args, model):
    if args.write_files:
        torch.save(model.module.state_dict(), "last.pt")


def main(cfg):
    args = argparse.ArgumentParser().parse_args()
    model = nn.Linear(8, 2)
    if cfg["DDP"]:
        dist.init_process_group("gloo")
        model = DDP(model)
    model = model.to("cpu")
    args.write_files = args.out_dir is not None and dist.get_rank() == 0
    for _epoch in range(3):
        model(torch.randn(4, 8)).sum().backward()
        if not cfg["DDP"] or dist.get_rank() == 0:
            torch.save(model.module.state_dict() if cfg["DDP"] else model.state_dict(), "m.pt")
            if cfg["DDP"]:
                weights = model.module.state_dict()
            else:
                weights = model.state_dict()
            torch.save(weights, "w.pt")
        if cfg["DDP"]:
            save_checkpoint(args, model)


if __name__ == "__main__":
    main({"DDP": True})
