"""Which backend and which device this rank uses, and the checks that keep GPUs apart.

- nccl (the default where CUDA works): one GPU per rank, ``visible_device_index()``;
- gloo on CPUs (the default without CUDA, or --backend gloo);
- the shared mode (--share-gpus): N ranks on fewer GPUs over gloo with CUDA tensors, rank
  ``local_rank % visible GPUs``; for learning and testing on a machine with fewer GPUs
  than ranks, not for speed;
- under nccl, ``check_distinct_gpus()`` stops every rank with one message when two ranks
  would use the same physical GPU (compared by UUID, so per-task binding, where every rank
  sees its own GPU as device 0, passes), before NCCL's own "Duplicate GPU detected".
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Mapping

import torch
import torch.distributed as dist

from utils.launch_env import DistributedSetupError, LaunchInfo

_NO_DEVICES = ("", "-1", "none", "nodevfiles", "void")  # CUDA_VISIBLE_DEVICES values that hide every GPU
# Scheduler variables that say "this job was given GPUs" (a count or a list of ids).
_GPU_ALLOCATION_VARIABLES = (
    "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS", "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_SOCKET", "NGPUS", "PBS_NGPUS",
)


def visible_device_index(local_rank: int, local_world_size: int | None, visible: int,
                         env: Mapping[str, str] | None = None) -> int:
    """Which of the GPUs this process can see it uses (an index for ``cuda:<index>``).

    * one GPU visible: that one, whatever the local rank. Sites that bind one GPU per task
      (Slurm ``--gpus-per-task=1`` or ``--gpu-bind=single:1``/``closest``, cgroup-constrained
      GRES, Cray ``set_gpu_rank``-style wrappers, per-rank affinity scripts) show every rank
      its own GPU as device 0;
    * at least as many visible as this node's ranks: the one at the local rank's index
      (every rank sees all of the node's GPUs, as under torchrun);
    * otherwise: an error that names CUDA_VISIBLE_DEVICES and the counts.
    """
    env = os.environ if env is None else env
    if visible == 1:
        return 0
    enough = local_rank < visible and (local_world_size is None or local_world_size <= visible)
    if visible > 1 and enough:
        return local_rank
    shown = env.get("CUDA_VISIBLE_DEVICES")
    cvd = "CUDA_VISIBLE_DEVICES is not set" if shown is None else f"CUDA_VISIBLE_DEVICES={shown!r}"
    ranks = f"{local_world_size} processes on this node" if local_world_size else "this node's processes"
    raise DistributedSetupError(
        f"local rank {local_rank} of {ranks}, but this process sees {visible} GPU(s) ({cvd}). "
        "Give every process one GPU (e.g. srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per "
        "rank), or let every process see all of the node's GPUs and start at most one process per "
        f"GPU (--nproc_per_node / --ppn / --ntasks-per-node <= {visible or 'the GPUs'}), "
        "or share the GPUs over gloo (--backend gloo-cuda), or use CPUs (--backend gloo)."
    )


def gpu_allocation_evidence(env: Mapping[str, str] | None = None) -> list[str]:
    """What says this job was given GPUs: set variables (CUDA_VISIBLE_DEVICES naming
    devices, Slurm's SLURM_GPUS*/SLURM_JOB_GPUS, PBS's NGPUS) and ``nvidia-smi -L`` listing
    GPUs. Empty on a CPU machine or in a CPU-only job."""
    env = os.environ if env is None else env
    evidence = []
    shown = env.get("CUDA_VISIBLE_DEVICES")
    if shown is not None and shown.strip().lower() not in _NO_DEVICES:
        evidence.append(f"CUDA_VISIBLE_DEVICES={shown}")
    for name in _GPU_ALLOCATION_VARIABLES:
        value = env.get(name, "").strip()
        if value and value not in ("0", "(null)", "N/A"):
            evidence.append(f"{name}={value}")
    gpus = _nvidia_smi(env, "-L")
    if gpus is not None:
        count = sum(line.startswith("GPU ") for line in gpus.splitlines())
        if count:
            evidence.append(f"nvidia-smi lists {count} GPU(s)")
    return evidence


def _nvidia_smi(env: Mapping[str, str], *args: str) -> str | None:
    """nvidia-smi's output, or None when it is missing, fails or takes over 10 s."""
    import shutil
    import subprocess

    program = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    if program is None:
        return None
    try:
        done = subprocess.run([program, *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _why_no_cuda(env: Mapping[str, str]) -> str:
    """Torch's CUDA version, the driver's (when nvidia-smi answers) and torch's own reason."""
    built = torch.version.cuda
    parts = [f"torch {torch.__version__} is " + (f"built for CUDA {built}" if built
                                                  else "a CPU-only build (no CUDA)")]
    driver = _nvidia_smi(env, "--query-gpu=driver_version", "--format=csv,noheader")
    if driver and driver.strip():
        parts.append(f"the NVIDIA driver is {driver.split()[0]}")
    if built:
        try:
            torch.cuda.init()
        except Exception as exc:  # noqa: BLE001 - its words are the diagnosis
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0].split(". ")[0]
            parts.append(f"torch says: {reason}")
    return "; ".join(parts)


BACKENDS = ("auto", "nccl", "gloo", "gloo-cuda")  # --backend's choices (utils/cli.py)


def pick_backend_and_device(requested: str, info: LaunchInfo,
                            env: Mapping[str, str] | None = None) -> tuple[str, torch.device]:
    """The process group's backend and this rank's device, from --backend:

    auto: nccl with CUDA GPUs, else gloo; nccl: one GPU per rank (visible_device_index);
    gloo: CPUs; gloo-cuda: the shared mode, gloo on GPU ``local_rank % visible GPUs``.
    """
    env = os.environ if env is None else env
    requested = (requested or "auto").lower()
    if requested not in BACKENDS:
        raise DistributedSetupError(f"backend {requested!r} is not one of {', '.join(BACKENDS)}.")
    if requested == "gloo-cuda":
        return "gloo", shared_gpu(info.local_rank, _visible_gpus(env, "--backend gloo-cuda"))
    backend = requested
    if backend == "auto":
        if not torch.cuda.is_available():
            evidence = gpu_allocation_evidence(env)
            if evidence:  # a GPU job about to train on CPUs without a word: stop instead
                raise DistributedSetupError(
                    f"this job was given GPUs ({', '.join(evidence)}) but torch cannot use CUDA "
                    f"({_why_no_cuda(env)}). Install a torch build that matches the node's driver "
                    "(or load the site's CUDA module), or, to train on CPUs anyway, pass --backend "
                    "gloo (or set DDP_BACKEND=gloo)."
                )
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo":
        return backend, torch.device("cpu")  # gpu-checked: gloo
    visible = _visible_gpus(env, "backend nccl")
    index = visible_device_index(info.local_rank, info.local_world_size, visible, env)
    return backend, torch.device("cuda", index)


def _visible_gpus(env: Mapping[str, str], what: str) -> int:
    """How many GPUs this process sees; an error that says why when CUDA is unusable."""
    if not torch.cuda.is_available():
        raise DistributedSetupError(
            f"{what} needs CUDA GPUs and none is visible ({_why_no_cuda(env)}): "
            "use --backend gloo."
        )
    return torch.cuda.device_count()


def shared_gpu(local_rank: int, visible: int) -> torch.device:
    """The shared mode's GPU: ranks take the visible GPUs in turn (local rank modulo their
    number), so 4 ranks on 1 GPU all use cuda:0, and 4 ranks on 2 GPUs use 0, 1, 0, 1."""
    return torch.device("cuda", local_rank % visible)


# ---- two nccl ranks on one GPU: stop before NCCL does
_GPU_PREFIX = "setup_distributed/gpus"


def gpu_uuid(device: torch.device) -> str:
    """The physical GPU behind a device index: its UUID (the same in every process that
    sees it, whatever CUDA_VISIBLE_DEVICES renumbers it to)."""
    return str(torch.cuda.get_device_properties(device).uuid)


def check_distinct_gpus(store: dist.Store, info: LaunchInfo, device: torch.device,
                        timeout: datetime.timedelta) -> None:
    """Stop every rank with one message when two ranks would use the same physical GPU.

    Each rank adds itself under its GPU's UUID in the rendezvous store; a rank that finds
    its GPU already taken records the clash. Once every rank has registered, every rank
    reads the clashes (none: go on). Costs a few store calls per rank, whatever the world
    size; call it before NCCL starts (init_process_group with device_id connects at once).
    """
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # torchrun's store outlives a restart
    store = dist.PrefixStore(f"{_GPU_PREFIX}/{restart}", store)
    uuid = gpu_uuid(device)
    me = {"rank": info.rank, "host": socket.gethostname(), "device": str(device),
          "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "unset")}
    store.append(f"gpu/{uuid}", json.dumps(me) + "\n")
    if store.add(f"count/{uuid}", 1) > 1:
        store.append("clashes", uuid + "\n")
    if store.add("registered", 1) == info.world_size:
        store.set("all", "1")
    try:
        store.wait(["all"], timeout)
    except RuntimeError:  # a DistStoreError: some rank never registered
        raise DistributedSetupError(
            f"rank {info.rank} waited {timeout.total_seconds():.0f} s for the other ranks to say "
            "which GPU they use, and some never did: a rank is missing or stopped early."
        ) from None
    if not store.check(["clashes"]):
        return
    uuid = store.get("clashes").decode().split()[0]
    sharing = [json.loads(line) for line in store.get(f"gpu/{uuid}").decode().split("\n") if line]
    raise DistributedSetupError(duplicate_gpu_message(uuid, sharing, info.rank))


def duplicate_gpu_message(uuid: str, sharing: list[dict], rank: int) -> str:
    """What happened and the two ways out (rank 0 says it all; the others point to it)."""
    sharing = sorted(sharing, key=lambda who: who["rank"])
    first, second = sharing[0], sharing[1]
    if rank != 0:
        return (f"rank {rank} stops: ranks {first['rank']} and {second['rank']} would share one "
                "GPU under nccl (rank 0 says more).")
    where = ", ".join(f"rank {who['rank']} as {who['device']} (CUDA_VISIBLE_DEVICES="
                      f"{who['cuda_visible_devices']})" for who in sharing)
    return (f"{len(sharing)} ranks on {first['host']} would use the same GPU ({uuid}): {where}. "
            "nccl needs one GPU per rank (NCCL would stop with 'Duplicate GPU detected'). "
            "Start at most one process per GPU (--nproc_per_node / -n / --ntasks-per-node no "
            "more than the GPUs), or share the GPUs on purpose over gloo: --backend gloo-cuda "
            "(or DDP_BACKEND=gloo-cuda), for learning and testing.")
