"""scripts/job_common.sh: how many processes a job starts per node (the GPUs it may use,
not every GPU nvidia-smi lists) and the CPU binding each launcher gets, run as the job
scripts run them, in bash, with a fake environment: stand-in `mpiexec`s that print their
MPI's --version and echo what they were asked to run, a fake `nproc` and `nvidia-smi`."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from conftest import clean_env, run

VERSIONS = {"openmpi": "mpiexec (Open MPI) 5.0.3", "mpich": "HYDRA build details:\n    Version: 4.2.0",
            "pals": "mpiexec version 1.4.0"}


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def fake_node(tmp_path):
    """A directory of stand-ins for a 64-core node with 4 GPUs (nvidia-smi), and one
    `mpiexec` per MPI under <dir>/<mpi>/ (PALS's under a .../pals/... path, as on HPE)."""
    executable(tmp_path / "bin" / "nproc", "#!/bin/sh\necho 64\n")
    gpus = "".join(f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"; ' for i in range(4))
    executable(tmp_path / "bin" / "nvidia-smi", f"#!/bin/sh\n{gpus}\n")
    for mpi, version in VERSIONS.items():
        executable(tmp_path / mpi / "bin" / "mpiexec",
                   f'#!/bin/bash\nif [[ "$1" == --version ]]; then echo "{version}"; exit 0; fi\n'
                   'echo "RAN mpiexec $*"\n')
    (tmp_path / "nodes").write_text("x1000c0s0b0n0\nx1000c0s0b0n1\n")
    return tmp_path


def shell(fake: Path, command: str, mpi: str = "openmpi", **env: str) -> str:
    full = clean_env(PATH=f"{fake / mpi / 'bin'}:{fake / 'bin'}:/usr/bin:/bin", HOME=str(fake),
                     PBS_NODEFILE=str(fake / "nodes"), PBS_JOBID="77.pbs", NCPUS="64")
    full.pop("CUDA_VISIBLE_DEVICES", None)
    full.update(env)
    result = run(["bash", "-c", f"source scripts/pbs_common.sh >/dev/null && {command}"], env=full,
                 timeout=30)
    assert result.returncode == 0, result.output
    return result.output


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ({}, "4"),  # nvidia-smi: the last resort
        ({"CUDA_VISIBLE_DEVICES": "1,3"}, "2"),  # what the job may use, not what the node has
        ({"CUDA_VISIBLE_DEVICES": "GPU-a1,GPU-b2,GPU-c3"}, "3"),  # UUIDs
        ({"CUDA_VISIBLE_DEVICES": ""}, "0"),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, "0"),
        ({"SLURM_GPUS_ON_NODE": "2"}, "2"),
        ({"SLURM_JOB_GPUS": "0,5,6"}, "3"),
    ],
)
def test_gpus_this_job_may_use(fake_node, env, gpus):
    out = shell(fake_node, 'echo "gpus=$(gpus_for_this_job) nproc=$NPROC_PER_NODE"', **env)
    expected_nproc = gpus if gpus != "0" else "2"
    assert f"gpus={gpus} nproc={expected_nproc}" in out


def test_no_gpus_anywhere_means_two_cpu_processes(fake_node):
    (fake_node / "bin" / "nvidia-smi").unlink()
    assert "nproc=2" in shell(fake_node, 'echo "nproc=$NPROC_PER_NODE"')
    assert "backend: gloo expected" in shell(fake_node, "backend_note")


# 2 nodes x 4 GPUs, NCPUS=64: a per-node torchrun gets all 64 cores, a rank 16.
@pytest.mark.parametrize(
    ("mpi", "ranks_line", "nodes_line"),
    [
        ("openmpi", "mpiexec -n 8 --map-by ppr:4:node:PE=16 --bind-to core python",
         "mpiexec -n 2 --map-by ppr:1:node --bind-to none bash"),
        ("mpich", "mpiexec -n 8 --ppn 4 -bind-to core:16 python",
         "mpiexec -n 2 --ppn 1 -bind-to none bash"),
        ("pals", "mpiexec -n 8 --ppn 4 --depth=16 --cpu-bind depth python",
         "mpiexec -n 2 --ppn 1 --depth=64 --cpu-bind depth bash"),
    ],
)
def test_each_launcher_gives_each_process_its_share_of_cores(fake_node, mpi, ranks_line, nodes_line):
    out = shell(fake_node, "launch_mpiexec train.py && launch_torchrun train.py", mpi=mpi)
    assert f"RAN {ranks_line} train.py" in out, out
    # one torchrun per node, started by torchrun_node.sh (it finds the rendezvous host)
    assert re.search(rf"RAN {re.escape(nodes_line)} \S+/torchrun_node\.sh 2 \S+:\d+ train\.py", out), out


def test_binding_parameters(fake_node):
    # CPUS_PER_RANK overrides the share; CPU_BIND=none leaves the MPI's defaults
    assert "-bind-to core:6 python" in shell(fake_node, "launch_mpiexec t.py", mpi="mpich", CPUS_PER_RANK="6")
    out = shell(fake_node, "launch_mpiexec t.py && launch_torchrun t.py", mpi="mpich", CPU_BIND="none")
    assert "RAN mpiexec -n 8 --ppn 4 python t.py" in out and "RAN mpiexec -n 2 --ppn 1 bash" in out
    # a launcher line that binds itself is left alone; MPI_FLAVOR names an undetectable MPI
    out = shell(fake_node, "launch_mpiexec t.py", mpi="mpich",
                RANK_LAUNCHER="mpiexec -n 8 --ppn 4 --cpu-bind list:0-7:8-15:16-23:24-31")
    assert "RAN mpiexec -n 8 --ppn 4 --cpu-bind list:0-7:8-15:16-23:24-31 python t.py" in out
    assert "--depth=16 --cpu-bind depth python" in shell(fake_node, "launch_mpiexec t.py", mpi="mpich",
                                                        MPI_FLAVOR="pals")
    # the job's own count of cores (NCPUS), not the node's
    assert "PE=2 --bind-to core" in shell(fake_node, "launch_mpiexec t.py", NCPUS="8")


def test_fewer_cores_than_ranks_binds_no_rank_to_a_shared_core(fake_node):
    out = shell(fake_node, "launch_mpiexec t.py", mpi="mpich", NCPUS="2")
    assert "RAN mpiexec -n 8 --ppn 4 python t.py" in out


def test_srun_steps_get_the_jobs_cpus_per_task(fake_node):
    """Both launchers put the job's --cpus-per-task on the srun line (Slurm 22.05-23.02 gave
    steps one CPU otherwise, and read SRUN_CPUS_PER_TASK; 23.11 reads SLURM_CPUS_PER_TASK)."""
    executable(fake_node / "bin" / "srun", '#!/bin/sh\necho "RAN srun $*"\n')
    env = clean_env(SLURM_JOB_ID="9", SLURM_CPUS_PER_TASK="8",
                    PATH=f"{fake_node / 'bin'}:/usr/bin:/bin", HOME=str(fake_node))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = ["bash", "-c",
           "source scripts/slurm_common.sh >/dev/null && launch_srun t.py && launch_torchrun t.py"]
    out = run(cmd, env=env, timeout=30).output
    assert "RAN srun --kill-on-bad-exit=1 --cpus-per-task=8 python t.py" in out, out
    assert "RAN srun --kill-on-bad-exit=1 --cpus-per-task=8 --nodes=" in out, out
    env["CPU_BIND"] = "none"
    out = run(cmd, env=env, timeout=30).output
    assert "RAN srun --kill-on-bad-exit=1 python t.py" in out, out
    assert "--cpus-per-task" not in out, out


# ---- scripts/site_env.sh: the site's settings, sourced by every job script when present
def test_site_file_reaches_every_rank(pbs_torchrun_job):
    """A site file (SITE_ENV) that sets a module list and NCCL/libfabric variables: the
    job says it read it, and where_am_i.py's ranks see the variables (the job: chapter 13's
    pbs_torchrun.sh, conftest.pbs_torchrun_job, which test_diagnostics and test_pbs_scripts
    read too)."""
    site, _, result = pbs_torchrun_job
    assert result.returncode == 0, result.output
    assert f"site settings: {site}" in result.output
    assert result.count("variables FI_PROVIDER=tcp NCCL_SOCKET_IFNAME==lo") == 2, result.output
    assert result.count("nccl_interface lo 127.0.0.1 (NCCL_SOCKET_IFNAME==lo)") == 2


def test_without_a_site_file_nothing_is_sourced_and_the_example_sets_nothing(tmp_path):
    env = clean_env(HOME=str(tmp_path), NPROC_PER_NODE="1", SITE_ENV=str(tmp_path / "absent.sh"))
    show = "source scripts/pbs_common.sh >/dev/null; env | grep -E '^(NCCL|FI|GLOO)_' | sort"
    plain = run(["bash", "-c", show], env=env, timeout=30)
    assert "site settings" not in plain.output
    env["SITE_ENV"] = "scripts/site_env.example.sh"  # every line of the example is commented out
    example = run(["bash", "-c", show], env=env, timeout=30)
    assert example.output.replace("site settings: scripts/site_env.example.sh\n", "") == plain.output
