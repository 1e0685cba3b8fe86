"""PBS job scripts: shellcheck-clean, and runnable under bash with a PBS-like environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env, run

from utils.distributed import job_port

JOB_SCRIPTS = sorted(REPO.glob("scripts/*/*.sh"))


def test_shellcheck_every_shell_script():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    files = [*JOB_SCRIPTS, REPO / "scripts" / "pbs_common.sh", REPO / ".ci" / "run"]
    result = run([shellcheck, "-x", *files], timeout=60)
    assert result.returncode == 0, result.output


def pbs_env(tmp_path: Path, job_id: str, *nodes: str) -> dict[str, str]:
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"{n}\n" for n in nodes))
    # A job starts in $HOME with the submitter's PATH; the script must find its way back.
    return clean_env(PBS_NODEFILE=str(nodefile), PBS_JOBID=job_id, PBS_O_WORKDIR=str(REPO),
                     HOME=str(tmp_path), VENV=str(Path(sys.executable).parents[1]))


# What each chapter's job must show besides a clean finish (its pitfall, bad and good).
EXPECTED_IN_JOB_OUTPUT = {
    "01_data_parallel_ddp": ["variant=bad world_size=2", "work=2.00x", "variant=good world_size=2",
                             "work=1.00x", "reshuffled_each_epoch=yes"],
    "02_collectives": ["checks_passed=8/8", "outcome=timeout",
                       "the bad variant failed as expected (exit code 1)", "outcome=completed totals=8,4,8"],
    "03_distributed_sampler": ["same_order_every_epoch=yes", "same_order_every_epoch=no",
                               "evaluated=1002", "matches_reference=no", "matches_reference=yes"],
    "04_logging_and_checkpoints": ["variant=bad world_size=2", "writes_per_rank=4,4", "plain_load=failed",
                                   "writes_per_rank=4,0", "plain_load=ok", "rng_restored=yes"],
    "05_gradient_accumulation": ["variant=bad world_size=2", "allreduces_per_step=4",
                                 "variant=good world_size=2", "allreduces_per_step=1", "grads_equal=yes",
                                 "bad_allreduces_per_step=4 good_allreduces_per_step=1"],
    "06_mixed_precision": ["variant=bad precision=fp16 world_size=2", "zero_grads=100.0%",
                           "variant=good precision=fp16 world_size=2", "scale=65536", "precision=bf16",
                           "fp16_ratio=0.50", "bf16_ratio=0.50"],
}


@pytest.mark.parametrize("job_script", JOB_SCRIPTS, ids=lambda p: p.parent.name)
def test_job_script_runs_under_bash_as_pbs_would(tmp_path, job_script):
    # PBS lists a node once per requested CPU: the script must count it once.
    env = pbs_env(tmp_path, "4242.pbs01", "localhost", "localhost")
    result = run(["bash", job_script], env=env, cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.output
    port = job_port("4242.pbs01")
    assert f"job 4242.pbs01: 1 node(s) [localhost] x 2 process(es); master localhost:{port}" in result.output
    for text in EXPECTED_IN_JOB_OUTPUT.get(job_script.parent.name, []):
        assert text in result.output, text


def test_job_submitted_from_elsewhere_says_where_to_submit_from(tmp_path):
    env = pbs_env(tmp_path, "9.pbs", "localhost")
    env["PBS_O_WORKDIR"] = str(tmp_path)  # qsub run outside the repository
    result = run(["bash", JOB_SCRIPTS[0]], env=env, cwd=tmp_path, timeout=30)
    assert result.returncode == 1
    assert "submit from the repository root, or set REPO_DIR to it" in result.output


@pytest.mark.parametrize("job_id", ["1234.pbs01", "98765.sdb", "12[3].pbs", "7"])
def test_shell_and_python_derive_the_same_port(tmp_path, job_id):
    env = pbs_env(tmp_path, job_id, "localhost")
    env["NPROC_PER_NODE"] = "1"
    result = run(["bash", "-c", 'source scripts/pbs_common.sh >/dev/null && echo "port=$MASTER_PORT"'],
                 env=env, timeout=30)
    assert f"port={job_port(job_id)}" in result.output, result.output


def test_two_nodes_give_a_multi_node_launch_line(tmp_path):
    """Two nodes in the node file: one torchrun per node through NODE_LAUNCHER, rendezvous
    at the first node on the job's port (checked with a stand-in launcher that echoes)."""
    env = pbs_env(tmp_path, "555.pbs", "nodeA", "nodeA", "nodeB")
    env.update(NPROC_PER_NODE="4", NODE_LAUNCHER="echo mpiexec -n 2 --ppn 1")
    result = run(["bash", "-c", "source scripts/pbs_common.sh && launch_torchrun train.py --epochs 1"],
                 env=env, timeout=30)
    assert result.returncode == 0, result.output
    port = job_port("555.pbs")
    assert (f"mpiexec -n 2 --ppn 1 torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d "
            f"--rdzv-endpoint=nodeA:{port} --rdzv-id=555.pbs train.py --epochs 1") in result.output


def test_without_a_scheduler_this_host_is_the_only_node(tmp_path):
    env = clean_env(NPROC_PER_NODE="1")
    result = run(["bash", "-c", "source scripts/pbs_common.sh && echo nodes=$NNODES"], env=env, timeout=30)
    assert "nodes=1" in result.output, result.output
