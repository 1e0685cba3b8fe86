"""What chapter 16's scripts share: a model of repeated blocks, FSDP2 sharding, byte counts.

- ``BlockModel``: an input layer, ``num_blocks`` identical residual MLP blocks (the shape of
  a transformer's layer stack, without attention) and a classifier head. Every weight's
  first dimension divides by 1, 2 and 4, so FSDP2's dim-0 shards are exactly 1/N each.
- ``shard_model()``: ``fully_shard`` on each block, then on the root (FSDP2).
- ``local_bytes()``: the bytes a rank holds for a set of tensors (a DTensor counts its
  local shard only), the measurement behind the chapter's memory table.
- ``add_fsdp_args()``: the scripts' flags.
- ``global_batch_slice()``: this rank's share of a global batch, so that a run gives the
  same updates (up to rounding) at any world size.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from utils.cli import positive_float, positive_int

NUM_FEATURES, NUM_CLASSES = 32, 4  # utils.data.synthetic_classification's defaults


class Block(nn.Module):
    """A pre-norm residual MLP: x + W2 gelu(W1 norm(x)), a transformer layer's second half."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class BlockModel(nn.Module):
    """Input layer, ``num_blocks`` repeated blocks, classifier head."""

    def __init__(self, dim: int = 64, hidden: int = 256, num_blocks: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(NUM_FEATURES, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(num_blocks))
        self.head = nn.Linear(dim, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build_model(seed: int, device: torch.device) -> BlockModel:
    """The same initial weights on every rank and in every run with this seed."""
    torch.manual_seed(seed)
    return BlockModel().to(device)


# --8<-- [start:shard_model]
def shard_model(model: BlockModel, mesh: DeviceMesh, *, precision: str = "fp32",
                reshard_after_forward: bool = True) -> BlockModel:
    """FSDP2: each block becomes one unit (one all-gather, one reduce-scatter), then the root
    takes what is left (embed, head). Bottom-up: a unit owns the parameters that no unit
    inside it owns already. The model is changed in place and returned."""
    mp_policy = MixedPrecisionPolicy()  # fp32 everywhere: the same numbers as DDP
    if precision == "bf16":
        # Compute and all-gather in bf16; reduce gradients in fp32; the sharded parameters
        # the optimizer updates stay fp32.
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp_policy,
                    reshard_after_forward=reshard_after_forward)
    # The root's reshard_after_forward is left at its default: its parameters are needed
    # again right at the start of backward, so FSDP2 keeps them.
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    return model
# --8<-- [end:shard_model]


# --8<-- [start:local_bytes]
def local_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes this rank holds for these tensors: a DTensor (FSDP2's sharded parameter,
    gradient, optimizer state) counts only its local shard."""
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        total += local.numel() * local.element_size()
    return total


def memory_row(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Parameters, gradients and Adam's two moments (exp_avg, exp_avg_sq), in bytes on
    this rank. Adam's per-tensor `step` counters (4 bytes each) are left out."""
    params = list(model.parameters())
    moments = [optimizer.state[p][key] for p in params if p in optimizer.state
               for key in ("exp_avg", "exp_avg_sq")]
    row = {"params": local_bytes(params), "grads": local_bytes(p.grad for p in params),
           "adam": local_bytes(moments)}
    row["total"] = sum(row.values())
    return row
# --8<-- [end:local_bytes]


def unsharded_bytes(model: nn.Module) -> int:
    """Bytes of the parameters that are whole (not DTensor shards) right now: between
    forward and backward, what FSDP2 kept gathered."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def add_fsdp_args(parser: argparse.ArgumentParser, *, epochs: int) -> argparse.ArgumentParser:
    """--epochs, --global-batch-size (instead of the per-rank --batch-size of the other
    chapters: a step's samples over all ranks, split equally, so that every world size trains
    on the same batches), --lr, --num-samples."""
    parser.add_argument("--epochs", type=positive_int, default=epochs, help="epochs (default: %(default)s)")
    parser.add_argument("--global-batch-size", type=positive_int, default=64,
                        help="samples per step over all ranks, split equally (default: %(default)s)")
    parser.add_argument("--lr", type=positive_float, default=1e-3,
                        help="learning rate (default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=256,
                        help="size of the synthetic data set (default: %(default)s)")
    return parser


def global_batch_slice(step: int, global_batch: int, num_samples: int, rank: int,
                       world_size: int, seed: int, epoch: int) -> torch.Tensor:
    """Indices of this rank's share of global batch `step` of `epoch`: the global batches
    (a permutation fixed by seed and epoch) do not depend on the world size, and rank r
    takes the r-th of N equal slices, so N ranks compute the gradient of the same global
    batch whatever N is."""
    if global_batch % world_size:
        raise SystemExit(f"--global-batch-size {global_batch} does not divide by the world size "
                         f"{world_size}: pick a multiple of it.")
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    batch = order[step * global_batch:(step + 1) * global_batch]
    per_rank = global_batch // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]
