"""Two wraps in two branches (apex's DDP or torch's), then the model inside saved by rank 0:
`self.student.module if hasattr(self.student, "module") else self.student`. The inside is no
wrapper, whichever branch ran. Nothing to say. Written for the tests; never run: it only has to
parse."""

import os

import torch
import torch.distributed as dist


class Distiller:
    def __init__(self, student, use_apex):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        self.is_master = dist.get_rank() == 0
        self.student = student
        if use_apex:
            from apex.parallel import DistributedDataParallel

            self.student = DistributedDataParallel(self.student)
        else:
            from torch.nn.parallel import DistributedDataParallel

            self.student = DistributedDataParallel(self.student)

    def save_checkpoint(self):
        if not self.is_master:
            return
        inside = self.student.module if hasattr(self.student, "module") else self.student
        torch.save(inside.state_dict(), "checkpoint.pth")


if __name__ == "__main__":
    Distiller(torch.nn.Linear(8, 2).cuda(), use_apex=False).save_checkpoint()
