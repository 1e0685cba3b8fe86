"""Where rank 0 listens (address and port), and connecting every rank to it.

The master address is: MASTER_ADDR; else 127.0.0.1 when every rank is on this node; else
rank 0's host name broadcast over MPI; else the first node of the job's node list. The port
is: MASTER_PORT; else one derived from the scheduler's job id and the launch id the launcher
gives (Slurm's step, PALS's application, PMIx's namespace: two jobs on one node, and two
launches side by side in one job, do not collide); else a free port that rank 0 picks and
broadcasts over MPI (MPICH and Intel MPI name no launch); else one derived from the job id
alone (the PBS/Slurm job scripts derive the same one). Never a fixed 29500.

Rank 0 writes its job id, launch and size into its store, and every other rank compares
them with its own before it joins: a rank that reached another job's or launch's rank 0
stops at once and says so. ``SetupDeadline`` bounds the whole set-up (--timeout), the
backend's connection of every rank to every other included.
"""

from __future__ import annotations

import datetime
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

import torch.distributed as dist

from utils.launch_env import MPI_LAUNCHERS, DistributedSetupError, LaunchInfo, import_mpi, why_no_mpi

SINGLE_NODE_ADDR = "127.0.0.1"
JOB_PORT_BASE, JOB_PORT_SPAN = 15000, 17000  # 15000-31999: below Linux's ephemeral range
JOB_ID_VARIABLES = ("PBS_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "COBALT_JOBID")
# The variable that names a launch, by launcher: the same on every rank of one launch (on
# every node), different for two launches of one job. MPICH's and Intel MPI's Hydra set none.
LAUNCH_ID_VARIABLES = {"slurm": "SLURM_STEP_ID", "pals": "PALS_APID", "openmpi": "PMIX_NAMESPACE",
                       "mpi4py": "PMIX_NAMESPACE"}
_LAUNCH_KEY = "setup_distributed/launch"  # rank 0's job, launch and size, in its store


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
        no_mpi = f"; here it cannot: {why_no_mpi()}" if info.launcher in MPI_LAUNCHERS else ""
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
    mpi = import_mpi()
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



def _check_resolvable(addr: str) -> None:
    try:
        socket.getaddrinfo(addr, None)
    except socket.gaierror as exc:
        raise DistributedSetupError(
            f"MASTER_ADDR={addr!r} does not resolve ({exc.strerror}): set MASTER_ADDR to a host "
            "name or IP address of rank 0's node that every node can reach."
        ) from None


class SetupDeadline:
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

    def __enter__(self) -> SetupDeadline:
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


def _wait_for_master(info: LaunchInfo, rdzv: Rendezvous, deadline: SetupDeadline) -> None:
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


def port_advice(rdzv: Rendezvous) -> str:
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


def connect_store(info: LaunchInfo, rdzv: Rendezvous, timeout: datetime.timedelta,
                   deadline: SetupDeadline) -> dist.Store:
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
                f"process, holds it). {port_advice(rdzv)}"
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
                       deadline: SetupDeadline) -> None:
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
            f"master, so another program holds the port. {port_advice(rdzv)}"
        ) from None
    if owner == mine:
        return
    whose = (_describe(owner) if owner["job"] != mine["job"] else
             f"another launch of the same job: {_describe(owner)}" if owner["launch"] != mine["launch"]
             else f"a launch of another size: {_describe(owner)}")
    raise DistributedSetupError(
        f"rank {info.rank} of {_describe(mine)} reached the master at {rdzv.addr}:{rdzv.port}, "
        f"but it belongs to {whose}. The two use the same port; this rank stops instead of "
        f"joining it. {port_advice(rdzv)}"
    )


def meet(info: LaunchInfo, backend: str, timeout: datetime.timedelta,
         deadline: SetupDeadline) -> tuple[dist.Store, Rendezvous | None]:
    """The store every rank meets at, and where it listens (None in one process).

    Under torchrun its agent already holds one at MASTER_ADDR:MASTER_PORT (torch's own
    env:// rendezvous connects to it, under the prefix init_process_group gives it);
    a world of one needs none (a HashStore: no port, no network); otherwise rank 0 listens
    where resolve_rendezvous() says and every rank connects (connect_store).
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        rdzv = Rendezvous(os.environ.get("MASTER_ADDR", "?"), int(os.environ.get("MASTER_PORT", "0")),
                          "torchrun")
        deadline.stage = f"reaching torchrun's store at {rdzv.addr}:{rdzv.port}"
        store, _, _ = next(dist.rendezvous("env://", timeout=timeout))
        store.set_timeout(timeout)
        deadline.stage = f"connecting to the other ranks ({backend}), under torchrun"
        return dist.PrefixStore("default_pg", store), rdzv
    if info.world_size == 1:
        return dist.HashStore(), None
    deadline.stage = "agreeing on the master with the other ranks"
    rdzv = resolve_rendezvous(info)
    store = connect_store(info, rdzv, timeout, deadline)
    deadline.stage = (f"connecting to the other {info.world_size - 1} rank(s) ({backend}; "
                      f"the master at {rdzv.addr}:{rdzv.port} had answered)")
    deadline.hint = (
        "A rank is missing, or cannot reach the others on the interface it chose (set "
        "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to one every node shares), or a rank of "
        "another launch joined this one: " + port_advice(rdzv))
    return store, rdzv
