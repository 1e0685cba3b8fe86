"""Are the replicas still identical? Per-rank checksums of a model, compared across ranks.

DDP keeps every rank's replica identical in three ways: the constructor broadcasts rank 0's
parameters and buffers, every ``backward()`` after a ``forward()`` through the wrapper
all-reduces the gradients (so every optimizer takes the same step), and every ``forward()``
through the wrapper broadcasts rank 0's buffers. Bypass one of them and nothing fails: the
replicas drift apart in silence. ``verify_replicas()`` makes the drift visible::

    report = verify_replicas(model)   # on every rank: it is a collective
    print0(report)                    # "replicas identical: 2 rank(s) agree on 4 tensors ..."
    if not report.identical:
        ...                           # report.differing_ranks, report.differing_tensors

Each rank reduces each of its parameters and buffers to one float64 checksum, the ranks
all-gather these short vectors (one number per tensor), and every rank compares them with
rank 0's. The cost is one pass over the model's tensors and two all-gathers of a few
numbers, far less than a training step: cheap enough for every few hundred steps, or every
step while debugging. ``max_parameter_difference()`` then says by how much the replicas
differ, at the price of broadcasting the whole model.

A checksum is not a hash: two different tensors can have the same checksum, though not by
the usual ways replicas drift (skipped gradient synchronization, a different seed, a
checkpoint loaded on one rank only). Exact comparison assumes every rank computes the sums
the same way (the same kind of device and the same number of CPU threads); otherwise pass
a small ``tolerance``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from utils.checkpoint import unwrap_model


# --8<-- [start:checksum]
def _named_tensors(module: nn.Module, include_buffers: bool) -> list[tuple[str, torch.Tensor]]:
    module = unwrap_model(module)  # through DDP / torch.compile: names without "module."
    named = list(module.named_parameters())
    return named + list(module.named_buffers()) if include_buffers else named


def _weighted_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum of the elements in float64, element i of n weighted by 1 + i/n: the weights see
    a swap of two elements, and a change that keeps the plain sum (under cross-entropy the
    last layer's bias always sums to its initial value)."""
    values = tensor.detach().reshape(-1).to(torch.float64)
    weights = torch.linspace(1.0, 2.0, values.numel(), dtype=torch.float64, device=values.device)
    return torch.dot(values, weights)


def tensor_checksums(module: nn.Module, *, include_buffers: bool = True) -> tuple[list[str], torch.Tensor]:
    """The names of ``module``'s parameters (then buffers) and a float64 vector with one
    checksum per tensor, on the device of the first one. DDP-wrapped or plain."""
    named = _named_tensors(module, include_buffers)
    device = named[0][1].device if named else torch.device("cpu")  # gpu-checked
    with torch.no_grad():
        sums = [_weighted_sum(tensor).to(device) for _, tensor in named]
    return [name for name, _ in named], torch.stack(sums) if sums else torch.zeros(0, dtype=torch.float64)


def parameter_checksum(module: nn.Module, *, include_buffers: bool = True) -> torch.Tensor:
    """One float64 number (a 0-d tensor) for the whole model, its parameters and buffers:
    equal on every rank while the replicas are identical."""
    return tensor_checksums(module, include_buffers=include_buffers)[1].sum()
# --8<-- [end:checksum]


@dataclass(frozen=True)
class ReplicaReport:
    """What verify_replicas() found; the same on every rank that called it.

    ``ranks`` lists the group's ranks (global numbers) in group order; ``checksums[i]`` is
    rank ``ranks[i]``'s parameter_checksum(). Each rank is compared with the first, rank 0
    for the default group, tensor by tensor.
    """

    ranks: tuple[int, ...]
    checksums: tuple[float, ...]
    tensor_counts: tuple[int, ...]
    differing_ranks: tuple[int, ...]
    differing_tensors: tuple[str, ...]

    @property
    def identical(self) -> bool:
        """True when every rank's tensors match the first rank's."""
        return not self.differing_ranks

    @property
    def reference_rank(self) -> int:
        return self.ranks[0]

    @property
    def max_difference(self) -> float:
        """The largest |checksum - reference checksum| over the ranks (0.0 when identical)."""
        reference = self.checksums[0]
        return max((abs(c - reference) for c in self.checksums if not math.isnan(c)), default=0.0)

    def __str__(self) -> str:
        tensors = self.tensor_counts[0]
        if self.identical:
            return (f"replicas identical: {len(self.ranks)} rank(s) agree on {tensors} tensors "
                    f"(checksum {self.checksums[0]:.10f})")
        if len(set(self.tensor_counts)) > 1:
            return (f"replicas DIFFER: not even the same model: tensors per rank "
                    f"{list(self.tensor_counts)} (ranks {list(self.ranks)})")
        names = ", ".join(self.differing_tensors[:4]) + (", ..." if len(self.differing_tensors) > 4 else "")
        return (f"replicas DIFFER: rank(s) {list(self.differing_ranks)} differ from rank "
                f"{self.reference_rank} in {len(self.differing_tensors)} of {tensors} tensors "
                f"({names}); checksums {[round(c, 10) for c in self.checksums]}")


def _gather(tensor: torch.Tensor, group: dist.ProcessGroup | None) -> list[torch.Tensor]:
    """all_gather on the device the group's backend takes (gloo: CPU; nccl: this GPU)."""
    if "gloo" in dist.get_backend(group):
        tensor = tensor.cpu()
    elif tensor.device.type == "cpu" and torch.cuda.is_available():  # gpu-checked
        tensor = tensor.cuda()  # gpu-checked: nccl moves GPU memory only (set_device was called)
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, tensor, group=group)
    return [t.cpu() for t in gathered]


# --8<-- [start:verify]
def verify_replicas(
    model: nn.Module, *, group: dist.ProcessGroup | None = None, include_buffers: bool = True,
    tolerance: float = 0.0,
) -> ReplicaReport:
    """Compare this rank's replica with every other rank's (of ``group``, default: all).

    A collective: call it on every rank of the group, at the same point; a rank that never
    comes makes the others fail after the group's timeout. ``model`` may be DDP-wrapped or
    plain, on CPU or GPU. Tensors compare equal when their float64 sums differ by at most
    ``tolerance``: 0.0, exactly equal, is right for DDP, whose replicas are bit for bit the same.
    Without a process group (one process) the report is one rank, identical.
    """
    names, sums = tensor_checksums(model, include_buffers=include_buffers)
    if not (dist.is_available() and dist.is_initialized()):
        return ReplicaReport((0,), (sums.sum().item(),), (len(names),), (), ())
    ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    # First the number of tensors: vectors of different lengths cannot be all-gathered.
    counts = [int(c.item()) for c in _gather(torch.tensor([len(names)], device=sums.device), group)]
    if len(set(counts)) > 1:
        differ = tuple(r for r, c in zip(ranks, counts, strict=True) if c != counts[0])
        return ReplicaReport(ranks, (math.nan,) * len(ranks), tuple(counts), differ, ())
    per_rank = _gather(sums, group)
    reference = per_rank[0]
    differing_ranks, differing = [], torch.zeros(len(names), dtype=torch.bool)
    for rank, rank_sums in zip(ranks, per_rank, strict=True):
        equal = torch.isclose(rank_sums, reference, rtol=0.0, atol=tolerance, equal_nan=True)
        if not bool(equal.all()):
            differing_ranks.append(rank)
            differing |= ~equal
    return ReplicaReport(
        ranks=ranks, checksums=tuple(s.sum().item() for s in per_rank), tensor_counts=tuple(counts),
        differing_ranks=tuple(differing_ranks),
        differing_tensors=tuple(name for name, d in zip(names, differing.tolist(), strict=True) if d),
    )
# --8<-- [end:verify]


# --8<-- [start:distance]
def max_parameter_difference(
    model: nn.Module, *, group: dist.ProcessGroup | None = None, include_buffers: bool = True,
) -> float:
    """The largest |difference| between an element of any rank's parameters (and buffers)
    and the same element on rank 0 (the group's first rank): 0.0 when identical, the same
    number on every rank. A collective.

    Exact where checksums only compare, and as costly as broadcasting the whole model: for
    debugging once verify_replicas() has found a difference, or for small models.
    """
    named = _named_tensors(model, include_buffers)
    if not (dist.is_available() and dist.is_initialized()) or not named:
        return 0.0
    source = dist.get_process_group_ranks(group or dist.group.WORLD)[0]
    largest = torch.zeros((), dtype=torch.float64, device=named[0][1].device)
    with torch.no_grad():
        for _, tensor in named:
            reference = tensor.detach().clone()
            dist.broadcast(reference, src=source, group=group)  # rank 0's values, on every rank
            if tensor.numel():
                difference = (tensor.to(torch.float64) - reference.to(torch.float64)).abs().max()
                largest = torch.maximum(largest, difference.to(largest.device))
    dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=group)
    return largest.item()
# --8<-- [end:distance]
