"""Chapter 05: gradient accumulation; without no_sync() K all-reduces per step, with it one,
and the accumulated gradient equals the large batch's either way."""

from __future__ import annotations

import re

import pytest
from conftest import captured_run, mpiexec, python, script_help

ACCUMULATE = "05_gradient_accumulation/grad_accumulation.py"
TIMING = "05_gradient_accumulation/time_no_sync.py"
NUM_SAMPLES, BATCH_SIZE, EPOCHS = 2048, 16, 2  # the main script's defaults
GRAD_TOLERANCE = 1e-6


def expected_steps(world_size: int, accumulation_steps: int) -> int:
    micro_batches_per_rank = (NUM_SAMPLES // world_size) // BATCH_SIZE
    return (micro_batches_per_rank // accumulation_steps) * EPOCHS


def epoch_losses(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"^epoch \d+/\d+ .* loss (\S+)$", output, flags=re.M)]


def assert_accumulated(result, *, world_size: int, accumulation_steps: int, launcher: str,
                       allreduces_per_step: int) -> dict[str, str]:
    """Exit 0, one summary line (rank 0 alone printed), the effective batch, the exact
    all-reduce count, and a gradient equal to the large batch's."""
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    summary = result.summary()
    assert summary["world_size"] == str(world_size)
    assert summary["launcher"] == launcher
    assert summary["effective_batch"] == str(BATCH_SIZE * accumulation_steps * world_size)
    assert summary["buckets"] == "1", "the model is meant to fit into one DDP bucket"
    steps = expected_steps(world_size, accumulation_steps)
    assert summary["allreduces"] == str(steps * allreduces_per_step), summary
    assert summary["allreduces_per_step"] == str(allreduces_per_step)
    assert float(summary["grad_max_abs_diff"]) <= GRAD_TOLERANCE, summary
    assert summary["grads_equal"] == "yes"
    losses = epoch_losses(result.output)
    assert len(losses) == EPOCHS and losses[-1] < losses[0], result.output
    return summary


@pytest.mark.parametrize("variant, allreduces_per_step", [("good", 1), ("bad", 4)])
def test_single_process_still_calls_the_hook(variant, allreduces_per_step):
    # good: the run the page shows
    result = captured_run("05_accumulation_single.txt") if variant == "good" else python(
        ACCUMULATE, "--variant", variant)
    assert_accumulated(result, world_size=1, accumulation_steps=4, launcher="none",
                       allreduces_per_step=allreduces_per_step)
    assert "one process: DDP still calls the hook" in result.output


def test_bad_without_no_sync_all_reduces_every_micro_batch():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this
    chapter. K = 4 all-reduces per optimizer step, counted, and the warning."""
    bad = captured_run("05_accumulation_bad.txt")
    assert_accumulated(bad, world_size=2, accumulation_steps=4, launcher="torchrun", allreduces_per_step=4)
    assert "WARNING: 4 all-reduces per optimizer step where 1 would do" in bad.output


def test_pitfall_without_no_sync_all_reduces_every_micro_batch():
    k = 4  # the script's default: the runs the page shows
    bad, good = captured_run("05_accumulation_bad.txt"), captured_run("05_accumulation_good.txt")
    bad_summary = assert_accumulated(bad, world_size=2, accumulation_steps=k, launcher="torchrun",
                                     allreduces_per_step=k)
    good_summary = assert_accumulated(good, world_size=2, accumulation_steps=k, launcher="torchrun",
                                      allreduces_per_step=1)
    # bad: exactly K times the all-reduces and K times the bytes of good ...
    assert int(bad_summary["allreduces"]) == k * int(good_summary["allreduces"])
    assert int(bad_summary["allreduce_bytes_per_step"]) == k * int(good_summary["allreduce_bytes_per_step"])
    assert "WARNING: 4 all-reduces per optimizer step where 1 would do" in bad.output
    assert "WARNING" not in good.output
    # ... for the same training: same gradients, so the same losses.
    assert epoch_losses(bad.output) == pytest.approx(epoch_losses(good.output), abs=1e-3)


def test_a_partial_last_window_under_mpich():
    """K=3 does not divide the 64 micro-batches per rank: the last one is skipped (the count
    of all-reduces says so: 21 steps of 3 per epoch)."""
    result = mpiexec("mpich", 2, ACCUMULATE, "--variant", "bad", "--accumulation-steps", "3")
    assert_accumulated(result, world_size=2, accumulation_steps=3, launcher="mpich",
                       allreduces_per_step=3)


@pytest.mark.parametrize("launch", ["torchrun", "openmpi"])
def test_timing_counts_both_ways_in_one_run(launch):
    if launch == "torchrun":  # the page's run: K=4, 4 epochs
        result, k, epochs = captured_run("05_time_no_sync.txt"), 4, 4
    else:
        result, k, epochs = mpiexec("openmpi", 2, TIMING, "--accumulation-steps", "2", "--epochs", "1"), 2, 1
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1
    summary = result.summary()
    assert summary["launcher"] == launch
    assert summary["bad_allreduces_per_step"] == str(k)
    assert summary["good_allreduces_per_step"] == "1"
    # 1024 samples per rank / 16 = 64 micro-batches = 64 / K steps an epoch, half of them each way
    assert summary["steps_each"] == str(64 // k * epochs // 2)
    # The times are printed, not tested (chapter 05 says so): on two loaded CPU cores even
    # interleaved steps put either way first from one run to the next.
    assert re.fullmatch(r"\d+\.\d{4}s", summary["bad_step_time"]), summary


def test_help_shows_the_launch_commands():
    result = script_help(ACCUMULATE)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=4" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant",
                 "--accumulation-steps"):
        assert flag in result.output
