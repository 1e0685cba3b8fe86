"""Layers a model of the project builds, re-exported with `*` (for tests/test_check_ddp.py)."""

from .common import *  # noqa: F403
