"""Early stopping objects, called like functions: stopper(loss, model, path)."""

import torch
import torch.distributed as dist


class Stopper:
    def __init__(self):
        self.best = None

    def __call__(self, loss, model, path):
        if self.best is None or loss < self.best:
            self.best = loss
            self.keep(model, path)

    def keep(self, model, path):
        torch.save(model.state_dict(), path)  # on every rank that calls it


class RankZeroStopper:
    def __init__(self):
        self.best = None

    def __call__(self, loss, model, path):
        if self.best is None or loss < self.best:
            self.best = loss
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), path)
