"""DDP's buffer broadcast against a positional-encoding table built as a transposed view.

Some Transformer examples build their table of positions as (positions, width), then turn it
into (positions, 1, width) with `.unsqueeze(0).transpose(0, 1)` and register it as a buffer.
Wrapped in DDP, such a model fails at its first forward, even as one process: DDP copies rank
0's buffers to every rank before each training forward, and the copy back into this table is
refused. The fix builds the same table with `.unsqueeze(1)`: the same shape and values, in
the usual memory layout. Plain PyTorch, one process (a group of one, as train_ddp.py makes):
    python scripts/00_porting/buffer_broadcast.py --variant bad    # PyTorch's error, exit 1
    python scripts/00_porting/buffer_broadcast.py --variant good
"""

import argparse
import math
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def seed(text):
    """An argparse type: a seed torch takes, a whole number from 0 to 2**32 - 1."""
    if not text.isdigit() or int(text) > 2**32 - 2:  # (the tokens take seed + 1)
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 4294967294, got {text!r}")
    return int(text)


def positional_table(positions, width, variant):
    """Sines and cosines of each position, as (positions, 1, width): one column per batch."""
    position = torch.arange(positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    # --8<-- [start:table]
    if variant == "bad":
        return table.unsqueeze(0).transpose(0, 1)  # a view: strides (width, positions * width, 1)
    return table.unsqueeze(1)  # the same shape and values, strides (width, width, 1)
    # --8<-- [end:table]


class TinyTransformer(nn.Module):
    """Embedding, the positions (the model's only buffer), one encoder layer, a linear head."""

    def __init__(self, variant, vocabulary=32, width=16, positions=64):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.register_buffer("positions", positional_table(positions, width, variant))
        self.encoder = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=32, dropout=0.0)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens):  # tokens: (sequence, batch), as word_language_model's
        return self.head(self.encoder(self.embed(tokens) + self.positions[: tokens.size(0)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=["bad", "good"], default="bad")
    parser.add_argument("--seed", type=seed, default=0, help="the weights' and the tokens' seed")
    args = parser.parse_args()
    # 1. A group of one (no launcher needed), and the model wrapped in DDP.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(args.seed)
    model = TinyTransformer(args.variant)
    table = model.positions
    print(f"variant={args.variant}: buffer shape {tuple(table.shape)} strides {table.stride()} "
          f"is_contiguous={table.is_contiguous()}; .contiguous() keeps strides {table.contiguous().stride()}")
    model = DDP(model)  # wrapping works: rank 0's parameters and buffers are copied together
    print("wrapped in DDP")
    # 2. The first training forward: DDP copies rank 0's buffers first.
    tokens = torch.randint(0, 32, (20, 4), generator=torch.Generator().manual_seed(args.seed + 1))
    try:
        loss = nn.functional.cross_entropy(model(tokens[:-1]).flatten(0, 1), tokens[1:].flatten())
        loss.backward()
    except RuntimeError as error:
        print(f"first forward failed: RuntimeError: {error}")
        code = 1
    else:
        print(f"first forward and backward: loss {loss.item():.4f}")
        code = 0
    # 3. Done: leave the group; a failure exits 1 with PyTorch's own message above.
    print(f"summary: variant={args.variant} world_size=1 first_forward={'ok' if code == 0 else 'failed'}")
    del model
    dist.destroy_process_group()
    sys.exit(code)


if __name__ == "__main__":
    main()
