"""A click-through model that trains itself: fit() wraps it in DDP and saves where it is given
a path; its BatchNorm is built only when asked (a ninth review's shape, for
tests/test_check_ddp.py). Written for the tests; never run."""

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class WideDeep(nn.Module):
    def __init__(self, features, hidden=32, use_bn=False, dropout=0.0):
        super().__init__()
        self.use_bn = use_bn
        self.embed = nn.Linear(features, hidden)
        if self.use_bn:
            self.norm = nn.BatchNorm1d(hidden)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        hidden = self.embed(x)
        if self.use_bn:
            hidden = self.norm(hidden)
        return self.head(self.drop(torch.relu(hidden)))

    def fit(self, x, y, epochs=2, save_path=None):
        model = DistributedDataParallel(self)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _epoch in range(epochs):
            optimizer.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
            loss.backward()
            optimizer.step()
            if save_path:
                torch.save(self.state_dict(), save_path)
        return loss.item()
