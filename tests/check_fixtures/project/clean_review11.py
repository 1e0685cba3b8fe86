"""The quiet twins of train_review11.py and train_review11_spawn.py: the experiment classes
the variable can hold load to a device given; the epoch uses no_sync for any wrapper and
decides to stop on every rank; the policy converted to SyncBatchNorm; the spawned worker
uses no_sync; a loop left on `world_size == 1`, the same on every rank (`world_size, rank =
world_size_and_rank()`). Written for the tests; never run."""

import lab11.steady_launch as steady_launch
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lab11.experiments import Impute, SteadyForecast
from lab11.nets import Policy
from lab11.steady_steps import generate, steady_epoch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main(task):
    dist.init_process_group("gloo")
    policy = nn.SyncBatchNorm.convert_sync_batchnorm(Policy(8))
    model = DistributedDataParallel(policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if task == "forecast":
        Exp = SteadyForecast
    else:
        Exp = Impute
    exp = Exp(model, None)
    exp.fit("best.pt")
    for _ in range(3):
        if not steady_epoch(model, torch.randn(5, 4, 2, 8), optimizer, 4):
            break
    generate(model, torch.randn(4, 8), 5)


if __name__ == "__main__":
    if dist.is_available():
        main("forecast")
    else:
        mp.spawn(steady_launch.run_worker, args=(2, 10), nprocs=2)
