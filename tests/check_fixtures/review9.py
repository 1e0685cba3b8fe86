"""Shapes of a sixth review, for tests/test_check_ddp.py: the wrapper's state_dict() saved
through a converter in one arm, loaded back into the wrapper (one note, not an error); a
training and an evaluation function that each name their sampler `sampler`, the evaluation's
padding (DDP031 there alone); float16 autocast around a call that runs backward (DDP060); a
loss divided by the rank's whole token count (DDP180); the model inside DDP trained through an
alias, `net = model.module if isinstance(model, DDP) else model` (DDP110). Written for the
tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def slim(state):
    return {key: value.half() for key, value in state.items()}


def train_step(model, x, y, mask, optimizer):
    per_token = (model(x.cuda()) - y.cuda()).square()
    loss = (per_token * mask).sum() / mask.sum()  # expect: DDP180
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def distill(model, x, y, optimizer):
    model.eval()  # a rollout first, then training: the function still trains
    model.train()
    net = model.module if isinstance(model, DistributedDataParallel) else model
    loss = (net(x.cuda()) - y.cuda()).square().mean()  # expect: DDP110
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def fit(model, data, optimizer, epochs):
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y, mask in loader:
            with torch.autocast("cuda", dtype=torch.float16):  # expect: DDP060
                train_step(model, x, y, mask, optimizer)
            distill(model, x, y, optimizer)


def evaluate(model, data):
    sampler = DistributedSampler(data, shuffle=False)  # expect: DDP031
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    total = torch.zeros(2, device="cuda")
    with torch.no_grad():
        for x, y, _ in loader:
            total[0] += nn.functional.mse_loss(model(x.cuda()), y.cuda(), reduction="sum")
            total[1] += len(x)
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def main(half):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DistributedDataParallel(nn.Linear(8, 8).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if os.path.exists("last.pt"):
        checkpoint = torch.load("last.pt", map_location="cpu")
        model.load_state_dict(checkpoint["weights"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8), torch.ones(64, 8))
    fit(model, data, optimizer, 10)
    print(evaluate(model, data))
    if dist.get_rank() == 0:
        weights = slim(model.state_dict()) if half else model.state_dict()  # expect: DDP041 note
        torch.save({"weights": weights, "optimizer": optimizer.state_dict()}, "last.pt")
        torch.save({"weights": slim(model.state_dict())}, "half.pt")  # expect: DDP041 note


if __name__ == "__main__":
    main(os.environ.get("HALF") == "1")
