"""An eighth review's FSDP1 shapes where DDP160 must still speak: an optimizer's state saved
to one path for every rank; a choice whose other arm is no FSDP state (an empty dict), so
the optimizer's arm still serves the FSDP model; a file named by the rank that this file
never loads back (only as many ranks could read it). Exactly the `# expect:` lines.
Written for the tests; never run: it only has to parse."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    args = argparse.ArgumentParser().parse_args()
    dist.init_process_group("gloo")
    model = FSDP(nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 8)).square().mean()
    loss.backward()
    optimizer.step()
    torch.save(optimizer.state_dict(), "optimizer.pt")  # expect: DDP160
    kept = {"optimizer": optimizer.state_dict() if args.keep_optimizer else {}}
    torch.save(kept, "kept.pt")  # expect: DDP160
    torch.save(optimizer.state_dict(), f"optimizer.{dist.get_rank()}.pt")  # expect: DDP160


if __name__ == "__main__":
    main()
