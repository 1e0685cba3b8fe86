"""utils/monitor.py with simulated GPUs: nvitop.Device replaced by stand-ins."""

from __future__ import annotations

import csv
import sys

import nvitop
from conftest import run

from utils import monitor


class FakeProcess:
    def __init__(self, memory: int) -> None:
        self.memory = memory

    def gpu_memory(self) -> int:
        return self.memory


class FakeDevice:
    def __init__(self, index: int) -> None:
        self.index = index

    def gpu_utilization(self) -> int:
        return 50 + self.index

    def memory_used(self) -> int:
        return (1 + self.index) * 2**30

    def processes(self) -> dict[int, FakeProcess]:
        return {1234: FakeProcess(512 * 2**20), 999: FakeProcess(2**30)}  # 999: another job


def test_monitor_records_gpus_and_this_jobs_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(nvitop.Device, "all", classmethod(lambda cls: [FakeDevice(0), FakeDevice(1)]))
    watch = monitor.Monitor(tmp_path / "m.csv", pids=[1234], interval_s=0.05)
    assert watch.note == "monitoring 2 GPU(s) and the host"
    import time

    time.sleep(0.3)
    line = watch.stop()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert rows and float(rows[0]["gpu1_util_percent"]) == 51
    assert float(rows[0]["gpu0_memory_used_mib"]) == 1024
    assert float(rows[0]["gpu0_job_memory_mib"]) == 512  # only this job's process
    assert "gpu1_util_mean=51%" in line and "gpu0_job_memory_peak=512MiB" in line
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"


def test_without_nvml_host_only_and_silent():
    """In a fresh process (no pytest log capture): nvitop's logger would print a "FATAL ERROR"
    to stderr when NVML is missing; gpu_devices() asks with it silenced."""
    code = ("import nvitop\nfrom nvitop.api import libnvml\n"
            "def missing(cls):\n"
            "    libnvml.LOGGER.critical('FATAL ERROR: NVML not found')\n"
            "    raise libnvml.NVMLError_LibraryNotFound()\n"
            "nvitop.Device.all = classmethod(missing)\n"
            "from utils.monitor import gpu_devices\n"
            "print(gpu_devices())\n")
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, result.output
    assert "([], 'no GPU monitoring (NVMLError_LibraryNotFound): host only')" in result.output
    assert "FATAL" not in result.output
