"""Checks of flags that depend on each other, on the machine or on the world size: a usage
error printed once, by rank 0, and exit 2 on every rank (before or after setup_distributed()).

Each check depends on the flags and the world size only, so every rank comes to the same
answer without talking to the others: no collective to wait in, no hang
(utils/cli.py usage_error()).
"""

from __future__ import annotations

from pathlib import Path

from utils.cli import usage_error
from utils.distributed import DistributedContext


def _ranks(world_size: int) -> str:
    return f"{world_size} rank{'s' if world_size != 1 else ''}"


def check_global_batch(ctx: DistributedContext, num_samples: int, batch_size: int, *,
                       accumulation_steps: int = 1, batch_flag: str = "--batch-size",
                       per_rank: bool = True) -> None:
    """At least one global batch (one optimizer step, with accumulation) in the data set.
    `batch_size` is per rank, or (per_rank=False) the global batch already."""
    step = batch_size * accumulation_steps * (ctx.world_size if per_rank else 1)
    if num_samples >= step:
        return
    parts = f"{batch_flag} {batch_size}"
    if accumulation_steps != 1:
        parts += f" x --accumulation-steps {accumulation_steps}"
    if per_rank:
        parts += f" x {_ranks(ctx.world_size)}"
    usage_error(f"--num-samples {num_samples} is smaller than one optimizer step's samples ({parts} "
                f"= {step}): give --num-samples {step} or more, or a smaller {batch_flag}.")


def check_divisible(ctx: DistributedContext, flag: str, value: int) -> None:
    """`value` (a global count) splits equally over the ranks."""
    if value % ctx.world_size:
        usage_error(f"{flag} {value} does not split equally over {_ranks(ctx.world_size)}: give a "
                    f"multiple of {ctx.world_size}.")


def check_rank(ctx: DistributedContext, flag: str, rank: int | None) -> None:
    """`rank` (None: unset) is one of the job's ranks."""
    if rank is not None and not 0 <= rank < ctx.world_size:
        usage_error(f"{flag} {rank} is not a rank of this job of {_ranks(ctx.world_size)}: give 0 to "
                    f"{ctx.world_size - 1}.")


CIFAR10_FOLDER = "cifar-10-batches-py"  # torchvision.datasets.CIFAR10.base_folder


def check_cifar10_dir(data_dir: str | Path | None, download: bool) -> None:
    """--data-dir holds a CIFAR-10 copy (torchvision's layout), unless --download fetches one."""
    if data_dir is None or download or (Path(data_dir) / CIFAR10_FOLDER).is_dir():
        return
    usage_error(f"--data-dir {data_dir} has no CIFAR-10 in it (no {CIFAR10_FOLDER} folder): give the "
                "folder that holds it, or add --download to fetch it there.")
