"""A ninth review's false alarms, shapes of our own (for tests/test_check_ddp.py): a model whose
BatchNorm is built only under a constructor flag that no call turns on, and whose fit() saves
only where it is given a path, here a module constant that is None. Written for the tests."""

import torch
import torch.distributed as dist
from lab12.ctr import WideDeep

BACKEND = "gloo"
SAVE_PATH = None  # a path here would make every rank write it


def main():
    dist.init_process_group(BACKEND)
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = torch.randn(64, 8), torch.rand(64)
    model = WideDeep(8, hidden=16, dropout=0.1)
    model.fit(x[rank::world], y[rank::world], save_path=SAVE_PATH)


if __name__ == "__main__":
    main()
