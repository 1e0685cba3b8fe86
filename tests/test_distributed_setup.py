"""utils/distributed.py and its parts (utils/launch_env.py, utils/rendezvous.py): the launcher
table, read from environments alone (no processes), and the errors a user gets for a broken
launch environment (real processes)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import torch
from conftest import REPO, clean_env, output_or_fail, python, run_as_main, script

from utils.distributed import (
    DistributedSetupError,
    LaunchInfo,
    detect_launcher,
    first_host,
    job_port,
    launch_port,
    resolve_master,
    resolve_rendezvous,
)

BASIC = "01_data_parallel_ddp/multinode_ddp_basic.py"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, LaunchInfo("none", 0, 1, 0, 1)),
        (
            {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
             "TORCHELASTIC_RUN_ID": "job"},
            LaunchInfo("torchrun", 3, 8, 1, 2),
        ),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, LaunchInfo("env", 1, 2, 0, None)),
        (
            {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
             "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
             "PMIX_RANK": "5"},
            LaunchInfo("openmpi", 5, 8, 1, 4),
        ),
        (
            {"PMI_RANK": "6", "PMI_SIZE": "8", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"},
            LaunchInfo("mpich", 6, 8, 2, 4),
        ),
        (  # Cray PALS sets PMI_* as well: it must be read as PALS, not as MPICH
            {"PALS_RANKID": "7", "PALS_LOCAL_RANKID": "3", "PMI_RANK": "7", "PMI_SIZE": "8",
             "PMI_LOCAL_SIZE": "4", "PALS_NODEID": "1"},
            LaunchInfo("pals", 7, 8, 3, 4),
        ),
        (
            {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
             "SLURM_NNODES": "2", "SLURM_JOB_ID": "77"},
            LaunchInfo("slurm", 3, 4, 1, None),
        ),
        (  # one node: every task is local
            {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
             "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1"},
            LaunchInfo("slurm", 1, 2, 1, 2),
        ),
        (  # an sbatch script itself (no srun step) is one process, not rank 0 of N
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77"},
            LaunchInfo("none", 0, 1, 0, 1),
        ),
        (  # torchrun inside an MPI or Slurm allocation: torchrun's variables win
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x",
             "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "SLURM_PROCID": "0", "SLURM_STEP_ID": "1"},
            LaunchInfo("torchrun", 2, 4, 0, None),
        ),
        (  # mpiexec inside a Slurm job: the MPI's variables win over the job's
            {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "SLURM_PROCID": "0",
             "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"},
            LaunchInfo("mpich", 1, 2, 1, None),
        ),
    ],
)
def test_launcher_table(env, expected):
    assert detect_launcher(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "1"}, "WORLD_SIZE and LOCAL_RANK are not"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK is not"),
        ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK=2 but WORLD_SIZE=2"),
        ({"RANK": "-1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "a rank must lie in 0..1"),
        ({"RANK": "one", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='one' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, "world size must be >= 1"),
        (
            {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
            "LOCAL_RANK=2 is outside this node's 2 processes",
        ),
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_LOCAL_RANK"),
        ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "MPI_LOCALRANKID is not"),
        ({"PALS_RANKID": "0", "PALS_LOCAL_RANKID": "0"}, "PMI_SIZE is not"),
        ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, "SLURM_NTASKS is not"),
    ],
)
def test_broken_environments_name_the_variable(env, message):
    with pytest.raises(DistributedSetupError, match=message):
        detect_launcher(env)


def test_job_port_is_stable_per_job_and_differs_between_jobs():
    assert job_port("1234.pbs01") == job_port("1234.pbs01")
    assert job_port("1234.pbs01") != job_port("1235.pbs01")
    assert all(15000 <= job_port(str(j)) < 32000 for j in (0, 1, 99999, 10**12))


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("gpu[03-05,09],cpu1", "gpu03"), ("node7", "node7"), ("a1,a2", "a1"), ("x[1,3]", "x1")],
)
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


def test_master_from_environment_job_id_and_node_list(tmp_path):
    two_nodes = LaunchInfo("slurm", 0, 4, 0, None)
    assert resolve_master(two_nodes, {"MASTER_ADDR": "n1", "MASTER_PORT": "23456"}) == ("n1", 23456)
    # no MASTER_*: the first node of the job, a port from the job id
    assert resolve_master(two_nodes, {"SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "991"}) == (
        "gpu07", job_port("991"))
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n5\nn5\nn6\n")
    assert resolve_master(two_nodes, {"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "42.pbs"}) == (
        "n5", job_port("42.pbs"))
    # one node: the loopback address
    one_node = LaunchInfo("slurm", 0, 2, 0, 2)
    assert resolve_master(one_node, {"SLURM_JOB_ID": "5"})[0] == "127.0.0.1"
    # ... and where the port came from, as setup_distributed() reports it (ctx.port_from)
    assert resolve_rendezvous(one_node, {"SLURM_JOB_ID": "5"}).port_from == "SLURM_JOB_ID=5"
    port_set = {"MASTER_PORT": "23456", "PBS_JOBID": "1.pbs"}
    assert resolve_rendezvous(one_node, port_set).port_from == "MASTER_PORT"


def test_master_unknown_is_a_clear_error():
    two_nodes = LaunchInfo("slurm", 0, 4, 0, None)
    with pytest.raises(DistributedSetupError, match="set MASTER_ADDR"):
        resolve_master(two_nodes, {"SLURM_JOB_ID": "5"})
    with pytest.raises(DistributedSetupError, match="set MASTER_PORT"):
        resolve_master(LaunchInfo("env", 0, 2, 0, 2), {})
    with pytest.raises(DistributedSetupError, match="MASTER_PORT='http' is not a port"):
        resolve_master(two_nodes, {"MASTER_ADDR": "n1", "MASTER_PORT": "http"})


# ---- the same errors as a user meets them: a real process, one clear line, no traceback
def run_with(timeout_flag: str = "5", **env: str):
    return python(BASIC, "--timeout", timeout_flag, env=clean_env(**env), timeout=60)


def assert_clear_error(result, *fragments: str) -> None:
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output and "frame #" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("setup_distributed: "), result.output
    for fragment in fragments:
        assert fragment in last


def test_partial_torchrun_variables():
    assert_clear_error(run_with(RANK="1"), "WORLD_SIZE and LOCAL_RANK are not")


def test_unresolvable_master():
    result = run_with(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="no-such-host.invalid",
                      MASTER_PORT="23456")
    assert_clear_error(result, "MASTER_ADDR='no-such-host.invalid' does not resolve")


def test_unreachable_master_fails_within_the_timeout():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_with("3", RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    assert_clear_error(result, f"could not reach the master at 127.0.0.1:{port} within 3 s")
    assert result.seconds < 30


def test_port_already_in_use():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_with(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    assert_clear_error(result, f"port {port} on 127.0.0.1 is already in use", f"It is MASTER_PORT={port}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has GPUs: nccl works")
def test_nccl_without_gpus_says_what_to_use():
    result = run_as_main(script(BASIC), "--backend", "nccl", env=clean_env())  # in this process: no GPU here
    assert_clear_error(result, "use --backend gloo")


def test_srun_with_pmi2_is_a_slurm_launch_not_an_incomplete_mpich_one():
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE (no MPI_LOCALRANKID) beside Slurm's variables.
    info = detect_launcher({"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1",
                            "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_TASKS": "2",
                            "SLURM_STEP_NUM_NODES": "1"})
    assert (info.launcher, info.rank, info.world_size) == ("slurm", 1, 2)


# ---- one port and one store check per launch, not per job (two launches side by side)
def test_each_launch_of_a_job_gets_its_own_port():
    """Slurm's step id, PALS's application id, PMIx's namespace name the launch: every rank
    of one launch derives the same port, two launches of one job different ones."""
    two_nodes = LaunchInfo("slurm", 0, 4, 0, None)
    job = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[01-02]"}
    step0 = resolve_rendezvous(two_nodes, {**job, "SLURM_STEP_ID": "0"})
    step1 = resolve_rendezvous(two_nodes, {**job, "SLURM_STEP_ID": "1"})
    assert step0.port != step1.port != job_port("77")
    assert step0 == resolve_rendezvous(LaunchInfo("slurm", 3, 4, 1, None), {**job, "SLURM_STEP_ID": "0"})
    assert step0.port_from == "SLURM_JOB_ID=77,SLURM_STEP_ID=0" and step0.launch == "SLURM_STEP_ID=0"
    assert step0.port == launch_port("77", "SLURM_STEP_ID=0")
    for launcher, variable in (("pals", "PALS_APID"), ("openmpi", "PMIX_NAMESPACE")):
        info = LaunchInfo(launcher, 0, 4, 0, 2)
        env = {"PBS_JOBID": "42.pbs", "MASTER_ADDR": "x1000c0s0b0n0.hsn.cm.site"}
        first = resolve_rendezvous(info, {**env, variable: "a1b2-3"})
        second = resolve_rendezvous(info, {**env, variable: "a1b2-4"})
        assert first.port != second.port, variable
        assert first.port_from == f"PBS_JOBID=42.pbs,{variable}=a1b2-3"
    # MASTER_PORT still wins; without a launch id, an env launch keeps the job's port.
    assert resolve_rendezvous(two_nodes, {**job, "SLURM_STEP_ID": "0", "MASTER_PORT": "23456"}).port == 23456
    env_launch = resolve_rendezvous(LaunchInfo("env", 0, 2, 0, 2), {"PBS_JOBID": "42.pbs"})
    assert (env_launch.port, env_launch.port_from) == (job_port("42.pbs"), "PBS_JOBID=42.pbs")
    assert env_launch.launch is None


def start_rank(rank: int, port: int, step: str, timeout: str = "30") -> subprocess.Popen:
    """One rank of a 2-task srun step of Slurm job 9, as srun starts it."""
    env = clean_env(SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID=str(rank),
                    SLURM_STEP_ID=step, SLURM_STEP_NUM_NODES="1", SLURM_JOB_ID="9",
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return subprocess.Popen([sys.executable, script(BASIC), "--timeout", timeout], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    output = output_or_fail(proc, timeout, "a rank hung")
    return proc.returncode, output


def test_a_rank_that_reaches_another_launch_stops_at_once_and_that_launch_goes_on():
    """Step 0's rank 0 listens; a rank 1 of step 1 of the same job reaches it (same port):
    it stops at once, long before its --timeout, and says so. Then step 0's own rank 1
    joins and step 0 trains."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rank0 = start_rank(0, port, "0")
    try:
        started = time.monotonic()
        code, output = finish(start_rank(1, port, "1", timeout="60"))
        seconds = time.monotonic() - started
        assert code == 1 and "Traceback" not in output, output
        assert output.strip().splitlines()[-1] == (
            f"setup_distributed: rank 1 of job 9 (launch SLURM_STEP_ID=1, 2 ranks) reached the "
            f"master at 127.0.0.1:{port}, but it belongs to another launch of the same job: job 9 "
            "(launch SLURM_STEP_ID=0, 2 ranks). The two use the same port; this rank stops instead of "
            f"joining it. It is MASTER_PORT={port}, set for this launch: give each launch (and "
            "job) its own MASTER_PORT, or unset it to let setup_distributed() choose one per launch."), output
        assert seconds < 30, f"took {seconds:.0f} s of its 60 s --timeout: not at once"
        code, output = finish(start_rank(1, port, "0"))
        assert code == 0, output
    finally:
        code, output = finish(rank0)
    assert code == 0 and "summary: variant=good world_size=2" in output, output


def test_two_launches_on_one_port_end_within_the_timeout():
    """Nothing tells two launches of one job apart (no launch id, no MPI): both derive the
    job's port, and a rank 1 of each reaches the same rank 0. One of them is left waiting,
    in gloo's full-mesh connection (which retries for minutes whatever the process group's
    timeout) or in its first collective: --timeout 5 ends every process long before."""
    env = clean_env(PBS_JOBID="9.pbs", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs = []
    started = time.monotonic()
    for rank in (0, 1, 1):
        procs.append(subprocess.Popen(
            [sys.executable, script(BASIC), "--timeout", "5"], env={**env, "RANK": str(rank),
                                                                    "LOCAL_RANK": str(rank)},
            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(1)
    results = [finish(proc, timeout=150) for proc in procs]
    seconds = time.monotonic() - started
    assert any(code != 0 for code, _ in results), results
    assert seconds < 60, f"{seconds:.0f} s: gloo's own connect timeout, not --timeout"


# A wait inside init_process_group that never ends (what gloo's mesh connection does when a
# peer never answers): the process group's timeout does not reach it.
STUCK_INIT = """
import runpy, sys, time
import torch.distributed as dist
dist.init_process_group = lambda *args, **kwargs: time.sleep(600)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_wait_that_torch_does_not_bound_ends_at_the_timeout():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = clean_env(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", STUCK_INIT, script(BASIC), "--timeout", "3"],
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
             for rank in (0, 1)]
    results = [finish(proc, timeout=120) for proc in procs]
    for rank, (code, output) in enumerate(results):
        assert code == 1, output
        assert output.strip().splitlines()[-1].startswith(
            f"setup_distributed: rank {rank} gave up after 3 s (--timeout) while connecting to the other 1 "
            f"rank(s) (gloo; the master at 127.0.0.1:{port} had answered). A rank is missing, or cannot "
            "reach the others on the interface it chose (set GLOO_SOCKET_IFNAME"), output
    assert time.monotonic() - started < 45
# ---- mpi4py installed, but no MPI library behind it (a fresh `make quickstart` .venv)
LIBMPI_ERROR = ("cannot load MPI library\n"
                "/home/u/.venv/lib/libmpi.so.12: cannot open shared object file: No such file or directory\n"
                "libmpi.so.12: cannot open shared object file: No such file or directory")


@pytest.fixture
def mpi4py_without_library(tmp_path, monkeypatch):
    """An mpi4py that imports but whose MPI module cannot load libmpi, raising what mpi4py 4
    raises then; first on sys.path (this process) and on PYTHONPATH (child processes)."""
    package = tmp_path / "fake" / "mpi4py"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "4.1.2"\n')
    (package / "MPI.py").write_text(f"raise RuntimeError({LIBMPI_ERROR!r})\n")
    for name in ("mpi4py", "mpi4py.MPI"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(package.parent))
    return package.parent


def test_mpi4py_without_an_mpi_library_is_named_with_the_fix(mpi4py_without_library):
    one_node = LaunchInfo("openmpi", 0, 2, 0, 2)
    with pytest.raises(DistributedSetupError) as caught:
        resolve_master(one_node, {})
    message = str(caught.value)
    assert "mpi4py 4.1.2 is installed but no MPI library loads" in message, message
    assert "libmpi.so.12: cannot open shared object file" in message, message
    assert "make mpi" in message and "install mpi4py" not in message.replace("rebuild mpi4py", ""), message
    with pytest.raises(DistributedSetupError, match="is installed but no MPI library loads"):
        detect_launcher({"PMIX_RANK": "0"})  # an MPI that only mpi4py can ask


def test_mpi4py_missing_altogether_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # `import mpi4py` raises ImportError
    with pytest.raises(DistributedSetupError, match="mpi4py is not installed: `make mpi`"):
        resolve_master(LaunchInfo("mpich", 0, 2, 0, 2), {})


def test_mpiexec_with_mpi4py_but_no_mpi_library_as_the_user_sees_it(mpi4py_without_library):
    # Rank 0 of an Open MPI launch on one node, no MASTER_PORT and no job id: only mpi4py could
    # agree on a port, and it cannot load libmpi.
    result = run_with(PYTHONPATH=str(mpi4py_without_library), OMPI_COMM_WORLD_RANK="0",
                      OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0",
                      OMPI_COMM_WORLD_LOCAL_SIZE="2")
    assert_clear_error(result, "no port was agreed", "mpi4py 4.1.2 is installed but no MPI library loads",
                       "(libmpi.so.12: cannot open shared object file)", "`make mpi`")


def test_cleanup_frees_the_group_so_gloo_does_not_end_at_exit():
    """After `del model` and cleanup_distributed(), gloo's threads are gone: the group is
    freed where the script leaves it, not at exit after the other ranks have gone (which
    aborted a rank now and then: "terminate called without an active exception"). Without
    utils/distributed.py's early import of torch.distributed.nn, the first DDP model imports
    it, its default arguments keep the world group, and 4 threads outlive the group."""
    code = (
        "import os, torch\n"
        "from utils.distributed import setup_distributed, cleanup_distributed\n"
        "threads = lambda: len(os.listdir('/proc/self/task'))\n"
        "before = threads()\n"
        "ctx = setup_distributed('gloo')\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "model(torch.ones(1, 2)).sum().backward()\n"
        "during = threads()\n"
        "del model\n"
        "cleanup_distributed()\n"
        "print('threads', before, during, threads())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=clean_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert result.returncode == 0, result.stdout
    before, during, after = map(int, result.stdout.split("threads")[-1].split())
    assert during > before, f"no gloo threads to free? {result.stdout}"
    assert after <= before, f"{before} threads before the group, {after} after cleanup_distributed()"
