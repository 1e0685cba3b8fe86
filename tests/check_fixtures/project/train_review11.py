"""An eighth review's misses, each a shape of real scripts (for tests/test_check_ddp.py): an
experiment class chosen through a variable (`Exp = Forecast`), then `Exp(...).fit()`; an epoch
function of the project whose no_sync runs only for an FSDP model and that returns on rank 0
alone; a policy whose BatchNorm sits four classes down. Written for the tests; never run."""

import torch
import torch.distributed as dist
from lab11.experiments import Forecast, Impute
from lab11.nets import Policy
from lab11.steps import train_epoch
from torch.nn.parallel import DistributedDataParallel


def main(task):
    dist.init_process_group("gloo")
    policy = Policy(8)
    model = DistributedDataParallel(policy)  # expect: DDP070
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if task == "forecast":
        Exp = Forecast
    elif task == "impute":
        Exp = Impute
    else:
        raise ValueError(task)
    exp = Exp(model, None)
    exp.fit("best.pt")  # expect: DDP042 # expect: DDP040
    for _ in range(3):
        if not train_epoch(model, torch.randn(5, 4, 2, 8), optimizer, 4):  # expect: DDP050 # expect: DDP191
            break


if __name__ == "__main__":
    main("forecast")
