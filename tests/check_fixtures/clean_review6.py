"""Right code that a fourth review found flagged, for tests/test_check_ddp.py (no finding, no
note): one name first holds the resumed file (its step counter, the same on every rank), then,
further down, a dict that holds this rank's best loss for the next save; a sample drawn from
the plain model for a log only, whose output never reaches backward(). Written for the tests;
never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(max_steps, resume):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step, lowest = 0, float("inf")
    if resume:
        saved = torch.load("last.pt", map_location="cpu")
        step = saved["step"]  # read before `saved` is reused below: every rank's file
        model.module.load_state_dict(saved["weights"])
    saved = None
    while True:
        x, y = torch.randn(8, 8).cuda(), torch.randint(0, 2, (8,)).cuda()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < lowest:
            lowest = loss.item()
            saved = {"weights": model.module.state_dict(), "step": step, "lowest": lowest}
            if dist.get_rank() == 0:
                torch.save(saved, "last.pt")
        if dist.get_rank() == 0 and step % 100 == 0:
            preview = model.module(x[:1])  # one sample for the log, never trained on
            print(f"step {step} loss {loss.item():.4f} preview {preview.argmax().item()}")
        step += 1
        if step >= max_steps:
            break
