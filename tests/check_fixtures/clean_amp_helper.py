"""float16 with the loss scaled by a helper class of the project's (it holds the GradScaler),
for tests/test_check_ddp.py (no finding). Never run: it only has to parse."""

import torch
import torch.distributed as dist
from my_project.utils import NativeScalerWithGradNormCount
from torch import nn


def train(model, loader, optimizer):
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
    loss_scaler = NativeScalerWithGradNormCount()
    for x, y in loader:
        with torch.cuda.amp.autocast(enabled=True):
            loss = nn.functional.mse_loss(model(x), y)
        loss_scaler(loss, optimizer, parameters=model.parameters())
        optimizer.zero_grad()
