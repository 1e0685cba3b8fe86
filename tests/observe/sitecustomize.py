"""Who wrote what: loaded by every Python process a test starts with this folder on
PYTHONPATH (tests/conftest.py's `observed_writes()`), torchrun's and mpiexec's ranks included.

For each write into the directory OBSERVE_WRITES_DIR it appends a line to a log of its own
in OBSERVE_WRITES_LOG: the rank of the process that wrote (from the process group once
there is one), what it did, and the path. A test then counts per rank what reached the
file system, instead of trusting a counter the script keeps about itself.

Seen: Python's open() for writing and os.rename/os.replace (audit events), and
torch.save() to a path, which torch writes from C++ where no audit event sees it (recorded
when the save returns and the file is there).
"""

from __future__ import annotations

import builtins
import os
import sys

WATCH = os.environ.get("OBSERVE_WRITES_DIR")
LOG = os.environ.get("OBSERVE_WRITES_LOG")


def _rank() -> str:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return str(dist.get_rank())
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if name in os.environ:
            return os.environ[name]
    return "0"


def _watched(path: object) -> str | None:
    if isinstance(path, (str, bytes, os.PathLike)):
        text = os.path.abspath(os.fsdecode(path))
        if text.startswith(WATCH + os.sep):
            return text
    return None


def _record(*fields: str) -> None:
    line = "\t".join((_rank(), *fields)) + "\n"
    fd = os.open(os.path.join(LOG, f"{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _audit(event: str, args: tuple) -> None:
    if event == "open" and (path := _watched(args[0])):
        mode, flags = args[1], args[2]
        if (mode and any(c in mode for c in "wax+")) or (flags & (os.O_WRONLY | os.O_RDWR)):
            _record("open", path)
    elif event == "os.rename" and (_watched(args[0]) or _watched(args[1])):
        _record("rename", os.path.abspath(os.fsdecode(args[0])), os.path.abspath(os.fsdecode(args[1])))


def _wrap_torch_save(torch) -> None:
    save = torch.save

    def observed_save(obj, f, *args, **kwargs):
        result = save(obj, f, *args, **kwargs)
        # Recorded once the save returned (a failed one raises). Not by the file's size: in
        # the bad variant every rank writes the same file, and another rank's save may have
        # just truncated it.
        if (path := _watched(f)) and os.path.exists(path):
            _record("save", path)
        return result

    torch.save = observed_save


def _import_hook() -> None:
    real_import = builtins.__import__

    def observed_import(name, *args, **kwargs):
        module = real_import(name, *args, **kwargs)
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "save") and not getattr(torch, "_observed", False):
            torch._observed = True
            _wrap_torch_save(torch)
            builtins.__import__ = real_import  # done: imports go back to normal speed
        return module

    builtins.__import__ = observed_import


if WATCH and LOG:
    WATCH = os.path.abspath(WATCH)
    sys.addaudithook(_audit)
    _import_hook()
