"""One place that knows launchers: ``setup_distributed()`` and its helpers.

Every script in this repository starts with ``ctx = setup_distributed(...)`` and ends
with ``cleanup_distributed()``. In between it never looks at an environment variable.

How a launch is recognised, in this order (the first row whose variables are present
wins; a row that is only partly present is an error that names what is missing):

==========================  ================================================================
launcher                    variables read
==========================  ================================================================
torchrun (or env://)        RANK, WORLD_SIZE, LOCAL_RANK [, LOCAL_WORLD_SIZE]
Open MPI mpiexec            OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK [, _LOCAL_SIZE]
Cray PALS (PBS on HPE)      PALS_RANKID, PALS_LOCAL_RANKID, PMI_SIZE [, PMI_LOCAL_SIZE]
MPICH Hydra / Intel MPI     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID [, MPI_LOCALNRANKS]
Slurm srun                  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (inside a job step)
other MPI (mpi4py)          PMIX_RANK or MV2_COMM_WORLD_RANK set: ask mpi4py
single process              none of the above: world size 1
==========================  ================================================================

PALS comes before MPICH because PALS sets PMI_RANK too. Environment variables are read
before mpi4py is imported, so an installed mpi4py can never override a launcher that said
who is who (under torchrun, importing mpi4py would make every process a world of one).

Where the launcher does not say where rank 0 listens (only torchrun does), the master
address is: MASTER_ADDR; else 127.0.0.1 when every rank is on this node; else rank 0's
host name broadcast over MPI; else the first node of the job's node list. The port is:
MASTER_PORT; else one derived from the scheduler's job id and the launch id the launcher
gives (Slurm's step, PALS's application, PMIx's namespace: two jobs on one node, and two
launches side by side in one job, do not collide); else a free port that rank 0 picks and
broadcasts over MPI (MPICH and Intel MPI name no launch); else one derived from the job id
alone (the PBS/Slurm job scripts derive the same one). Never a fixed 29500.

Rank 0 writes its job id, launch and size into its store, and every other rank compares
them with its own before it joins: a rank that reached another job's or launch's rank 0
stops at once and says so. --timeout bounds the whole set-up, the backend's connection of
every rank to every other included.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

DEFAULT_TIMEOUT_S = 120.0
SINGLE_NODE_ADDR = "127.0.0.1"
JOB_PORT_BASE, JOB_PORT_SPAN = 15000, 17000  # 15000-31999: below Linux's ephemeral range
JOB_ID_VARIABLES = ("PBS_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "COBALT_JOBID")
# The variable that names a launch, by launcher: the same on every rank of one launch (on
# every node), different for two launches of one job. MPICH's and Intel MPI's Hydra set none.
LAUNCH_ID_VARIABLES = {"slurm": "SLURM_STEP_ID", "pals": "PALS_APID", "openmpi": "PMIX_NAMESPACE",
                       "mpi4py": "PMIX_NAMESPACE"}
_LAUNCH_KEY = "setup_distributed/launch"  # rank 0's job, launch and size, in its store
MPI_LAUNCHERS = ("openmpi", "pals", "mpich", "mpi4py")


class DistributedSetupError(SystemExit):
    """A launch environment we cannot use; the message says what to set.

    A SystemExit, so an uncaught one prints its message (no traceback) and exits 1.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"setup_distributed: {message}")


@dataclass(frozen=True)
class LaunchInfo:
    """Who this process is, as the launcher told it (no process group yet)."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None


@dataclass(frozen=True)
class DistributedContext:
    """What setup_distributed() returns: everything a training script needs to know."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int | None
    device: torch.device
    backend: str
    launcher: str
    rendezvous: Rendezvous | None = None  # where rank 0 listened; None in one process

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one rank that prints, plots and saves."""
        return self.rank == 0


# --------------------------------------------------------------------------- detection
# Each row: launcher name, then the variables for rank, world size, local rank, and
# local world size (optional: None when the launcher does not set one).
_LAUNCHER_TABLE: tuple[tuple[str, str, str, str, str | None], ...] = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("pals", "PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID", "PMI_LOCAL_SIZE"),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
)
_TRIGGERS = {  # the variables whose presence alone says "this launcher started us"
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    "openmpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    "pals": ("PALS_RANKID", "PALS_LOCAL_RANKID"),
    "mpich": ("PMI_RANK",),
    "slurm": ("SLURM_STEP_ID",),  # srun sets it; a batch script alone has SLURM_PROCID=0 too
}


def _read_int(env: Mapping[str, str], name: str, launcher: str) -> int:
    raw = env[name]
    try:
        return int(raw)
    except ValueError:
        raise DistributedSetupError(
            f"{name}={raw!r} is not an integer ({launcher} launch). "
            f"Set {name} to a whole number, or unset it."
        ) from None


def detect_launcher(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Read who this process is from the launcher's environment variables.

    Pure: reads ``env`` (default ``os.environ``), starts nothing, imports no MPI unless
    no known launcher matched and an unknown MPI's variables are present.
    """
    env = os.environ if env is None else env
    for launcher, rank_var, size_var, local_var, local_size_var in _LAUNCHER_TABLE:
        if not any(name in env for name in _TRIGGERS[launcher]):
            continue
        if launcher == "mpich" and "MPI_LOCALRANKID" not in env and "SLURM_STEP_ID" in env:
            continue  # srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE too: a Slurm launch
        if launcher == "slurm" and "SLURM_STEP_NUM_TASKS" in env:
            size_var = "SLURM_STEP_NUM_TASKS"  # this srun step's tasks; SLURM_NTASKS is the job's
        required = (rank_var, size_var, local_var)
        missing = [name for name in required if name not in env]
        if missing:
            seen = dict.fromkeys(n for n in (*required, *_TRIGGERS[launcher]) if n in env)
            present = ", ".join(f"{n}={env[n]}" for n in seen)
            raise DistributedSetupError(
                f"incomplete {launcher} environment: {present} is set but "
                f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not. "
                f"Set {', '.join(missing)} (a {launcher} launch sets all of "
                f"{', '.join(required)}), or unset the others to run as one process."
            )
        rank = _read_int(env, rank_var, launcher)
        world_size = _read_int(env, size_var, launcher)
        local_rank = _read_int(env, local_var, launcher)
        local_world_size = (
            _read_int(env, local_size_var, launcher)
            if local_size_var is not None and local_size_var in env
            else None
        )
        if launcher == "slurm" and env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES")) == "1":
            local_world_size = world_size  # one node: every task is local
        if launcher == "torchrun" and "TORCHELASTIC_RUN_ID" not in env:
            launcher = "env"  # RANK/WORLD_SIZE exported by hand or by another tool
        info = LaunchInfo(launcher, rank, world_size, local_rank, local_world_size)
        return _validated(info, rank_var, size_var, local_var)
    if "PMIX_RANK" in env or "MV2_COMM_WORLD_RANK" in env:
        return _detect_with_mpi4py()
    return LaunchInfo("none", rank=0, world_size=1, local_rank=0, local_world_size=1)


def _validated(info: LaunchInfo, rank_var: str, size_var: str, local_var: str) -> LaunchInfo:
    if info.world_size < 1:
        raise DistributedSetupError(f"{size_var}={info.world_size}: the world size must be >= 1.")
    if not 0 <= info.rank < info.world_size:
        raise DistributedSetupError(
            f"{rank_var}={info.rank} but {size_var}={info.world_size}: a rank must lie in "
            f"0..{info.world_size - 1}. Fix {rank_var} or {size_var}."
        )
    if info.local_rank < 0 or (info.local_world_size and info.local_rank >= info.local_world_size):
        raise DistributedSetupError(
            f"{local_var}={info.local_rank} is outside this node's "
            f"{info.local_world_size} processes. Fix {local_var}."
        )
    return info


def _import_mpi():
    """mpi4py's MPI module, or None when mpi4py or an MPI library is missing."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError):
        return None
    return MPI


def _why_no_mpi() -> str:
    """Why mpi4py cannot be used here, and how to get a working one (for error messages)."""
    try:
        import mpi4py
    except ImportError:
        return ("mpi4py is not installed: `make mpi` installs it and an MPI (MPICH) into .venv "
                "from PyPI; on a cluster, pip install mpi4py against the site's MPI")
    try:
        from mpi4py import MPI  # noqa: F401
    except (ImportError, RuntimeError) as error:
        text = str(error)
        missing = re.search(r"libmpi[\w.]*\.so\.\d+: cannot open shared object file", text) or re.search(
            r"[^/\s]*libmpi[^:\s]*: cannot open shared object file", text)
        detail = missing.group(0) if missing else (text.strip().splitlines() or [type(error).__name__])[0]
        return (f"mpi4py {getattr(mpi4py, '__version__', '')} is installed but no MPI library loads "
                f"({detail}). `make mpi` installs one into .venv from PyPI (MPICH: its libmpi and "
                "mpiexec); on a cluster, load the site's MPI (module load ...) and rebuild mpi4py "
                "against it: MPICC=mpicc pip install --force-reinstall --no-binary mpi4py mpi4py")
    return "mpi4py loads an MPI library"


def _detect_with_mpi4py() -> LaunchInfo:
    mpi = _import_mpi()
    if mpi is None:
        raise DistributedSetupError(
            "an MPI launcher started this process (PMIX_RANK or MV2_COMM_WORLD_RANK is set) "
            "but it is not one setup_distributed() reads, and mpi4py cannot ask it: "
            f"{_why_no_mpi()}. Or set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
            "MASTER_PORT yourself."
        )
    world = mpi.COMM_WORLD
    node = world.Split_type(mpi.COMM_TYPE_SHARED)
    return LaunchInfo("mpi4py", world.Get_rank(), world.Get_size(), node.Get_rank(), node.Get_size())


# --------------------------------------------------------------------------- rendezvous
@dataclass(frozen=True)
class Rendezvous:
    """Where rank 0 listens, where its port came from, and which launch this is."""

    addr: str
    port: int
    port_from: str  # "MASTER_PORT", "PBS_JOBID=42.pbs", "SLURM_JOB_ID=7,SLURM_STEP_ID=2",
    #                 "mpi_broadcast" (rank 0 picked a free one) or "torchrun"
    launch: str | None = None  # what tells this launch from another one of the same job


def job_port(job_id: str) -> int:
    """The port a job uses when nothing tells its launches apart: the same on every node
    of the job, different for two jobs on one node. scripts/job_common.sh computes the same."""
    digits = re.sub(r"\D", "", job_id)[-9:]
    return JOB_PORT_BASE + int(digits or "0") % JOB_PORT_SPAN


def launch_id(launcher: str, env: Mapping[str, str] | None = None) -> str | None:
    """What the launcher says this launch is, as NAME=value, or None: srun's step id, Cray
    PALS's application id, Open MPI's PMIx namespace. Only the launcher's own: under an
    mpiexec inside a Slurm job, SLURM_STEP_ID may be the batch step's on one node and an
    srun step's on another."""
    env = os.environ if env is None else env
    name = LAUNCH_ID_VARIABLES.get(launcher)
    return f"{name}={env[name]}" if name and env.get(name) else None


def launch_port(job_id: str | None, launch: str) -> int:
    """The port of one launch: derived from the job id and the launch id together, so two
    launches side by side in one job (and two jobs) get different ports, and every node of
    one launch the same."""
    return JOB_PORT_BASE + zlib.crc32(f"{job_id or ''}/{launch}".encode()) % JOB_PORT_SPAN


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu[03-05,09],cpu1' -> 'gpu03'."""
    match = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist.strip())
    if not match:
        raise DistributedSetupError(f"cannot read a host from node list {nodelist!r}; set MASTER_ADDR.")
    return match.group(1) + (match.group(2) or "")


def _job_variable(env: Mapping[str, str]) -> str | None:
    return next((name for name in JOB_ID_VARIABLES if env.get(name)), None)


def _job_id(env: Mapping[str, str]) -> str | None:
    name = _job_variable(env)
    return env[name] if name else None


def _node_list_head(env: Mapping[str, str]) -> str | None:
    nodefile = env.get("PBS_NODEFILE")
    if nodefile and os.path.isfile(nodefile):
        with open(nodefile, encoding="utf-8") as handle:
            hosts = [line.strip() for line in handle if line.strip()]
        if hosts:
            return hosts[0]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return first_host(nodelist) if nodelist else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def resolve_master(info: LaunchInfo, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Where rank 0 listens: (address, port), following the order in the module docstring."""
    found = resolve_rendezvous(info, env)
    return found.addr, found.port


def resolve_rendezvous(info: LaunchInfo, env: Mapping[str, str] | None = None) -> Rendezvous:
    """Where rank 0 listens, where the port comes from, and which launch this is.

    Under an MPI launcher this is collective (rank 0 broadcasts what it chose): every rank
    calls it, or none does."""
    env = os.environ if env is None else env
    single_node = info.local_world_size == info.world_size
    addr = env.get("MASTER_ADDR") or (SINGLE_NODE_ADDR if single_node else None)
    job_variable, launch = _job_variable(env), launch_id(info.launcher, env)
    job_id = env[job_variable] if job_variable else None
    port_text = env.get("MASTER_PORT")
    port: int | None = None
    port_from = ""
    if port_text is not None:
        try:
            port = int(port_text)
        except ValueError:
            raise DistributedSetupError(f"MASTER_PORT={port_text!r} is not a port number.") from None
        if not 0 < port < 65536:
            raise DistributedSetupError(f"MASTER_PORT={port} is outside 1..65535.")
        port_from = "MASTER_PORT"
    elif launch is not None:
        port = launch_port(job_id, launch)
        port_from = ",".join(filter(None, (job_variable and f"{job_variable}={job_id}", launch)))

    # Where the launcher names no launch (MPICH, Intel MPI), rank 0 picks a free port and a
    # token for this launch, and broadcasts both: two launches of one job never share either.
    if info.launcher in MPI_LAUNCHERS and (addr is None or port is None or launch is None):
        agreed = _agree_over_mpi(info, addr, port)
        if agreed is not None:
            addr, agreed_port, token = agreed
            launch = launch or f"mpi_token={token}"
            if port is None:
                port, port_from = agreed_port, "mpi_broadcast"
    if port is None and job_id is not None:
        port, port_from = job_port(job_id), f"{job_variable}={job_id}"
    if addr is None:
        addr = _node_list_head(env)
    if addr is None or port is None:
        # Under an MPI launcher mpi4py would have agreed on both (above): say why it could not.
        no_mpi = f"; here it cannot: {_why_no_mpi()}" if info.launcher in MPI_LAUNCHERS else ""
    if addr is None:
        raise DistributedSetupError(
            f"{info.launcher} started {info.world_size} processes on more than one node but "
            "nothing says where rank 0 is: set MASTER_ADDR to rank 0's host (and MASTER_PORT), "
            f"or let mpi4py broadcast it{no_mpi}."
        )
    if port is None:
        raise DistributedSetupError(
            f"{info.launcher} started {info.world_size} processes but no port was agreed: "
            "set MASTER_PORT (any free port, the same on every rank), or let mpi4py have "
            f"rank 0 pick one and broadcast it{no_mpi}."
        )
    return Rendezvous(addr, port, port_from, launch)


def _agree_over_mpi(
    info: LaunchInfo, addr: str | None, port: int | None
) -> tuple[str, int, str] | None:
    """Rank 0's (address, port, launch token), broadcast over MPI; None without mpi4py."""
    mpi = _import_mpi()
    if mpi is None:
        return None  # the caller falls back to the job id and the node list, or says what to set
    world = mpi.COMM_WORLD
    if world.Get_size() != info.world_size:
        raise DistributedSetupError(
            f"the launcher says {info.world_size} processes but mpi4py sees "
            f"{world.Get_size()}: mpi4py was built for a different MPI than the mpiexec that "
            "started this job. Use the mpiexec that matches mpi4py, or set MASTER_ADDR and "
            "MASTER_PORT."
        )
    proposal = None
    if world.Get_rank() == 0:
        proposal = (addr or socket.gethostname(), port or _free_port(), uuid.uuid4().hex[:12])
    return world.bcast(proposal, root=0)


# --------------------------------------------------------------------------- device and backend
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
        "or use --backend gloo."
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


def _pick_backend_and_device(requested: str, info: LaunchInfo,
                             env: Mapping[str, str] | None = None) -> tuple[str, torch.device]:
    env = os.environ if env is None else env
    requested = (requested or "auto").lower()
    if requested not in ("auto", "nccl", "gloo"):
        raise DistributedSetupError(f"backend {requested!r} is not one of auto, nccl, gloo.")
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
    if not torch.cuda.is_available():
        raise DistributedSetupError(
            f"backend nccl needs CUDA GPUs and none is visible ({_why_no_cuda(env)}): "
            "use --backend gloo."
        )
    index = visible_device_index(info.local_rank, info.local_world_size, torch.cuda.device_count(), env)
    return backend, torch.device("cuda", index)


def _check_resolvable(addr: str) -> None:
    try:
        socket.getaddrinfo(addr, None)
    except socket.gaierror as exc:
        raise DistributedSetupError(
            f"MASTER_ADDR={addr!r} does not resolve ({exc.strerror}): set MASTER_ADDR to a host "
            "name or IP address of rank 0's node that every node can reach."
        ) from None


class _SetupDeadline:
    """--timeout for the whole of setup. Each wait gets what is left of it; a watchdog ends
    the process with a message when a wait that no timeout of ours bounds outlives it (gloo's
    full-mesh connection retries each peer for minutes; NCCL's communicator set-up)."""

    GRACE_S = 2.0  # the waits' own errors, which say more, come first

    def __init__(self, rank: int, timeout_s: float) -> None:
        self.rank, self.timeout_s = rank, timeout_s
        self.end = time.monotonic() + timeout_s
        self.stage, self.hint = "starting", ""
        self._timer = threading.Timer(timeout_s + self.GRACE_S, self._expire)
        self._timer.daemon = True

    def left(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=max(1.0, self.end - time.monotonic()))

    def __enter__(self) -> _SetupDeadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        sys.stderr.write(
            f"setup_distributed: rank {self.rank} gave up after {self.timeout_s:.0f} s (--timeout) "
            f"while {self.stage}.{' ' + self.hint if self.hint else ''}\n")
        sys.stderr.flush()
        os._exit(1)  # the main thread is inside C++ (gloo, NCCL): no exception reaches it


def _wait_for_master(info: LaunchInfo, rdzv: Rendezvous, deadline: _SetupDeadline) -> None:
    """Poll rank 0's port with plain sockets until it answers, or fail when the time is up.

    TCPStore would retry too, but it logs C++ stack traces on every attempt.
    """
    while True:
        try:
            with socket.create_connection((rdzv.addr, rdzv.port), timeout=2.0):
                return
        except OSError:
            if time.monotonic() >= deadline.end:
                raise DistributedSetupError(
                    f"rank {info.rank} could not reach the master at {rdzv.addr}:{rdzv.port} "
                    f"within {deadline.timeout_s:.0f} s. Check that MASTER_ADDR is rank 0's node, "
                    "that rank 0 started, and that no firewall blocks the port. "
                    "(--timeout sets the wait.)"
                ) from None
            time.sleep(0.25)


def _port_advice(rdzv: Rendezvous) -> str:
    """Where a port that two launches share came from, and what to do about it."""
    if rdzv.port_from == "MASTER_PORT":
        return (f"It is MASTER_PORT={rdzv.port}, set for this launch: give each launch (and job) "
                "its own MASTER_PORT, or unset it to let setup_distributed() choose one per launch.")
    if rdzv.port_from == "mpi_broadcast":
        return "Rank 0 picked it as a free port a moment ago and something took it since: run again."
    if rdzv.launch is None or rdzv.launch.startswith("mpi_token="):
        return (f"It is derived from the job id alone ({rdzv.port_from}), the same for every launch "
                "in this job: nothing here tells its launches apart (the launcher names none, and "
                "no agreement over MPI was possible). Set MASTER_PORT to a different free port for "
                "each launch (or, under mpiexec, install mpi4py for its MPI).")
    return (f"It is derived from {rdzv.port_from}; another launch's happened to be the same: "
            "set MASTER_PORT to a free port for this launch.")


def _connect_store(info: LaunchInfo, rdzv: Rendezvous, timeout: datetime.timedelta,
                   deadline: _SetupDeadline) -> dist.Store:
    """The rendezvous store, created here so that its failures get plain words."""
    addr, port = rdzv.addr, rdzv.port
    _check_resolvable(addr)
    if info.rank != 0:
        deadline.stage = f"reaching the master at {addr}:{port}"
        _wait_for_master(info, rdzv, deadline)
    try:
        store = dist.TCPStore(
            addr, port, info.world_size, is_master=info.rank == 0, timeout=timeout,
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as exc:  # DistNetworkError is a RuntimeError
        text = str(exc).lower()
        if info.rank == 0 and ("in use" in text or "eaddrinuse" in text):
            raise DistributedSetupError(
                f"port {port} on {addr} is already in use (another job or launch, or a leftover "
                f"process, holds it). {_port_advice(rdzv)}"
            ) from None
        if info.rank == 0:
            raise DistributedSetupError(
                f"rank 0 could not listen on {addr}:{port} ({exc}). MASTER_ADDR must be an address "
                "of rank 0's own node."
            ) from None
        raise DistributedSetupError(
            f"rank {info.rank} could not reach the master at {addr}:{port} within "
            f"{timeout.total_seconds():.0f} s. Check that MASTER_ADDR is rank 0's node, that "
            "rank 0 started, and that no firewall blocks the port. (--timeout sets the wait.)"
        ) from None
    _check_same_launch(info, store, rdzv, deadline)
    return store


def _describe(launch: dict) -> str:
    job = f"job {launch['job']}" if launch["job"] else "a job without an id"
    name = f"launch {launch['launch']}, " if launch["launch"] else ""
    return f"{job} ({name}{launch['world_size']} ranks)"


def _check_same_launch(info: LaunchInfo, store: dist.Store, rdzv: Rendezvous,
                       deadline: _SetupDeadline) -> None:
    """Rank 0 writes its job, launch and size into its store; the other ranks compare them
    with their own before joining anything, so that a rank that reached another launch's
    rank 0 (the two chose the same port) says so and stops at once, and that launch goes on."""
    mine = {"job": _job_id(os.environ), "launch": rdzv.launch, "world_size": info.world_size}
    if info.rank == 0:
        store.set(_LAUNCH_KEY, json.dumps(mine))
        return
    deadline.stage = f"waiting for the master at {rdzv.addr}:{rdzv.port} to say which launch it is"
    try:
        store.wait([_LAUNCH_KEY], deadline.left())
        owner = json.loads(store.get(_LAUNCH_KEY))
    except (RuntimeError, ValueError):  # a timeout is a DistStoreError (a RuntimeError)
        raise DistributedSetupError(
            f"rank {info.rank} reached {rdzv.addr}:{rdzv.port}, but what listens there never said "
            f"which launch it is (within {deadline.timeout_s:.0f} s): not a setup_distributed() "
            f"master, so another program holds the port. {_port_advice(rdzv)}"
        ) from None
    if owner == mine:
        return
    whose = (_describe(owner) if owner["job"] != mine["job"] else
             f"another launch of the same job: {_describe(owner)}" if owner["launch"] != mine["launch"]
             else f"a launch of another size: {_describe(owner)}")
    raise DistributedSetupError(
        f"rank {info.rank} of {_describe(mine)} reached the master at {rdzv.addr}:{rdzv.port}, "
        f"but it belongs to {whose}. The two use the same port; this rank stops instead of "
        f"joining it. {_port_advice(rdzv)}"
    )


def setup_distributed(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> DistributedContext:
    """Join the job's process group, whatever launched us, and return who we are.

    backend: "auto" (nccl where CUDA is available, else gloo), "nccl" or "gloo".
    timeout_s: the longest any collective may wait before it fails with an error instead
    of hanging; also the longest the whole set-up (rendezvous, connecting every rank to
    every other) may take.
    Safe in a single process: a process group of one, so DDP and collectives still work.
    """
    info = detect_launcher()
    backend, device = _pick_backend_and_device(backend, info)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init, so NCCL binds this process to its GPU
    timeout = datetime.timedelta(seconds=timeout_s)
    device_id = device if device.type == "cuda" else None
    rdzv: Rendezvous | None = None

    with _SetupDeadline(info.rank, timeout_s) as deadline:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            # torchrun already holds the rendezvous store at MASTER_ADDR:MASTER_PORT.
            rdzv = Rendezvous(os.environ.get("MASTER_ADDR", "?"),
                              int(os.environ.get("MASTER_PORT", "0")), "torchrun")
            deadline.stage = f"connecting to the other ranks ({backend}), under torchrun"
            dist.init_process_group(backend, timeout=timeout, device_id=device_id)
        else:
            if info.world_size == 1:
                store: dist.Store = dist.HashStore()  # nothing to meet: no port, no network
            else:
                deadline.stage = "agreeing on the master with the other ranks"
                rdzv = resolve_rendezvous(info)
                store = _connect_store(info, rdzv, timeout, deadline)
                deadline.stage = (f"connecting to the other {info.world_size - 1} rank(s) ({backend}; "
                                  f"the master at {rdzv.addr}:{rdzv.port} had answered)")
                deadline.hint = (
                    "A rank is missing, or cannot reach the others on the interface it chose (set "
                    "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to one every node shares), or a rank of "
                    "another launch joined this one: " + _port_advice(rdzv))
            dist.init_process_group(
                backend, store=store, rank=info.rank, world_size=info.world_size,
                timeout=timeout, device_id=device_id,
            )
    return DistributedContext(
        rank=info.rank, local_rank=info.local_rank, world_size=info.world_size,
        local_world_size=info.local_world_size, device=device, backend=backend,
        launcher=info.launcher, rendezvous=rdzv,
    )


def timeout_group(ctx: DistributedContext, timeout_s: float, *,
                  expect_failure: bool = False) -> tuple[dist.ProcessGroup, torch.device]:
    """A process group of every rank whose collectives give up after ``timeout_s``, and the
    device its tensors must live on.

    Normally a new group of the job's backend, on ``ctx.device``. With ``expect_failure``
    (a script's demonstration of a hang or a mismatch) under nccl: a gloo group on CPU
    tensors instead, because under nccl a collective that times out is not an exception
    (NCCL's watchdog thread ends the process: SIGABRT with TORCH_NCCL_ASYNC_ERROR_HANDLING's
    default, 3), and collectives that do not match (sizes, dtypes, a barrier against an
    all-reduce) are undefined behaviour in NCCL: wrong data or a hang, not an error. The
    demonstrations are about the order of the calls, which gloo shows the same way on
    every machine. (A barrier of the returned group waits on CPU tensors too.)
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    if expect_failure and ctx.backend == "nccl":
        return dist.new_group(timeout=timeout, backend="gloo"), torch.device("cpu")  # gpu-checked
    return dist.new_group(timeout=timeout), ctx.device


def cleanup_distributed() -> None:
    """Wait for every rank, then leave the process group (safe without a group).

    Release the DDP model first (``del model``): DDP holds the process group, so while it
    lives destroy_process_group() only forgets the group, and gloo tears it down later, at
    exit, when other ranks may be gone: the process can then abort with "terminate called
    without an active exception". A still-living DDP model is reported here.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    # (compare MROs: isinstance() would run ABC checks that warn on deprecated torch objects)
    if any(DistributedDataParallel in type(obj).__mro__ for obj in gc.get_objects()):
        print0("cleanup_distributed: WARNING: a DistributedDataParallel model is still alive; "
               "`del` it before cleanup_distributed(): it holds the process group.", file=sys.stderr)
    dist.barrier()  # no rank tears down its connections while another still uses them
    dist.destroy_process_group()


# --------------------------------------------------------------------------- printing
def is_main_process() -> bool:
    """Rank 0, or any process outside a process group."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def print0(*args: object, **kwargs: object) -> None:
    """print() on rank 0 only, flushed so lines from a launcher arrive in order."""
    if is_main_process():
        print(*args, **{"flush": True, **kwargs})
