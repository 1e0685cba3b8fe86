"""Two experiment classes that a script picks through a variable (`Exp = Forecast`)."""

import torch


class Forecast:
    def __init__(self, model, loader):
        self.model, self.loader = model, loader

    def fit(self, path):
        self.model.load_state_dict(torch.load(path))  # the saving GPU's device, on every rank


class Impute:
    def __init__(self, model, loader):
        self.model, self.loader = model, loader

    def fit(self, path):
        self.model.load_state_dict(torch.load(path, map_location="cpu"))


class SteadyForecast(Forecast):
    def fit(self, path):
        self.model.load_state_dict(torch.load(path, map_location="cpu"))
