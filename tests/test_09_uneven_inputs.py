"""Chapter 09: ranks with different numbers of batches. A plain loop hangs in an all-reduce,
which the timeout turns into an explained error within seconds; Join and even shards finish."""

from __future__ import annotations

import math
import re
import subprocess

import pytest
from conftest import (
    captured_run,
    clean_env,
    exit_code_echoed,
    mpiexec,
    python,
    run_as_main,
    script,
    script_help,
)

UNEVEN = "09_uneven_inputs/uneven_inputs.py"
NUM_SAMPLES, BATCH_SIZE, EPOCHS = 2048, 32, 3  # the script's defaults


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def samples_per_rank(output: str) -> list[int]:
    """The shard sizes the script printed: 'rank 0 885 samples = 28 batches, ...'."""
    line = next(ln for ln in output.splitlines() if ln.startswith("per rank and epoch:"))
    return [int(n) for n in re.findall(r"rank \d+ (\d+) samples", line)]


def assert_uneven_shards(result, world_size: int) -> list[int]:
    """Every sample in exactly one shard, the batch counts follow from the shard sizes, and
    they differ: the premise of the chapter. Returns the batches per rank."""
    samples = samples_per_rank(result.output)
    batches = ints(result.summary()["batches_per_rank"])
    assert len(samples) == len(batches) == world_size, result.output
    assert sum(samples) == NUM_SAMPLES
    assert batches == [math.ceil(n / BATCH_SIZE) for n in samples]
    assert len(set(batches)) > 1, "the default shards are meant to be uneven"
    return batches


def assert_hang_explained(result, world_size: int, timeout: float, launcher: str,
                          every_rank: bool = True) -> None:
    """Exit 1 within seconds, rank 0's explanation and, with `every_rank`, every rank's own
    account (the other ranks print it on stderr, which the page's capture drops: the 3-rank
    run under mpiexec checks it)."""
    assert result.returncode != 0, result.output
    assert result.seconds < 60, f"took {result.seconds:.0f} s: the timeout should end it in seconds"
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    summary = result.summary()
    assert (summary["outcome"], summary["launcher"]) == ("timeout", launcher), result.output
    batches = assert_uneven_shards(result, world_size)
    shortest = min(batches)
    assert summary["hung_epoch"] == "1"
    assert timeout * 0.9 <= float(summary["waited"].removesuffix("s")) < timeout + 30, summary
    assert f"the timeout (--timeout {timeout:g}) ended the wait" in result.output
    # Where the ranks stopped, as rank 0 tells it: the shortest shards' ranks at the end of the
    # epoch, the others in the step after the shortest shard's last.
    short = ",".join(str(r) for r, b in enumerate(batches) if b == shortest)
    assert re.search(rf"^epoch 1: rank\(s\) {short} ran out of batches after step {shortest} and waited at "
                     rf"the end of the epoch; rank\(s\) [\d,]+ went on to step {shortest + 1} ",
                     result.output, flags=re.M), result.output
    assert summary["rank0_steps_done"] == str(shortest)  # every rank did the shortest shard's
    leftovers = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [ln for ln in leftovers.splitlines() if UNEVEN in ln and "--variant bad" in ln], leftovers
    if not every_rank:
        return
    # Where each rank stopped, in its own words: the ranks with longer shards in the step
    # the others never reached, the shortest at the end of the epoch, each with the batches
    # it had done; every rank did exactly as many as the shortest shard has.
    stopped = {int(rank): (where, int(done), int(own)) for rank, where, done, own in re.findall(
        r"^rank (\d+): (.+) of epoch 1 failed after [\d.]+ s, with (\d+) of its (\d+) batches done",
        result.output, flags=re.M)}
    assert sorted(stopped) == list(range(world_size)), result.output
    for rank, (where, done, own) in stopped.items():
        expected = "the end-of-epoch barrier" if batches[rank] == shortest else f"step {shortest + 1}"
        assert (where, done, own) == (expected, shortest, batches[rank]), result.output
    assert summary["rank0_steps_done"] == str(stopped[0][1])
    assert "Timed out waiting" in result.output  # gloo's own words


def assert_finished(result, world_size: int, fix: str, launcher: str) -> dict[str, str]:
    """Exit 0, every rank's step count, loss falling, replicas equal at the end."""
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1
    summary = result.summary()
    assert (summary["outcome"], summary["fix"], summary["launcher"]) == ("completed", fix, launcher)
    assert summary["world_size"] == str(world_size)
    # Join copies the last rank's model to all at its end, so only even shards are checked.
    assert summary["replicas_identical"] == ("unchecked" if fix == "join" else "yes")
    assert float(summary["last_loss"]) < 0.5 * float(summary["first_loss"]), summary
    losses = [float(x) for x in re.findall(r"^epoch \d+/\d+ .* loss (\S+)$", result.output, flags=re.M)]
    assert len(losses) == EPOCHS and losses == sorted(losses, reverse=True), result.output
    return summary


@pytest.fixture(scope="module")
def uneven_bad():
    """bad under torchrun with its own 5 s default: the page's run (stdout, the code it
    echoed). Each rank's own account, on stderr, is checked at 3 ranks under mpiexec."""
    return exit_code_echoed(captured_run("09_uneven_bad.txt"))


def test_bad_extra_all_reduce_ends_at_the_timeout_with_its_cause(uneven_bad):
    """The pitfall alone, one launch: `make test-quick`'s test of this chapter."""
    assert "timeout=5 s" in uneven_bad.output  # the bad variant's own default
    assert_hang_explained(uneven_bad, world_size=2, timeout=5, launcher="torchrun", every_rank=False)


def test_pitfall_hangs_until_the_timeout_and_join_finishes(uneven_bad):
    assert "timeout=5 s" in uneven_bad.output  # the bad variant's own default
    assert_hang_explained(uneven_bad, world_size=2, timeout=5, launcher="torchrun", every_rank=False)

    join = captured_run("09_uneven_join.txt")  # the run the page shows
    summary = assert_finished(join, world_size=2, fix="join", launcher="torchrun")
    batches = assert_uneven_shards(join, 2)
    # every rank ran all of its own batches, every epoch: nothing dropped
    assert ints(summary["steps_per_rank"]) == [b * EPOCHS for b in batches]
    assert summary["samples_dropped_per_epoch"] == "0"
    assert "samples 2048" in join.output


def test_pitfall_odd_world_under_mpiexec_and_even_shards():
    bad = mpiexec("openmpi", 3, UNEVEN, "--variant", "bad", "--timeout", "3", timeout=90)
    assert_hang_explained(bad, world_size=3, timeout=3, launcher="openmpi")

    even = mpiexec("mpich", 3, UNEVEN, "--fix", "even")
    summary = assert_finished(even, world_size=3, fix="even", launcher="mpich")
    batches = assert_uneven_shards(even, 3)
    shortest = min(batches)
    # every rank stopped after the shortest shard's batches; the rest of each shard is dropped
    assert ints(summary["steps_per_rank"]) == [shortest * EPOCHS] * 3
    kept = sum(min(n, shortest * BATCH_SIZE) for n in samples_per_rank(even.output))
    assert int(summary["samples_dropped_per_epoch"]) == NUM_SAMPLES - kept > 0


def test_single_process_has_nothing_to_wait_for():
    result = python(UNEVEN, "--variant", "bad", "--epochs", "2")
    assert result.returncode == 0, result.output
    assert "nothing can hang" in result.output
    summary = result.summary()
    assert (summary["outcome"], summary["launcher"]) == ("completed", "none")
    assert summary["batches_per_rank"] == str(math.ceil(NUM_SAMPLES / BATCH_SIZE))


def test_bad_input_says_what_to_set():
    fewer_files = mpiexec("mpich", 2, UNEVEN, "--num-files", "1", timeout=90)
    assert fewer_files.returncode != 0
    assert "--num-files 1 is fewer than the 2 ranks" in fewer_files.output
    assert "set --num-files to at least 2" in fewer_files.output
    fix_with_bad = run_as_main(script(UNEVEN), "--variant", "bad", "--fix", "join", env=clean_env())
    assert fix_with_bad.returncode == 2
    assert "--fix chooses the fix of --variant good" in fix_with_bad.output


def test_help_shows_the_launch_commands():
    result = script_help(UNEVEN)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in result.output
    assert "mpiexec -n 3 python" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant",
                 "--fix", "--num-samples", "--num-files"):
        assert flag in result.output

