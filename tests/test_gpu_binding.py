"""GPU placement, proven without a GPU: torch.cuda's answers are monkeypatched, the
scheduler's variables and CUDA_VISIBLE_DEVICES are set as each binding style sets them, and
a fake `nvidia-smi` stands on PATH where a test needs one.

- which GPU a rank uses, for every way sites bind GPUs to ranks (utils/distributed.py's
  visible_device_index, through setup_distributed's backend and device choice);
- the silent-CPU guard: a job that was given GPUs but whose torch cannot use CUDA stops
  with one line that says why and how to force CPUs, instead of training on gloo.
"""

from __future__ import annotations

import stat

import pytest
import torch
from conftest import clean_env, python

from utils import distributed
from utils.distributed import (
    DistributedSetupError,
    detect_launcher,
    gpu_allocation_evidence,
    visible_device_index,
)

BASIC = "01_data_parallel_ddp/multinode_ddp_basic.py"


def fake_gpus(monkeypatch, count: int) -> None:
    """torch.cuda as a node with `count` visible GPUs (0: CUDA unusable) would answer."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def pick(requested: str, env: dict[str, str]) -> tuple[str, torch.device]:
    return distributed._pick_backend_and_device(requested, detect_launcher(env), env)


# ---- 1. one visible GPU per rank, or all of the node's GPUs visible to every rank
TORCHRUN = {"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
            "TORCHELASTIC_RUN_ID": "x"}
SRUN = {"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_STEP_ID": "0",
        "SLURM_NNODES": "2", "SLURM_JOB_ID": "77"}
PALS = {"PALS_RANKID": "6", "PALS_LOCAL_RANKID": "2", "PMI_RANK": "6", "PMI_SIZE": "8",
        "PMI_LOCAL_SIZE": "4"}
OPENMPI = {"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}


@pytest.mark.parametrize(
    ("style", "launcher_env", "visible", "cvd", "expected"),
    [
        # every rank sees the node's 4 GPUs (torchrun, mpiexec without binding): by local rank
        ("torchrun, all GPUs visible", TORCHRUN, 4, None, 2),
        ("mpiexec, all GPUs visible", OPENMPI, 4, "0,1,2,3", 2),
        ("more GPUs than ranks", {**TORCHRUN, "LOCAL_WORLD_SIZE": "3"}, 4, None, 2),
        # one GPU per task: each rank sees only its own GPU, as device 0
        ("srun --gpus-per-task=1", SRUN, 1, "2", 0),
        ("srun --gpu-bind=single:1 / closest", SRUN, 1, "2", 0),
        ("cgroup-constrained GRES (every task sees its GPU as 0)", SRUN, 1, "0", 0),
        ("Cray PALS with a set_gpu_rank-style wrapper", PALS, 1, "2", 0),
        ("Polaris affinity script (reversed order)", PALS, 1, "1", 0),
        ("srun --gpus-per-task=2: two own GPUs, local rank picks", {**SRUN, "SLURM_LOCALID": "1",
                                                                    "SLURM_STEP_NUM_NODES": "1",
                                                                    "SLURM_NTASKS": "2",
                                                                    "SLURM_PROCID": "1"}, 2, "2,3", 1),
    ],
)
def test_each_rank_gets_a_gpu_it_can_see(monkeypatch, style, launcher_env, visible, cvd, expected):
    fake_gpus(monkeypatch, visible)
    env = {**launcher_env, **({"CUDA_VISIBLE_DEVICES": cvd} if cvd is not None else {})}
    assert pick("auto", env) == ("nccl", torch.device("cuda", expected)), style


@pytest.mark.parametrize(
    ("local_rank", "local_world_size", "visible", "cvd", "fragments"),
    [
        (3, 4, 2, "0,1", ["local rank 3 of 4 processes on this node", "sees 2 GPU(s)",
                          "CUDA_VISIBLE_DEVICES='0,1'"]),
        (0, 4, 2, "0,1", ["sees 2 GPU(s)"]),  # every rank of a bad layout fails, not only some
        (4, None, 4, None, ["local rank 4 of this node's processes", "CUDA_VISIBLE_DEVICES is not set"]),
    ],
)
def test_too_few_visible_gpus_is_a_clear_error(local_rank, local_world_size, visible, cvd, fragments):
    env = {"CUDA_VISIBLE_DEVICES": cvd} if cvd is not None else {}
    with pytest.raises(DistributedSetupError) as raised:
        visible_device_index(local_rank, local_world_size, visible, env)
    message = str(raised.value)
    for fragment in [*fragments, "--gpus-per-task=1", "--backend gloo"]:
        assert fragment in message


def test_explicit_gloo_stays_on_cpu_whatever_the_gpus(monkeypatch):
    fake_gpus(monkeypatch, 4)
    assert pick("gloo", TORCHRUN) == ("gloo", torch.device("cpu"))


# ---- 2. a GPU job that would silently run on CPUs
@pytest.fixture
def fake_nvidia_smi(tmp_path):
    """A directory holding an `nvidia-smi` that lists two GPUs and a driver version."""
    program = tmp_path / "nvidia-smi"
    program.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a)"; '
        'echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1b)";;\n'
        '  --query-gpu=driver_version) echo "550.54.15"; echo "550.54.15";;\n'
        "  *) exit 9;;\n"
        "esac\n"
    )
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return tmp_path


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, "CUDA_VISIBLE_DEVICES=0,1"),
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_ID": "7"}, "SLURM_GPUS_ON_NODE=4"),
        ({"SLURM_JOB_GPUS": "0,1,2,3"}, "SLURM_JOB_GPUS=0,1,2,3"),
        ({"SLURM_GPUS_PER_TASK": "1"}, "SLURM_GPUS_PER_TASK=1"),
        ({"NGPUS": "4", "PBS_JOBID": "1.pbs"}, "NGPUS=4"),
    ],
)
def test_gpus_given_but_cuda_unusable_stops_with_the_reason(monkeypatch, env, shown):
    fake_gpus(monkeypatch, 0)
    env = {"PATH": "/nonexistent", **env}
    with pytest.raises(DistributedSetupError) as raised:
        pick("auto", env)
    message = str(raised.value)
    assert f"this job was given GPUs ({shown}" in message
    cuda = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    assert f"torch {torch.__version__} is {cuda}" in message
    assert "--backend gloo" in message and "DDP_BACKEND=gloo" in message
    assert pick("gloo", env) == ("gloo", torch.device("cpu"))  # the way out the message names


def test_nvidia_smi_alone_is_evidence_and_gives_the_driver_version(monkeypatch, fake_nvidia_smi):
    fake_gpus(monkeypatch, 0)
    env = {"PATH": str(fake_nvidia_smi)}
    assert gpu_allocation_evidence(env) == ["nvidia-smi lists 2 GPU(s)"]
    with pytest.raises(DistributedSetupError, match=r"the NVIDIA driver is 550\.54\.15"):
        pick("auto", env)


@pytest.mark.parametrize(
    "env",
    [{}, {"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": "-1"},
     {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, {"SLURM_GPUS_ON_NODE": "0"}, {"SLURM_JOB_ID": "7"}],
)
def test_cpu_jobs_still_choose_gloo_quietly(monkeypatch, env):
    fake_gpus(monkeypatch, 0)
    assert pick("auto", {"PATH": "/nonexistent", **env}) == ("gloo", torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has GPUs: CUDA is usable")
def test_the_guard_as_a_user_meets_it(fake_nvidia_smi):
    """A real process: one line, no traceback, exit 1; --backend gloo then trains."""
    env = clean_env(SLURM_JOB_GPUS="0,1")
    env["PATH"] = f"{fake_nvidia_smi}:{env['PATH']}"
    result = python(BASIC, "--epochs", "1", env=env, timeout=90)
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("setup_distributed: this job was given GPUs (SLURM_JOB_GPUS=0,1, "
                           "nvidia-smi lists 2 GPU(s))"), last
    assert "the NVIDIA driver is 550.54.15" in last and "--backend gloo" in last
    forced = python(BASIC, "--epochs", "1", "--backend", "gloo", env=env, timeout=90)
    assert forced.clean_summary()["world_size"] == "1"


# ---- failure demonstrations: a gloo side group under nccl (utils/distributed.py)
def test_failure_demonstrations_run_over_gloo_on_cpu_tensors_under_nccl():
    import dataclasses
    import datetime

    import torch.distributed as dist

    from utils.distributed import DistributedContext, timeout_group

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        gpu_job = DistributedContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                                     device=torch.device("cuda", 0), backend="nccl", launcher="torchrun")
        group, device = timeout_group(gpu_job, 5.0, expect_failure=True)
        assert (dist.get_backend(group), device) == ("gloo", torch.device("cpu"))
        assert dist.get_backend(timeout_group(gpu_job, 5.0)[0]) == "gloo"  # the job's: gloo here
        assert timeout_group(gpu_job, 5.0)[1] == torch.device("cuda", 0)  # its device: the GPU
        cpu_job = dataclasses.replace(gpu_job, device=torch.device("cpu"), backend="gloo")
        assert timeout_group(cpu_job, 5.0, expect_failure=True)[1] == torch.device("cpu")
    finally:
        dist.destroy_process_group()
