"""An eighth review's wrap-by-flag shapes where the checker must still speak: the DDP wrap
chosen by one flag, the plain state_dict() in the else of another flag (the wrapper's
'module.' keys there when both are set: DDP041); the wrap made whatever the flag, its
state_dict() in the else arm all the same (DDP041); a save under a flag the caller set from
something other than the rank (DDP040). Exactly the `# expect:` lines. Written for the
tests; never run: it only has to parse."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(args, model):
    if args.write_files:
        torch.save(model.module.state_dict(), "last.pt")  # expect: DDP040


def main(cfg):
    args = argparse.ArgumentParser().parse_args()
    dist.init_process_group("gloo")
    model = nn.Linear(8, 2)
    if cfg["DDP"]:
        model = DDP(model)
    other = DDP(nn.Linear(8, 2))
    args.write_files = args.out_dir is not None
    for _epoch in range(3):
        model(torch.randn(4, 8)).sum().backward()
        other(torch.randn(4, 8)).sum().backward()
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict() if cfg["AMP"] else model.state_dict(), "m")  # expect: DDP041
            torch.save(other.module.state_dict() if cfg["DDP"] else other.state_dict(), "o")  # expect: DDP041
        save_checkpoint(args, model)


if __name__ == "__main__":
    main({"DDP": True, "AMP": False})
