"""A real one-node Slurm cluster on localhost, for the tests that submit jobs to it.

No systemd here: the daemons are started by hand, each from a configuration written to a
temporary directory, on free ports, so the cluster touches nothing outside that directory
and two test sessions side by side do not meet:

    munged      its own key (mungekey) and socket; Slurm finds it through AuthInfo=socket=
    slurmctld   the controller, on this host's name, listening on 127.0.0.1
    slurmd -N localhost
                the one node, NodeName=localhost with 48 CPUs (SlurmdParameters=
                config_overrides: the configured CPUs, not the machine's, so jobs may
                oversubscribe the cores)

with the plugins that need no cgroups or database (proctrack/linuxproc, task/none, no
accounting). ``shared_cluster(config)`` starts it once per pytest session, waits until the
node is idle, and stops it when pytest exits, whatever happened: jobs cancelled, then
every daemon killed through its pid file, then the directory removed.

Slurm comes from Debian's packages: `.ci/install-slurm` (CI runs it). Where it is
missing, the tests that need it fail in CI (CI is set) and are skipped elsewhere.
"""

from __future__ import annotations

import getpass
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, TEARDOWN_FAILURES, Result, clean_env, log_launch

DAEMONS = ("munged", "slurmctld", "slurmd")  # started in this order, stopped in reverse
COMMANDS = (*DAEMONS, "mungekey", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel", "qsub")
SBIN_DIRS = ("/usr/sbin", "/sbin")  # daemons live here, which a non-root PATH may lack
# What the node claims: the PBS job scripts ask for ncpus=16 each, and test_pbs_scripts runs
# JOBS_AT_ONCE of them side by side (with 16, Slurm started them one after another).
NODE_CPUS = 48
START_TIMEOUT_S = 60
FINAL_JOB_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                    "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

SLURM_CONF = """\
ClusterName=ddptests
FirstJobId={first_job_id}
SlurmctldHost={controller}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=30 State=UP
"""


def find(command: str) -> str | None:
    """The command's path: on PATH, or in an sbin directory."""
    return shutil.which(command) or next(
        (str(Path(d) / command) for d in SBIN_DIRS if (Path(d) / command).is_file()), None)


def missing_commands() -> list[str]:
    return [command for command in COMMANDS if find(command) is None]


def require_slurm() -> None:
    """Fail (CI) or skip (elsewhere) with what to do when Slurm is not installed."""
    missing = missing_commands()
    message = None
    if missing:
        message = (f"Slurm is not installed ({', '.join(missing)} missing): run .ci/install-slurm "
                   "as root (Debian's slurm-wlm, slurm-wlm-torque, munge)")
    elif os.geteuid() != 0:
        message = "starting the test cluster's slurmd needs root: run the Slurm tests as root"
    if message:
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SlurmCluster:
    """A started cluster: its directory, and the environment its commands need."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment (conftest.clean_env) that talks to this cluster."""
        env = clean_env(SLURM_CONF=str(self.conf), **extra)
        env["PATH"] = os.pathsep.join([env["PATH"], *SBIN_DIRS])
        return env

    def command(self, *args: str, timeout: float = 30, env: dict[str, str] | None = None,
                cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in args], env=env or self.env(), cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=timeout)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else f"(no {path.name})"

    # ------------------------------------------------------------------ jobs
    def submit(self, submit_cmd: list[object], *, output: Path, timeout: float = 400,
               env: dict[str, str] | None = None, cwd: Path = REPO) -> Result:
        """Submit a job (`sbatch --parsable ...` or `qsub ...`: the last word printed is the
        job id), wait for it to end, and return its exit code and its output file.

        Waits by asking scontrol every half second: `sbatch --wait` checks after 2, 8 and
        32 s, which would add up to half a minute to every job. A job still running after
        ``timeout`` is cancelled and the test fails: no hang.
        """
        start = time.monotonic()
        submitted = self.command(*submit_cmd, env=env, cwd=cwd, timeout=60)
        words = submitted.stdout.split()
        job_id = words[-1].split(";")[0] if submitted.returncode == 0 and words else ""
        assert job_id.isdigit(), f"submission failed: {' '.join(map(str, submit_cmd))}\n{submitted.stdout}"
        fields: dict[str, str] = {}
        while time.monotonic() - start < timeout:
            fields = self.job(job_id)
            if fields.get("JobState") in FINAL_JOB_STATES:
                break
            time.sleep(0.5)
        else:
            self.command("scancel", job_id)
            pytest.fail(f"job {job_id} not finished after {timeout} s, cancelled (a hang?): "
                        f"{' '.join(map(str, submit_cmd))}\n{_read(output)}")
        exit_code, _, signal_number = fields.get("ExitCode", "1:0").partition(":")
        returncode = int(exit_code) or (128 + int(signal_number or 0) if signal_number != "0" else 0)
        if fields["JobState"] != "COMPLETED" and returncode == 0:
            returncode = 1  # cancelled, timed out, node failure: never a success
        text = f"{submitted.stdout}{_read(output)}"
        log_launch(" ".join(map(str, submit_cmd)), time.monotonic() - start)
        for sign in TEARDOWN_FAILURES:
            assert sign not in text, f"teardown problem ({sign!r}) in the job's output:\n{text}"
        return Result(returncode, text, time.monotonic() - start)

    def wait_for_output(self, path: Path, text: str, timeout: float = 120) -> None:
        """Wait until a running job's output file shows ``text``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while text not in _read(path):
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} not in {path} after {timeout} s:\n{_read(path)}")
            time.sleep(0.5)

    def job(self, job_id: str) -> dict[str, str]:
        """What scontrol says about a job (kept for MinJobAge seconds after it ends)."""
        shown = self.command("scontrol", "--oneliner", "show", "job", job_id)
        return dict(re.findall(r"(\w+)=(\S+)", shown.stdout))

    def cancel_all(self) -> None:
        self.command("scancel", "--user", getpass.getuser(), timeout=30)

    # ------------------------------------------------------------------ start / stop
    def start(self) -> None:
        (self.root / "state").mkdir()
        (self.root / "spool").mkdir()
        self.conf.write_text(SLURM_CONF.format(
            controller=socket.gethostname().split(".")[0], ctld_port=_free_port(),
            slurmd_port=_free_port(), user=getpass.getuser(), root=self.root, cpus=NODE_CPUS,
            # job ids (and so the job scripts' ports) unlike another session's cluster's
            first_job_id=random.randrange(1000, 1_000_000)))
        key = self.root / "munge.key"
        self._run_or_fail(find("mungekey"), "--create", f"--keyfile={key}")
        key.chmod(0o600)
        self._run_or_fail(find("munged"), "--force", f"--key-file={key}",
                          f"--socket={self.root}/munge.socket", f"--pid-file={self.root}/munged.pid",
                          f"--log-file={self.root}/munged.log", f"--seed-file={self.root}/munged.seed")
        self._run_or_fail(find("slurmctld"), "-f", self.conf)
        self._run_or_fail(find("slurmd"), "-N", "localhost", "-f", self.conf)
        self._wait_until_idle()

    def _run_or_fail(self, *cmd: object) -> None:
        result = self.command(*cmd, timeout=START_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, cmd))} failed (exit {result.returncode}):\n"
                               f"{result.stdout}\nslurmctld.log:\n{self.log('slurmctld')}")

    def _wait_until_idle(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            result = self.command("sinfo", "--noheader", "--nodes=localhost", "--format=%T")
            state = result.stdout.strip()
            if result.returncode == 0 and state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the node is not idle after {START_TIMEOUT_S} s (sinfo: {state!r})\n"
                           f"slurmctld.log:\n{self.log('slurmctld')}\nslurmd.log:\n{self.log('slurmd')}")

    def stop(self) -> None:
        """Cancel every job, stop the daemons by their pid files, remove the directory."""
        try:
            if (self.root / "slurmctld.pid").exists():
                self.cancel_all()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    queue = self.command("squeue", "--noheader", "--format=%i", timeout=30)
                    if queue.returncode != 0 or not queue.stdout.strip():
                        break
                    time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass  # a daemon already gone: kill the rest below
        for daemon in reversed(DAEMONS):
            _kill_from_pid_file(self.root / f"{daemon}.pid")
        shutil.rmtree(self.root, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else f"(no output file {path})"


def _kill_from_pid_file(pid_file: Path, grace_s: float = 10) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # raises once it has exited
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_SESSION: dict[str, object] = {}  # the one cluster of this pytest session, or why it failed


def shared_cluster(config: pytest.Config) -> SlurmCluster:
    """The session's cluster, started on first use and stopped when pytest exits.

    Test modules wrap it in a session fixture; whichever asks first starts it.
    """
    require_slurm()
    if "error" in _SESSION:
        pytest.fail(f"the Slurm cluster did not start: {_SESSION['error']}")
    if "cluster" not in _SESSION:
        cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-tests-")))
        config.add_cleanup(cluster.stop)  # runs at exit, after failures and Ctrl-C too
        try:
            cluster.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            _SESSION["error"] = str(exc)
            pytest.fail(f"the Slurm cluster did not start: {exc}")
        _SESSION["cluster"] = cluster
    return _SESSION["cluster"]  # type: ignore[return-value]
