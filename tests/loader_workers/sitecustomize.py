"""Loader workers on CPUs, as on a GPU: loaded by every Python process a test starts with this
folder on PYTHONPATH and LOADER_WORKERS_ON_CPU=N set (torchrun's ranks included).

utils/data.py's make_loader gives a rank's loader worker processes on a GPU only
(loader_workers(): none on a CPU). With this, every loader gets N of them, started through
the fork server as on a GPU, so that a CPU test can show what a GPU run does with them (a
rank killed by SIGKILL and its workers: tests/test_14_fault_tolerance.py).
"""

from __future__ import annotations

import builtins
import os
import sys

WORKERS = os.environ.get("LOADER_WORKERS_ON_CPU")


def _import_hook(workers: int) -> None:
    real_import = builtins.__import__

    def patching_import(name, *args, **kwargs):
        module = real_import(name, *args, **kwargs)
        data = sys.modules.get("utils.data")
        if data is not None and hasattr(data, "make_loader"):  # utils/data.py fully loaded
            data.loader_workers = lambda device, local_world_size=None: workers
            builtins.__import__ = real_import  # done: imports go back to normal speed
        return module

    builtins.__import__ = patching_import


if WORKERS:
    _import_hook(int(WORKERS))
