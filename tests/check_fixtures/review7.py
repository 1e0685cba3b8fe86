"""Pitfalls that a fifth review found missed or mislabelled, for tests/test_check_ddp.py (the
`# expect:` comments): an FSDP1 model told to give its sharded state (set_state_dict_type with
SHARDED_STATE_DICT), then saved with torch.save. Written for the tests; never run: it only has
to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType


def main(steps):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = FullyShardedDataParallel(nn.Linear(8, 2).cuda())
    FullyShardedDataParallel.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8).cuda()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "model.pt")  # expect: DDP160


if __name__ == "__main__":
    main(10)
