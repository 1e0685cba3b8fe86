"""A loss scaler that runs backward() and steps the optimizer when told."""

import torch


class LossScaler:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, parameters=None, update_grad=True):
        self.scaler.scale(loss).backward()
        if update_grad:
            self.scaler.step(optimizer)
            self.scaler.update()
