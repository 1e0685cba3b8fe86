"""utils/data.py's make_loader(): the same batches, in the same order, as the plain
DataLoader it replaces, with or without worker processes (started by forkserver, as on
GPUs), and the GPU settings chosen from the device (no GPU needed: torch.cuda's answers
are monkeypatched where the settings depend on them)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from utils import data
from utils.data import loader_workers, make_loader, synthetic_classification

CPU = torch.device("cpu")


def batches(loader) -> list[list[torch.Tensor]]:
    return [list(batch) for batch in loader]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))


@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_a_plain_dataloader_with_a_distributed_sampler(drop_last):
    dataset = synthetic_classification(203, seed=1)
    samplers = [DistributedSampler(dataset, num_replicas=3, rank=2, shuffle=True, seed=7) for _ in range(2)]
    plain = DataLoader(dataset, batch_size=16, sampler=samplers[0], drop_last=drop_last)
    fast = make_loader(dataset, 16, CPU, sampler=samplers[1], drop_last=drop_last)
    assert len(fast) == len(plain)
    for epoch in range(2):  # set_epoch() on the sampler still reshuffles
        for sampler in samplers:
            sampler.set_epoch(epoch)
        assert same(batches(plain), batches(fast))


def test_same_batches_when_shuffling_from_the_global_seed_and_from_a_subset():
    dataset = synthetic_classification(100, seed=2)
    torch.manual_seed(3)
    plain = batches(DataLoader(dataset, batch_size=8, shuffle=True))
    torch.manual_seed(3)
    assert same(plain, batches(make_loader(dataset, 8, CPU, shuffle=True)))
    subset = Subset(dataset, list(range(10, 60, 3)))
    assert same(batches(DataLoader(subset, batch_size=4)), batches(make_loader(subset, 4, CPU)))


def test_worker_processes_from_forkserver_give_the_same_batches():
    dataset = synthetic_classification(64, seed=4)
    loader = make_loader(dataset, 8, CPU, num_workers=2)
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
    assert loader.persistent_workers
    assert same(batches(DataLoader(dataset, batch_size=8)), batches(loader))


def test_settings_follow_the_device(monkeypatch):
    dataset = synthetic_classification(16)
    cpu = make_loader(dataset, 4, CPU)
    assert (cpu.num_workers, cpu.pin_memory, cpu.persistent_workers) == (0, False, False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    gpu = torch.device("cuda", 0)
    assert loader_workers(gpu, local_world_size=4) == 4  # 8 cores per rank: 4 workers
    assert loader_workers(gpu) == 4  # no local world size: one rank per GPU
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert loader_workers(gpu, local_world_size=4) == 1  # 2 cores per rank: 1 worker, 1 to train
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert loader_workers(gpu, local_world_size=4) == 1  # at least one
    monkeypatch.setattr(data, "loader_workers", lambda device, local_world_size=None: 3)
    with warnings.catch_warnings():  # DataLoader's "more workers than suggested" (1 core here)
        warnings.simplefilter("ignore", UserWarning)
        loader = make_loader(dataset, 4, gpu)  # built, not iterated: pinning needs a real GPU
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == (3, True, True)
    assert loader.multiprocessing_context.get_start_method() == "forkserver"


def test_one_indexing_per_batch_not_one_per_sample():
    """What makes an epoch's time the training's: the data set is indexed once per batch."""
    calls = []

    class Counting(torch.utils.data.Dataset):
        def __init__(self, inner):
            self.inner = inner

        def __len__(self):
            return len(self.inner)

        def __getitem__(self, index):
            calls.append(index)
            return self.inner[index]

    dataset = Counting(synthetic_classification(64))
    assert len(batches(make_loader(dataset, 8, CPU))) == 8
    assert len(calls) == 8 and all(len(c) == 8 for c in calls)
