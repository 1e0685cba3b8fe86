"""Chapter 19: metrics and decisions across ranks. The mean of the ranks' F1 and AUROC is off,
the counts and the gathered scores give one process's; early stopping on each rank's own
validation loss ends in the timeout's error, one decision for all stops every rank at one
epoch; every rank preparing the same file reads it torn, one writer per node does not."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from conftest import (
    VENV_BIN,
    captured_run,
    clean_env,
    mpiexec,
    observed_writes,
    python,
    run,
    run_as_main,
    script,
    script_help,
    writes_to,
)
from simulated_nodes import Background, kill_leftovers  # noqa: F401 - the fixture ends leftovers

METRIC = "19_metrics_and_decisions/metric_across_ranks.py"
STOP = "19_metrics_and_decisions/early_stopping.py"
PREPARE = "19_metrics_and_decisions/prepare_once.py"
SAMPLES = 2000  # the metric script's default evaluation set
FAR_OFF = 0.05  # what "far off" means for F1 here: 5 points


# --------------------------------------------------------------------------- 1. a metric
def rank_table(output: str) -> list[tuple[int, int, float, float]]:
    """The per-rank table: (samples, positive, F1, AUROC) of each rank."""
    rows = re.findall(r"^\d+\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)$", output, flags=re.M)
    return [(int(n), int(p), float(f1), float(area)) for n, p, f1, area in rows]


def assert_mean_is_off(result, world_size: int) -> dict[str, str]:
    """The bad variant: the printed F1 and AUROC are the means of the ranks' (the table),
    they are off the reference by the amount printed, and F1 by FAR_OFF or more."""
    summary = result.clean_summary()
    table = rank_table(result.output)
    assert len(table) == world_size, result.output
    f1, area = float(summary["f1"]), float(summary["auroc"])
    assert abs(f1 - sum(row[2] for row in table) / world_size) <= 1e-4, result.output
    assert abs(area - sum(row[3] for row in table) / world_size) <= 1e-4, result.output
    off = float(summary["f1_off_by"])
    assert abs(off - (f1 - float(summary["reference_f1"]))) <= 1e-4, summary
    assert abs(float(summary["auroc_off_by"]) - (area - float(summary["reference_auroc"]))) <= 1e-4
    assert abs(off) >= FAR_OFF, f"the mean of the ranks' F1 is only {off:+.4f} off:\n{result.output}"
    assert summary["matches_reference"] == "no"
    assert f"WARNING: off by {off:+.4f} (F1)" in result.output
    return summary


def assert_matches_reference(result, world_size: int) -> dict[str, str]:
    summary = result.clean_summary()
    assert summary["world_size"] == str(world_size)
    assert (summary["f1"], summary["auroc"]) == (summary["reference_f1"], summary["reference_auroc"]), summary
    assert summary["counted"] == str(SAMPLES) and summary["matches_reference"] == "yes", summary
    assert "WARNING" not in result.output
    return summary


def test_bad_mean_of_the_ranks_f1_is_off():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_mean_is_off(captured_run("19_metric_bad.txt"), 2)


def test_bad_mean_of_the_ranks_f1_is_off_and_the_good_counts_match_one_process():
    bad, good = captured_run("19_metric_bad.txt"), captured_run("19_metric_good.txt")
    bad_summary = assert_mean_is_off(bad, 2)
    good_summary = assert_matches_reference(good, 2)
    # the same shards, and the same reference: only the way the ranks combine differs
    assert rank_table(bad.output) == rank_table(good.output)
    assert bad_summary["reference_f1"] == good_summary["f1"]
    # the premise: shards of different sizes and class balance, every sample in one of them
    table = rank_table(good.output)
    assert sum(n for n, _, _, _ in table) == SAMPLES
    shares = [positive / n for n, positive, _, _ in table]
    assert max(shares) > 3 * min(shares), table


def test_one_process_gives_the_reference():
    single = python(METRIC)
    summary = assert_matches_reference(single, 1)
    good = captured_run("19_metric_good.txt").summary()
    assert (summary["f1"], summary["auroc"]) == (good["reference_f1"], good["reference_auroc"])


def test_mpiexec_three_ranks_and_the_samplers_padding():
    bad = mpiexec("openmpi", 3, METRIC, "--variant", "bad")
    assert bad.summary()["world_size"] == "3"
    assert_mean_is_off(bad, 3)
    # DistributedSampler pads 2000 samples to 3 x 667: the good variant counts each sample once
    good = mpiexec("mpich", 3, METRIC, "--shards", "sampler")
    assert [n for n, _, _, _ in rank_table(good.output)] == [667, 667, 667], good.output
    assert_matches_reference(good, 3)


# --------------------------------------------------------------------------- 2. a decision
def epoch_rows(output: str, world_size: int) -> list[list[tuple[str, str]]]:
    """Rank 0's table: per epoch, each rank's (loss, decision)."""
    cell = r"\s+(\S+) \S+ (go on|stop)"
    rows = re.findall(rf"^\d+{cell * world_size}\s*$", output, flags=re.M)
    return [list(zip(row[::2], row[1::2], strict=True)) for row in rows]


def assert_hang_explained(result, world_size: int, timeout: float) -> dict[str, str]:
    """Exit 1, the ranks' decisions parting at the last epoch, and the timeout's error
    within its bound."""
    assert "exit code: 1" in result.output or result.returncode == 1, result.output
    assert result.count("summary:") == 1, result.output
    summary = result.summary()
    assert summary["outcome"] == "timeout", result.output
    assert timeout * 0.9 <= float(summary["waited"].removesuffix("s")) < timeout + 15, summary
    rows = epoch_rows(result.output, world_size)
    last = int(summary["left_after_epoch"])
    assert len(rows) == last, result.output
    decisions = [decision for _, decision in rows[-1]]
    assert "stop" in decisions and "go on" in decisions, result.output  # the ranks part
    assert summary["left"] == ",".join(str(r) for r, d in enumerate(decisions) if d == "stop")
    assert summary["went_on"] == ",".join(str(r) for r, d in enumerate(decisions) if d == "go on")
    assert all(decision == "go on" for row in rows[:-1] for _, decision in row), result.output
    assert f"the timeout (--timeout {timeout:g}) ended the wait" in result.output
    assert "Traceback" not in result.output
    return summary


def assert_one_decision(result, world_size: int) -> list[int]:
    summary = result.clean_summary()
    epochs = [int(e) for e in summary["stop_epoch_per_rank"].split(",")]
    steps = [int(s) for s in summary["steps_per_rank"].split(",")]
    assert len(epochs) == world_size and len(set(epochs)) == 1 and len(set(steps)) == 1, summary
    assert summary["stopped"] == "early", summary
    rows = epoch_rows(result.output, world_size)
    assert len(rows) == epochs[0], result.output
    assert [decision for _, decision in rows[-1]] == ["stop"] * world_size
    return epochs


def test_bad_early_stopping_times_out_and_the_all_reduced_loss_stops_every_rank_together():
    bad = captured_run("19_stop_bad.txt")
    assert "timeout=5 s" in bad.output  # the bad variant's own default
    assert_hang_explained(bad, 2, 5)
    good = captured_run("19_stop_good.txt")
    assert_one_decision(good, 2)
    # every rank saw the same loss, every epoch: the whole validation set's
    assert all(len({loss for loss, _ in row}) == 1 for row in epoch_rows(good.output, 2)), good.output


def test_mpiexec_every_rank_says_where_it_waited_and_broadcast_stops_every_rank():
    bad = mpiexec("openmpi", 3, STOP, "--variant", "bad", "--timeout", "3", timeout=120)
    summary = assert_hang_explained(bad, 3, 3)
    last = int(summary["left_after_epoch"])
    waited = dict(re.findall(r"^rank (\d+): waited in (.+) after \d+ steps, failed after", bad.output,
                             flags=re.M))
    assert sorted(waited) == ["0", "1", "2"], bad.output  # every rank's own account
    # gloo's own words: its timeout, on the ranks in the all-reduce and at the barrier alike; or,
    # where a peer's clock ran out a moment sooner, that peer's closed connection, read at the
    # same --timeout (the page's note). Never an early end: every wait lasted the timeout.
    said = re.findall(r"^rank \d+: waited in .+ failed after ([\d.]+) s: (.+)$", bad.output, flags=re.M)
    assert len(said) == 3 and all(float(seconds) >= 0.9 * 3 for seconds, _ in said), said
    assert all(text.startswith(("Timed out waiting", "Connection closed by peer")) for _, text in said), said
    assert any(text.startswith("Timed out waiting") for _, text in said), said
    for rank in summary["left"].split(","):
        assert waited[rank] == "the end-of-training barrier", bad.output
    for rank in summary["went_on"].split(","):
        assert waited[rank] == f"step 1 of epoch {last + 1}", bad.output

    good = mpiexec("mpich", 3, STOP, "--fix", "broadcast")
    assert "fix=broadcast" in good.output
    assert_one_decision(good, 3)


def test_bad_input_says_what_to_do():
    fix_with_bad = run_as_main(script(STOP), "--variant", "bad", "--fix", "broadcast", env=clean_env())
    assert fix_with_bad.returncode == 2
    assert "--fix chooses the fix of --variant good" in fix_with_bad.output
    helped = script_help(STOP)
    assert helped.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in helped.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant",
                 "--fix", "--patience", "--num-samples"):
        assert flag in helped.output


# --------------------------------------------------------------------------- 3. prepare once
def read_outcomes(output: str) -> dict[int, tuple[bool, str]]:
    """Per rank: (whether it wrote the file, what its read gave)."""
    return {int(rank): (bool(wrote), what) for rank, wrote, what in re.findall(
        r"^rank (\d+) \(local rank \d+\): (wrote the file, )?(?:read it|could not read it): (.+)$",
        output, flags=re.M)}


def assert_torn(result, world_size: int) -> None:
    assert "exit code: 1" in result.output or result.returncode == 1, result.output
    outcomes = read_outcomes(result.output)
    assert sorted(outcomes) == list(range(world_size)), result.output
    assert outcomes[0][0] and outcomes[0][1].startswith("ok"), result.output  # the writer
    for rank in range(1, world_size):
        wrote, what = outcomes[rank]
        assert not wrote and what.startswith("torn: "), result.output
        assert "fewer bytes than its header" in what, result.output
    assert result.summary()["failed_reads"] == str(world_size - 1)


def assert_every_rank_read_it(result, world_size: int, writers: list[int]) -> None:
    summary = result.clean_summary()
    outcomes = read_outcomes(result.output)
    assert sorted(outcomes) == list(range(world_size)), result.output
    assert [rank for rank, (wrote, _) in outcomes.items() if wrote] == writers, result.output
    assert len({what for _, what in outcomes.values()}) == 1, result.output  # one crc for all
    assert all(what.startswith("ok, 1048576 tokens") for _, what in outcomes.values())
    assert summary["reads_ok"] == f"{world_size}/{world_size}", summary


def test_bad_every_rank_prepares_and_one_reads_a_torn_file_good_one_writer_and_a_barrier():
    assert_torn(captured_run("19_prepare_bad.txt"), 2)
    assert_every_rank_read_it(captured_run("19_prepare_good.txt"), 2, writers=[0])


def test_mpiexec_torn_read_and_the_writes_as_the_file_system_saw_them(tmp_path):
    bad = mpiexec("mpich", 2, PREPARE, "--variant", "bad", "--cache-dir", str(tmp_path / "bad"))
    assert bad.returncode == 1
    assert_torn(bad, 2)
    # good, observed: one rank opened a file for writing, under another name, renamed onto the cache
    cache_dir, log = tmp_path / "good", tmp_path / "writes"
    observe = {k: v for k, v in observed_writes(cache_dir, log).items()
               if k in ("PYTHONPATH", "OBSERVE_WRITES_DIR", "OBSERVE_WRITES_LOG")}
    good = mpiexec("openmpi", 2, PREPARE, "--cache-dir", str(cache_dir), env_extra=observe)
    assert_every_rank_read_it(good, 2, writers=[0])
    assert writes_to(log, cache_dir / "tokens.cache", 2) == [1, 0]
    opened = [line.split("\t") for file in log.glob("*.log") for line in file.read_text().splitlines()
              if "\topen\t" in line]
    assert [(rank, Path(path).name.endswith(".tmp")) for rank, _, path in opened] == [("0", True)], opened


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_nodes(tmp_path: Path, cache_on: str, dirs: tuple[Path, Path], ranks_per_node: int = 2):
    """Two torchrun agents on this machine as two nodes of `ranks_per_node` ranks (static
    rendezvous), each with its own --cache-dir where the disks are node-local, or the same
    one where shared."""
    port = free_port()

    def node(rank: int) -> list:
        return [VENV_BIN / "torchrun", "--nnodes=2", f"--node-rank={rank}",
                f"--nproc-per-node={ranks_per_node}", "--master-addr=127.0.0.1", f"--master-port={port}",
                script(PREPARE),
                "--cache-on", cache_on, "--cache-dir", dirs[rank]]

    other = Background(node(1), env=clean_env(), timeout=180)
    first = run(node(0), timeout=180)
    return first, other.finish()


def test_two_nodes_node_local_disks_one_writer_each_shared_one_writer(tmp_path):
    """Node-local disks at 2 ranks per node: local rank 0 of each node writes, not every rank.
    A shared disk at 1 rank per node is enough to tell rank 0 alone (1 writer) from local
    rank 0 of each node (2 writers), with 2 processes fewer."""
    local, other = two_nodes(tmp_path, "node-local", (tmp_path / "node0", tmp_path / "node1"))
    assert other.returncode == 0, other.output
    assert_every_rank_read_it(local, 4, writers=[0, 2])  # local rank 0 of each node
    assert "cache=" + str(tmp_path / "node0" / "tokens.cache") in local.output
    assert all((tmp_path / f"node{n}" / "tokens.cache").is_file() for n in (0, 1))
    shared, other = two_nodes(tmp_path, "shared", (tmp_path / "shared",) * 2, ranks_per_node=1)
    assert other.returncode == 0, other.output
    assert_every_rank_read_it(shared, 2, writers=[0])  # rank 0 alone, not node 1's local rank 0
    assert sorted(os.listdir(tmp_path / "shared")) == ["tokens.cache"]  # no temporary file left
