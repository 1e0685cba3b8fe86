"""Seeing what DDP sends: a counting communication hook and the bytes on the wire.

A DDP communication hook is called once per gradient bucket, with the bucket's flattened
gradients; whatever it returns (a future of the reduced tensor) is what DDP copies back
into ``param.grad``. The counting hook below counts the bucket, then does exactly what
DDP does without a hook: average the bucket over the ranks with one all_reduce.

Chapters 05, 06 and 10 register it to count all-reduces and bytes per step::

    counter = AllReduceCounter()
    model.register_comm_hook(counter, counting_allreduce_hook)  # counter: the hook's state
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at
# register time and wants the real dist.GradBucket class, not a string.
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


# --8<-- [start:hook]
@dataclass
class AllReduceCounter:
    """What DDP sent: all-reduce calls, their bytes, and which buckets."""

    calls: int = 0
    bytes: int = 0
    buckets: set[int] = field(default_factory=set)


def counting_allreduce_hook(
    counter: AllReduceCounter, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: count the bucket, then do DDP's normal all-reduce
    (average the bucket's gradients over the ranks)."""
    tensor = bucket.buffer()  # fp32, or fp16/bf16 when a compress wrapper cast it first
    counter.calls += 1
    counter.bytes += tensor.numel() * tensor.element_size()
    counter.buckets.add(bucket.index())
    return default_hooks.allreduce_hook(None, bucket)  # None: the default process group
# --8<-- [end:hook]


def bytes_written_by_this_process() -> int | None:
    """Bytes this process has written to files and sockets (Linux: /proc/self/io), or None.

    gloo sends over TCP sockets, so the growth of this number during training is the
    traffic the all-reduces put on the wire. NCCL moves GPU memory without it.
    """
    try:
        with open("/proc/self/io", encoding="ascii") as handle:
            fields = dict(line.split(": ") for line in handle.read().splitlines() if ": " in line)
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of the gradients DDP all-reduces every step: every parameter that needs one."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
