"""A ninth review's shape (for tests/test_check_ddp.py): a snapshot helper of the project,
given the DDP wrapper by keyword on rank 0; the network's weights are also read from a
snapshot's "net" key before the wrap. Written for the tests; never run: it only has to
parse."""

import torch
import torch.distributed as dist
from lab12.snapshots import save_snapshot
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(folder, warm_start):
    dist.init_process_group("gloo")
    net = nn.Linear(8, 2)
    if warm_start:
        net.load_state_dict(torch.load(warm_start, map_location="cpu")["net"])
    net = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    if dist.get_rank() == 0:
        save_snapshot(folder=folder, net=net, optimizer=optimizer, step=0)  # expect: DDP041


if __name__ == "__main__":
    main("runs", None)
