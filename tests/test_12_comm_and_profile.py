"""Chapter 12, second half: the communication benchmark (nccl-tests' bandwidths, agreement with
a bare all_reduce loop), the profiler's table of a DDP step, DataParallel on a CPU, and the
linear learning-rate scaling rule."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest
from conftest import REPO, captured_run, clean_env, mpiexec, python

FOLDER = "12_scaling_and_performance"
COMM = f"{FOLDER}/comm_bench.py"
DP = f"{FOLDER}/dataparallel_vs_ddp.py"


def comm_bench_module():
    spec = importlib.util.spec_from_file_location("comm_bench", REPO / "scripts" / COMM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seconds(value: str) -> float:
    return float(value.removesuffix("s"))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])


# (op, S bytes, seconds, ranks) -> (algbw, busbw) in GB/s, worked out by hand from nccl-tests'
# definitions: algbw = S / t; busbw = algbw x 2(n-1)/n, (n-1)/n, (n-1)/n, 1.
HAND_COMPUTED = [
    ("all_reduce", 1_000_000_000, 1.0, 4, 1.0, 1.5),
    ("all_reduce", 8_000_000, 0.004, 8, 2.0, 3.5),
    ("all_reduce", 4_000_000, 0.001, 2, 4.0, 4.0),
    ("all_gather", 1_000_000_000, 0.5, 4, 2.0, 1.5),
    ("all_gather", 6_000_000, 0.003, 2, 2.0, 1.0),
    ("reduce_scatter", 3_000_000_000, 1.0, 3, 3.0, 2.0),
    ("broadcast", 5_000_000_000, 2.0, 16, 2.5, 2.5),
    ("all_reduce", 1_000_000, 1.0, 1, 0.001, 0.0),  # one rank: nothing crosses a link
]


@pytest.mark.parametrize(("op", "size", "secs", "ranks", "algbw", "busbw"), HAND_COMPUTED)
def test_bandwidth_formulas_are_nccl_tests(op, size, secs, ranks, algbw, busbw):
    got = comm_bench_module().bandwidths(op, size, secs, ranks)
    assert got == pytest.approx((algbw, busbw), rel=1e-12)


@pytest.mark.timed
def test_comm_bench_agrees_with_a_bare_all_reduce_loop():
    """The page's torchrun run: every size timed, and the bare loop within 5% on small sizes."""
    result = captured_run("12_comm_bench.txt")
    summary = result.clean_summary()
    assert summary["launcher"] == "torchrun" and summary["world_size"] == "2", summary
    assert summary["bare_loop_agrees"] == "yes", result.output
    # 8 bytes to 32 KiB, by 4: 7 sizes, 25 pairs each, from each of the 2 ranks
    assert summary["small_sizes"] == "7" and summary["pairs"] == str(7 * 25 * 2), summary
    assert "the median ratio benchmark / bare loop is within 5% of 1" in result.output
    # a row of four times per size, 8 bytes to 512 KiB, and the bare loop's row for each
    rows = re.findall(r"^\s+(\d+)((?:\s+\d+\.\d+ s){4})$", result.output, flags=re.M)
    assert [int(size) for size, _ in rows] == [8 * 4**k for k in range(9)], result.output
    assert len(re.findall(r"benchmark \d+\.\d+ s  bare loop \d+\.\d+ s", result.output)) == 9


@pytest.mark.timed  # the script exits 1 when its two timings disagree: it measures alone
def test_comm_bench_under_mpiexec_writes_nccl_tests_bandwidths(tmp_path):
    table, plot = tmp_path / "comm.csv", tmp_path / "comm.png"
    result = mpiexec("openmpi", 2, COMM, "--max-bytes", "32768", "--csv", str(table), "--plot", str(plot))
    summary = result.clean_summary()
    assert summary["launcher"] == "openmpi" and summary["bare_loop_agrees"] == "yes", result.output
    rows = list(csv.DictReader(table.open()))
    assert [row["op"] for row in rows[:4]] == ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
    assert len(rows) == 4 * 7
    factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0}  # n = 2
    for row in rows:
        size, secs = int(row["bytes"]), float(row["seconds"])
        assert size % 8 == 0 and 0 < secs < 1, row  # S splits into 2 ranks' float32 halves
        assert float(row["algbw_GBps"]) == pytest.approx(size / secs / 1e9, rel=1e-9), row
        assert float(row["busbw_GBps"]) == pytest.approx(float(row["algbw_GBps"]) * factor[row["op"]],
                                                         rel=1e-9), row
    assert png_size(plot) == (700, 400)


def merged_length(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds covered by `intervals` (trace microseconds) within [start, end], overlaps merged."""
    merged: list[list[float]] = []
    for lo, hi in sorted((max(lo, start), min(hi, end)) for lo, hi in intervals if lo < end and hi > start):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return sum(hi - lo for lo, hi in merged) / 1e6


@pytest.mark.timed
def test_profiler_table_sums_to_the_step_and_shows_overlap():
    result = captured_run("12_profile_step.txt")
    summary = result.clean_summary()
    assert summary["launcher"] == "torchrun" and summary["steps"] == "3", summary
    trace = Path(summary["trace"])
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    names = [event.get("name") for event in events]
    assert names.count("step") == 3 and "gloo:all_reduce" in names and "c10d::allreduce_" in names
    rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+) s\s+(\d+\.\d+) s\s+(\d+\.\d+) s\s+(\d+\.\d+) s\s+"
                      r"(\d+\.\d+) s\s+(\d+\.\d+) s$", result.output, flags=re.M)
    assert len(rows) == 3, result.output

    def ranges(name: str) -> list[dict]:
        return sorted((e for e in events if e["name"] == name and e.get("cat") == "user_annotation"),
                      key=lambda e: e["ts"])

    def interval(e: dict) -> tuple[float, float]:
        return e["ts"], e["ts"] + e["dur"]

    # Worked out here from the trace, apart from the script: gloo's collectives as its worker
    # threads recorded them; those while the autograd engine computed gradients (backward()'s
    # start to the end of its last evaluate_function) are overlapped; broadcasts of the
    # BatchNorm buffers during the forward are exposed.
    gloo = [interval(e) for e in events if e["name"].startswith("gloo:")]
    broadcasts = [interval(e) for e in events if e["name"] == "gloo:broadcast"]
    autograd = [interval(e) for e in events if e["name"].startswith("autograd::engine::evaluate_function")]
    for step, forward, backward, row in zip(ranges("step"), ranges("forward"), ranges("backward"), rows,
                                            strict=True):
        _, step_time, data, compute, exposed, total, overlapped = (float(value) for value in row)
        start, end = interval(step)
        assert data + compute + exposed == pytest.approx(total, abs=2e-4)
        # the rest (zero_grad, the Python between the ranges) is small: within 10% of the step
        assert abs(total - step_time) <= 0.10 * step_time, (total, step_time)
        assert compute > 0.5 * step_time  # ResNet-18 on a CPU: mostly compute
        assert exposed + overlapped == pytest.approx(merged_length(gloo, start, end), abs=2e-4)
        backward_start, backward_end = interval(backward)
        computing_end = max(hi for lo, hi in autograd if backward_start <= lo <= backward_end)
        assert overlapped == pytest.approx(merged_length(gloo, backward_start, computing_end), abs=2e-4)
        in_forward = merged_length(broadcasts, *interval(forward))
        assert in_forward > 0 and exposed >= in_forward - 2e-4, (in_forward, exposed)
    # DDP launches the all-reduce of the first buckets while backward() still computes
    assert seconds(summary["comm_overlapped"]) > 0, summary


def test_dataparallel_on_a_cpu_says_what_it_needs_and_prints_no_number():
    result = captured_run("12_dp_cpu.txt")
    assert result.returncode == 0, result.output
    assert "DataParallel needs two or more" in result.output
    assert result.summary() == {"gpus": "0", "dataparallel": "not_run", "ddp": "not_run"}
    assert not re.search(r"\d\s*samples/s", result.output), result.output  # no number it did not measure
    # Started by a launcher as several processes: a clear message, not a half-run comparison.
    launched = python(DP, env=clean_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0"))
    assert launched.returncode != 0
    assert "run it as one process" in launched.output and "Traceback" not in launched.output


def test_linear_scaling_rule_recovers_the_reference_curve():
    summary = captured_run("12_lr_scaling.txt").clean_summary()
    assert summary["effective_batch"] == "32" and summary["world_size"] == "2", summary
    reference, unscaled, scaled = (float(summary[f"{run}_loss"]) for run in ("reference", "unscaled",
                                                                              "scaled"))
    # The same samples, half the steps: with the same lr the loss lags well behind ...
    assert unscaled - reference > 0.1, summary
    # ... and with the lr scaled by the world size (after warm-up) it nearly catches up.
    assert scaled - reference < 0.2 * (unscaled - reference), summary


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_linear_scaling_warms_up_from_the_single_process_lr(world_size):
    """The scaled run's lr: base_lr at step 0, rising linearly to base_lr x N at warmup_steps."""
    import torch

    spec = importlib.util.spec_from_file_location("lr_scaling", REPO / "scripts" / f"{FOLDER}/lr_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    scheduler = module.linear_scaling(optimizer, 0.1, world_size, warmup_steps=8)
    lrs = []
    for _ in range(12):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[4] == pytest.approx(0.1 * (1 + (world_size - 1) / 2))
    assert lrs[8:] == pytest.approx([0.1 * world_size] * 4)
