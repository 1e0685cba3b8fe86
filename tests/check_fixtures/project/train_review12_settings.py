"""A ninth review's shape (for tests/test_check_ddp.py): the model's settings come in as a dict
the checker does not read, so whether its BatchNorm is built is out of sight: a note.
Written for the tests; never run."""

import json
import sys

import torch
import torch.distributed as dist
from lab12.ctr import WideDeep


def main():
    dist.init_process_group("gloo")
    with open(sys.argv[1]) as handle:
        settings = json.load(handle)
    model = WideDeep(8, **settings)  # expect: DDP070 note
    model.fit(torch.randn(64, 8), torch.rand(64))


if __name__ == "__main__":
    main()
