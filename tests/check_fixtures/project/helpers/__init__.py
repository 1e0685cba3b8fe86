"""A package of helpers for tests/test_check_ddp.py's project fixture: re-exports, as real
packages do."""

from .dist import *  # noqa: F403
from .io import save_checkpoint, save_on_master

__all__ = ["save_checkpoint", "save_on_master"]
