"""A ninth review's shape (for tests/test_check_ddp.py): the snapshot helper of the project
given the DDP wrapper, whose snapshot this file loads back into the wrapper alone: a note.
Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from lab12.snapshots import load_snapshot, save_snapshot
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(folder, resume):
    dist.init_process_group("gloo")
    net = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    step = load_snapshot(resume, net, optimizer) if resume else 0
    if dist.get_rank() == 0:
        save_snapshot(folder, net, optimizer, step)  # expect: DDP041 note


if __name__ == "__main__":
    main("runs", None)
