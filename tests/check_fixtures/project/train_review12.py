"""A ninth review's shapes, the pitfalls (for tests/test_check_ddp.py): the model's BatchNorm
turned on by the call (DDP070); fit() given a path, so
every rank saves (DDP040); nccl named by a module constant, no set_device (DDP131).
Written for the tests; never run."""

import torch
import torch.distributed as dist
from lab12.ctr import WideDeep

BACKEND = "nccl"


def main():
    dist.init_process_group(BACKEND)  # expect: DDP131
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = torch.randn(64, 8).cuda(), torch.rand(64).cuda()
    model = WideDeep(8, use_bn=True)  # expect: DDP070
    model.fit(x[rank::world], y[rank::world], save_path="ctr.pt")  # expect: DDP040


if __name__ == "__main__":
    main()
