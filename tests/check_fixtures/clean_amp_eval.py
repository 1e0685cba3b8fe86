"""Mixed precision the checker once flagged, for tests/test_check_ddp.py (no finding): float16
autocast in an evaluation under @torch.no_grad (no backward, nothing to underflow), and
bfloat16 in training, with no loss scaler anywhere. Never run: it only has to parse."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


@torch.no_grad()
def validate(model, loader):
    model.eval()
    total = torch.zeros(2)
    for x, y in loader:
        with torch.cuda.amp.autocast():  # float16 by default on CUDA: only a forward here
            total += torch.stack([nn.functional.mse_loss(model(x), y, reduction="sum"), torch.tensor(len(y))])
    dist.all_reduce(total)
    return total


def train(net, loader, held_out, optimizer):
    model = DDP(net)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    validate(model, held_out)
