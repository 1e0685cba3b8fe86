"""Chapter 10: tiny buckets give one all-reduce per gradient tensor and slower steps; DDP's
default buckets give two, and launch the first while backward() is still computing."""

from __future__ import annotations

import struct

import pytest
from conftest import captured_run, clean_env, mpiexec, python, run_as_main, script, script_help

BUCKETS = "10_communication_overlap/bucket_size.py"
SWEEP = "10_communication_overlap/bucket_sweep.py"
TENSORS = 66  # the default model: 33 Linear layers, a weight and a bias each
GRAD_BYTES = 4 * (32 * 128 + 128 + 31 * (128 * 128 + 128) + 128 * 4 + 4)  # float32 gradients
SLOWDOWN_MARGIN = 2.0  # tiny buckets measured 5-6x slower per step on 2 CPU cores; assert 2x


def summary_of(result, *, launcher: str, world_size: int) -> dict[str, str]:
    """Exit 0, one summary line (rank 0 alone printed), from the expected launcher."""
    summary = result.clean_summary()
    assert summary["launcher"] == launcher and summary["world_size"] == str(world_size), summary
    return summary


def seconds(value: str) -> float:
    return float(value.removesuffix("s"))


def assert_one_all_reduce_per_tensor(bad: dict[str, str]) -> None:
    """bad: every gradient tensor is a bucket, so one all-reduce each, every step (after
    step 1's single bucket), each but the first layer's launched during backward()."""
    assert bad["tensors"] == str(TENSORS)
    assert bad["buckets"] == bad["allreduces_per_step"] == str(TENSORS), bad
    assert bad["first_steps_allreduces"] == f"1,{TENSORS},{TENSORS}"
    assert bad["allreduce_bytes_per_step"] == str(GRAD_BYTES)
    assert bad["launched_during_backward"] == str(TENSORS - 1)


def test_bad_tiny_buckets_all_reduce_every_tensor_alone():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_one_all_reduce_per_tensor(summary_of(captured_run("10_buckets_bad.txt"), launcher="torchrun",
                                                world_size=2))


def test_pitfall_tiny_buckets_all_reduce_every_tensor_alone():
    bad = summary_of(captured_run("10_buckets_bad.txt"), launcher="torchrun", world_size=2)  # the page's runs
    good_run = captured_run("10_buckets_good.txt")
    good = summary_of(good_run, launcher="torchrun", world_size=2)
    assert bad["tensors"] == good["tensors"] == str(TENSORS)
    # bad: every gradient tensor is a bucket, so one all-reduce each, every step ...
    assert_one_all_reduce_per_tensor(bad)
    # ... good: DDP's default caps, the first bucket 1 MiB, the rest in a second one.
    assert good["buckets"] == good["allreduces_per_step"] == "2", good
    # Step 1 is one bucket while DDP learns the gradients' order; then the real buckets.
    assert bad["first_steps_allreduces"] == f"1,{TENSORS},{TENSORS}"
    assert good["first_steps_allreduces"] == "1,2,2"
    # The same bytes either way: the pitfall is the number of calls, not the traffic.
    assert bad["allreduce_bytes_per_step"] == good["allreduce_bytes_per_step"] == str(GRAD_BYTES)
    # Overlap: every bucket but the one holding the first layer is launched during backward().
    assert bad["launched_during_backward"] == str(TENSORS - 1)
    assert good["launched_during_backward"] == "1"
    assert "1 of 2 all-reduce(s) launched while backward() was still computing" in good_run.output
    assert good["grad_storages"] == str(TENSORS)  # without gradient_as_bucket_view: one each


def test_gradient_as_bucket_view_and_static_graph_in_one_process():
    result = python(BUCKETS, "--gradient-as-bucket-view", "--static-graph")
    summary = summary_of(result, launcher="none", world_size=1)
    assert summary["buckets"] == summary["allreduces_per_step"] == "2", summary
    # static_graph: step 1 learns the graph, so the buckets are rebuilt one step later.
    assert summary["first_steps_allreduces"] == "1,1,2"
    # gradient_as_bucket_view: the gradients are views into the 2 buckets, not 66 tensors.
    assert summary["grad_storages"] == "2"
    assert "gradient storages: 2 (views into the buckets)" in result.output


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])  # width, height from the IHDR chunk


@pytest.mark.timed
def test_sweep_under_mpiexec_times_tiny_buckets_slower_and_plots(tmp_path):
    plot = tmp_path / "sweep.png"
    result = mpiexec("openmpi", 2, SWEEP, "--plot", str(plot))
    summary = summary_of(result, launcher="openmpi", world_size=2)
    caps = summary["caps"].split(",")
    assert caps == ["1e-05", "0.01", "0.1", "0.5", "default", "25"]
    calls = dict(zip(caps, summary["allreduces_per_step"].split(","), strict=True))
    assert calls == {"1e-05": "66", "0.01": "32", "0.1": "16", "0.5": "4", "default": "2", "25": "1"}
    times = dict(zip(caps, map(seconds, summary["step_times"].split(",")), strict=True))
    # Interleaved steps see the same machine load, so the ratio holds on a busy machine.
    assert times["1e-05"] >= SLOWDOWN_MARGIN * times["default"], times
    assert times["0.01"] > times["default"], times
    # The plot: a real PNG of the size the script draws (7 x 4 inches at 100 dpi).
    assert png_size(plot) == (700, 400)
    assert plot.stat().st_size > 10_000
    assert f"plot: {plot}" in result.output


def test_help_and_bad_input():
    result = script_help(BUCKETS)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--num-samples", "--backend",
                 "--timeout", "--variant", "--bucket-cap-mb", "--gradient-as-bucket-view", "--static-graph"):
        assert flag in result.output
    wrong = run_as_main(script(SWEEP), "--bucket-caps", "1", "ten", env=clean_env())
    assert wrong.returncode == 2
    assert "--bucket-caps takes numbers of MiB or 'default'" in wrong.output
