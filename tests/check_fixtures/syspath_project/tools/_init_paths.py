"""Puts the project's lib/ folder on sys.path, as many research repositories do before their
imports (for tests/test_check_ddp.py; never run)."""

import os.path as osp
import sys


def add_path(path):
    if path not in sys.path:
        sys.path.insert(0, path)


here = osp.dirname(__file__)
add_path(osp.join(here, "..", "lib"))
