"""Models built from classes of the project (for tests/test_check_ddp.py): a class imported
from a package whose blocks build BatchNorm (DDP070), and a class picked by a name from a
package where only some classes have BatchNorm (a note). Written for the tests; never run:
it only has to parse."""

import nets
import torch.distributed as dist
from nets import PlainNet
from torch.nn.parallel import DistributedDataParallel as DDP


def main(name):
    dist.init_process_group("gloo")
    model = PlainNet(8)
    ddp = DDP(model)  # expect: DDP070
    picked = getattr(nets, name)()
    picked = DDP(picked)  # expect: DDP070 note
    return ddp, picked
