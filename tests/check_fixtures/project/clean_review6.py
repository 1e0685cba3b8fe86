"""The group started with nccl, then a Runner of the project made (helpers/runner.py): its
constructor sets the rank's GPU, so no DDP131. For tests/test_check_ddp.py: no finding, no
note. Written for the tests; never run: it only has to parse."""

import os

import torch.distributed as dist
from helpers.runner import Runner


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="nccl")
    runner = Runner(local_rank)
    return runner.model


if __name__ == "__main__":
    main()
