"""A Trainer that wraps its model in DDP, resumes from a checkpoint and trains in float16."""

import torch
from torch.nn.parallel import DistributedDataParallel

from deeplib.models.nets import make_net


class Trainer:
    def __init__(self, config):
        self.rank = config.values["rank"]
        self.model = DistributedDataParallel(make_net().cuda(), device_ids=[self.rank])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def resume(self, path):
        state = torch.load(path)  # no map_location: back to the GPU that saved it
        self.model.module.load_state_dict(state["model"])

    def fit(self):
        self.resume("last.pt")
        for _ in range(10):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(torch.randn(4, 8).cuda()).square().mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
        torch.save(self.model.module.state_dict(), "last.pt")  # on every rank
