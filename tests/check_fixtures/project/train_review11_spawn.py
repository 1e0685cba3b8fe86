"""An eighth review's miss (for tests/test_check_ddp.py): the script spawns a function of
another module, which wraps the model and builds a worker whose method accumulates without
no_sync; the worker's save runs on rank 0 alone. Written for the tests; never run."""

import lab11.launch as launch
import torch.multiprocessing as mp

if __name__ == "__main__":
    mp.spawn(launch.run_worker, args=(2, 10), nprocs=2)  # expect: DDP050
