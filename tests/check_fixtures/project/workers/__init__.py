"""A package whose functions come from a star import (for tests/test_check_ddp.py)."""

from .worker import *  # noqa: F403
