"""A metric that is not a sum, averaged over the ranks (DDP190), and a loop left on a value
each rank computed alone (DDP191), for tests/test_check_ddp.py (exactly the `# expect:`
lines). Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from sklearn.metrics import f1_score, precision_score, roc_auc_score
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def scores(model, x, y):
    with torch.no_grad():
        predicted = model(x).argmax(1)
    f1 = torch.tensor(f1_score(y, predicted))
    dist.all_reduce(f1, op=dist.ReduceOp.AVG)  # expect: DDP190
    auroc = torch.tensor(roc_auc_score(y, model(x)[:, 1]))
    dist.all_reduce(auroc)  # expect: DDP190
    auroc /= dist.get_world_size()
    precisions = [None] * dist.get_world_size()
    dist.all_gather_object(precisions, precision_score(y, predicted))  # expect: DDP190
    mean_precision = sum(precisions) / len(precisions)
    return f1.item(), auroc.item(), mean_precision


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
        val_loss = validation_loss(model, x_val, y_val)  # this rank's own held-out part
        if val_loss < best:
            best, bad_epochs = val_loss, 0
        else:
            bad_epochs += 1
        if bad_epochs >= patience:
            break  # expect: DDP191
