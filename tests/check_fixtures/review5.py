"""The shapes behind a fresh review's misses and notes, in one file, for
tests/test_check_ddp.py: the optimizer step skipped with `continue` until the last
micro-batch (DDP050), and a resume checkpoint of DDP(torch.compile(model)) that this file
loads back into the same wrapper (its keys start with 'module.', then '_orig_mod.': a note,
not DDP150). Exactly the `# expect:` lines. Written for the tests; never run: it only has
to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(epochs, accumulation, resume):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = torch.compile(nn.Linear(8, 2).cuda())
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if resume:
        model.load_state_dict(torch.load("resume.pt", map_location="cuda"))
    micro_batches = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            micro_batches += 1
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda()) / accumulation
            loss.backward()  # expect: DDP050
            if micro_batches % accumulation != 0:
                continue
            optimizer.step()
            optimizer.zero_grad()
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "resume.pt")  # expect: DDP041 note
        dist.barrier()


if __name__ == "__main__":
    main(3, 4, os.path.exists("resume.pt"))
