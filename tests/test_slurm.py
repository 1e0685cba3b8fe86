"""Slurm for real: a one-node cluster on localhost (tests/slurm_cluster.py) runs the Slurm
job scripts through sbatch (one beside a job on a fixed port: chapter 13's pitfall), and
srun starts ranks with the MPIs' PMI plugins."""

from __future__ import annotations

import re
import socket
import sys

import pytest
from conftest import REPO, mpi_env, run
from slurm_cluster import shared_cluster

from utils.distributed import JOB_PORT_BASE, JOB_PORT_SPAN, job_port, launch_port

FOLDER = "scripts/13_multinode_and_hpc"
# (the porting page's template, which sources nothing from here: tests/test_00_porting.py)
SLURM_JOB_SCRIPTS = sorted(p.name for p in REPO.glob("scripts/*/*.sh")
                           if "\n#SBATCH" in p.read_text() and p.parent.name != "00_porting")
MPI4PY_RANKS = ("from mpi4py import MPI; world = MPI.COMM_WORLD; "
                "print(f'mpi4py rank {world.Get_rank()} of {world.Get_size()}', flush=True)")


@pytest.fixture(scope="session")
def slurm(request):
    return shared_cluster(request.config)


def rank_lines(output: str) -> list[tuple[str, str]]:
    """(rank, launcher) of where_am_i.py's per-rank lines, in the order rank 0 printed them."""
    return re.findall(r"^rank (\d+)/\d+ .*  launcher (\S+) ", output, flags=re.M)


def test_every_slurm_job_script_is_tested():
    # slurm_preemptible.sh (chapter 14): tests/test_14_fault_tolerance.py runs it
    assert SLURM_JOB_SCRIPTS == ["slurm_preemptible.sh", "slurm_srun.sh", "slurm_torchrun.sh"]


def assert_job_ran(result, *, launcher: str, tasks_per_node: int) -> str:
    """A Slurm job script's job: exit 0, the header line with the port of the job's id,
    where_am_i.py's lines from both ranks in rank order, and chapter 01's training on 2
    ranks, each summary printed once (by rank 0). Returns the job id."""
    assert result.returncode == 0, result.output
    job_id = result.output.split()[0].split(";")[0]
    port = job_port(job_id)  # the port of Slurm's job id, in the shell as in Python
    assert (f"job {job_id}: 1 node(s) [localhost], tasks per node {tasks_per_node}; "
            f"master localhost:{port}") in result.output
    assert rank_lines(result.output) == [("0", launcher), ("1", launcher)], result.output
    assert result.count("summary:") == 2, "a summary printed by more than rank 0"
    assert f"summary: launcher={launcher} world_size=2 nodes=1 ranks_per_node=2 " in result.output
    assert re.search(rf"summary: variant=good world_size=2 backend=gloo launcher={launcher} "
                     r"samples_per_rank=1024 work=1\.00x ", result.output), result.output
    return job_id


def test_torchrun_job_script_under_sbatch(slurm, tmp_path):
    """srun starts one torchrun per node; they meet at the first node on the job's port."""
    output = tmp_path / "job.out"
    result = slurm.submit(["sbatch", "--parsable", f"--output={output}", f"{FOLDER}/slurm_torchrun.sh"],
                          output=output)
    job_id = assert_job_ran(result, launcher="torchrun", tasks_per_node=1)
    assert f"--rdzv-endpoint=localhost:{job_port(job_id)} --rdzv-id={job_id}" in result.output


def test_srun_job_script_beside_a_job_on_a_fixed_port(slurm, tmp_path):
    """srun alone starts the ranks; and the chapter's pitfall under the real scheduler. A
    first job holds a fixed MASTER_PORT (exported; fixed_port.py --hold-until: it waits
    without work); beside it, on the same node, the job script with the same port exported
    cannot listen (bad), and without it, on its job id's port, runs beside the first (good).
    The fixed port is one the system has free now, not 29500: chapter 13's captures pin 29500
    and may run in the background meanwhile."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        fixed_port = probe.getsockname()[1]
    fixed = slurm.env(MASTER_PORT=str(fixed_port))
    first_output, release = tmp_path / "first.out", tmp_path / "release"
    hold = f"{sys.executable} {FOLDER}/fixed_port.py --hold-until {release}"
    first = slurm.command("sbatch", "--parsable", "--ntasks=2", "--time=5", f"--output={first_output}",
                          f"--wrap=srun --kill-on-bad-exit=1 {hold}", env=fixed)
    first_id = first.stdout.split(";")[0].strip()
    assert first.returncode == 0 and first_id.isdigit(), first.stdout
    try:
        slurm.wait_for_output(first_output, "holding the port until")  # its rank 0 listens on the port

        bad_output, good_output = tmp_path / "bad.out", tmp_path / "good.out"
        bad = slurm.submit(["sbatch", "--parsable", f"--output={bad_output}", f"{FOLDER}/slurm_srun.sh"],
                           output=bad_output, env=fixed)
        assert bad.returncode != 0, bad.output
        assert f"master localhost:{fixed_port}" in bad.output
        # rank 0 cannot listen, or rank 1 reached the first job's rank 0 first: which one
        # explains it is a race (the step ends at the first rank that fails)
        explanations = (f"port {fixed_port} on localhost is already in use",
                        f"reached the master at localhost:{fixed_port}, but it belongs to job {first_id} ")
        assert any(text in bad.output for text in explanations), bad.output

        good = slurm.submit(["sbatch", "--parsable", f"--output={good_output}", f"{FOLDER}/slurm_srun.sh"],
                            output=good_output)
        good_id = assert_job_ran(good, launcher="slurm", tasks_per_node=2)
        # setup_distributed() used the job script's address, and a port of the job and its
        # first step (where_am_i.py): srun steps side by side in one job do not share one.
        port = launch_port(good_id, "SLURM_STEP_ID=0")
        assert f"ranks_per_node=2 master=localhost:{port}\n" in good.output
        assert slurm.job(first_id)["JobState"] == "RUNNING", "the jobs did not run side by side"
    finally:
        slurm.command("scancel", first_id)


@pytest.mark.parametrize("plugin, mpi", [("pmi2", "mpich"), ("pmix", "openmpi")])
def test_srun_with_a_pmi_plugin(slurm, plugin, mpi):
    """srun alone starts the ranks, and the MPI library (mpi4py) and setup_distributed()
    agree on who is who. Open MPI has no PMI-2, MPICH's wheel no PMIx: one pair each."""
    plugins = slurm.command("srun", "--mpi=list").stdout
    assert plugin in plugins, plugins
    env = slurm.env(PATH=mpi_env(mpi)["PATH"])  # this MPI's python (and mpi4py) first
    srun = ["srun", "--ntasks=2", f"--mpi={plugin}", "--time=5", "python"]

    mpi4py = run([*srun, "-c", MPI4PY_RANKS], env=env, timeout=120)
    assert mpi4py.returncode == 0, mpi4py.output
    assert sorted(re.findall(r"mpi4py rank \d of \d", mpi4py.output)) == [
        "mpi4py rank 0 of 2", "mpi4py rank 1 of 2"], mpi4py.output

    where = run([*srun, REPO / FOLDER / "where_am_i.py"], env=env, timeout=120)
    assert where.returncode == 0, where.output
    assert rank_lines(where.output) == [("0", "slurm"), ("1", "slurm")], where.output
    port = int(re.search(r"summary: launcher=slurm world_size=2 nodes=1 ranks_per_node=2 "
                         r"master=127\.0\.0\.1:(\d+)$", where.output, flags=re.M)[1])
    assert JOB_PORT_BASE <= port < JOB_PORT_BASE + JOB_PORT_SPAN, "not a port of the job and its step"

