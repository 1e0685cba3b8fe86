"""The same library, where nothing is wrong to say: the factory's loading method called on rank
0 alone, a table of data read with torch.load (no checkpoint), the launch helper named in full
(the one without a port). Written for the tests; never run: it only has to parse."""

import os

import torch
from deeplib.dist import launchers
from deeplib.models.nets import define_model
from torch.nn.parallel import DistributedDataParallel


def main():
    rank = int(os.environ["RANK"])
    getattr(launchers, "init_dist_pytorch")(29400)  # noqa: B009 (the shape under test)
    model = define_model({"kind": "plain", "pretrained": "weights.pt"})
    if rank == 0:
        model.init_train()
    model.read_table("table.pt")
    net = DistributedDataParallel(model.net.cuda())
    loss = net(torch.randn(4, 8).cuda()).square().mean()
    loss.backward()


if __name__ == "__main__":
    main()
