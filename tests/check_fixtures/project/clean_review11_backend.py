"""A quiet shape of real scripts (for tests/test_check_ddp.py): the model wrapped here, the
accumulation in an epoch function of the project whose micro-batches run in a context that a
backend object gives, handed the model (it may hold back the all-reduce itself). Written for
the tests; never run."""

import torch
import torch.distributed as dist
from lab11.backend_steps import epoch_with_backend
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(backend):
    dist.init_process_group("gloo")
    model = DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    epoch_with_backend(model, backend, torch.randn(5, 4, 2, 8), optimizer, 4)


if __name__ == "__main__":
    main(None)
