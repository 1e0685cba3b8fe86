"""Chapter 13, debugging: a rank that hangs, passes another shape, or crashes, and what the
timeout, TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_CPP_LOG_LEVEL=INFO, torchrun's error files
(@record) and py-spy show of it. The runs without DETAIL are the captured outputs
(docs/outputs/13_debug_*.txt), which test_site re-runs and compares."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest
from conftest import (
    REPO,
    VENV_BIN,
    captured_run,
    clean_env,
    exit_code_echoed,
    kill_tree,
    mpiexec,
    python,
    run,
    script,
    script_help,
)

DEBUGGING = "13_multinode_and_hpc/hang_debugging.py"
PAGE = REPO / "chapters" / "13_multinode_and_hpc.md"
LABEL_COUNTS = "label counts over all ranks [16, 16, 16, 16]"


def torchrun_with(env_extra: dict[str, str], *args: str, timeout: float = 120):
    """`VAR=value torchrun --standalone --nproc_per_node=2 hang_debugging.py ...`"""
    cmd = [VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", script(DEBUGGING), *args]
    return run(cmd, env=clean_env(**env_extra), timeout=timeout)


def assert_failed_at_step_3(result, outcome: str, fault: str) -> dict[str, str]:
    assert result.returncode != 0, result.output
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    summary = result.summary()
    assert (summary["variant"], summary["fault"], summary["outcome"]) == ("bad", fault, outcome), summary
    assert (summary["failed_step"], summary["steps_done"], summary["faulty_rank"]) == ("3", "2", "1")
    assert result.count(LABEL_COUNTS) == 2, result.output  # steps 1 and 2 completed
    return summary


def root_cause(output: str) -> str:
    """torchrun's 'Root Cause (first observed failure)' block."""
    assert "Root Cause (first observed failure)" in output, output
    return output.split("Root Cause (first observed failure)", 1)[1]


def test_crash_record_puts_the_rank_and_its_traceback_in_torchruns_summary():
    result = torchrun_with({}, "--variant", "bad", "--fault", "crash")
    assert result.returncode != 0
    cause = root_cause(result.output)
    assert re.search(r"rank\s+: 1 \(local_rank: 1\)", cause), cause
    assert re.search(r"exitcode\s+: 1 ", cause), cause
    assert re.search(r"error_file: \S+error\.json", cause), "@record wrote no error file"
    assert re.search(r'hang_debugging\.py", line \d+, in load_batch', cause), cause
    assert "ValueError: rank 1: sample 96 of step 3 is corrupt" in cause
    assert "To enable traceback see" not in cause  # what torchrun says without @record


def test_hang_timeout_ends_it_and_detail_names_the_rank_that_did_not_arrive():
    result = torchrun_with({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "--variant", "bad", "--fault", "hang")
    assert_failed_at_step_3(result, "timeout", "hang")
    assert "timeout=5 s" in result.output
    assert re.search(r"step 3 failed after (4\.[5-9]|[5-9]\.\d|\d\d\.\d) s: \[Rank 0\]: "
                     r"Ranks 1 failed to pass monitoredBarrier in 5000 ms", result.output), result.output
    # @record: rank 0's timeout, with the line of the script where it waited
    cause = root_cause(result.output)
    assert re.search(r"rank\s+: 0 \(local_rank: 0\)", cause), cause
    assert re.search(r'hang_debugging\.py", line \d+, in train_step', cause), cause


def test_mismatch_detail_names_the_shapes_and_the_fix_completes():
    detail = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    bad = exit_code_echoed(captured_run("13_debug_mismatch_detail.txt"))  # the page's run: stdout is enough
    assert_failed_at_step_3(bad, "mismatch", "mismatch")
    line = next(ln for ln in bad.output.splitlines() if ln.startswith("rank 0: step 3 failed"))
    assert "Detected mismatch between collectives on ranks" in line
    assert "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, " \
           "TensorShape=[4]" in line
    assert "but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=5, " \
           "OpType=ALLREDUCE, TensorShape=[3]" in line
    assert "Tensor shapes: 4vs 3" in line
    assert float(re.search(r"failed after ([\d.]+) s", line).group(1)) < 4, "DETAIL waited for the timeout"
    # The fix, with C++ logging on too (one launch, both checks): DETAIL finds nothing to
    # report, and INFO shows c10d's connections.
    good = torchrun_with({**detail, "TORCH_CPP_LOG_LEVEL": "INFO"}, "--variant", "good")
    assert good.returncode == 0, good.output
    assert good.summary()["outcome"] == "completed"
    assert good.count(LABEL_COUNTS) == 4
    assert re.search(r"^\[I\d{4} [\d:.]+ socket\.cpp:\d+\] \[c10d\] The client socket has connected to "
                     r"\S+:\d+ on SocketImpl", good.output, flags=re.M), good.output


def test_mismatch_without_detail_is_only_a_timeout_under_mpiexec():
    result = mpiexec("openmpi", 2, DEBUGGING, "--variant", "bad", "--fault", "mismatch", timeout=120)
    assert_failed_at_step_3(result, "timeout", "mismatch")
    assert result.summary()["world_size"] == "2"
    assert "launcher=openmpi" in result.output
    assert "Timed out waiting 5000ms" in result.output
    assert "Detected mismatch" not in result.output and "TensorShape" not in result.output


def test_one_process_connects_to_nothing():
    """(c10d's connections under torchrun, with TORCH_CPP_LOG_LEVEL=INFO: the fix's run in
    test_mismatch_detail_names_the_shapes_and_the_fix_completes.)"""
    plain = python(DEBUGGING)  # one process: nothing to connect to, and no C++ log lines
    assert plain.returncode == 0, plain.output
    assert plain.summary()["world_size"] == "1" and plain.summary()["outcome"] == "completed"
    assert "[c10d]" not in plain.output


def source_line(text: str) -> int:
    """The line number of the script line that contains `text`."""
    lines = script(DEBUGGING).read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def py_spy() -> str:
    found = VENV_BIN / "py-spy"
    if found.exists():
        return str(found)
    if os.environ.get("CI"):
        pytest.fail("py-spy is missing: requirements-dev.txt installs it")
    path = shutil.which("py-spy")
    if path is None:
        pytest.skip("py-spy is not installed (pip install py-spy)")
    return path


def test_py_spy_dump_shows_where_each_rank_waits():
    """A hang with a 30 s timeout: dump both ranks while they hang. Rank 0 waits in the
    gradients' all_reduce of train_step; rank 1 is stuck in load_batch."""
    spy = py_spy()
    cmd = [VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", script(DEBUGGING),
           "--variant", "bad", "--fault", "hang", "--timeout", "30"]
    # The ranks opt in to being traced by py-spy, which is not their ancestor (Yama).
    env = clean_env(PYTHONPATH=str(REPO / "tests" / "ptraceable"))
    proc = subprocess.Popen([str(c) for c in cmd], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    output, dumps, pids = [], {}, None
    try:
        deadline = time.monotonic() + 90
        for line in proc.stdout:  # until step 2 is done: then rank 1 stalls at step 3
            output.append(line)
            if line.startswith("ranks: "):
                pids = [int(pid) for pid in re.findall(r"pid (\d+)", line)]
            if line.startswith("step 2:") or time.monotonic() > deadline:
                break
        assert pids and len(pids) == 2, "".join(output)
        time.sleep(2)  # both ranks reach their waits
        for rank, pid in enumerate(pids):
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=60)
            if dump.returncode != 0 and "ermission" in dump.stderr + dump.stdout:
                message = f"py-spy cannot attach here (ptrace not permitted): {dump.stderr.strip()}"
                if os.environ.get("CI"):  # where CI runs, the check must run
                    pytest.fail(f"{message}; the CI machine must allow ptrace "
                                "(CAP_SYS_PTRACE, or Yama ptrace_scope <= 1)")
                pytest.skip(message)
            assert dump.returncode == 0, dump.stderr
            dumps[rank] = dump.stdout
    finally:  # torchrun and its ranks, which run in sessions of their own
        kill_tree(proc.pid)
        proc.communicate()
    waits = f"train_step (hang_debugging.py:{source_line('dist.all_reduce(gradients')})"
    stuck = f"load_batch (hang_debugging.py:{source_line('time.sleep(STALL_TIMEOUTS')})"
    in_all_reduce = r"^\s+all_reduce \(torch/distributed/distributed_c10d\.py:\d+\)"
    assert re.search(in_all_reduce, dumps[0], flags=re.M), dumps[0]
    assert waits in dumps[0], dumps[0]
    assert stuck in dumps[1] and "all_reduce" not in dumps[1], dumps[1]
    # the page shows these frames: they must still be where py-spy finds them
    page = PAGE.read_text()
    assert waits in page and stuck in page, "the py-spy dump on the chapter page is out of date"


def test_help_shows_the_launch_commands():
    result = script_help(DEBUGGING)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in result.output
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in result.output
    assert "mpiexec -n 2 python" in result.output
    for flag in ("--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant", "--fault",
                 "--faulty-rank"):
        assert flag in result.output


def test_a_faulty_rank_outside_the_world_says_so():
    result = python(DEBUGGING, "--variant", "bad", "--faulty-rank", "3")
    assert result.returncode == 1
    assert "--faulty-rank 3: a rank must lie in 0..0" in result.output
