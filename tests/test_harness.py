"""The harness's own promise: a run that outlives its timeout fails, and leaves nothing behind."""

from __future__ import annotations

import os
import re
import sys
import threading
import time

import psutil
import pytest
from conftest import longest_first, run


def test_a_timed_out_run_kills_descendants_in_sessions_of_their_own():
    # Like torchrun, whose workers run in sessions of their own: a kill of the launcher's
    # process group alone would leave them running, holding ports and CPUs.
    with pytest.raises(pytest.fail.Exception, match="timed out after 2 s") as failure:
        run(["bash", "-c", "setsid sleep 300 & echo worker pid $!; wait"], timeout=2)
    worker = int(re.search(r"worker pid (\d+)", str(failure.value)).group(1))
    deadline = time.monotonic() + 5
    while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"worker {worker} outlived the timed-out run"
        time.sleep(0.1)


PRELOADED_SCRIPT = """\
import os, subprocess, sys, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "rank", os.environ.get("RANK"), "path0", sys.path[0])
if sys.argv[1] == "hang":  # a worker in a session of its own, as torchrun starts its ranks
    print("worker pid", subprocess.Popen(["setsid", "sleep", "300"]).pid, flush=True)
    time.sleep(300)
if sys.argv[1] == "raise":
    raise ValueError("a bug in the script")
sys.exit(sys.argv[1] == "fail" and "said what to do")
"""


def test_a_preloaded_python_runs_the_script_as_python_does(tmp_path):
    """`python SCRIPT` forked from the preloaded Python (conftest.run): its argv, folder,
    environment (a launcher variable) and sys.path[0]; exit 0, a message and exit 1, a
    traceback from the script's own frames and exit 1; a hang fails at the timeout and leaves
    no descendant behind. An environment import torch may read (PYTHONPATH) runs for real."""
    from conftest import _PRELOADED, _preloaded_serves, clean_env

    if not _preloaded_serves(clean_env()):
        pytest.skip("every run is launched for real here (PRELOADED_PYTHON=0, or an NVIDIA driver)")
    path = tmp_path / "script.py"
    path.write_text(PRELOADED_SCRIPT)
    ok = run([sys.executable, path, "ok"], env=clean_env(RANK="3"), cwd=tmp_path)
    assert ok.returncode == 0 and ok.output == f"argv ['ok'] cwd {tmp_path} rank 3 path0 {tmp_path}\n"
    server = _PRELOADED[threading.get_ident()]["proc"].pid  # this thread's server
    assert server in [p.pid for p in psutil.Process().children()], "not forked from the preloaded Python"
    failed = run([sys.executable, path, "fail"], cwd=tmp_path)
    assert failed.returncode == 1 and failed.output.endswith("said what to do\n"), failed.output
    raised = run([sys.executable, path, "raise"], cwd=tmp_path)
    assert raised.returncode == 1, raised.output
    assert raised.output.splitlines()[1:] == ["Traceback (most recent call last):",
                                              f'  File "{path}", line 7, in <module>',
                                              '    raise ValueError("a bug in the script")',
                                              "ValueError: a bug in the script"], raised.output
    with pytest.raises(pytest.fail.Exception, match="timed out after 2 s") as failure:
        run([sys.executable, path, "hang"], cwd=tmp_path, timeout=2)
    worker = int(re.search(r"worker pid (\d+)", str(failure.value)).group(1))
    deadline = time.monotonic() + 5
    while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"worker {worker} outlived the timed-out run"
        time.sleep(0.1)
    real = run([sys.executable, path, "ok"], env=clean_env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert real.returncode == 0 and _PRELOADED[threading.get_ident()]["proc"].pid == server
    assert ok.output.replace("rank 3", "rank None") == real.output


# --------------------------------------------------------------------------- make test-gpu
class _Item:
    """What conftest.longest_first reads of a test item."""

    def __init__(self, name: str) -> None:
        self.fspath, self.name, self.nodeid = "tests/test_gpu.py", name, f"tests/test_gpu.py::{name}"


class _Worker:
    """What xdist's scheduler uses of a worker: what it sends it."""

    def __init__(self, number: int) -> None:
        from types import SimpleNamespace

        self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=f"gw{number}"), False, []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def first_tests_per_worker(items: list, workers: int) -> list[str]:
    """The first test each worker runs under pytest-xdist's --dist load (its own scheduler,
    given the collection in the order conftest.longest_first puts it)."""
    from types import SimpleNamespace

    from xdist.scheduler import LoadScheduling

    ordered = longest_first(items, workers)
    options = {"tx": ["popen"] * workers, "maxschedchunk": None}
    config = SimpleNamespace(getvalue=options.get, getoption=options.get)
    scheduler, nodes = LoadScheduling(config), [_Worker(i) for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, [item.nodeid for item in ordered])
    scheduler.schedule()
    return [ordered[node.sent[0]].name for node in nodes]


@pytest.mark.parametrize(("workers", "others"), [(12, 84), (4, 84), (12, 140), (8, 6)])
def test_the_gpu_lanes_longest_cases_start_first_one_per_worker(workers, others):
    """Issue 39: at -n 12 the four slowest cases started last. Now each worker's first test
    is one of the longest, longest first, whatever the lane's size (2+ GPUs add an nccl lane)."""
    long = ["test_fault_tolerance[gloo-cuda-2]", "test_checkpoints[gloo-cuda-2]",
            "test_one_rank_under_nccl[compile_ddp---variant-bad---checkpoint-dir]",
            "test_multi_rank_pitfalls[gloo-cuda-2-compressed_gradients]",
            "test_fsdp_checkpoint_saved_by_4_ranks_resumes_at_2_in_the_shared_mode",
            "test_monitor_records_gpu_use"]
    items = [_Item(f"test_one_rank_under_nccl[case{i}]") for i in range(others // 2)]
    items += [_Item(name) for name in reversed(long)]  # where the lane collects them: last
    items += [_Item(f"test_multi_rank_pitfalls[case{i}]") for i in range(others // 2)]
    firsts = first_tests_per_worker(items, workers)
    assert firsts[:len(long)] == long[:workers], firsts
    assert [item.name for item in longest_first(items, 1)][:len(long)] == long  # no xdist: first too


def test_the_lane_collects_its_longest_cases_first():
    """The hook is wired: `pytest -m gpu --collect-only` lists them first (CUDA or not)."""
    result = run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q",
                  "-p", "no:cacheprovider", "tests/test_gpu.py"], timeout=120)
    ids = [line.split("::", 1)[1] for line in result.output.splitlines() if line.startswith("tests/")]
    assert ids[:2] == ["test_fault_tolerance[gloo-cuda-2]", "test_checkpoints[gloo-cuda-2]"], ids[:12]
    assert ids.index("test_monitor_records_gpu_use") < 12 < len(ids), ids


def test_make_test_gpu_counts_the_cores_whatever_omp_num_threads_says(tmp_path):
    """Job scripts export OMP_NUM_THREADS=1, and `nproc` honours it: the lane ran on one worker
    of 16 cores (issue 39). The cores are those the process may run on."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text(  # runs Python, but prints the pytest command instead of running it
        '#!/bin/sh\nif [ "$1" = "-m" ]; then echo "would run: python $*"; '
        f'else exec {sys.executable} "$@"; fi\n')
    (fake / "python").chmod(0o755)
    cores = len(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_LANE_WORKERS", "MAKEFLAGS")}
    result = run(["make", "-s", "-o", ".venv/.dev-installed", "test-gpu", f"BIN={fake}"],
                 env={**env, "OMP_NUM_THREADS": "1", "OMP_THREAD_LIMIT": "1"}, timeout=60)
    workers = max(cores * 3 // 4, 1)
    assert result.returncode == 0, result.output
    assert f"make test-gpu: {cores} CPU cores -> pytest -n {workers} " in result.output, result.output
    assert f"would run: python -m pytest -m gpu -rs -n {workers} --dist load" in result.output


# --------------------------------------------------------------------------- launch_report.py
def test_launch_report_sums_the_cpu_per_file_and_finds_the_repeated_commands(tmp_path, monkeypatch, capsys):
    """What `LAUNCH_LOG=FILE make test` writes (conftest.log_launch), read back by
    tests/launch_report.py: totals, per test file (the background captures apart), the
    costliest launches, and the commands launched more than once with their cost."""
    import threading

    import launch_report
    from conftest import log_launch

    log = tmp_path / "launches.tsv"
    monkeypatch.setenv("LAUNCH_LOG", str(log))
    launches = [("tests/test_a.py::test_one (call)", "torchrun x.py --epochs 2", 10.0, 8.0),
                ("tests/test_a.py::test_two (call)", "torchrun x.py --epochs 2", 11.0, 9.0),
                ("tests/test_b.py::test_three (call)", "python -c 'import torch\n\tprint(1)'", 3.0, 2.5),
                ("tests/test_b.py::test_four (call)", "srun python y.py", 30.0, None)]
    for test, command, seconds, cpu in launches:
        monkeypatch.setenv("PYTEST_CURRENT_TEST", test)
        log_launch(command, seconds, cpu)
    background = threading.Thread(target=log_launch, args=("bash -c 'torchrun z.py'", 40.0, 30.0),
                                  name="captures")
    background.start()
    background.join()
    with log.open("a") as file:
        file.write("tests/test_c.py::old\tMainThread\t1.0\tpython old.py\n")  # before the CPU column
        file.write("\tbroken rest of an unescaped command\n")
    launch_report.main(str(log), top=2)
    out = capsys.readouterr().out
    assert out.startswith("6 launches, 50 CPU-s (2 without a CPU count), 95 wall-s summed"), out
    per_file = out.split("per test file")[1].split("\n\n")[0].splitlines()[1:]
    assert [line.split() for line in per_file] == [
        ["1", "30.0", "40.0", "(captures", "run", "in", "the", "background)"],
        ["2", "17.0", "21.0", "tests/test_a.py"], ["2", "2.5", "33.0", "tests/test_b.py"],
        ["1", "0.0", "1.0", "tests/test_c.py"]], out
    costliest = out.split("most expensive launches")[1].split("\n\n")[0].splitlines()[1:]
    assert len(costliest) == 2 and "z.py" in costliest[0] and "--epochs 2" in costliest[1], out
    assert "commands launched more than once: 1 (9 CPU-s in the repeats)" in out, out
    assert "2x    17.0 CPU-s  torchrun x.py --epochs 2" in out and "['test_one', 'test_two']" in out, out
    rows = launch_report.read(str(log))  # a command's line break and tab kept it on its line
    assert rows[2][4] == "python -c 'import torch\\n print(1)'" and len(rows) == 6, rows


def test_launch_report_says_what_it_cannot_read(tmp_path):
    result = run([sys.executable, "tests/launch_report.py", tmp_path / "none.tsv"], timeout=60)
    assert result.returncode == 2 and "cannot read" in result.output and "none.tsv" in result.output
    assert "Traceback" not in result.output
    result = run([sys.executable, "tests/launch_report.py", "--help"], timeout=60)
    assert result.returncode == 0 and "LAUNCH_LOG=" in result.output


def test_a_plain_captured_command_runs_through_run_and_a_shell_line_through_bash():
    """conftest._run_captured: a page's command that is one program and its arguments goes
    through run() (its torchrun agent forked from the preloaded Python); anything a shell must
    read (a pipe, a redirection, a variable, an environment prefix, a quote) goes to bash."""
    from conftest import PLAIN_COMMAND

    plain = ["torchrun --standalone --nproc_per_node=2 scripts/01_data_parallel_ddp/multinode_ddp_basic.py",
             "python scripts/18_transformer/gpt_ddp.py --checkpoint-dir /tmp/ch18/single",
             "torchrun --standalone --nproc_per_node=2 scripts/10_x.py --bucket-caps 1,25 --lr 0.5"]
    shell = ["torchrun --standalone --nproc_per_node=2 scripts/09_uneven_inputs/uneven_inputs.py 2>/dev/null",
             "torchrun --standalone --nproc_per_node=2 scripts/x.py | grep -A 3 memory",
             "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 scripts/x.py",
             "rm -rf /tmp/x && torchrun --standalone --nproc_per_node=2 scripts/x.py",
             "for n in 1 4; do torchrun --standalone --nproc_per_node=$n scripts/x.py; done",
             "python scripts/x.py --title 'two words'",
             "bash scripts/13_multinode_and_hpc/two_jobs_one_node.sh bad",
             "torchrun --standalone --nproc_per_node=2 scripts/x.py; echo \"exit code: $?\""]
    assert [command for command in plain if not PLAIN_COMMAND.fullmatch(command)] == []
    assert [command for command in shell if PLAIN_COMMAND.fullmatch(command)] == []
