"""A solver that sets the sampler's epoch itself (what set_epoch does) and autocasts with a
dtype property that is never float16."""

import torch

from .progress import Progress


class SteadySolver:
    def __init__(self, loaders, model, optimizer, cfg):
        self.train_loader = loaders["train"]
        self.model, self.optimizer, self.cfg = model, optimizer, cfg

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.run_epoch(epoch)

    def run_epoch(self, epoch):
        loader = self.train_loader
        loader.sampler.epoch = epoch
        for x, y in Progress(loader):
            with torch.autocast("cuda", dtype=self.cfg.wide_dtype):
                loss = (self.model(x.cuda()) - y.cuda()).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
