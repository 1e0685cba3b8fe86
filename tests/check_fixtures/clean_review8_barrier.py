"""Rank 0 goes first, unless evaluating: the other ranks wait at a barrier before the cache is
built, rank 0 calls its own after building it. Both tests share `not evaluate`, so every rank
calls one barrier or none. Nothing to say. Written for the tests; never run: it only has to
parse."""

import os

import torch
import torch.distributed as dist


def load_examples(local_rank, evaluate=False):
    if local_rank not in [-1, 0] and not evaluate:
        dist.barrier()  # the others wait while rank 0 builds the cache
    examples = torch.randn(64, 8)
    if local_rank == 0 and not evaluate:
        dist.barrier()  # rank 0 done: the others go on and read the cache
    return examples


if __name__ == "__main__":
    dist.init_process_group("gloo")
    print(load_examples(int(os.environ["LOCAL_RANK"])).shape)
