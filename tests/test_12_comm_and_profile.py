"""Chapter 12, second half: the profiler's table of a DDP step, DataParallel on a CPU, and the
linear learning-rate scaling rule (the communication benchmark: test_12b_scaling_out.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest
from conftest import REPO, captured_run, clean_env, run_as_main

FOLDER = "12_scaling_and_performance"
DP = f"{FOLDER}/dataparallel_vs_ddp.py"


def seconds(value: str) -> float:
    return float(value.removesuffix("s"))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])


def merged_length(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds covered by `intervals` (trace microseconds) within [start, end], overlaps merged."""
    merged: list[list[float]] = []
    for lo, hi in sorted((max(lo, start), min(hi, end)) for lo, hi in intervals if lo < end and hi > start):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return sum(hi - lo for lo, hi in merged) / 1e6


def test_profiler_table_sums_to_the_step_and_shows_overlap():
    """The page's run: the table's columns are the trace's own arithmetic (worked out here
    apart from the script), the parts fit inside their step, and DDP's all-reduce overlapped
    backward. How large each part is (compute the most, on a CPU) is the capture's to show:
    a busy machine moves it."""
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
        # the parts are ranges inside the step, one after another: their sum is no longer
        # (the rest is zero_grad and the Python between the ranges)
        assert 0 < total <= step_time + 2e-4 and compute > 0 and data > 0, (total, step_time, compute)
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
    # refused before any process group: run in this process (run_as_main)
    launched = run_as_main(REPO / "scripts" / DP, env=clean_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0"))
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
