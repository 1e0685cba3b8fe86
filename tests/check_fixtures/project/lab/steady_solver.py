"""A solver that sets the sampler's epoch itself (what set_epoch does) and autocasts with a
dtype property that is never float16; it trains on the scorers' loaders too (no
evaluation reads them)."""

import torch

from .progress import Progress


class SteadySolver:
    def __init__(self, loaders, model, optimizer, cfg, scorers=()):
        self.train_loader = loaders["train"]
        self.model, self.optimizer, self.cfg, self.scorers = model, optimizer, cfg, scorers

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.run_epoch(epoch)
            for scorer in self.scorers:
                for x, y in iter(scorer.score_loader):
                    (self.model(x.cuda()) - y.cuda()).pow(2).mean().backward()

    def run_epoch(self, epoch):
        loader = self.train_loader
        loader.sampler.epoch = epoch
        for x, y in Progress(loader):
            with torch.autocast("cuda", dtype=self.cfg.wide_dtype):
                loss = (self.model(x.cuda()) - y.cuda()).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
