"""Synthetic data sets (nothing to download, identical on every rank for a given seed), and
the one place that knows DataLoader settings for CPUs and GPUs (make_loader)."""

from __future__ import annotations

import functools
import os
import select
import threading
import time

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
)


def synthetic_classification(
    num_samples: int, num_features: int = 32, num_classes: int = 4, seed: int = 0
) -> TensorDataset:
    """Inputs drawn at random, labels from a fixed random linear 'teacher'.

    The labels are a learnable function of the inputs, so a model's loss falls as it
    trains; the same seed gives the same data set on every rank.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_samples, num_features, generator=generator)
    teacher = torch.randn(num_features, num_classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    return TensorDataset(inputs, labels)


def loader_workers(device: torch.device, local_world_size: int | None = None) -> int:
    """Worker processes per rank: none on a CPU (the ranks already use the cores, and the
    tutorial's data sets are tensors in memory), else up to 4 on a GPU, within this rank's
    share of the CPUs it may run on, one core left for the training process itself."""
    if device.type != "cuda":
        return 0
    ranks_here = local_world_size or max(1, torch.cuda.device_count())
    share = len(os.sched_getaffinity(0)) // ranks_here
    return max(1, min(4, share - 1))


def exit_with_owner(owner_pid: int, worker_id: int) -> None:
    """A DataLoader worker's ``worker_init_fn``: the worker ends when the process that
    owns its loader (a rank) has ended, however it ended.

    torch's own check in a worker (torch.utils.data._utils.worker.ManagerWatchdog) waits
    for its *parent* to change. A worker started through the "forkserver" has the fork
    server as its parent, not the rank, and the fork server ends only once every worker
    has closed its copy of the server's liveness pipe. A rank killed by SIGKILL (an
    out-of-memory kill, a crash, chapter 14's --fail-at-step) thus leaves its workers and
    its fork server running for ever, and they hold the launcher's stdout and stderr open:
    whatever reads the job's output to its end (a pipe, a CI log, the test suite) waits."""
    threading.Thread(target=_watch_owner, args=(owner_pid,), daemon=True,
                     name=f"exit_with_owner-{worker_id}").start()


def _watch_owner(owner_pid: int) -> None:
    try:  # Linux 5.3+: a descriptor that becomes readable when the process exits
        fd = os.pidfd_open(owner_pid)
    except (AttributeError, OSError):  # no pidfd, or the owner is already gone
        fd = None
    if fd is not None:
        select.select([fd], [], [])
        os._exit(0)
    while True:  # elsewhere: ask every second
        try:
            os.kill(owner_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass
        time.sleep(1.0)


# --8<-- [start:make_loader]
def make_loader(dataset: Dataset, batch_size: int, device: torch.device, *, sampler: Sampler | None = None,
                shuffle: bool = False, drop_last: bool = False, generator: torch.Generator | None = None,
                num_workers: int | None = None, local_world_size: int | None = None,
                per_sample: bool = False) -> DataLoader:
    """A DataLoader with the settings for `device`; batches in the same order as
    ``DataLoader(dataset, batch_size, sampler=..., shuffle=..., drop_last=...)``.

    - Whole batches at once: the sampler's indices are grouped first (BatchSampler) and
      the data set is indexed with each group, one indexing operation per batch instead of
      batch_size __getitem__ calls and a stack (TensorDataset and Subset take a list of
      indices). The time per step is then the training's, not Python's batching loop's.
    - On a GPU: worker processes prepare the next batches while the GPU computes
      (loader_workers), kept alive across epochs (persistent_workers), started with
      "forkserver" (a worker forked from a process that holds CUDA and NCCL state
      inherits it, which CUDA does not support), and pinned (page-locked) memory, so
      that ``tensor.to(device, non_blocking=True)`` copies asynchronously. Each worker
      ends when its rank does, even a rank killed by SIGKILL (``exit_with_owner``).
    - On a CPU: everything in the training process, nothing pinned.
    - ``generator``: the shuffle's random numbers without a `sampler`; with one, the
      generator the loader draws its workers' base seed from, each time an epoch's
      iterator starts (by default the global torch RNG: an exact resume mid-epoch must
      keep that draw out of the global RNG, chapter 14).
    - ``per_sample=True``: a data set indexed one sample at a time (torchvision's, whose
      transforms work on one image), batched by the loader's collate function.
    """
    on_gpu = device.type == "cuda"
    loader_generator = generator if sampler is not None else None
    if sampler is None:
        sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    workers = loader_workers(device, local_world_size) if num_workers is None else num_workers
    batching = (dict(batch_size=batch_size, sampler=sampler, drop_last=drop_last) if per_sample
                else dict(batch_size=None, sampler=BatchSampler(sampler, batch_size, drop_last)))
    return DataLoader(
        dataset, **batching, num_workers=workers, pin_memory=on_gpu, persistent_workers=workers > 0,
        multiprocessing_context="forkserver" if workers > 0 else None, generator=loader_generator,
        worker_init_fn=functools.partial(exit_with_owner, os.getpid()) if workers > 0 else None,
    )
# --8<-- [end:make_loader]
