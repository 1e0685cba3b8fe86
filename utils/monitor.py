"""Watch the GPUs and the host while a job trains: a background sampler built on nvitop.

``Monitor(path, pids)`` starts a thread that, every ``interval_s``, reads through nvitop's
API (``nvitop.Device``, ``nvitop.host``) each GPU's utilisation and memory used, the GPU
memory held by this job's processes (``pids``: the ranks on this node), and the host's CPU
and memory use, and appends a row to a CSV file. One per node: start it on local rank 0.
``stop()`` ends the thread and returns a one-line summary; ``plot()`` draws the CSV.

Without a GPU, or without NVIDIA's management library (libnvidia-ml), it records the host
only and says so once (``note``). nvitop logs a "FATAL ERROR" to stderr when the library is
missing; that logger is silenced while we ask.
"""

from __future__ import annotations

import csv
import logging
import threading
import time
from pathlib import Path

from utils.plots import saved_figure


def gpu_devices() -> tuple[list, str]:
    """(nvitop devices, a note): the GPUs NVML sees, or none and why."""
    import nvitop

    nvml_log = logging.getLogger("nvitop.api.libnvml")
    level, nvml_log.disabled = nvml_log.disabled, True  # no NVML noise on stderr
    try:
        devices = nvitop.Device.all()
    except Exception as error:  # NVMLError_LibraryNotFound, driver not loaded, ...
        return [], f"no GPU monitoring ({type(error).__name__}): host only"
    finally:
        nvml_log.disabled = level
    if not devices:
        return [], "no GPU found by NVML: host only"
    return devices, f"monitoring {len(devices)} GPU(s) and the host"


def _number(value: object) -> float:
    """nvitop's values, with its N/A (NaType) as NaN."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


class Monitor:
    """A thread that samples GPUs and host into a CSV file until stop()."""

    def __init__(self, path: Path, pids: list[int], interval_s: float = 0.5) -> None:
        from nvitop import host

        self.path, self.pids, self.interval_s = Path(path), set(pids), interval_s
        self.devices, self.note = gpu_devices()
        self.host = host
        self.rows: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._start = time.monotonic()
        host.cpu_percent()  # the first reading only starts psutil's interval
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)
        self._thread.start()

    # --8<-- [start:sample]
    def sample(self) -> dict[str, float]:
        """One row: seconds since start, host CPU % and memory, then per GPU."""
        memory = self.host.virtual_memory()
        row = {"time_s": round(time.monotonic() - self._start, 3),
               "host_cpu_percent": _number(self.host.cpu_percent()),
               "host_memory_used_mib": memory.used / 2**20,
               "host_memory_percent": _number(memory.percent)}
        for index, device in enumerate(self.devices):
            job = sum(_number(p.gpu_memory()) for pid, p in device.processes().items() if pid in self.pids)
            row[f"gpu{index}_util_percent"] = _number(device.gpu_utilization())
            row[f"gpu{index}_memory_used_mib"] = _number(device.memory_used()) / 2**20
            row[f"gpu{index}_job_memory_mib"] = job / 2**20
        return row
    # --8<-- [end:sample]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.rows.append(self.sample())

    def stop(self) -> str:
        """End the sampling, write the CSV and its plot (.png), and return its summary."""
        self._stop.set()
        self._thread.join(timeout=10)
        if not self.rows:
            self.rows.append(self.sample())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(self.rows)
        plot_rows(self.rows, len(self.devices), self.path.with_suffix(".png"))
        return summarize(self.rows, len(self.devices))


def summarize(rows: list[dict[str, float]], gpus: int) -> str:
    """Mean host CPU, peak host memory, and per GPU mean utilisation and peak memory."""
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    peak = lambda key: max(r[key] for r in rows)  # noqa: E731
    parts = [f"monitor_samples={len(rows)}", f"host_cpu_mean={mean('host_cpu_percent'):.0f}%",
             f"host_memory_peak={peak('host_memory_used_mib'):.0f}MiB"]
    for index in range(gpus):
        parts += [f"gpu{index}_util_mean={mean(f'gpu{index}_util_percent'):.0f}%",
                  f"gpu{index}_memory_peak={peak(f'gpu{index}_memory_used_mib'):.0f}MiB",
                  f"gpu{index}_job_memory_peak={peak(f'gpu{index}_job_memory_mib'):.0f}MiB"]
    return " ".join(parts)


def plot_rows(rows: list[dict[str, float]], gpus: int, png: Path) -> None:
    """Host CPU % and each GPU's utilisation % over time (top); memory (bottom)."""
    times = [r["time_s"] for r in rows]
    with saved_figure(png, nrows=2, figsize=(7, 5), sharex=True) as (figure, (top, bottom)):
        top.plot(times, [r["host_cpu_percent"] for r in rows], label="host CPU")
        bottom.plot(times, [r["host_memory_used_mib"] / 1024 for r in rows], label="host memory")
        for index in range(gpus):
            top.plot(times, [r[f"gpu{index}_util_percent"] for r in rows], label=f"GPU {index}")
            bottom.plot(times, [r[f"gpu{index}_memory_used_mib"] / 1024 for r in rows], label=f"GPU {index}")
        top.set_ylabel("utilisation (%)")
        top.set_ylim(0, 105)
        bottom.set_ylabel("memory used (GiB)")
        bottom.set_xlabel("seconds")
        for axes in (top, bottom):
            axes.legend(fontsize=8, loc="lower right")
