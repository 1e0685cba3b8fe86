"""An eighth review's misses, each a shape of real scripts (for tests/test_check_ddp.py): an
experiment class chosen through a variable (`Exp = Forecast`), then `Exp(...).fit()`; an epoch
function of the project whose no_sync runs only for an FSDP model and that returns on rank 0
alone; a policy whose BatchNorm sits four classes down; a helper's (data, loader) pair, the
loader read under no_grad: an evaluation (DDP031), no DDP030. Written for the tests; never run."""

import torch
import torch.distributed as dist
from lab11.data import provide
from lab11.experiments import Forecast, Impute
from lab11.nets import Policy
from lab11.steps import train_epoch
from torch.nn.parallel import DistributedDataParallel


def warm_up(model, optimizer):
    for _epoch in range(2):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()


def test(model):
    with torch.no_grad():
        for _horizon in (24, 48):
            test_data, test_loader = provide(torch.randn(30, 8), True)  # expect: DDP031
            for x in test_loader:
                model(x)


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
    warm_up(model, optimizer)
    test(model)


if __name__ == "__main__":
    main("forecast")
