"""An FSDP1 model at its default state_dict type (the whole model, gathered): its own save by
rank 0 is right; its optimizer's state_dict() holds this rank's shards all the same (the
`# expect:` comment). Written for the tests; never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main(steps):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = FSDP(nn.Linear(8, 2).cuda())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8).cuda()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = model.state_dict()
    if dist.get_rank() == 0:
        torch.save(weights, "model.pt")
    torch.save(optimizer.state_dict(), f"optimizer.{dist.get_rank()}.pt")  # expect: DDP160


if __name__ == "__main__":
    main(10)
