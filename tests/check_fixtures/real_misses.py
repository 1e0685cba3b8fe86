"""Pitfalls in the shapes real training scripts give them, which the checker once missed, for
tests/test_check_ddp.py: a line that must be flagged ends with `# expect: CODE`, and the
checker must flag exactly those. Written for the tests (each shape seen in public training
scripts, none copied). Never run: it only has to parse."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--init-url", default="tcp://127.0.0.1:23456")  # expect: DDP130
parser.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", default="23457")  # expect: DDP130
args = parser.parse_args()
RANK = int(os.environ.get("RANK", "-1"))


def save_atomically(state, path):
    """Write to a temporary name, then rename (no rank test in here: the caller's job)."""
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def evaluate(model, held_out):
    """The summed loss over this rank's part of the held-out set, added over the ranks."""
    total = torch.zeros(1)
    with torch.no_grad():
        for x, y in held_out:
            total += nn.functional.mse_loss(model(x), y, reduction="sum")
    dist.all_reduce(total)
    return total


def place(args):
    """Where the ranks meet: the URL built in one function, used in another."""
    args.node_url = f"tcp://{os.environ.get('HEAD_NODE', 'localhost')}:58472"  # expect: DDP130
    args.pair_url = "tcp://" + args.host + ":" + args.port


def meet(args, second):
    dist.init_process_group("gloo", init_method=args.pair_url if second else args.node_url)


def validate_epoch(model, loader):
    """An evaluation without no_grad: .eval() and the name say what it is."""
    model.eval()
    return [model(x) for x, _ in loader]


def validate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(nn.functional.mse_loss(model(x), y).item() for x, y in loader)


class Trainer:
    """A trainer whose checkpoint holds the wrapper's keys when EMA is off."""

    def __init__(self, net, use_ema):
        self.use_ema = use_ema
        self.ema = net
        self.model = nn.parallel.DistributedDataParallel(net)

    def save(self):
        saved = self.ema if self.use_ema else self.model
        if RANK in {-1, 0}:
            torch.save({"model": saved.state_dict()}, "trainer.pt")  # expect: DDP041

    def resume(self, plain):
        plain.load_state_dict(torch.load("trainer.pt", map_location="cpu")["model"])


def main(epochs, steps):
    dist.init_process_group("gloo", init_method=args.init_url)
    train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    held_set = TensorDataset(torch.randn(16, 8), torch.randn(16, 8))
    # a sampler handed to a BatchSampler is still this file's: set_epoch is never called
    sampler = DistributedSampler(train_set, shuffle=True)  # expect: DDP030
    loader = DataLoader(train_set, batch_sampler=BatchSampler(sampler, 8, drop_last=True))
    # a shuffling sampler over the held-out set, read under no_grad in validate()
    held_sampler = DistributedSampler(held_set)  # expect: DDP031
    held = DataLoader(held_set, batch_size=8, sampler=held_sampler)
    # a sampler in a conditional expression, read by an evaluation of the file
    test_sampler = DistributedSampler(held_set) if dist.is_initialized() else None  # expect: DDP031
    test_loader = DataLoader(held_set, batch_size=8, sampler=test_sampler)
    net = nn.Linear(8, 8)
    # the wrap inside a conditional expression, and inside a comprehension
    model = nn.parallel.DistributedDataParallel(net) if dist.is_initialized() else net
    heads = [nn.parallel.DistributedDataParallel(nn.Linear(8, 1)) for _ in range(2)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # float16 chosen through a dict lookup, and no loss scaling anywhere in the file
    amp_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.precision]
    for _epoch in range(epochs):
        for x, y in loader:
            for micro_x, micro_y in zip(x.chunk(steps), y.chunk(steps), strict=True):
                with torch.autocast("cuda", dtype=amp_dtype):  # expect: DDP060
                    loss = nn.functional.mse_loss(model(micro_x), micro_y) / steps
                if loss.requires_grad:  # a test unrelated to accumulation
                    loss.backward()  # expect: DDP050
            optimizer.step()
            optimizer.zero_grad()
        validate(model, held)
        validate_epoch(model, test_loader)
        if RANK in {-1, 0}:
            evaluate(model, held)  # expect: DDP020
        save_atomically({"model": model.module.state_dict()}, "checkpoint.pt")  # expect: DDP040
        torch.save(model, "whole.pt")  # expect: DDP040
        torch.save(model.module, "inner.pt")  # expect: DDP040
    # compiled, then wrapped: the model inside the wrapper is the compiled one
    compiled: nn.Module = torch.compile(net)
    wrapped = nn.parallel.DistributedDataParallel(compiled)
    raw_model = wrapped.module
    if RANK in {-1, 0}:
        torch.save(raw_model.state_dict(), "raw.pt")  # expect: DDP150
        torch.save(compiled.state_dict(), "compiled.pt")  # expect: DDP150
    Trainer(net, use_ema=False).save()
    del heads


if __name__ == "__main__":
    place(args)
    meet(args, second=False)
    main(2, 4)
