"""A solver that keeps the loaders and runs the epochs: it tells the loader its epoch (an
attribute torch never reads) and autocasts with the config's dtype, with no loss scaler; it
scores each scorer's loader in evaluate()."""

import torch

from .progress import Progress


class Solver:
    def __init__(self, loaders, model, optimizer, cfg, scorers=()):
        self.train_loader = loaders["train"]
        self.model, self.optimizer, self.cfg, self.scorers = model, optimizer, cfg, scorers

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.run_epoch(epoch)
            self.evaluate()

    def evaluate(self):
        self.model.eval()
        for scorer in self.scorers:
            batches = iter(scorer.score_loader)
            error = 0.0
            for x, y in batches:
                with torch.no_grad():
                    error += (self.model(x.cuda()) - y.cuda()).abs().sum().item()
            print(scorer.label, error)
        self.model.train()

    def run_epoch(self, epoch):
        loader = self.train_loader
        loader.epoch = epoch
        for x, y in Progress(loader):
            with torch.autocast("cuda", dtype=self.cfg.amp_dtype):
                loss = (self.model(x.cuda()) - y.cuda()).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
