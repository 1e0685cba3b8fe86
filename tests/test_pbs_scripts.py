"""PBS job scripts: shellcheck-clean, runnable under bash with a PBS-like environment, and
through Slurm's PBS-compatible qsub (slurm-wlm-torque), which reads their #PBS directives."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import MPI_VENVS, REPO, Result, clean_env, mpi_env, run, selected_params
from slurm_cluster import shared_cluster

from utils.distributed import job_port

# A PBS job script is one with #PBS directives (the Slurm ones, #SBATCH, are test_slurm.py's;
# the porting page's template, which sources nothing from here, is test_00_porting.py's).
JOB_SCRIPTS = sorted(p for p in REPO.glob("scripts/*/*.sh")
                     if "\n#PBS " in p.read_text() and p.parent.name != "00_porting")


def script_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_shellcheck_every_shell_script():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    files = [*REPO.glob("scripts/*.sh"), *REPO.glob("scripts/*/*.sh"), REPO / ".ci" / "run",
             REPO / ".ci" / "install-slurm", REPO / ".ci" / "install-chromium"]
    result = run([shellcheck, "-x", *files], timeout=60)
    assert result.returncode == 0, result.output


def job_venv(job_script: Path) -> str:
    """The virtual environment a job activates: mpiexec alone needs an MPI's (MPICH's here:
    its mpiexec takes PBS Pro's --ppn), torchrun the main one."""
    if "launch_mpiexec" in job_script.read_text():
        mpi_env("mpich")  # skips (fails in CI) when .venv-mpich is missing
        return str(MPI_VENVS["mpich"])
    return str(Path(sys.executable).parents[1])


def pbs_env(tmp_path: Path, job_id: str, *nodes: str, venv: str | None = None) -> dict[str, str]:
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"{n}\n" for n in nodes))
    # A job starts in $HOME with the submitter's PATH; the script must find its way back.
    return clean_env(PBS_NODEFILE=str(nodefile), PBS_JOBID=job_id, PBS_O_WORKDIR=str(REPO),
                     HOME=str(tmp_path), VENV=venv or str(Path(sys.executable).parents[1]))


# What each chapter's job must show besides a clean finish (its pitfall, bad and good).
EXPECTED_IN_JOB_OUTPUT = {
    "01_data_parallel_ddp": ["variant=bad world_size=2", "work=2.00x", "variant=good world_size=2",
                             "work=1.00x", "reshuffled_each_epoch=yes"],
    "02_collectives": ["checks_passed=8/8", "outcome=timeout",
                       "the bad variant failed as expected (exit code 1)", "outcome=completed totals=8,4,8"],
    "03_distributed_sampler": ["same_order_every_epoch=yes", "same_order_every_epoch=no",
                               "evaluated=1002", "matches_reference=no", "matches_reference=yes"],
    "04_logging_and_checkpoints": ["variant=bad world_size=2", "plain_load=failed", "plain_load=ok",
                                   "losses=1.278334,0.831593,0.434088,0.281914 "
                                   "rng_states=e443777b,8ff8a994,2f13cf98,67a343a2",
                                   "start_epoch=2 epochs_done=4 losses=0.434088,0.281914 "
                                   "rng_states=2f13cf98,67a343a2"],
    "05_gradient_accumulation": ["variant=bad world_size=2", "allreduces_per_step=4",
                                 "variant=good world_size=2", "allreduces_per_step=1", "grads_equal=yes",
                                 "bad_allreduces_per_step=4 good_allreduces_per_step=1"],
    "06_mixed_precision": ["variant=bad precision=fp16 world_size=2", "zero_grads=100.0%",
                           "variant=good precision=fp16 world_size=2", "scale=65536", "precision=bf16",
                           "fp16_ratio=0.50", "bf16_ratio=0.50"],
    "07_batchnorm_and_buffers": ["variant=bad world_size=2", "broadcast_buffers=no", "eval_identical=no",
                                 "broadcast_buffers=yes", "eval_identical=yes", "variant=good world_size=2",
                                 "matches_reference=yes"],
    "08_unused_parameters": ["outcome=error failed_step=2",
                             "the bad variant failed as expected (exit code 1)",
                             "variant=good world_size=2", "replicas_equal=yes", "every_2nd_find_unused=ok",
                             "every_2nd_static_graph=error", "find_unused_allreduces_per_step=2"],
    "09_uneven_inputs": ["outcome=timeout batches_per_rank=28,37 hung_epoch=1 rank0_steps_done=28",
                         "the bad variant failed as expected (exit code 1)",
                         "fix=join world_size=2", "steps_per_rank=84,111 samples_dropped_per_epoch=0",
                         "fix=even world_size=2", "steps_per_rank=84,84 samples_dropped_per_epoch=267",
                         "replicas_identical=yes"],
    "10_communication_overlap": ["variant=bad world_size=2", "buckets=66 first_steps_allreduces=1,66,66",
                                 "variant=good world_size=2", "allreduces_per_step=2 ",
                                 "launched_during_backward=1", "allreduces_per_step=66,32,16,4,2,1",
                                 "plot: "],
    "11_replica_consistency": ["variant=bad world_size=2", "identical_checks=1/9", "replica_losses_equal=no",
                               "variant=good world_size=2", "identical_checks=9/9",
                               "replica_losses_equal=yes", "init_before_ddp=differ init_after_ddp=identical",
                               "same_seed_distinct_masks=32/64", "per_rank_distinct_masks=64/64"],
    "12_scaling_and_performance": ["world_size=2 rank=0 variant=bad", "world_size=2 rank=0 variant=good",
                                   "monitor_samples=",
                                   "summary: ranks=2 batches=16 grad_bytes=44695848 weak_efficiency=",
                                   "plot: "],
    "13_multinode_and_hpc": ["world_size=2 nodes=1 ranks_per_node=2", "variant=good world_size=2",
                             "work=1.00x"],
    "14_fault_tolerance": ["rank 1: killed (SIGKILL) after step 10",
                           "resumed from checkpoint_good.pt: step 8, epoch 1, batch 8 of the epoch",
                           # (the checksum is the machine's: fp32 rounding differs between CPUs)
                           "restart=1 resumed_from_step=8 steps=48/48 weights_crc=",
                           "cannot resume: checkpoint_bad.pt is not a complete checkpoint: "
                           "PytorchStreamReader failed reading zip archive",
                           "the bad variant failed as expected (exit code 1)",
                           "removed the temporary file of a save that never finished"],
    "15_torch_compile_ddp": ["variant=bad world_size=2 launcher=torchrun order=ddp-then-compile "
                             "optimize_ddp=on last_batch=ragged buckets=5 subgraphs=5", "recompiles=2",
                             "plain_load=failed",
                             "variant=good world_size=2", "last_batch=dynamic buckets=5 subgraphs=5",
                             "recompiles=0", "graphs=1 step1_s=", "plain_load=ok tensors_equal=yes"],
    "16_fsdp": ["precision=fp32 params=135236 ddp_bytes=2163776 fsdp2_bytes=1081888", "losses_match=yes",
                "variant=bad launcher=torchrun world_size=2", "rank_file_load=failed",
                "export_bytes_per_rank=540944,540944", "variant=good launcher=torchrun world_size=2",
                "export_bytes_per_rank=540944,0 ", "saved by 2 ranks, loaded by 1",
                "variant=good launcher=torchrun world_size=1 start_epoch=1"],
    "17_zero_and_beyond": ["identical=yes", "variant=bad world_size=2", "saved_states=2/8",
                           "resume_equal=no", "variant=good world_size=2",
                           "saved_states=8/8 right_shape_states=8/8", "resume_equal=yes",
                           "mesh=1x2", "dp_grads_ok=yes"],
    "18_transformer": ["variant=bad accumulation_steps=1", "variant=good accumulation_steps=1",
                       "losses_match=yes", "resume_equal=yes"],
    "19_metrics_and_decisions": ["f1_off_by=-0.0666 auroc_off_by=+0.0350 matches_reference=no",
                                 "variant=good shards=files world_size=2", "matches_reference=yes",
                                 "outcome=timeout left_after_epoch=5 left=1 went_on=0",
                                 "the bad variant failed as expected (exit code 1)",
                                 "stop_epoch_per_rank=7,7 steps_per_rank=56,56",
                                 "writes_per_rank=1,0 failed_reads=1 reads_ok=1/2",
                                 "writes_per_rank=1,0 failed_reads=0 reads_ok=2/2"],
    # (one folder, two launchers: per-script entries add to the folder's)
    "13_multinode_and_hpc/pbs_torchrun.sh": ["summary: launcher=torchrun world_size=2 nodes=1"],
    "13_multinode_and_hpc/pbs_mpiexec.sh": ["summary: launcher=mpich world_size=2 nodes=1"],
}


def expected_in_job_output(job_script: Path) -> list[str]:
    """What the job must print: its folder's entry and its own, at least one of them."""
    keys = [key for key in (job_script.parent.name, script_id(job_script)) if key in EXPECTED_IN_JOB_OUTPUT]
    assert keys, f"{script_id(job_script)}: add what its output must show to EXPECTED_IN_JOB_OUTPUT"
    return [text for key in keys for text in EXPECTED_IN_JOB_OUTPUT[key]]


@pytest.mark.parametrize("job_script", JOB_SCRIPTS, ids=script_id)
def test_every_job_script_has_expectations(job_script):
    assert expected_in_job_output(job_script)


def test_every_expectation_belongs_to_a_job_script():
    keys = {key for job in JOB_SCRIPTS for key in (job.parent.name, script_id(job))}
    assert set(EXPECTED_IN_JOB_OUTPUT) <= keys, set(EXPECTED_IN_JOB_OUTPUT) - keys


def assert_job_output(output: str, job_script: Path) -> None:
    for text in expected_in_job_output(job_script):
        assert text in output, text
    for plot in re.findall(r"^plot: (\S+)$", output, flags=re.M):  # a plot the job says it saved
        assert Path(plot).read_bytes().startswith(b"\x89PNG"), plot


def test_job_script_runs_under_bash_as_pbs_would(pbs_torchrun_job):
    """The path without a scheduler's launch: bash with the environment PBS Pro sets (a node
    file, a job id, the submit directory). One job script is enough: every job script sources
    the same scripts/pbs_common.sh, and every one of them runs through qsub below. The one of
    fewest processes: chapter 13's, two launches of 2 ranks (chapter 01's has three); the run,
    with a site file, is conftest.pbs_torchrun_job, which test_job_binding and test_diagnostics
    read too. PBS lists a node once per requested CPU: the script must count it once."""
    _, result, _ = pbs_torchrun_job
    job_script = REPO / "scripts" / "13_multinode_and_hpc" / "pbs_torchrun.sh"
    assert job_venv(job_script) == str(Path(sys.executable).parents[1])  # the venv the job was given
    assert result.returncode == 0, result.output
    port = job_port("4242.pbs01")
    assert f"job 4242.pbs01: 1 node(s) [localhost] x 2 process(es); master localhost:{port}" in result.output
    assert_job_output(result.output, job_script)


@pytest.fixture(scope="session")
def slurm(request):
    return shared_cluster(request.config)


# Jobs run side by side, this many at a time (the test cluster's node has room for three jobs
# of ncpus=16): one job alone keeps about 1.3 of the two cores busy (start-up, imports, waits
# for Slurm); two fill them, three only crowd them (measured: no faster than two).
JOBS_AT_ONCE = 2


@dataclass
class QsubRun:
    result: Result
    job: dict[str, str]  # what scontrol says about the job, read as soon as it ended


def run_through_qsub(slurm, tmp_path: Path, job_script: Path) -> QsubRun:
    """qsub from the repository root, as the scripts say; what the jobs write goes to
    tmp_path, not into the submitter's $HOME."""
    output = tmp_path / "job.out"
    # STEPS: chapter 12's runs at 3 steps (2 left out, 1 timed), not 8: what this test checks
    # is that the job runs and reports, not its step times (test_12 checks those).
    env = slurm.env(VENV=job_venv(job_script), PLOT=str(tmp_path / "plot.png"),
                    CHECKPOINT_DIR=str(tmp_path / "checkpoints"), STEPS="3")
    result = slurm.submit(["qsub", "-j", "oe", "-o", output, job_script.relative_to(REPO)],
                          output=output, env=env)
    job_id = result.output.split()[0] if result.output.split() else ""
    return QsubRun(result, slurm.job(job_id) if job_id.isdigit() else {})


@pytest.fixture(scope="module")
def qsub_runs(slurm, tmp_path_factory, request):
    """The job scripts of the session's qsub tests (all, unless -k or a node id picks some),
    submitted at the first test that asks, JOBS_AT_ONCE at a time; each test waits for its own."""
    with ThreadPoolExecutor(max_workers=JOBS_AT_ONCE, thread_name_prefix="qsub") as pool:
        runs = {job: pool.submit(run_through_qsub, slurm, tmp_path_factory.mktemp(job.stem), job)
                for job in selected_params(request.session, "test_job_script_runs_through_slurms_qsub",
                                           "job_script")}
        yield runs
        for pending in runs.values():
            pending.cancel()


@pytest.mark.parametrize("job_script", JOB_SCRIPTS, ids=script_id)
def test_job_script_runs_through_slurms_qsub(qsub_runs, job_script):
    """Slurm's qsub hands the script to sbatch, which reads its #PBS directives. No
    PBS_NODEFILE: the nodes come from Slurm."""
    qsub_run = qsub_runs[job_script].result()
    result = qsub_run.result
    assert result.returncode == 0, result.output
    job_id = result.output.split()[0]
    assert (f"job {job_id}: 1 node(s) [localhost] x 2 process(es); "
            f"master localhost:{job_port(job_id)}") in result.output
    assert_job_output(result.output, job_script)
    # The #PBS lines were read: the job's name (-N) and its time limit (walltime).
    text = job_script.read_text()
    name = re.search(r"^#PBS -N (\S+)", text, flags=re.M)[1]
    hours, minutes = re.search(r"^#PBS -l walltime=(\d+):(\d+):", text, flags=re.M).groups()
    assert qsub_run.job["JobName"] == name, qsub_run.job
    assert qsub_run.job["TimeLimit"] == f"{hours}:{minutes}:00", qsub_run.job


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
    """Two nodes in the node file: through NODE_LAUNCHER, torchrun_node.sh on each node starts
    one torchrun, rendezvous at the first node on the job's port (checked with a stand-in
    launcher that runs the command here, once, and a stand-in torchrun that echoes)."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n')
    (venv_bin / "torchrun").write_text('#!/bin/bash\necho "torchrun $*"\n')
    (venv_bin / "torchrun").chmod(0o755)
    env = pbs_env(tmp_path, "555.pbs", "nodeA", "nodeA", "nodeB", venv=str(tmp_path / "venv"))
    env.update(NPROC_PER_NODE="4", NODE_LAUNCHER="env")
    result = run(["bash", "-c", "source scripts/pbs_common.sh && launch_torchrun train.py --epochs 1"],
                 env=env, timeout=30)
    assert result.returncode == 0, result.output
    # The port: one free on this node (where the job script runs: the first node), chosen per
    # launch, so that two launches side by side in one job do not meet at one rendezvous.
    node_script = REPO / "scripts" / "13_multinode_and_hpc" / "torchrun_node.sh"
    port = re.search(rf"^\+ env bash {re.escape(str(node_script))} 2 nodeA:(\d+) train.py", result.output,
                     flags=re.M)[1]
    # nodeA is not this machine: its torchrun does not host the rendezvous.
    assert (f"\ntorchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=nodeA:{port} "
            "--rdzv-id=555.pbs train.py --epochs 1\n") in result.output, result.output
    again = run(["bash", "-c", "source scripts/pbs_common.sh && launch_torchrun train.py --epochs 1"],
                env=env, timeout=30)
    assert f"nodeA:{port} " not in again.output, "a second launch in the job got the same port"
    # MASTER_PORT set before the job: every launch uses it.
    given = run(["bash", "-c", "source scripts/pbs_common.sh && launch_torchrun train.py"],
                env={**env, "MASTER_PORT": "23456"}, timeout=30)
    assert " 2 nodeA:23456 train.py" in given.output, given.output


def test_without_a_scheduler_this_host_is_the_only_node(tmp_path):
    env = clean_env(NPROC_PER_NODE="1")
    result = run(["bash", "-c", "source scripts/pbs_common.sh && echo nodes=$NNODES"], env=env, timeout=30)
    assert "nodes=1" in result.output, result.output
