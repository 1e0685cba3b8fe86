"""Chapter 03: set_epoch() reshuffles; a distributed evaluation counts each sample once.

Both pitfalls, bad versus good, under real launchers, asserted from what the scripts print.
"""

from __future__ import annotations

import re

import pytest
from conftest import captured_run, mpiexec, python, script_help

SHUFFLE = "03_distributed_sampler/set_epoch_shuffling.py"
EVAL = "03_distributed_sampler/distributed_eval.py"
EPOCHS = 3  # set_epoch_shuffling.py's default
SAMPLES = 1001  # distributed_eval.py's default: divisible by none of 2, 3, 4


def fingerprints(result) -> list[list[str]]:
    """Per epoch line, each rank's order fingerprint: [[rank0, rank1, ...], ...]."""
    assert result.returncode == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("epoch ")]
    assert len(lines) == EPOCHS, result.output
    return [re.findall(r"rank \d+: ([0-9a-f]{8}) ", line) for line in lines]


# ------------------------------------------------------------------ pitfall 1: set_epoch
def assert_same_order_every_epoch(bad) -> None:
    """bad: each rank draws the very same order in every epoch."""
    bad_prints = fingerprints(bad)
    assert all(len(epoch) == 2 for epoch in bad_prints), "one fingerprint per rank"
    assert bad_prints == [bad_prints[0]] * EPOCHS
    assert bad.summary()["orders_per_rank"] == "1"
    assert bad.summary()["same_order_every_epoch"] == "yes"
    assert "WARNING: every rank drew the same shard in the same order" in bad.output


def test_bad_without_set_epoch_every_epoch_repeats_the_order():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_same_order_every_epoch(captured_run("03_set_epoch_bad.txt"))


def test_without_set_epoch_every_epoch_repeats_the_order_with_set_epoch_it_changes():
    bad = captured_run("03_set_epoch_bad.txt")  # the runs the page shows
    good = captured_run("03_set_epoch_good.txt")
    bad_prints, good_prints = fingerprints(bad), fingerprints(good)
    assert all(len(epoch) == 2 for epoch in good_prints), "one fingerprint per rank"
    # bad: each rank draws the very same order in every epoch ...
    assert_same_order_every_epoch(bad)
    # ... good: a new order every epoch on every rank; epoch 0 is the order bad repeats
    # (set_epoch(0) is the sampler's starting state).
    assert good_prints[0] == bad_prints[0]
    for rank in range(2):
        assert len({epoch[rank] for epoch in good_prints}) == EPOCHS, good.output
    assert good.summary()["orders_per_rank"] == str(EPOCHS)
    assert good.summary()["same_order_every_epoch"] == "no"
    assert "WARNING" not in good.output
    assert good.count("summary:") == 1, "a line printed by more than rank 0"


def test_set_epoch_matters_even_in_one_process():
    """DistributedSampler in a plain `python` run: the same repeat without set_epoch."""
    assert python(SHUFFLE, "--variant", "bad").summary()["same_order_every_epoch"] == "yes"
    assert python(SHUFFLE, "--variant", "good").summary()["same_order_every_epoch"] == "no"


def test_set_epoch_under_mpich():
    good = mpiexec("mpich", 3, SHUFFLE)
    prints = fingerprints(good)
    assert good.summary()["world_size"] == "3"
    assert all(len(set(epoch)) == 3 for epoch in prints), "the 3 ranks draw 3 different shards"
    assert good.summary()["orders_per_rank"] == str(EPOCHS)


# ------------------------------------------------------------------ pitfall 2: evaluation
def eval_summary(result) -> dict[str, str]:
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    return result.summary()


def test_padded_duplicates_skew_the_accuracy_and_exact_counting_matches_one_process():
    bad = eval_summary(captured_run("03_eval_bad.txt"))  # torchrun, 4 ranks: the runs the page shows
    good_result = captured_run("03_eval_good.txt")
    good = eval_summary(good_result)
    single = eval_summary(python(EVAL, "--variant", "good"))
    # The reference is the same in every run, and is what one process computes.
    assert bad["reference_correct"] == good["reference_correct"] == single["correct"]
    assert single["evaluated"] == str(SAMPLES) and single["matches_reference"] == "yes"
    # bad: 1001 = 4 * 251 - 3, so 3 samples are evaluated twice; they are the first ones
    # (class 0, always right), so the padded accuracy comes out too high.
    assert bad["evaluated"] == "1004" and bad["counted_twice"] == "3"
    assert int(bad["correct"]) == int(bad["reference_correct"]) + 3
    assert float(bad["accuracy"]) > float(bad["reference_accuracy"])
    assert bad["matches_reference"] == "no"
    # good: every sample once, and the very same count as one process.
    assert good["evaluated"] == str(SAMPLES) and good["counted_twice"] == "0"
    assert good["correct"] == single["correct"] and good["accuracy"] == single["accuracy"]
    assert good["matches_reference"] == "yes"
    assert "samples evaluated per rank: [251, 250, 250, 250] -> 1001 in all" in good_result.output
    assert "WARNING" not in good_result.output


def test_the_skew_depends_on_the_world_size():
    """3 ranks pad one sample, so even the bad count differs from 4 ranks' bad count; the
    good count is the same for 2 ranks as for one process."""
    bad3 = eval_summary(mpiexec("openmpi", 3, EVAL, "--variant", "bad"))
    assert bad3["world_size"] == "3" and bad3["evaluated"] == "1002"
    assert bad3["counted_twice"] == "1" and bad3["matches_reference"] == "no"
    good2 = eval_summary(mpiexec("mpich", 2, EVAL, "--variant", "good"))
    assert good2["evaluated"] == str(SAMPLES) and good2["matches_reference"] == "yes"
    assert good2["correct"] == bad3["reference_correct"]


def test_no_padding_no_skew_when_the_world_size_divides_the_set():
    """1000 samples on 2 ranks: nothing to pad, so even the bad variant is exact."""
    bad = eval_summary(mpiexec("mpich", 2, EVAL, "--variant", "bad", "--num-samples", "1000"))
    assert bad["evaluated"] == "1000" and bad["counted_twice"] == "0"
    assert bad["matches_reference"] == "yes"


@pytest.mark.parametrize("path", [SHUFFLE, EVAL])
def test_help_shows_the_launch_commands(path):
    result = script_help(path)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=" in result.output
    assert "mpiexec -n 4 python" in result.output
    for flag in ("--batch-size", "--seed", "--backend", "--timeout", "--variant", "--num-samples"):
        assert flag in result.output
