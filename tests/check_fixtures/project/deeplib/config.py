"""A config that starts the process group from what it holds (its URL from the settings)."""

import torch
import torch.distributed as dist


class Config:
    def __init__(self, settings, rank):
        self.values = dict(settings, rank=rank)
        self.start_group()

    def start_group(self):
        url = "tcp://" + self.values["ip"] + ":" + str(self.values["port"])
        dist.init_process_group("nccl", init_method=url, rank=self.values["rank"],
                                world_size=self.values["nproc"])
        torch.cuda.set_device(self.values["rank"])
