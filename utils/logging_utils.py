"""A rank-aware logger: rank 0 speaks for the job, every rank only when you ask for it.

Under DDP every rank runs the same script, so a plain ``print`` or ``logging`` call shows
each line once per rank, in an order that changes from run to run. ``get_logger()``
returns a standard ``logging.Logger`` whose handler lets rank 0's records through only;
``get_logger(name, all_ranks=True)`` lets every rank's through, each prefixed with
``[rank N]``, for the moments (debugging a hang, a per-rank metric) when you want them all.

The rank is looked up when a record is emitted, not when the logger is made, so a logger
created at import time, before ``init_process_group``, still knows who it is.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import torch.distributed as dist

from utils.distributed import DistributedSetupError, detect_launcher

RANK_PREFIX = "[rank %(rank)d] "


def current_rank() -> int:
    """This process's rank: from the process group if there is one, else from the
    launcher's environment variables (so it is right before setup_distributed() too)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return detect_launcher().rank
    except DistributedSetupError:
        return 0


# --8<-- [start:rank_filter]
class RankFilter(logging.Filter):
    """Stamps each record with its rank; drops the records of ranks other than 0
    unless ``all_ranks``."""

    def __init__(self, all_ranks: bool = False) -> None:
        super().__init__()
        self.all_ranks = all_ranks

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = current_rank()
        return self.all_ranks or record.rank == 0
# --8<-- [end:rank_filter]


# --8<-- [start:get_logger]
def get_logger(
    name: str = "ddp", *, all_ranks: bool = False, level: int = logging.INFO,
    fmt: str = "%(message)s", stream: TextIO | None = None,
) -> logging.Logger:
    """A logger that writes on rank 0 only (``all_ranks=True``: on every rank, each line
    prefixed with ``[rank N]``).

    Calling it again with the same name reconfigures the same logger instead of adding a
    second handler (which would print every line twice). ``fmt`` is a ``logging`` format
    string; ``%(rank)d`` is available in it. Records do not propagate to the root logger,
    so a library's ``logging.basicConfig`` cannot duplicate them.
    """
    logger = logging.getLogger(name)
    for handler in [h for h in logger.handlers if getattr(h, "_rank_aware", False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stdout)  # flushes per record
    handler._rank_aware = True  # type: ignore[attr-defined]  # marks the handler as ours
    handler.addFilter(RankFilter(all_ranks))
    handler.setFormatter(logging.Formatter((RANK_PREFIX if all_ranks else "") + fmt))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger
# --8<-- [end:get_logger]
