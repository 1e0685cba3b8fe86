"""A solver that keeps the loaders and runs the epochs: it tells the loader its epoch (an
attribute torch never reads) and autocasts with the config's dtype, with no loss scaler."""

import torch

from .progress import Progress


class Solver:
    def __init__(self, loaders, model, optimizer, cfg):
        self.train_loader = loaders["train"]
        self.model, self.optimizer, self.cfg = model, optimizer, cfg

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.run_epoch(epoch)

    def run_epoch(self, epoch):
        loader = self.train_loader
        loader.epoch = epoch
        for x, y in Progress(loader):
            with torch.autocast("cuda", dtype=self.cfg.amp_dtype):
                loss = (self.model(x.cuda()) - y.cuda()).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
