"""Chapter 12: the starved input pipeline (data wait against compute, each run against its own
ceiling) and the device-resident one, the digits learned by one process and by two ranks, the
nvitop monitor's CSV under Open MPI, and the scaling study's plots."""

from __future__ import annotations

import csv
import re
import socket
import struct

import pytest
from conftest import REPO, captured_run, clean_env, mpiexec, run_as_main

DDP = "12_scaling_and_performance/train_ddp.py"
SINGLE = "12_scaling_and_performance/train_single.py"


def share(summary: dict[str, str]) -> float:
    """The data-wait share of a step: seconds waiting / (waiting + computing)."""
    wait, compute = float(summary["data_wait"].rstrip("s")), float(summary["compute"].rstrip("s"))
    return wait / (wait + compute)


def percent(value: str) -> float:
    return float(value.rstrip("%"))


READS_PER_STEP_S = 8 * 0.030  # 8 images per rank and step, each read waiting 30 ms (--read-latency-ms 30)


def per_step(summary: dict[str, str], key: str) -> float:
    return float(summary[key].rstrip("s"))


def test_bad_starved_loader_waits_for_its_reads_every_step():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this
    chapter. Every step waits for its 8 reads of 30 ms (a sleep: no load makes it shorter)."""
    bad = captured_run("12_loader_bad.txt").clean_summary()
    assert bad["variant"] == "bad" and bad["world_size"] == "2", bad
    assert per_step(bad, "data_wait") >= READS_PER_STEP_S, bad
    assert percent(bad["data_wait_share"]) == pytest.approx(100 * share(bad), abs=0.1)


@pytest.mark.timed  # the good loader's workers read ahead of a step: nothing else on the cores
def test_pitfall_starved_loader_waits_for_data_and_workers_feed_it():
    """Reads of 30 ms per image (--read-latency-ms): without workers every step waits for its
    8 reads, at least 0.24 s (a sleep: no load makes it shorter); one worker per rank reads
    the next batch while the ranks compute, and a step waits less than its reads would take.
    The shares on the page are the runs' own arithmetic (checked), never compared between runs."""
    bad = captured_run("12_loader_bad.txt").clean_summary()  # the page's runs, under torchrun
    good = captured_run("12_loader_good.txt").clean_summary()
    assert bad["variant"] == "bad" and good["variant"] == "good" and bad["world_size"] == "2"
    assert per_step(bad, "data_wait") >= READS_PER_STEP_S, bad
    assert per_step(good, "data_wait") < READS_PER_STEP_S, good
    for summary in (bad, good):  # the share printed is the one of the printed seconds
        assert percent(summary["data_wait_share"]) == pytest.approx(100 * share(summary), abs=0.1)
    # Not samples/s, nor the share of the ceiling: on two CPU cores a ResNet-18 step of half a
    # second moves by tens of percent between launches and within one (shares of 76% to 123%
    # seen on a quiet machine), more than the reads cost.


def test_device_pipeline_reads_once_before_the_first_step_and_prints_its_batch_race():
    """--variant device: the data set read once before the first step (1437 reads, 32 at a
    time: at least 45 rounds of 30 ms), so no step waits for a read; in the same run, one
    batch made both ways, timed in turn, and their ratio printed (which is faster is the
    capture's to show: a busy machine can move it)."""
    result = captured_run("12_loader_device.txt")
    device = result.clean_summary()
    read_once = re.search(r"1437 images read once \(([\d.]+) s\)", result.output)
    assert read_once and float(read_once.group(1)) >= round(-(-1437 // 32) * 0.030, 1) - 0.05, result.output
    assert per_step(device, "data_wait") < READS_PER_STEP_S, device
    assert percent(device["data_wait_share"]) == pytest.approx(100 * share(device), abs=0.1)
    for summary in (device, captured_run("12_accuracy_single.txt").clean_summary(),
                    captured_run("12_accuracy_ddp.txt").clean_summary()):
        per_sample, on_device = (float(summary[k].rstrip("s")) for k in ("per_sample_batch", "device_batch"))
        assert per_sample > 0 and on_device > 0, summary
        assert float(summary["device_batch_speedup"]) == pytest.approx(per_sample / on_device, rel=0.1)


def test_one_process_and_two_ranks_reach_the_same_held_out_accuracy():
    """The digits learn: one process at batch 32 and two ranks at 16 each (the same effective
    batch, the same steps) end within 2 points of held-out accuracy, both above 95%."""
    single = captured_run("12_accuracy_single.txt")
    ddp = captured_run("12_accuracy_ddp.txt")
    one, two = single.clean_summary(), ddp.clean_summary()
    assert (one["world_size"], two["world_size"]) == ("1", "2") and one["steps"] == two["steps"]
    assert float(one["accuracy"]) >= 0.95 and float(two["accuracy"]) >= 0.95, (one, two)
    assert abs(float(one["accuracy"]) - float(two["accuracy"])) <= 0.02, (one, two)
    for result in (single, ddp):  # it learned: the first epoch's accuracy is far lower
        first = re.search(r"^epoch 0: .*accuracy=([\d.]+)", result.output, flags=re.M)
        assert float(first.group(1)) < 0.6, result.output
    assert "data=digits (scikit-learn" in single.output


def test_warm_up_that_takes_every_step_is_a_usage_error_not_a_crash():
    """Issue 23: 2 steps, 2 warm-up steps: no ZeroDivisionError, a message that says what to do."""
    # one process, stopped before its first step: run in this process (run_as_main)
    result = run_as_main(REPO / "scripts" / SINGLE, "--data", "fake", "--fake-size", "16",
                         "--batch-size", "8", "--epochs", "1", env=clean_env())
    assert result.returncode == 2, result.output
    assert "--warm-up 2 leaves them all out of the timings" in result.output
    assert "Traceback" not in result.output


def two_ranks_of_device_batches(size: int = 64, batch: int = 8, flip: bool = True):
    """The device pipeline of two ranks, in one process, built as train_ddp.py builds it (a
    DistributedSampler per rank, the generator seeded with seed + rank), on images whose
    labels are their own indices: a batch's labels say which images it holds."""
    import torch
    from torch.utils.data import DistributedSampler

    from utils.vision import DeviceBatches, Images

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (size, 3, 32, 32), dtype=torch.uint8, generator=generator)
    split = Images(images, torch.arange(size), mean=(120.0, 125.0, 130.0), std=(60.0, 61.0, 62.0), flip=flip)
    samplers = [DistributedSampler(split, num_replicas=2, rank=rank, seed=0) for rank in range(2)]
    pipelines = [DeviceBatches(split, batch, torch.device("cpu"), sampler, seed=rank)
                 for rank, sampler in enumerate(samplers)]
    return split, samplers, pipelines


def test_device_pipeline_gives_each_rank_its_own_share_reshuffled_by_set_epoch():
    """Issue 31: the batches themselves. Per epoch the two ranks' images are disjoint and
    together the whole data set; set_epoch(1) deals them out anew (another order, other
    sets per rank)."""
    split, samplers, pipelines = two_ranks_of_device_batches()
    seen = {}
    for epoch in (0, 1):
        for rank, (sampler, pipeline) in enumerate(zip(samplers, pipelines, strict=True)):
            sampler.set_epoch(epoch)
            seen[epoch, rank] = [int(label) for _, labels in pipeline for label in labels]
            assert len(seen[epoch, rank]) == len(pipeline) * 8 == 32, seen[epoch, rank]
        ranks = [set(seen[epoch, 0]), set(seen[epoch, 1])]
        assert not ranks[0] & ranks[1], f"epoch {epoch}: images on both ranks: {ranks[0] & ranks[1]}"
        assert ranks[0] | ranks[1] == set(range(len(split))), f"epoch {epoch}: images left out"
    for rank in (0, 1):
        assert seen[0, rank] != seen[1, rank] and set(seen[0, rank]) != set(seen[1, rank]), rank


def test_device_pipeline_augments_every_batch_differently_from_the_plain_images():
    """The batches are crops (and flips) of the images the labels name, not the images as
    they are: most differ from the plain normalised image; each is a shifted window of it."""
    import torch
    import torch.nn.functional as F

    from utils.vision import normalized

    split, samplers, pipelines = two_ranks_of_device_batches(flip=False)  # crops alone: checkable
    plain = normalized(split, torch.device("cpu"))
    padded = F.pad(split.images.float(), (4, 4, 4, 4))
    mean = torch.tensor(split.mean).view(1, -1, 1, 1)
    std = torch.tensor(split.std).view(1, -1, 1, 1)
    shifted = total = 0
    for pipeline in pipelines:
        for images, labels in pipeline:
            for image, label in zip(images, labels, strict=True):
                total += 1
                shifted += not torch.equal(image, plain[label])
                windows = [(padded[label, :, dy:dy + 32, dx:dx + 32] - mean[0]) / std[0]
                           for dy in range(9) for dx in range(9)]
                assert any(torch.allclose(image, w, atol=1e-5) for w in windows), int(label)
    assert total == 64 and shifted >= 0.8 * total, (shifted, total)  # 1 crop in 81 is unshifted


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("monitor")
    # The device pipeline under Open MPI: the small model learns the digits in two epochs.
    # Every rank's batches are recorded from outside the script (tests/observe_batches).
    observed = {"PYTHONPATH": str(REPO / "tests" / "observe_batches"),
                "OBSERVE_BATCHES_LOG": str(directory)}
    result = mpiexec("openmpi", 2, DDP, "--model", "small", "--variant", "device", "--batch-size", "32",
                     "--lr", "0.05", "--epochs", "2", "--warm-up", "1", "--monitor-dir", str(directory),
                     env_extra=observed)
    return result, directory


def test_each_rank_trains_on_its_own_share_augmented_and_reshuffled_every_epoch(mpi_run):
    """What the script's ranks really iterated (recorded by tests/observe_batches): in each
    epoch, two disjoint shares of the 1437 training digits, every image of them once, all but
    the 29 that drop_last leaves over (2 ranks x 22 batches x 32 = 1408); epoch 1 deals them
    out anew; every image of a batch augmented."""
    import json

    result, directory = mpi_run
    passes = [json.loads(line) for log in directory.glob("*.jsonl") for line in log.read_text().splitlines()]
    epochs = {(p["rank"], p["epoch"]): p for p in passes if len(p["batches"]) == 22}  # whole epochs
    assert sorted(epochs) == [(0, 0), (0, 1), (1, 0), (1, 1)], (passes, result.output)
    shares = {key: [i for batch in p["batches"] for i in batch] for key, p in epochs.items()}
    for epoch in (0, 1):
        zero, one = set(shares[0, epoch]), set(shares[1, epoch])
        assert len(zero) == len(one) == 22 * 32, epoch  # no image twice on a rank
        assert not zero & one, f"epoch {epoch}: {len(zero & one)} images on both ranks"
        assert len(zero | one) == 1437 - 29 and max(zero | one) < 1437, epoch
    for rank in (0, 1):
        assert set(shares[rank, 0]) != set(shares[rank, 1]), f"rank {rank}: the same share in epoch 1"
    assert all(p["augmented"] >= 0.8 * 32 * len(p["batches"]) for p in epochs.values()), epochs


def test_trains_under_open_mpi_and_the_loss_falls(mpi_run):
    result, _ = mpi_run
    summary = result.clean_summary()
    assert summary["world_size"] == "2" and summary["variant"] == "device"
    assert result.output.startswith("data=digits")
    losses = [float(line.split()[3]) for line in result.output.splitlines() if line.startswith("epoch ")]
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    assert float(summary["accuracy"]) > 0.5, summary


def test_monitor_writes_sane_host_samples_without_nvml_noise(mpi_run):
    result, directory = mpi_run
    rows = list(csv.DictReader((directory / f"monitor_{socket.gethostname()}.csv").open()))
    assert len(rows) >= 2
    assert all(0 <= float(r["host_cpu_percent"]) <= 100 for r in rows)
    assert all(0 < float(r["host_memory_percent"]) < 100 for r in rows)
    assert max(float(r["host_cpu_percent"]) for r in rows) > 20  # two ranks were training
    assert int(result.summary()["monitor_samples"]) == len(rows)
    assert "NVML" not in result.output and "FATAL" not in result.output
    assert png_size(directory / f"monitor_{socket.gethostname()}.png") == (700, 500)


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])
