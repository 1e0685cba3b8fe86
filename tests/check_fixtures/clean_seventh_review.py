"""A seventh review's false alarms, each a shape of our own, where they are right (no
finding): a port option whose default the script replaces with a free port in its
`__main__` block, after parse_args() and before main() uses it; a test of whether the job is
distributed on a variable that holds a device word where it is not (`rank not in ("cpu",
"cuda")`), not a branch on the rank. Written for the tests; never run: it only has to parse."""

import argparse
import socket

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def main(args):
    rank = args.rank if args.world_size > 1 else "cpu"
    if rank not in ("cpu", "cuda"):
        dist.init_process_group("gloo", init_method=args.dist_url, rank=rank, world_size=args.world_size)
        model = DistributedDataParallel(nn.Linear(8, 2))
    else:
        model = nn.Linear(8, 2)
    if rank not in ("cpu", "cuda"):
        dist.barrier()  # every launched rank: the test is on the mode, not on the rank
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    args = parser.parse_args()
    args.dist_url = "tcp://127.0.0.1:" + str(free_port())  # the default never reaches main()
    main(args)
