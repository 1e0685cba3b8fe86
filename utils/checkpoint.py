"""Checkpoints that survive DDP: one writer, a complete file or none, exact resume.

Call ``save_checkpoint()`` on every rank (it runs collectives), and ``load_checkpoint()``
on every rank that resumes (each reads the file, so it must be on a file system every node
sees):

- rank 0 alone writes, the state of the *unwrapped* model (keys without ``module.``), to a
  temporary file in the target directory that is then renamed over the old checkpoint, so
  the path always holds a complete checkpoint; every rank waits at a barrier until it has;
- the file holds what an exact resume needs: model, optimizer (and scheduler), the number
  of epochs done, and every rank's random-number-generator states;
- ``load_checkpoint()`` maps tensors onto this rank's device (``map_location``), loads
  into the unwrapped model, and restores this rank's RNG states.

``unwrap_model()`` and ``strip_prefixes()`` handle the wrappers' key prefixes
(``module.`` from DDP, ``_orig_mod.`` from torch.compile) for code that did not use these.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:  # numpy is optional: its RNG is saved and restored only where it is installed
    import numpy as np
except ImportError:  # pragma: no cover - numpy ships with most torch installs
    np = None

TEMP_PREFIX = "."  # atomic_torch_save's temporary files: hidden, next to the checkpoint
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP / DataParallel, torch.compile
StateDict = dict[str, Any]


# --------------------------------------------------------------------------- keys
# --8<-- [start:unwrap]
def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / DataParallel (``.module``) and torch.compile
    (``._orig_mod``), however deeply nested: the one whose state_dict has clean keys."""
    while True:
        if isinstance(model, (DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


def strip_prefixes(state_dict: Mapping[str, Any], prefixes: tuple[str, ...] = WRAPPER_PREFIXES) -> StateDict:
    """A copy of ``state_dict`` with wrapper prefixes removed from the front of every key,
    e.g. ``module.0.weight`` -> ``0.weight``: repairs checkpoints saved from the wrapper."""
    clean = {}
    for key, value in state_dict.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in prefixes:
                if key.startswith(prefix):
                    key, stripped = key[len(prefix):], True
        clean[key] = value
    return clean
# --8<-- [end:unwrap]


# --------------------------------------------------------------------------- RNG
def capture_rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """This process's RNG states: torch CPU, CUDA (of ``device``), Python, numpy.

    Stored as tensors, ints, lists and tuples only, so ``torch.load(weights_only=True)``
    can read them back.
    """
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = (kind, keys.tolist(), int(pos), int(has_gauss), float(cached))
    return state


# --8<-- [start:fingerprint]
def generator_states(device: torch.device | None = None) -> list[torch.Tensor]:
    """The states of the torch generators a run on ``device`` draws from: the CPU's
    (``torch.get_rng_state()``), and on a GPU the device's own (``torch.cuda.get_rng_state``),
    which dropout and ``torch.rand`` on CUDA tensors draw from. Python's and numpy's
    generators are left out: a script that draws from them fingerprints them too."""
    states = [torch.get_rng_state()]
    if device is not None and device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def fingerprint_states(states_per_rank: Sequence[Sequence[torch.Tensor]]) -> str:
    """Eight hex digits (CRC-32) of every rank's generator states, in rank order: they
    change when any generator of any rank moves."""
    data = b"".join(state.detach().cpu().contiguous().numpy().tobytes()
                    for states in states_per_rank for state in states)
    return f"{zlib.crc32(data):08x}"
# --8<-- [end:fingerprint]


def restore_rng_state(state: Mapping[str, Any], device: torch.device | None = None) -> None:
    """Undo capture_rng_state(): set this process's generators to the saved states."""
    torch.set_rng_state(state["torch"].cpu())  # map_location may have moved it to a GPU
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    if "numpy" in state and np is not None:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


# --------------------------------------------------------------------------- files
# --8<-- [start:atomic]
def atomic_torch_save(obj: Any, path: str | os.PathLike[str], *,
                      open_file: Callable[[Path], BinaryIO] | None = None) -> None:
    """torch.save() to a temporary file in the same directory, then rename it over
    ``path``. A rename within one file system is atomic: a reader (or a restarted job)
    sees the old checkpoint or the new one, never a half-written file; the previous
    checkpoint stays in place until the new one is complete. ``open_file(temp_path)``
    replaces ``open(temp_path, "wb")`` (chapter 14 passes one that dies mid-write)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # same directory: same file system, so the rename below is atomic
    temp_path = path.with_name(f"{TEMP_PREFIX}{path.name}.{os.getpid()}.tmp")
    try:
        with (open_file or _open_for_writing)(temp_path) as temp_file:
            torch.save(obj, temp_file)
            temp_file.flush()
            os.fsync(temp_file.fileno())  # the bytes are on disk before the name points at them
        os.replace(temp_path, path)
        _fsync_directory(path.parent)  # and the rename itself survives a crash of the node
    except BaseException:
        temp_path.unlink(missing_ok=True)  # a failed save leaves the previous checkpoint alone
        raise
# --8<-- [end:atomic]


def _open_for_writing(path: Path) -> BinaryIO:
    return open(path, "wb")


def _fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename is a change of the directory) to disk."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform or file system where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_partial_saves(directory: str | os.PathLike[str]) -> int:
    """Delete the temporary files of atomic saves that never finished (a process killed
    mid-write leaves one behind); returns how many. Call on one rank, before any saves."""
    partial = list(Path(directory).glob(f"{TEMP_PREFIX}*.tmp"))
    for temp_path in partial:
        temp_path.unlink(missing_ok=True)
    return len(partial)


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _model_device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")  # gpu-checked


# --8<-- [start:save]
def save_checkpoint(
    path: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
    *, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    extra: Mapping[str, Any] | None = None,
    write: Callable[[Any, Path], None] = atomic_torch_save,
) -> bool:
    """Save everything a resume needs; call on every rank. Returns True on the rank that
    wrote the file (rank 0).

    ``epoch`` is the number of epochs done (the resumed run starts at that index);
    ``extra`` holds anything else a resume needs (chapter 14: the step, the position in the
    epoch). ``write(checkpoint, path)`` writes the file: atomic_torch_save unless a caller
    wants another way (chapter 14 shows the unsafe one).
    """
    rank, world_size = _rank_and_world()
    # Every rank's RNG states, gathered to all (a collective: every rank must be here).
    rng_states: list[Any] = [None] * world_size
    my_rng = capture_rng_state(_model_device(model))
    if world_size > 1:
        dist.all_gather_object(rng_states, my_rng)
    else:
        rng_states = [my_rng]
    if rank == 0:
        checkpoint = {
            "model": unwrap_model(model).state_dict(),  # clean keys: no "module." prefix
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "epoch": epoch,
            "world_size": world_size,
            "rng": rng_states,
            "extra": dict(extra or {}),
        }
        write(checkpoint, Path(path))
    _barrier()  # nobody reads the checkpoint (or exits) before rank 0 has finished it
    return rank == 0
# --8<-- [end:save]


# --8<-- [start:load]
def load_checkpoint(
    path: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
    *, device: torch.device, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a save_checkpoint() file on every rank and return it (``["epoch"]`` is where
    to resume). Tensors land on ``device``, this rank's, not on the device that saved them.

    RNG states are restored per rank when the world size is the one that saved them;
    otherwise they are left alone (the returned ``["rng_restored"]`` says which).
    """
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    unwrap_model(model).load_state_dict(checkpoint["model"])
    if optimizer is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    if scheduler is not None and checkpoint.get("scheduler") is not None:
        scheduler.load_state_dict(checkpoint["scheduler"])
    rank, world_size = _rank_and_world()
    rng_states = checkpoint.get("rng") or []
    checkpoint["rng_restored"] = restore_rng and len(rng_states) == world_size
    if checkpoint["rng_restored"]:
        restore_rng_state(rng_states[rank], device)
    return checkpoint
# --8<-- [end:load]
