"""Chapter 07: with plain BatchNorm each rank keeps its own running statistics (evaluation
differs by rank); broadcast_buffers gives every rank rank 0's; SyncBatchNorm (on CPUs its
stand-in, utils/batchnorm.py) computes the global batch's, equal to one process on it."""

from __future__ import annotations

import re

import pytest
from conftest import captured_run, mpiexec, python, script_help

SCRIPT = "07_batchnorm_and_buffers/batchnorm_ddp.py"
REFERENCE_TOLERANCE = 1e-5
REFERENCE_KEYS = ("ref_outputs_diff", "ref_running_mean_diff", "ref_running_var_diff", "ref_gradients_diff")
# A row of the per-rank table: rank, classes, data mean, running_mean, running_var, accuracy.
TABLE_ROW = re.compile(r"^ +(\d+) +(\S+) +([+-]\d+\.\d+) +([+-]\d+\.\d+) +(\d+\.\d+) +(\d+\.\d)%$", re.M)


def table(output: str) -> list[tuple[str, ...]]:
    """Per rank, in rank order: (rank, classes, data mean, running_mean, running_var, accuracy)."""
    rows = TABLE_ROW.findall(output)
    assert [int(row[0]) for row in rows] == list(range(len(rows))), output
    return rows


def epoch_losses(output: str) -> list[str]:
    return re.findall(r"^epoch \d+/\d+  loss (\S+)$", output, flags=re.M)


def accuracies(summary: dict[str, str]) -> list[float]:
    return [float(a.removesuffix("%")) for a in summary["accuracy"].split(",")]


def assert_global_batch_statistics(result, world_size: int, launcher: str) -> dict[str, str]:
    """Identical buffers and outputs on every rank, equal to one process on the global batch."""
    summary = result.clean_summary()
    assert summary["world_size"] == str(world_size) and summary["launcher"] == launcher, summary
    assert summary["norm"] == "AllReduceBatchNorm", summary  # CPU: nn.SyncBatchNorm refuses CPU tensors
    assert "torch.nn.SyncBatchNorm runs on GPUs only" in result.output
    assert float(summary["buffers_spread_after_training"]) == 0.0, summary
    assert float(summary["buffers_spread_at_eval"]) == 0.0, summary
    assert summary["eval_identical"] == "yes" and summary["predictions_differing"] == "0", summary
    assert len(set(accuracies(summary))) == 1, summary
    for key in REFERENCE_KEYS:
        assert float(summary[key]) <= REFERENCE_TOLERANCE, (key, summary)
    assert summary["matches_reference"] == "yes"
    rows = table(result.output)
    assert len(rows) == world_size and len({row[3] for row in rows}) == 1, result.output
    assert "WARNING" not in result.output
    return summary


@pytest.fixture(scope="module")
def bad_run():
    return captured_run("07_batchnorm_bad.txt")  # torchrun, 2 ranks: the run the page shows


def assert_per_rank_statistics(bad_run) -> dict[str, str]:
    """bad: each rank keeps its own running statistics, so the replicas evaluate differently
    and none of them has the global batch's statistics. Returns its summary."""
    bad = bad_run.clean_summary()
    assert bad["world_size"] == "2" and bad["norm"] == "BatchNorm1d" and bad["broadcast_buffers"] == "no"
    # Each rank's running mean follows its own shard, so the ranks' buffers differ ...
    rows = table(bad_run.output)
    assert rows[0][1] != rows[1][1], "the shards are meant to hold different classes"
    for _, _, data_mean, running_mean, _, _ in rows:
        assert abs(float(running_mean) - float(data_mean)) < 0.1, bad_run.output
    assert abs(float(rows[0][3]) - float(rows[1][3])) > 0.3, bad_run.output
    assert float(bad["buffers_spread_at_eval"]) > 0.3, bad
    # ... and the same model gives different outputs and predictions on the same samples.
    assert bad["eval_identical"] == "no" and float(bad["eval_max_abs_diff"]) > 0.1, bad
    assert int(bad["predictions_differing"]) > 0, bad
    assert "WARNING: the ranks evaluated with different running statistics" in bad_run.output
    # Per-rank statistics are not the global batch's: far from the single-process reference.
    for key in REFERENCE_KEYS:
        assert float(bad[key]) > 1e-3, (key, bad)
    assert bad["matches_reference"] == "no"
    return bad


def test_bad_plain_batchnorm_evaluates_differently_on_each_rank(bad_run):
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_per_rank_statistics(bad_run)


def test_pitfall_plain_batchnorm_keeps_per_rank_statistics(bad_run):
    bad = assert_per_rank_statistics(bad_run)
    good_run = captured_run("07_batchnorm_good.txt")
    good = assert_global_batch_statistics(good_run, world_size=2, launcher="torchrun")
    # The same data, normalized alike on every rank: evaluation is better, not only consistent.
    assert accuracies(good)[0] > max(accuracies(bad)) + 5, (good, bad)


def test_default_broadcast_buffers_gives_every_rank_rank_0s_statistics(bad_run):
    result = captured_run("07_batchnorm_broadcast.txt")
    summary = result.clean_summary()
    assert summary["broadcast_buffers"] == "yes"
    # Consistent: every rank evaluated with the same buffers and gave the same outputs ...
    assert float(summary["buffers_spread_at_eval"]) == 0.0, summary
    assert summary["eval_identical"] == "yes" and summary["predictions_differing"] == "0", summary
    # ... because the eval forward copied them: after the last training step each rank had
    # folded its own batch into rank 0's copy.
    assert float(summary["buffers_spread_after_training"]) > 0.0, summary
    # They are rank 0's: the run without the broadcast trained alike (the training forward
    # normalizes with batch statistics, not buffers), and its rank 0 had these buffers.
    assert epoch_losses(result.output) == epoch_losses(bad_run.output)
    rank0 = table(bad_run.output)[0]
    for row in table(result.output):
        assert row[3:] == rank0[3:], (row, rank0)
    # Not the global batch's statistics.
    assert summary["matches_reference"] == "no"
    assert "WARNING: the ranks agree only because rank 0's buffers were copied" in result.output


def test_three_ranks_under_open_mpi():
    result = mpiexec("openmpi", 3, SCRIPT, "--variant", "good")
    assert_global_batch_statistics(result, world_size=3, launcher="openmpi")


@pytest.mark.parametrize("variant", ["bad", "good"])
def test_single_process_plain_batchnorm_is_the_reference(variant):
    """One process: its batch is the global batch, so both variants match the reference."""
    result = python(SCRIPT, "--variant", variant, "--epochs", "1")
    summary = result.clean_summary()
    assert summary["world_size"] == "1" and summary["launcher"] == "none"
    assert summary["norm"] == ("BatchNorm1d" if variant == "bad" else "AllReduceBatchNorm")
    assert summary["matches_reference"] == "yes" and summary["eval_identical"] == "yes", summary
    assert "(one process: its batch is the global batch" in result.output


def test_help_shows_the_launch_commands():
    result = script_help(SCRIPT)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--num-samples", "--backend", "--timeout",
                 "--variant", "--broadcast-buffers"):
        assert flag in result.output
