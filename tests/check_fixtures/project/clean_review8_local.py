"""One process: the library's model-parallel class, told not to wrap in DDP, and no group
started anywhere it reaches. A DDP wrap somewhere in the library is no distributed job, so its
torch.load without map_location is no finding. Written for the tests; never run: it only has to
parse."""

import torch
from deeplib.parallel import ModelParallel
from torch import nn


def infer():
    state = torch.load("model.pt")
    net = nn.Linear(8, 2)
    net.load_state_dict(state)
    model = ModelParallel(net, init_data_parallel=False)
    print(model.module(torch.randn(4, 8)))


if __name__ == "__main__":
    infer()
