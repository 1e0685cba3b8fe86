"""Chapter 12: ResNet-18 on FakeData under torchrun and Open MPI, the starved input pipeline
(data wait against compute), the nvitop monitor's CSV, and the scaling study's plots."""

from __future__ import annotations

import csv
import re
import socket
import struct

import pytest
from conftest import captured_run, mpiexec, python

DDP = "12_scaling_and_performance/train_ddp.py"
STUDY = "12_scaling_and_performance/scaling_study.py"


def share(summary: dict[str, str]) -> float:
    """The data-wait share of a step: seconds waiting / (waiting + computing)."""
    wait, compute = float(summary["data_wait"].rstrip("s")), float(summary["compute"].rstrip("s"))
    return wait / (wait + compute)


@pytest.mark.timed
def test_pitfall_starved_loader_waits_for_data_and_workers_feed_it():
    """Reads of 30 ms per image (--read-latency-ms): without workers the ranks wait for
    them; one worker per rank reads the next batch while they compute."""
    bad = captured_run("12_loader_bad.txt").clean_summary()  # the page's runs, under torchrun
    good = captured_run("12_loader_good.txt").clean_summary()
    assert bad["variant"] == "bad" and good["variant"] == "good" and bad["world_size"] == "2"
    assert share(bad) > 2 * share(good), (bad, good)
    for summary in (bad, good):  # the share printed is the one of the printed seconds
        assert float(summary["data_wait_share"].rstrip("%")) == pytest.approx(100 * share(summary), abs=0.1)
    assert int(good["throughput"]) > int(bad["throughput"]), (bad, good)


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("monitor")
    # 8 images per rank, one step an epoch: the same images (augmented anew) five times.
    result = mpiexec("openmpi", 2, DDP, "--epochs", "5", "--fake-size", "16", "--warm-up", "1",
                     "--monitor-dir", str(directory))
    return result, directory


def test_trains_under_open_mpi_and_the_loss_falls(mpi_run):
    result, _ = mpi_run
    summary = result.clean_summary()
    assert summary["world_size"] == "2"
    assert result.output.startswith("data=FakeData")
    losses = [float(line.split()[3]) for line in result.output.splitlines() if line.startswith("epoch ")]
    assert len(losses) == 5 and losses[-1] < losses[0], losses


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


@pytest.mark.timed
def test_scaling_study_plots_and_reports_efficiencies(tmp_path):
    plot = tmp_path / "scaling.png"
    result = python(STUDY, "--ranks", "1", "2", "--batch-size", "4", "--steps-per-epoch", "6",
                    "--warm-up", "2", "--plot", str(plot), timeout=240)
    summary = result.clean_summary()
    assert summary["ranks"] == "1,2"
    # The ceiling's efficiency is T1 over the copies' step: two copies on two cores can reach
    # at most 2, and a slow launch of the one-rank baseline can lift it above 1.2 (seen once).
    for key, most in (("weak_efficiency", 1.2), ("strong_efficiency", 1.2), ("ceiling_efficiency", 2.0)):
        values = [float(v) for v in summary[key].split(",")]
        assert values[0] == 1.0 and all(0 < v <= most for v in values), (key, values)
    # The formulas, from the step times the table printed: weak T1/TN, strong T1/(N*TN),
    # the ceiling T1/T(side-by-side copies).
    steps = {(int(n), run): float(t) for n, run, t in
             re.findall(r"^\s+(\d+)  (\w+)\s+\d+\s+([\d.]+) s", result.output, flags=re.M)}
    t1 = steps[1, "weak"]
    expected = {"weak_efficiency": t1 / steps[2, "weak"], "strong_efficiency": t1 / (2 * steps[2, "strong"]),
                "ceiling_efficiency": t1 / steps[2, "ceiling"]}
    for key, value in expected.items():
        assert float(summary[key].split(",")[1]) == pytest.approx(value, abs=0.011), (key, result.output)
    assert png_size(plot) == (1000, 400)
    assert f"plot: {plot}" in result.output
