"""What the checker cannot tell from one file, said as notes, for tests/test_check_ddp.py: a
line ends with `# expect: CODE note`, and the checker must give exactly those notes and no
error or warning. Each is right in one case and a pitfall in another: the data may be split
by rank in another file, the other file's evaluation may drop repeated samples, the
checkpoint goes back into the wrapper, a language model's windows may be full. Written for
the tests; never run: it only has to parse."""

import argparse

import torch
import torch.distributed as dist
from my_project.data import build_dataset
from my_project.engine import evaluate
from my_project.utils import init_distributed_mode
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler


def batchify(tokens, columns):
    rows = tokens.size(0) // columns
    return tokens[: rows * columns].view(columns, -1).t().contiguous()


def evaluate_stream(model, data, bptt):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):  # expect: DDP032 note
            targets = data[i + 1:i + 1 + bptt].flatten()
            total += nn.functional.cross_entropy(model(data[i:i + bptt]), targets).item()
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bptt", type=int, default=35)
    args = parser.parse_args()
    init_distributed_mode(args)  # sets args.rank: build_dataset(args) may split by it
    train_set = build_dataset(args)
    val_set = build_dataset(args, train=False)
    loader = DataLoader(train_set, batch_size=32, shuffle=True)  # expect: DDP010 note
    val_sampler = DistributedSampler(val_set, shuffle=False)  # expect: DDP031 note
    val_loader = DataLoader(val_set, batch_size=32, sampler=val_sampler)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 8).cuda(), device_ids=[args.gpu])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.load_state_dict(torch.load("checkpoint.pt", map_location="cpu")["model"])
    for x, y in loader:
        logits = model(x).flatten(0, 1)
        loss = nn.functional.cross_entropy(logits, y.flatten(), ignore_index=-1)  # expect: DDP180 note
        loss.backward()
        optimizer.step()
    evaluate(model, val_loader)
    # a token stream: every rank reads all of it
    train_data = batchify(torch.arange(10_000), 20)
    for i in range(0, train_data.size(0) - 1, args.bptt):  # expect: DDP010 note
        chunk = train_data[i:i + args.bptt]
        nn.functional.mse_loss(model(chunk.float()), chunk.float()).backward()
        optimizer.step()
    evaluate_stream(model, batchify(torch.arange(2_000), 10), args.bptt)
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict()}, "checkpoint.pt")  # expect: DDP041 note


if __name__ == "__main__":
    main()
