"""Who this process is, read from the launcher's environment: ``detect_launcher()``.

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
Pure: nothing here starts a process group or opens a socket.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

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


def import_mpi():
    """mpi4py's MPI module, or None when mpi4py or an MPI library is missing."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError):
        return None
    return MPI


def why_no_mpi() -> str:
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
    mpi = import_mpi()
    if mpi is None:
        raise DistributedSetupError(
            "an MPI launcher started this process (PMIX_RANK or MV2_COMM_WORLD_RANK is set) "
            "but it is not one setup_distributed() reads, and mpi4py cannot ask it: "
            f"{why_no_mpi()}. Or set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
            "MASTER_PORT yourself."
        )
    world = mpi.COMM_WORLD
    node = world.Split_type(mpi.COMM_TYPE_SHARED)
    return LaunchInfo("mpi4py", world.Get_rank(), world.Get_size(), node.Get_rank(), node.Get_size())

