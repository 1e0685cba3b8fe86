"""The right ways to DDP190's and DDP191's pitfalls, for tests/test_check_ddp.py (no finding):
all-reduce the confusion counts and compute F1 once, gather the predictions and score them
once, and leave the loop on an all-reduced or a broadcast decision. Never run: it only has
to parse."""

import torch
import torch.distributed as dist
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def f1_from_counts(counts):
    true_pos, false_pos, false_neg = counts.tolist()
    return 2 * true_pos / max(2 * true_pos + false_pos + false_neg, 1)


def scores(model, x, y):
    with torch.no_grad():
        predicted = model(x).argmax(1)
    counts = torch.stack([((predicted == 1) & (y == 1)).sum(), ((predicted == 1) & (y == 0)).sum(),
                          ((predicted == 0) & (y == 1)).sum()])
    dist.all_reduce(counts)  # sums: they add up across ranks
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (y.tolist(), model(x)[:, 1].tolist()))
    labels = [label for part, _ in gathered for label in part]
    probabilities = [p for _, part in gathered for p in part]
    return f1_from_counts(counts), roc_auc_score(labels, probabilities)


def validation_loss(model, x, y):
    with torch.no_grad():
        return nn.functional.cross_entropy(model(x), y).item()


def train(net, batches, x_val, y_val, optimizer, patience):
    model = DDP(net)
    best, bad_epochs = float("inf"), 0
    for _epoch in range(100):
        for x, y in batches:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        val_loss = torch.tensor(validation_loss(model, x_val, y_val))
        dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)  # one value, the same on every rank
        if val_loss.item() < best:
            best, bad_epochs = val_loss.item(), 0
        else:
            bad_epochs += 1
        stop = torch.tensor(int(bad_epochs >= patience))
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
        decision = [bad_epochs > 2 * patience]
        dist.broadcast_object_list(decision, src=0)  # rank 0 decides for everyone
        if decision[0]:
            return
