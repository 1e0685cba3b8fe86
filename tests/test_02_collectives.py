"""Chapter 02: every collective gives each rank what the page says, and a skipped
collective turns into a timeout error that explains itself instead of a hang."""

from __future__ import annotations

import re

import pytest
from conftest import captured_run, exit_code_echoed, mpiexec, python, script_help

TOUR = "02_collectives/collectives_tour.py"
ORDER = "02_collectives/collective_order.py"


def table(output: str, title_start: str) -> dict[int, tuple[str, str]]:
    """The per-rank rows printed under the table whose title starts with `title_start`."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    rows = {}
    for line in lines[start + 1:]:
        match = re.match(r"  rank (\d+): (\[.*?\])\s+-> (\[.*?\])(.*)$", line)
        if not match:
            break
        assert match.group(4) == "", f"a rank got a wrong result: {line}"
        rows[int(match.group(1))] = (match.group(2), match.group(3))
    return rows


def nums(values) -> str:
    return "[" + ", ".join(f"{float(v):g}" for v in values) + "]"


def assert_tour(result, world: int, launcher: str) -> None:
    """Exit 0, rank 0 alone printed, and each table holds what the collective should give."""
    assert result.returncode == 0, result.output
    summary = result.summary()
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    assert (summary["world_size"], summary["launcher"], summary["backend"]) == (str(world), launcher, "gloo")
    checks = 7 if world == 1 else 8  # a world of one has no send/recv ring
    assert summary["checks_passed"] == f"{checks}/{checks}"
    ranks_sum = world * (world + 1) // 2
    starts = {r: nums([r + 1, 2 * (r + 1)]) for r in range(world)}
    assert table(result.output, "all_reduce SUM:") == {r: (starts[r], nums([ranks_sum, 2 * ranks_sum]))
                                                       for r in range(world)}
    assert table(result.output, "all_reduce MAX") == {r: (starts[r], nums([world, 2 * world]))
                                                      for r in range(world)}
    mean = nums([ranks_sum / world, 2 * ranks_sum / world])
    assert table(result.output, "all_reduce SUM / world_size") == {r: (starts[r], mean) for r in range(world)}
    assert summary["mean"] == mean[1:-1].replace(" ", "")
    broadcast = table(result.output, "broadcast")
    assert broadcast[0] == ("[1, 2]", "[1, 2]")
    assert all(broadcast[r] == ("[0, 0]", "[1, 2]") for r in range(1, world))
    everyone = nums([10 * r for r in range(world)])
    assert table(result.output, "all_gather") == {r: (nums([10 * r]), everyone) for r in range(world)}
    assert table(result.output, "reduce_scatter") == {
        r: (nums([(r + 1) * (i + 1) for i in range(world)]), nums([ranks_sum * (r + 1)]))
        for r in range(world)}
    assert table(result.output, "all_reduce SUM with async_op") == table(result.output, "all_reduce SUM:")
    # The barrier held the early ranks: rank r slept r x 0.1 s (--barrier-delay) first, so
    # rank 0 waited about (world - 1) x 0.1 s for the last rank, which itself hardly waited.
    # (Without the barrier every wait is 0.00; half the expected wait leaves room for load.)
    waits = [float(w) for w in
             re.findall(r"rank \d+: worked [\d.]+ s, then waited ([\d.]+) s", result.output)]
    assert len(waits) == world, result.output
    if world > 1:
        assert waits[0] >= 0.5 * (world - 1) * 0.1 and waits[-1] < waits[0], waits
    if world > 1:
        assert table(result.output, "send/recv ring") == {
            r: (nums([r]), nums([(r - 1) % world])) for r in range(world)}
    else:
        assert "send/recv ring: skipped" in result.output


def test_tour_single_process():
    assert_tour(python(TOUR), world=1, launcher="none")


def test_tour_torchrun():
    assert_tour(captured_run("02_tour.txt"), world=3, launcher="torchrun")  # the page's run: 3 ranks


def test_tour_mpiexec_even_world():
    """An even world (2 ranks), and MPICH: the tour holds at 1, 2 and 3 ranks."""
    assert_tour(mpiexec("mpich", 2, TOUR), world=2, launcher="mpich")


def expected_totals(world: int) -> str:
    """4 samples per rank per step, except the last rank at step 2."""
    return f"{4 * world},{4 * world - 4},{4 * world}"


def assert_hang_explained(result, world: int, timeout: float, every_rank: bool = True) -> None:
    """Non-zero exit, rank 0's explanation, and a wait that the timeout ended; with
    `every_rank`, each rank's own account too (the other ranks print it on stderr, which the
    page's capture drops: the 3-rank run under mpiexec checks it)."""
    assert result.returncode != 0, result.output
    summary = result.summary()
    assert summary["outcome"] == "timeout", result.output
    assert summary["failed_call"] == "all_reduce_#3"
    assert timeout * 0.9 <= float(summary["waited"].rstrip("s")) < timeout + 30, summary
    # step 2 met the skipper's step 3: a wrong total before the hang
    assert summary["totals"] == f"{4 * world},{4 * world}"
    assert summary["expected"] == expected_totals(world)
    assert "step 2: total samples" in result.output and "<- WRONG" in result.output
    assert f"cause: rank {world - 1} skipped all_reduce #2." in result.output
    assert f"the timeout (--timeout {timeout:g}) ended the wait" in result.output
    assert "rank 0: all_reduce #3 found no partner; after " in result.output
    if not every_rank:
        return
    # each rank says where it stopped: the others in all_reduce #3, the skipper in the barrier
    for rank in range(world - 1):
        assert f"rank {rank}: all_reduce #3 failed after" in result.output
    assert f"rank {world - 1}: the final barrier failed after" in result.output
    assert "Timed out waiting" in result.output  # gloo's own words, from the first to give up


@pytest.fixture(scope="module")
def skipped_all_reduce():
    """bad under torchrun with the script's own 5 s default: the page's run (stdout, the code
    it echoed). Each rank's own account, on stderr, is checked at 3 ranks under mpiexec."""
    return exit_code_echoed(captured_run("02_order_bad.txt"))


def test_bad_skipped_all_reduce_ends_at_the_timeout_with_its_cause(skipped_all_reduce):
    """The pitfall alone, one launch: `make test-quick`'s test of this chapter."""
    assert "timeout=5 s" in skipped_all_reduce.output
    assert_hang_explained(skipped_all_reduce, world=2, timeout=5, every_rank=False)


def test_pitfall_skipped_all_reduce_times_out_and_the_fix_completes(skipped_all_reduce):
    # bad, with the script's own 5 s default: ends within the harness's bound, explained
    assert "timeout=5 s" in skipped_all_reduce.output
    assert_hang_explained(skipped_all_reduce, world=2, timeout=5, every_rank=False)
    good = captured_run("02_order_good.txt")  # the run the page shows
    assert good.returncode == 0, good.output
    summary = good.summary()
    assert (summary["outcome"], summary["totals"]) == ("completed", expected_totals(2))
    assert "WRONG" not in good.output and "cause:" not in good.output


def test_pitfall_odd_world_under_mpiexec():
    bad = mpiexec("openmpi", 3, ORDER, "--variant", "bad", "--timeout", "3", timeout=90)
    assert_hang_explained(bad, world=3, timeout=3)
    good = mpiexec("openmpi", 3, ORDER, "--variant", "good")
    assert good.returncode == 0, good.output
    assert good.summary()["totals"] == expected_totals(3)


def test_pitfall_needs_two_ranks():
    """One process has nobody to wait for: the bad variant says so and completes."""
    result = python(ORDER, "--variant", "bad")
    assert result.returncode == 0, result.output
    assert "a skipped all_reduce cannot hang" in result.output
    assert result.summary()["outcome"] == "completed"


def test_help_shows_the_launch_commands():
    for path, flags in ((TOUR, ()), (ORDER, ("--variant",))):
        result = script_help(path)
        assert result.returncode == 0
        assert "torchrun --standalone --nproc_per_node=" in result.output
        assert "mpiexec -n 3 python" in result.output
        for flag in ("--seed", "--backend", "--timeout", *flags):
            assert flag in result.output
