"""More pitfalls that live in the project's helpers (helpers/), for tests/test_check_ddp.py:
a port in a configuration object made by a function, a port that is a helper's default, a
loader in the tuple a builder returns (through a builder of a builder), a sampler class of the
project that pads as DistributedSampler does, a builder's flags given in a **kwargs dict. The
GPU is set by the helper that starts the group (no DDP131). Exactly the `# expect:` lines.
Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from helpers.config import get_config
from helpers.data import build_all, build_loaders, make_eval_loader, make_exact_loader
from helpers.dist import init_distributed, wrap
from helpers.engine import evaluate
from torch import nn
from torch.utils.data import TensorDataset


def main(epochs):
    cfg = get_config()
    init_distributed()  # expect: DDP130
    dist.init_process_group("nccl", init_method=cfg.dist_url)  # expect: DDP130
    rank, world_size = dist.get_rank(), dist.get_world_size()
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    val_set = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_loader, val_loader = build_loaders(train_set, val_set)  # expect: DDP031
    _, other_val_loader = build_all(train_set, val_set)  # expect: DDP031
    padded_loader = make_eval_loader(val_set, False, world_size, rank)  # expect: DDP031
    exact_loader = make_exact_loader(val_set, world_size, rank)  # every sample once: nothing to say
    eval_kwargs = dict(training=False, num_replicas=world_size, rank=rank)
    kwargs_loader = make_eval_loader(val_set, **eval_kwargs)  # expect: DDP031
    model = wrap(nn.Linear(8, 2), int(os.environ["LOCAL_RANK"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        for loader in (val_loader, other_val_loader, padded_loader, exact_loader, kwargs_loader):
            print(evaluate(model, loader))
        evaluate(model, val_loader)
        evaluate(model, other_val_loader)
        evaluate(model, padded_loader)
        evaluate(model, exact_loader)
        evaluate(model, kwargs_loader)


if __name__ == "__main__":
    main(3)
