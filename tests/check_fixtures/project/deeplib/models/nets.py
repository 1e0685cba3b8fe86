"""Networks, and a factory of models that know how to load their weights."""

import torch
from torch import nn


def make_net():
    return nn.Linear(8, 2)


class BaseModel:
    def __init__(self, opt):
        self.opt = opt
        self.net = make_net()

    def load_weights(self, path):
        weights = torch.load(path)  # no map_location
        self.net.load_state_dict(weights)

    def read_table(self, path):
        return torch.load(path)  # a file of data, no checkpoint: nothing to say


class PlainModel(BaseModel):
    def init_train(self):
        self.load()

    def load(self):
        if self.opt["pretrained"]:
            self.load_weights(self.opt["pretrained"])
        self.read_table("table.pt")


class GanModel(BaseModel):
    def init_train(self):
        self.net.train()


def define_model(opt):
    if opt["kind"] == "plain":
        model = PlainModel(opt)
    else:
        model = GanModel(opt)
    return model
