"""A seventh review's miss (for tests/test_check_ddp.py): the ranks started by mp.spawn on
a function of a package of the project (its __init__.py star-imports it), which sets a fixed
MASTER_PORT: distributed, and the port said at the spawn. The same function called with a
device word for its rank runs as one process, and so does a trial that sets its own rank to
one: nothing said at those calls. Written for the tests; never run: it only has to parse."""

import torch
import torch.multiprocessing as mp
import workers
from workers import run_trial


def main():
    world_size = torch.cuda.device_count()
    if world_size == 0:
        workers.run_worker("cpu", world_size)
    else:
        mp.spawn(workers.run_worker, args=(world_size,), nprocs=world_size, join=True)  # expect: DDP130
    run_trial({"folder": "."})


if __name__ == "__main__":
    main()
