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
MASTER_PORT; else one derived from the scheduler's job id (so two jobs on one node do not
collide, and the PBS/Slurm job scripts derive the same one); else a free port that rank 0
picks and broadcasts over MPI. Never a fixed 29500.
"""

from __future__ import annotations

import datetime
import gc
import os
import re
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

DEFAULT_TIMEOUT_S = 120.0
SINGLE_NODE_ADDR = "127.0.0.1"
JOB_PORT_BASE, JOB_PORT_SPAN = 15000, 17000  # 15000-31999: below Linux's ephemeral range
JOB_ID_VARIABLES = ("PBS_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "COBALT_JOBID")
_JOB_KEY = "setup_distributed/job_id"  # rank 0's job id, in the rendezvous store
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
def job_port(job_id: str) -> int:
    """The port a job uses when none is given: the same on every node of the job,
    different for two jobs on one node. scripts/pbs_common.sh computes the same."""
    digits = re.sub(r"\D", "", job_id)[-9:]
    return JOB_PORT_BASE + int(digits or "0") % JOB_PORT_SPAN


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu[03-05,09],cpu1' -> 'gpu03'."""
    match = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist.strip())
    if not match:
        raise DistributedSetupError(f"cannot read a host from node list {nodelist!r}; set MASTER_ADDR.")
    return match.group(1) + (match.group(2) or "")


def _job_id(env: Mapping[str, str]) -> str | None:
    return next((env[name] for name in JOB_ID_VARIABLES if env.get(name)), None)


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
    env = os.environ if env is None else env
    single_node = info.local_world_size == info.world_size
    addr = env.get("MASTER_ADDR") or (SINGLE_NODE_ADDR if single_node else None)
    port_text = env.get("MASTER_PORT")
    if port_text is not None:
        try:
            port = int(port_text)
        except ValueError:
            raise DistributedSetupError(f"MASTER_PORT={port_text!r} is not a port number.") from None
        if not 0 < port < 65536:
            raise DistributedSetupError(f"MASTER_PORT={port} is outside 1..65535.")
    else:
        job_id = _job_id(env)
        port = job_port(job_id) if job_id else None

    if (addr is None or port is None) and info.launcher in MPI_LAUNCHERS:
        addr, port = _agree_over_mpi(info, addr, port)
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
    return addr, port


def _agree_over_mpi(info: LaunchInfo, addr: str | None, port: int | None) -> tuple[str, int]:
    mpi = _import_mpi()
    if mpi is None:
        return addr, port  # the caller falls back to the node list, or says what to set
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
        proposal = (addr or socket.gethostname(), port or _free_port())
    return world.bcast(proposal, root=0)


# --------------------------------------------------------------------------- setup
def _pick_backend_and_device(requested: str, info: LaunchInfo) -> tuple[str, torch.device]:
    requested = (requested or "auto").lower()
    if requested not in ("auto", "nccl", "gloo"):
        raise DistributedSetupError(f"backend {requested!r} is not one of auto, nccl, gloo.")
    backend = requested
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo":
        return backend, torch.device("cpu")
    if not torch.cuda.is_available():
        raise DistributedSetupError("backend nccl needs CUDA GPUs and none is visible: use --backend gloo.")
    gpus = torch.cuda.device_count()
    if info.local_rank >= gpus:
        raise DistributedSetupError(
            f"local rank {info.local_rank} but only {gpus} GPU(s) visible on this node: start at "
            f"most {gpus} processes per node (--nproc_per_node / --ppn), or use --backend gloo."
        )
    return backend, torch.device("cuda", info.local_rank)


def _check_resolvable(addr: str) -> None:
    try:
        socket.getaddrinfo(addr, None)
    except socket.gaierror as exc:
        raise DistributedSetupError(
            f"MASTER_ADDR={addr!r} does not resolve ({exc.strerror}): set MASTER_ADDR to a host "
            "name or IP address of rank 0's node that every node can reach."
        ) from None


def _wait_for_master(info: LaunchInfo, addr: str, port: int, timeout: datetime.timedelta) -> None:
    """Poll rank 0's port with plain sockets until it answers, or fail after ``timeout``.

    TCPStore would retry too, but it logs C++ stack traces on every attempt.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise DistributedSetupError(
                    f"rank {info.rank} could not reach the master at {addr}:{port} within "
                    f"{timeout.total_seconds():.0f} s. Check that MASTER_ADDR is rank 0's node, "
                    "that rank 0 started, and that no firewall blocks the port. "
                    "(--timeout sets the wait.)"
                ) from None
            time.sleep(0.25)


def _connect_store(info: LaunchInfo, addr: str, port: int, timeout: datetime.timedelta) -> dist.Store:
    """The rendezvous store, created here so that its failures get plain words."""
    _check_resolvable(addr)
    if info.rank != 0:
        _wait_for_master(info, addr, port, timeout)
    try:
        store = dist.TCPStore(
            addr, port, info.world_size, is_master=info.rank == 0, timeout=timeout,
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as exc:  # DistNetworkError is a RuntimeError
        text = str(exc).lower()
        if info.rank == 0 and ("in use" in text or "eaddrinuse" in text):
            raise DistributedSetupError(
                f"port {port} on {addr} is already in use (another job, or a leftover process, "
                "holds it). Unset MASTER_PORT to let setup_distributed() choose, or pick another."
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
    _check_same_job(info, store, addr, port)
    return store


def _check_same_job(info: LaunchInfo, store: dist.Store, addr: str, port: int) -> None:
    """Rank 0 writes the job id into its store; the other ranks check it, so that a rank
    that reached another job's rank 0 (both jobs chose the same port) says so and stops,
    instead of joining that job's process group."""
    job_id = _job_id(os.environ)
    if job_id is None:
        return  # nothing to compare: no scheduler's job id
    if info.rank == 0:
        store.set(_JOB_KEY, job_id)
        return
    owner = store.get(_JOB_KEY).decode()
    if owner != job_id:
        raise DistributedSetupError(
            f"rank {info.rank} of job {job_id} reached the master at {addr}:{port}, but it belongs "
            f"to job {owner}: the two jobs use the same port. Unset MASTER_PORT to let "
            "setup_distributed() derive one from the job id."
        )


def setup_distributed(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> DistributedContext:
    """Join the job's process group, whatever launched us, and return who we are.

    backend: "auto" (nccl where CUDA is available, else gloo), "nccl" or "gloo".
    timeout_s: the longest any collective (and the rendezvous) may wait before it fails
    with an error instead of hanging.
    Safe in a single process: a process group of one, so DDP and collectives still work.
    """
    info = detect_launcher()
    backend, device = _pick_backend_and_device(backend, info)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init, so NCCL binds this process to its GPU
    timeout = datetime.timedelta(seconds=timeout_s)
    device_id = device if device.type == "cuda" else None

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun already holds the rendezvous store at MASTER_ADDR:MASTER_PORT.
        dist.init_process_group(backend, timeout=timeout, device_id=device_id)
    else:
        if info.world_size == 1:
            store: dist.Store = dist.HashStore()  # nothing to meet: no port, no network
        else:
            addr, port = resolve_master(info)
            store = _connect_store(info, addr, port, timeout)
        dist.init_process_group(
            backend, store=store, rank=info.rank, world_size=info.world_size,
            timeout=timeout, device_id=device_id,
        )
    return DistributedContext(
        rank=info.rank, local_rank=info.local_rank, world_size=info.world_size,
        local_world_size=info.local_world_size, device=device, backend=backend,
        launcher=info.launcher,
    )


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
