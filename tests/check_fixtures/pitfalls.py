"""A DDP script with the pitfalls no chapter's bad variant shows in this form, for
tests/test_check_ddp.py. A line that must be flagged ends with `# expect: CODE`; the
checker must flag exactly those (a `# noqa` line is a pitfall silenced on purpose).
Never run: it only has to parse."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

os.environ["MASTER_PORT"] = "29500"  # expect: DDP130


def main(num_samples, epochs, accumulation):
    dataset = TensorDataset(torch.randn(num_samples, 8), torch.randn(num_samples, 8))  # same on every rank
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")  # expect: DDP131
    loader = DataLoader(dataset, batch_size=32, shuffle=True)  # expect: DDP010
    quiet = DataLoader(dataset, batch_size=32, shuffle=True)  # noqa: DDP010
    sampler = DistributedSampler(dataset)  # expect: DDP030
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).cuda()  # expect: DDP070
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(epochs):
        for step, (x, y) in enumerate(DataLoader(dataset, sampler=sampler)):
            with torch.autocast("cuda"):  # expect: DDP060
                loss = nn.functional.mse_loss(model(x), y) / accumulation
            loss.backward()  # expect: DDP050
            if (step + 1) % accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
        if rank == 0:
            dist.barrier()  # expect: DDP020
            torch.save(model.state_dict(), "model.pt")  # expect: DDP041
        checkpoint = {"model": model.module.state_dict()}
        torch.save(checkpoint, "every_rank.pt")  # expect: DDP040
        torch.save(checkpoint, "meant.pt")  # noqa
        state = torch.load("model.pt")  # expect: DDP042
        model.module.load_state_dict(state)
        outputs = model.module(x)  # expect: DDP110
        outputs.sum().backward()
    token_mean(model, loader, optimizer, -100)
    token_mean_of_batches(model, loader, optimizer)
    del quiet, loader


def token_mean(model, loader, optimizer, pad):
    """Padded sequences: each rank's loss the mean over its own real tokens (chapter 18)."""
    criterion = nn.CrossEntropyLoss(ignore_index=pad)  # expect: DDP180
    for tokens, targets in loader:
        logits, flat = model(tokens).flatten(0, 1), targets.flatten()
        loss = nn.functional.cross_entropy(logits, flat, ignore_index=pad)  # expect: DDP180
        per_token = nn.functional.cross_entropy(logits, flat, reduction="none")
        mask = flat != pad
        masked = (per_token * mask).sum() / mask.sum()  # expect: DDP180
        (loss + masked + criterion(logits, flat)).backward()
        optimizer.step()


def token_mean_of_batches(model, loader, optimizer):
    """Batches as a tokenizer gives them, a dict: the mask named by a string key."""
    for batch in loader:
        logits = model(batch["input_ids"]).flatten(0, 1)
        per_token = nn.functional.cross_entropy(logits, batch["labels"].flatten(), reduction="none")
        masked = (per_token * batch["attention_mask"].flatten()).sum()
        (masked / batch["attention_mask"].sum()).backward()  # expect: DDP180
        optimizer.step()


if __name__ == "__main__":
    main(64, 2, 4)
