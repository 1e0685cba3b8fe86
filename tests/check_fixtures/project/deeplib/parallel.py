"""A model-parallel class that may wrap its model in DDP, in a group its caller started."""

from torch.nn.parallel import DistributedDataParallel


class ModelParallel:
    def __init__(self, module, init_data_parallel=True):
        self.module = module
        if init_data_parallel:
            self.module = DistributedDataParallel(module)
