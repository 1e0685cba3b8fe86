"""A language model's data on many processes: one token stream, split by columns.

Scripts like pytorch/examples' word_language_model read no Dataset. They cut one long stream
of tokens into columns (`batchify`) and walk down the rows in windows of --bptt tokens. With
DDP, each rank takes its own columns of the same matrix. One process with --batch-size 16 and
two with --batch-size 8 then train on the same 16 columns, window by window: the same global
batch. The held-out stream is cut into columns too, each rank evaluates its own, and one
all-reduce adds the token counts: every held-out token counted once, at any world size.
Plain PyTorch, synthetic tokens made from the seed (no download):
    python scripts/00_porting/token_stream.py --batch-size 16
    torchrun --standalone --nproc_per_node=2 scripts/00_porting/token_stream.py --batch-size 8
"""

import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - imported before the group exists (train_ddp.py: step 6)
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

VOCABULARY = 64
TRAIN_TOKENS, HELD_OUT_TOKENS = 16384, 4096  # the two synthetic streams


def make_stream(tokens, seed):
    """A stream with a rule to learn: the next token is (5 * token + 3) % 64, 9 times in 10."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, VOCABULARY, (tokens,), generator=generator).tolist()
    follows = (torch.rand(tokens, generator=generator) < 0.9).tolist()
    stream = [0]
    for i in range(1, tokens):
        stream.append((5 * stream[-1] + 3) % VOCABULARY if follows[i] else noise[i])
    return torch.tensor(stream)


def whole_number(text):
    """An argparse type: a whole number of at least 1; if not, exit 2 with a message."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def positive_number(text):
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


# --8<-- [start:split]
def batchify(stream, columns):
    """word_language_model's layout: the stream cut into `columns` equal columns, one per row
    of the result's transpose; what does not fill the last row is dropped."""
    rows = stream.numel() // columns
    return stream[: rows * columns].view(columns, rows).t().contiguous()  # (rows, columns)


def my_columns(data, rank, world_size, per_rank):
    """This rank's columns of the global batch: rank r takes columns r*b .. r*b + b - 1."""
    assert data.size(1) == per_rank * world_size, "the matrix has the global batch's columns"
    return data[:, rank * per_rank:(rank + 1) * per_rank]


def windows(data, bptt):
    """(input, target) windows down the rows; the target is the input shifted by one token."""
    for row in range(0, data.size(0) - 1, bptt):
        length = min(bptt, data.size(0) - 1 - row)
        yield data[row:row + length], data[row + 1:row + 1 + length]
# --8<-- [end:split]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=whole_number, default=16, help="columns per process")
    parser.add_argument("--bptt", type=whole_number, default=32, help="tokens per window")
    parser.add_argument("--epochs", type=whole_number, default=2)
    parser.add_argument("--lr", type=positive_number, default=0.5)
    parser.add_argument("--eval-columns", type=whole_number, default=10, help="held-out columns, in all")
    args = parser.parse_args()
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if TRAIN_TOKENS // (args.batch_size * world_size) < 2:  # a column needs an input and a target
        parser.error(f"--batch-size {args.batch_size} on {world_size} process(es) leaves columns of fewer "
                     f"than 2 of the {TRAIN_TOKENS} tokens: at most {TRAIN_TOKENS // 2 // world_size}")
    if HELD_OUT_TOKENS // args.eval_columns < 2:
        parser.error(f"--eval-columns: at most {HELD_OUT_TOKENS // 2}, got {args.eval_columns}")
    # 1. The group (one process without torchrun: a group of one, no address needed).
    store = None if world_size > 1 else dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(minutes=5))
    # --8<-- [start:data]
    # 2. The data: the global batch's columns, this rank's share of them; the held-out columns
    # dealt round the ranks (10 columns on 3 ranks: 4, 3 and 3), so none is counted twice.
    columns = args.batch_size * world_size  # the global batch: the same at any world size
    stream = make_stream(TRAIN_TOKENS, seed=0)
    train = my_columns(batchify(stream, columns), rank, world_size, args.batch_size)
    held_out = batchify(make_stream(HELD_OUT_TOKENS, seed=1), args.eval_columns)[:, rank::world_size]
    # --8<-- [end:data]
    if rank == 0:
        print(f"world_size={world_size}: {columns} columns of {train.size(0)} tokens "
              f"({args.batch_size} per rank), windows of {args.bptt}; held-out: {args.eval_columns} "
              f"columns of {held_out.size(0)} tokens", flush=True)
    # 3. The model (a small one: the lesson is the data), wrapped in DDP, and plain SGD.
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Embedding(VOCABULARY, 32), nn.Tanh(), nn.Linear(32, VOCABULARY)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    # 4. Train: each rank's windows hold the same number of tokens, so DDP's average of the
    # ranks' mean losses is the mean over the global batch. Step 0: the check of a port.
    step = 0
    for epoch in range(args.epochs):
        totals = torch.zeros(2)  # sum of the losses, tokens
        for inputs, targets in windows(train, args.bptt):
            loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if step == 0:  # the global batch's loss (the ranks' equal-sized means, averaged)
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
                if rank == 0:
                    print(f"step 0: loss {mean.item() / world_size:.6f} gradient norm {norm.item():.6f}",
                          flush=True)
            optimizer.step()
            totals += torch.tensor([loss.item() * targets.numel(), targets.numel()])
            step += 1
        # --8<-- [start:evaluate]
        # 5. Evaluate: each rank its held-out columns, sums of losses and tokens, one all-reduce.
        counts = torch.zeros(2)  # sum of the losses, tokens
        with torch.no_grad():
            for inputs, targets in windows(held_out, args.bptt):
                logits = model.module(inputs).flatten(0, 1)  # the plain model: no collective
                summed = nn.functional.cross_entropy(logits, targets.flatten(), reduction="sum")
                counts += torch.tensor([summed, targets.numel()])
        dist.all_reduce(totals)
        dist.all_reduce(counts)  # every held-out token once
        # --8<-- [end:evaluate]
        if rank == 0:
            print(f"epoch {epoch}: loss {totals[0] / totals[1]:.4f} over {int(totals[1])} tokens, held-out "
                  f"loss {counts[0] / counts[1]:.4f} over {int(counts[1])} tokens, step {step}", flush=True)
    if rank == 0:
        print(f"summary: world_size={world_size} global_batch={columns} steps={step} "
              f"train_tokens={int(totals[1])} held_out_tokens={int(counts[1])} "
              f"held_out_loss={counts[0] / counts[1]:.4f}", flush=True)
    # 6. Done: leave the group together.
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
