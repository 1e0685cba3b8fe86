import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class DDPBackend:
    def __init__(self, args):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(self.local_rank)

    def wrap(self, model):
        return DistributedDataParallel(model, device_ids=[self.local_rank])


class SingleBackend:
    def __init__(self, args):
        self.local_rank = 0

    def wrap(self, model):
        return model
