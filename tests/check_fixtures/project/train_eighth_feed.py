"""An eighth review's DDP010 shapes where the checker must still speak: a builder of the
project whose inner builder makes no sampler (every rank reads all the data: an error);
a builder of an installed package, out of the checker's sight (a note). Exactly the
`# expect:` lines. Written for the tests; never run: it only has to parse."""

import torch
import torch.distributed as dist
from helpers.feeds import make_plain_loader
from loaderkit import build_shuffled_loader
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset


def main(epochs):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    feed = make_plain_loader(data, shuffle=True)  # expect: DDP010
    extra = build_shuffled_loader(data, shuffle=True)  # expect: DDP010 note
    model = DDP(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(epochs):
        for (x, y), (u, v) in zip(feed, extra, strict=False):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y) + nn.functional.cross_entropy(model(u), v)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main(3)
