"""GPU placement, proven without a GPU: torch.cuda's answers are monkeypatched, the
scheduler's variables and CUDA_VISIBLE_DEVICES are set as each binding style sets them, and
a fake `nvidia-smi` stands on PATH where a test needs one.

- which GPU a rank uses, for every way sites bind GPUs to ranks (utils/devices.py's
  visible_device_index, through setup_distributed's backend and device choice);
- the silent-CPU guard: a job that was given GPUs but whose torch cannot use CUDA stops
  with one line that says why and how to force CPUs, instead of training on gloo;
- the shared mode (--backend gloo-cuda): which GPU each rank takes, and CPU tensors for
  point-to-point calls;
- two nccl ranks on one physical GPU (fake UUIDs, ranks as threads sharing one store):
  every rank stops with one message; per-task binding (each rank's own GPU as device 0) passes.
"""

from __future__ import annotations

import stat
import threading
import types

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


# ---- failure demonstrations: a gloo side group on GPUs (utils/distributed.py's timeout_group)
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
        shared_job = dataclasses.replace(gpu_job, backend="gloo")  # --backend gloo-cuda
        assert timeout_group(shared_job, 5.0, expect_failure=True)[1] == torch.device("cpu")
        assert timeout_group(shared_job, 5.0)[1] == torch.device("cuda", 0)
        cpu_job = dataclasses.replace(gpu_job, device=torch.device("cpu"), backend="gloo")
        assert timeout_group(cpu_job, 5.0, expect_failure=True)[1] == torch.device("cpu")
    finally:
        dist.destroy_process_group()


# ---- 3. the shared mode (--backend gloo-cuda): many ranks on fewer GPUs, over gloo
@pytest.mark.parametrize(("visible", "expected"), [(1, [0, 0, 0, 0]), (2, [0, 1, 0, 1]), (4, [0, 1, 2, 3])])
def test_shared_mode_takes_the_visible_gpus_in_turn(monkeypatch, visible, expected):
    fake_gpus(monkeypatch, visible)
    for local_rank in range(4):
        env = {**TORCHRUN, "RANK": str(local_rank), "LOCAL_RANK": str(local_rank)}
        assert pick("gloo-cuda", env) == ("gloo", torch.device("cuda", expected[local_rank]))
        assert pick("GLOO-CUDA", env)[0] == "gloo"  # DDP_BACKEND may be spelled in capitals


def test_shared_mode_without_cuda_says_so(monkeypatch):
    fake_gpus(monkeypatch, 0)
    with pytest.raises(DistributedSetupError,
                       match=r"--backend gloo-cuda needs CUDA GPUs .*--backend gloo\."):
        pick("gloo-cuda", {"PATH": "/nonexistent", **TORCHRUN})


def test_point_to_point_goes_through_cpu_tensors_in_the_shared_mode():
    from utils.distributed import DistributedContext, p2p_device

    def ctx(backend: str, device: str) -> DistributedContext:
        return DistributedContext(rank=0, local_rank=0, world_size=2, local_world_size=2,
                                  device=torch.device(device), backend=backend, launcher="torchrun")
    assert p2p_device(ctx("gloo", "cuda:0")) == torch.device("cpu")  # the shared mode
    assert p2p_device(ctx("nccl", "cuda:1")) == torch.device("cuda", 1)
    assert p2p_device(ctx("gloo", "cpu")) == torch.device("cpu")


def test_the_shared_mode_gives_cpu_tensors_to_what_gloo_cannot_run_on_cuda_ones():
    """utils/shared_mode.py's routing: in the shared mode, point-to-point and every
    all-gather built on gloo's coalesced all-gather (DTensor.full_tensor, redistribute to
    Replicate, the full state_dict: SIGSEGV on CUDA tensors) go through the CPU; the
    collectives gloo copies through pinned host memory itself stay on the GPU; under nccl
    and on CPUs nothing moves."""
    from utils.shared_mode import CPU_ROUTED, ON_DEVICE, collective_device, shares_gpu

    gpu, cpu = torch.device("cuda", 1), torch.device("cpu")
    assert set(CPU_ROUTED) == {"send", "recv", "isend", "irecv", "batch_isend_irecv",
                               "all_gather_into_tensor_coalesced", "full_tensor",
                               "redistribute_to_replicate", "full_state_dict", "all_reduce_coalesced"}
    for op in CPU_ROUTED:
        assert collective_device("gloo", gpu, op) == cpu, op  # the shared mode
        assert collective_device("nccl", gpu, op) == gpu, op
        assert collective_device("gloo", cpu, op) == cpu, op
    for op in ON_DEVICE:
        assert collective_device("gloo", gpu, op) == gpu, op
    assert {"all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor"} <= ON_DEVICE
    assert shares_gpu("gloo", gpu) and not shares_gpu("nccl", gpu) and not shares_gpu("gloo", cpu)
    with pytest.raises(ValueError, match="unknown collective 'all_gather_object_typo'"):
        collective_device("gloo", gpu, "all_gather_object_typo")  # a typo never routes silently


# ---- 4. two nccl ranks on one physical GPU: one message before NCCL's own
def fake_uuids(monkeypatch, uuids: dict[int, dict[int, str]]) -> None:
    """torch.cuda.get_device_properties as each rank (a thread named rank<N>) would see it:
    uuids[rank][device index] is the UUID of the GPU that rank sees at that index."""
    def properties(device):
        rank = int(threading.current_thread().name.removeprefix("rank"))
        return types.SimpleNamespace(uuid=uuids[rank][torch.device(device).index])
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)


def check_all(devices: list[int], world_size: int | None = None, timeout_s: float = 10.0) -> dict[int, str]:
    """check_distinct_gpus on every rank (threads sharing one store): rank -> '' or its error."""
    import datetime

    import torch.distributed as dist

    from utils.distributed import LaunchInfo, check_distinct_gpus

    store, outcome = dist.HashStore(), {}
    world = world_size or len(devices)

    def rank_main(rank: int) -> None:
        info = LaunchInfo("torchrun", rank, world, rank, world)
        try:
            check_distinct_gpus(store, info, torch.device("cuda", devices[rank]),
                                datetime.timedelta(seconds=timeout_s))
            outcome[rank] = ""
        except DistributedSetupError as error:
            outcome[rank] = str(error)
    threads = [threading.Thread(target=rank_main, args=(r,), name=f"rank{r}") for r in range(len(devices))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s + 5)
    assert not any(thread.is_alive() for thread in threads), "check_distinct_gpus hung"
    return outcome


def test_per_task_binding_passes_every_rank_sees_its_own_gpu_as_0(monkeypatch):
    fake_uuids(monkeypatch, {r: {0: f"GPU-{r}"} for r in range(4)})  # srun --gpus-per-task=1
    assert check_all([0, 0, 0, 0]) == {0: "", 1: "", 2: "", 3: ""}


def test_all_gpus_visible_passes_one_rank_per_index(monkeypatch):
    fake_uuids(monkeypatch, {r: {0: "GPU-a", 1: "GPU-b"} for r in range(2)})
    assert check_all([0, 1]) == {0: "", 1: ""}


def test_two_ranks_on_one_gpu_stop_every_rank_with_one_message(monkeypatch):
    # torchrun --nproc_per_node=2 on one GPU: both ranks get cuda:0, the same GPU
    fake_uuids(monkeypatch, {r: {0: "GPU-aaaa"} for r in range(2)})
    outcome = check_all([0, 0])
    assert set(outcome) == {0, 1} and all(outcome.values()), outcome
    first = outcome[0]
    for fragment in ("2 ranks on", "would use the same GPU (GPU-aaaa)", "rank 0 as cuda:0",
                     "rank 1 as cuda:0", "Duplicate GPU detected", "one process per GPU",
                     "--nproc_per_node", "--backend gloo-cuda", "DDP_BACKEND=gloo-cuda"):
        assert fragment in first, first
    assert outcome[1] == ("setup_distributed: rank 1 stops: ranks 0 and 1 would share one GPU "
                          "under nccl (rank 0 says more).")


def test_a_clash_between_other_ranks_stops_rank_0_too(monkeypatch):
    # 4 ranks: 0 and 1 on their own GPUs, 2 and 3 bound to the same one (different indices)
    fake_uuids(monkeypatch, {0: {0: "GPU-a"}, 1: {0: "GPU-b"}, 2: {0: "GPU-c"}, 3: {1: "GPU-c"}})
    outcome = check_all([0, 0, 0, 1])
    assert all(outcome.values()), outcome
    assert "rank 2 as cuda:0" in outcome[0] and "rank 3 as cuda:1" in outcome[0], outcome[0]


def setup_as_ranks(monkeypatch, visible: int, uuids: dict[int, dict[int, str]]) -> tuple[dict, list]:
    """setup_distributed("nccl") itself on 2 ranks (threads) of a node whose GPUs are faked:
    the rendezvous is one shared store, and init_process_group only records who reached it.
    Returns (rank -> '' or the error each rank raised, the ranks that reached NCCL's init)."""
    import torch.distributed as dist

    from utils.distributed import LaunchInfo

    fake_gpus(monkeypatch, visible)
    fake_uuids(monkeypatch, uuids)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    store, started, outcome = dist.HashStore(), [], {}
    monkeypatch.setattr(distributed, "detect_launcher", lambda: LaunchInfo(
        "torchrun", int(threading.current_thread().name.removeprefix("rank")), 2,
        int(threading.current_thread().name.removeprefix("rank")), 2))
    monkeypatch.setattr(distributed, "meet", lambda info, backend, timeout, deadline: (store, None))
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend, **kwargs: started.append((kwargs["rank"], backend)))

    def rank_main(rank: int) -> None:
        try:
            distributed.setup_distributed("nccl", timeout_s=10.0)
            outcome[rank] = ""
        except DistributedSetupError as error:
            outcome[rank] = str(error)
    threads = [threading.Thread(target=rank_main, args=(r,), name=f"rank{r}") for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads), "setup_distributed hung"
    return outcome, started


def test_setup_distributed_checks_the_gpus_before_nccl_starts(monkeypatch):
    """The call site (the GPU lane's duplicate-GPU case, proven without a GPU): two nccl
    ranks shown one GPU stop in setup_distributed with the one message, and neither
    reaches init_process_group; on two GPUs both pass the check and go on to it."""
    outcome, started = setup_as_ranks(monkeypatch, 1, {r: {0: "GPU-aaaa"} for r in range(2)})
    assert "would use the same GPU (GPU-aaaa)" in outcome[0], outcome
    assert "ranks 0 and 1 would share one GPU under nccl" in outcome[1], outcome
    assert started == []  # NCCL never started: no 'Duplicate GPU detected' after ours
    outcome, started = setup_as_ranks(monkeypatch, 2, {r: {0: "GPU-a", 1: "GPU-b"} for r in range(2)})
    assert outcome == {0: "", 1: ""} and sorted(started) == [(0, "nccl"), (1, "nccl")]


def test_a_missing_rank_ends_the_check_in_its_timeout(monkeypatch):
    fake_uuids(monkeypatch, {r: {0: f"GPU-{r}"} for r in range(2)})
    outcome = check_all([0, 0], world_size=3, timeout_s=1.0)  # rank 2 never comes
    for rank in (0, 1):
        assert "waited 1 s for the other ranks to say which GPU they use" in outcome[rank], outcome


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has GPUs: the shared mode would run")
def test_shared_mode_without_gpus_as_a_user_meets_it():
    """DDP_BACKEND=gloo-cuda (as --backend gloo-cuda) on a machine without CUDA: one line, exit 1."""
    result = python(BASIC, "--epochs", "1", env=clean_env(DDP_BACKEND="gloo-cuda"), timeout=90)
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("setup_distributed: --backend gloo-cuda needs CUDA GPUs and none is visible"), last
    assert last.endswith("use --backend gloo."), last
