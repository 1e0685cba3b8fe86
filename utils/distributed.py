"""One place that knows launchers: ``setup_distributed()`` and its helpers.

Every script in this repository starts with ``ctx = setup_distributed(...)`` and ends
with ``cleanup_distributed()``. In between it never looks at an environment variable.

The parts, each in its own module (every public name is importable from here too):

- utils/launch_env.py: who this process is (torchrun, Open MPI, MPICH, Intel MPI, Cray
  PALS, Slurm srun, mpi4py, or one process): ``detect_launcher()``;
- utils/rendezvous.py: where rank 0 listens and the ports (never a fixed 29500), the
  connection to it, and the deadline of the whole set-up (--timeout);
- utils/devices.py: backend and device (nccl with one GPU per rank, gloo on CPUs, or the
  shared mode: N ranks on fewer GPUs over gloo), and the check that no two nccl ranks
  share a GPU;
- utils/shared_mode.py: the collectives the shared mode gives CPU tensors (gloo has no CUDA
  path for them), ``collective_device()``, ``gather_through_cpu()``;
- here: ``setup_distributed()`` itself, ``timeout_group()``, ``cleanup_distributed()``,
  ``print0()``.
"""

from __future__ import annotations

import datetime
import gc
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

# Imported before any process group exists. Its functions take ``group=group.WORLD`` as a
# default argument, evaluated at import: imported later (the first DDP model imports it,
# through torch._dynamo), they would hold the live world group for good, and
# destroy_process_group() could not free it (gloo's threads then end at exit, after other
# ranks may have gone). torch 2.14: torch/distributed/nn/functional.py.
import torch.distributed.nn  # noqa: F401
from torch.nn.parallel import DistributedDataParallel

from utils.devices import (  # noqa: F401 - public names, importable from here
    BACKENDS,
    check_distinct_gpus,
    gpu_allocation_evidence,
    gpu_uuid,
    pick_backend_and_device,
    shared_gpu,
    visible_device_index,
)
from utils.launch_env import DistributedSetupError, LaunchInfo, detect_launcher  # noqa: F401
from utils.rendezvous import (  # noqa: F401
    JOB_PORT_BASE,
    JOB_PORT_SPAN,
    Rendezvous,
    SetupDeadline,
    first_host,
    job_port,
    launch_id,
    launch_port,
    meet,
    resolve_master,
    resolve_rendezvous,
)
from utils.shared_mode import collective_device, shares_gpu  # noqa: F401

DEFAULT_TIMEOUT_S = 120.0
_pick_backend_and_device = pick_backend_and_device  # its name before the split


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


def setup_distributed(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> DistributedContext:
    """Join the job's process group, whatever launched us, and return who we are.

    backend: "auto" (nccl where CUDA is available, else gloo), "nccl", "gloo", or
    "gloo-cuda" (the shared mode: gloo on GPUs, any number of ranks per GPU).
    timeout_s: the longest any collective may wait before it fails with an error instead
    of hanging; also the longest the whole set-up (rendezvous, connecting every rank to
    every other) may take.
    Safe in a single process: a process group of one, so DDP and collectives still work.
    """
    info = detect_launcher()  # 1. who we are: rank, world size, local rank
    backend, device = pick_backend_and_device(backend, info)  # 2. how we talk, on what
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init, so NCCL binds this process to its GPU
    timeout = datetime.timedelta(seconds=timeout_s)
    with SetupDeadline(info.rank, timeout_s) as deadline:
        store, rdzv = meet(info, backend, timeout, deadline)  # 3. where the ranks meet
        if backend == "nccl" and info.world_size > 1:  # 4. one GPU per rank, or a clear error
            check_distinct_gpus(store, info, device, deadline.left())
        dist.init_process_group(  # 5. connect every rank to every other
            backend, store=store, rank=info.rank, world_size=info.world_size, timeout=timeout,
            device_id=device if backend == "nccl" else None,
        )
    # The objects made so far (torch's import: about 190,000) live as long as the process:
    # the garbage collector skips them from here on, cleanup_distributed()'s collection too.
    gc.freeze()
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
    (a script's demonstration of a hang or a mismatch) on GPUs: a gloo group on CPU
    tensors instead (in the shared mode too, where the job's gloo works on GPU tensors),
    because under nccl a collective that times out is not an exception
    (NCCL's watchdog thread ends the process: SIGABRT with TORCH_NCCL_ASYNC_ERROR_HANDLING's
    default, 3), and collectives that do not match (sizes, dtypes, a barrier against an
    all-reduce) are undefined behaviour in NCCL: wrong data or a hang, not an error. The
    demonstrations are about the order of the calls, which gloo shows the same way on
    every machine. (A barrier of the returned group waits on CPU tensors too.)

    Every rank meets first in a barrier of the job's group, under the job's longer timeout:
    the new group's set-up waits for every rank under ``timeout_s``
    (``dist.new_group`` rendezvouses through the store with the group's timeout), so a
    rank that lags by more than ``timeout_s`` on a loaded machine would otherwise fail it.
    """
    dist.barrier()
    timeout = datetime.timedelta(seconds=timeout_s)
    if expect_failure and ctx.device.type == "cuda":
        return dist.new_group(timeout=timeout, backend="gloo"), torch.device("cpu")  # gpu-checked
    return dist.new_group(timeout=timeout), ctx.device


def p2p_device(ctx: DistributedContext) -> torch.device:
    """Where tensors for send/recv (and batch_isend_irecv) must live: the job's device,
    except in the shared mode (gloo on GPUs), where gloo's point-to-point calls take CPU
    tensors only (a CUDA tensor ends the process: "transport/tcp/pair.cc ... Bad address").
    The shared mode's other CPU routes: utils/shared_mode.py."""
    return collective_device(ctx.backend, ctx.device, "batch_isend_irecv")


def cleanup_distributed() -> None:
    """Wait for every rank, then leave the process group (safe without a group).

    Release the DDP model first (``del model``): DDP holds the process group, so while it
    lives destroy_process_group() only forgets the group, and gloo tears it down later, at
    exit, when other ranks may be gone: the process can then abort with "terminate called
    without an active exception". A still-living DDP model is reported here. (This module
    imports torch.distributed.nn before any group, for the same reason: see the import.)
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

