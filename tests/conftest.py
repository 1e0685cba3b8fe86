"""Launch the real scripts under the real launchers, and never hang.

Every helper here starts processes in their own session and kills the whole group when
the timeout runs out, so a hung rank becomes a test failure that shows its output.

The MPI launchers live in their own virtual environments (`make test` builds them):
.venv-openmpi and .venv-mpich, each with its MPI's `mpiexec` and a matching mpi4py, and
the main .venv's packages (torch, ...) visible through a .pth file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MPI_VENVS = {"openmpi": REPO / ".venv-openmpi", "mpich": REPO / ".venv-mpich"}
# Variables a launcher sets; a test must never inherit them from the shell that runs pytest.
LAUNCHER_VARS = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|"
    r"OMPI_.*|PMIX_.*|PMI_.*|PALS_.*|MPI_LOCAL.*|SLURM_.*|PBS_.*|DDP_.*)$"
)

# Signs of an unclean exit that every run is checked for, whatever the test asserts.
TEARDOWN_FAILURES = ("terminate called", "DistributedDataParallel model is still alive")


def parse_summary(output: str) -> dict[str, str]:
    """The key=value pairs of the last 'summary:' line of `output`."""
    lines = [line for line in output.splitlines() if line.startswith("summary:")]
    assert lines, f"no summary line in the output:\n{output}"
    return dict(re.findall(r"(\w+)=(\S+)", lines[-1]))


@dataclass
class Result:
    """What a user would see: the exit code and everything printed."""

    returncode: int
    output: str
    seconds: float

    def summary(self) -> dict[str, str]:
        """The key=value pairs of the last 'summary:' line."""
        return parse_summary(self.output)

    def clean_summary(self) -> dict[str, str]:
        """The summary of a run that exited 0 and printed it once (rank 0 alone)."""
        assert self.returncode == 0, self.output
        assert self.count("summary:") == 1, f"a line printed by more than rank 0:\n{self.output}"
        return self.summary()

    def count(self, text: str) -> int:
        return self.output.count(text)


def exit_code_echoed(result: Result) -> Result:
    """A captured run whose command ends in `; echo "exit code: $?"` (the page shows the
    code; the shell then exits 0): the run with that code as its own, the echoed line left out."""
    head, _, code = result.output.rstrip("\n").rpartition("\nexit code: ")
    assert code.lstrip("-").isdigit(), f"no 'exit code: N' line at the end:\n{result.output}"
    return Result(int(code), head, result.seconds)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARS.match(k)}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant: torchrun starts its workers
    in sessions of their own, out of reach of a kill of the launcher's group alone."""
    import psutil

    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def output_or_fail(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """What `proc` printed, once it exits; after `timeout` seconds, kill its whole tree and
    fail the test with what it had printed (a hang becomes a failure, never a hung suite)."""
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        output, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout} s (a hang?): {what}\n{output}")
    return output


def log_launch(command: str, seconds: float, cpu_seconds: float | None = None) -> None:
    """With LAUNCH_LOG=FILE set, append a line per launch (the test, the thread, the wall
    seconds, the CPU seconds, the command) to FILE: where the suite's time goes, e.g. which
    commands run twice. The CPU seconds (user + system of the launch and every process it
    waited for, from wait4: torchrun's and mpiexec's ranks, loader workers) hardly depend on
    what else runs on the machine; the wall seconds do. "-": not known (a Slurm job's tasks
    are started by slurmd, not by the launch)."""
    if log := os.environ.get("LAUNCH_LOG"):
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        cpu = "-" if cpu_seconds is None else f"{cpu_seconds:.1f}"
        one_line = command.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", " ")  # python -c CODE
        with open(log, "a") as file:
            file.write(f"{test}\t{threading.current_thread().name}\t{seconds:.1f}\t{cpu}\t{one_line}\n")


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 120,
        cwd: Path = REPO) -> Result:
    """Run cmd to completion, or kill its whole process group after `timeout` seconds.
    `python SCRIPT ...` and `torchrun ...` (its agent; the ranks it starts are Pythons of their
    own) are forked from a Python that has imported torch already (tests/preloaded_python.py:
    about 1.8 CPU-s less a process) where the environment allows it (_preloaded_serves)."""
    import time

    from captured_outputs import CpuPopen

    env = env or clean_env()
    program = str(cmd[0])
    agent = program == str(VENV_BIN / "torchrun")
    if _preloaded_serves(env, agent) and (agent or (
            program == sys.executable and len(cmd) > 1 and str(cmd[1]).endswith(".py"))):
        path, args = (cmd[0], cmd[1:]) if program != sys.executable else (cmd[1], cmd[2:])
        return _preloaded_run(Path(path), [str(a) for a in args], env, timeout, cwd, command=cmd)
    start = time.monotonic()
    proc = CpuPopen(
        [str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    output = output_or_fail(proc, timeout, " ".join(map(str, cmd)))
    log_launch(" ".join(map(str, cmd)), time.monotonic() - start, proc.cpu_seconds)
    for sign in TEARDOWN_FAILURES:
        assert sign not in output, f"teardown problem ({sign!r}) in: {' '.join(map(str, cmd))}\n{output}"
    return Result(proc.returncode, output, time.monotonic() - start)


def script(path: str) -> Path:
    return REPO / "scripts" / path


# Held while run_as_main swaps os.environ for a run's: a thread that builds a launch's
# environment from os.environ (the background's captures) takes it around that read.
ENVIRON_LOCK = threading.Lock()


def run_as_main(path: Path, *args: str, env: dict[str, str], cwd: Path = REPO) -> Result:
    """`python PATH ARGS` in the environment `env` and the folder `cwd`, for a run that ends at
    its checks (a usage error, a launch it refuses) before any process group: run as __main__
    in this process (tests/test_flags.py's _run_case, as the flag walk runs every script), so
    that it costs no interpreter and no `import torch` of its own (about 1.8 CPU-s a launch).
    What it printed and its exit code, as a launch shows them; an exception is a traceback in
    its output, with exit code 1, as Python's would be."""
    from test_flags import _run_case

    with ENVIRON_LOCK:  # the background's next capture reads the session's environment, not env
        saved, here = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        try:
            case = _run_case(Path(path), [str(a) for a in args], keep=100_000)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(here)
    code = case["code"] if case["outcome"] == "exit" else 1 if case["outcome"].startswith("traceback") else 0
    return Result(code, case["output"], case["seconds"])


_HELP_TEXTS: dict[str, Result] = {}


def script_help(path: str) -> Result:
    """What `python scripts/<path> --help` prints, and its exit code. The first call asks one
    process for the help of every script (tests/test_flags.py --help-texts: each run as
    __main__ in turn, as the flag walk runs them): one import of torch for all of them,
    instead of a launch of about 2.3 CPU-s per script."""
    import json

    if not _HELP_TEXTS:
        names = sorted(str(p.relative_to(REPO)) for p in (REPO / "scripts").glob("*/*.py"))
        walk = run([sys.executable, REPO / "tests" / "test_flags.py", "--help-texts", REPO, *names],
                   timeout=300)
        assert walk.returncode == 0, walk.output
        for name, case in json.loads(walk.output.splitlines()[-1]).items():
            # a script whose main() is torchrun's @record returns from a SystemExit(0)
            ran_to_the_end = case["code"] is None and case["outcome"] == "accepted: ran to the end"
            code = 0 if ran_to_the_end else case["code"]
            _HELP_TEXTS[name] = Result(code, case["output"], case["seconds"])
    return _HELP_TEXTS[f"scripts/{path}"]


def python(path: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
    """`python script.py ...`: one process, no launcher (run(): forked from a preloaded Python
    where the environment allows it)."""
    return run([sys.executable, script(path), *args], env=env, timeout=timeout)


# --------------------------------------------------------------------------- preloaded Python
# One server per thread that launches (the foreground's tests, the background's captures), so
# that neither waits for the other's run: {thread id: {"proc": the server, "pending": bytes}}.
_PRELOADED: dict[int, dict] = {}
_PRELOADED_LOCK = threading.Lock()  # guards the dict, not the servers (each has one user)


# What torchrun's agent passes on to the ranks it starts, and reads nothing of itself: a
# sitecustomize folder on PYTHONPATH (tests/observe, fake GPUs) and what it reads.
AGENT_PASSES_ON = re.compile(r"^(PYTHONPATH|OBSERVE_WRITES_.*)$")
# Read by nothing `import torch` runs, only by the script and what it starts: PATH (a capture
# runs with .venv's tools first on it, as a reader's activated venv has them).
READ_AFTER_IMPORT = {"PATH"}


def _preloaded_serves(env: dict[str, str], agent: bool = False) -> bool:
    """True where the run's environment differs from clean_env() only in launcher variables
    (read when a process group starts, never by `import torch`), and for torchrun's `agent`
    in what it passes on to its ranks (AGENT_PASSES_ON): the preloaded Python's children run
    it. PRELOADED_PYTHON=0 launches every run for real, and so does a machine with an NVIDIA
    driver (/dev/nvidiactl): were the server's imports ever to start CUDA, its forked children
    could not use the GPU (the CPU suite is where the seconds count)."""
    if os.environ.get("PRELOADED_PYTHON", "1") == "0" or os.path.exists("/dev/nvidiactl"):
        return False
    base = clean_env()
    names = set(env) | set(base)
    return all(env.get(name) == base.get(name) for name in names
               if not LAUNCHER_VARS.match(name) and name not in READ_AFTER_IMPORT
               and not (agent and AGENT_PASSES_ON.match(name)))


def _preloaded_server() -> dict:
    """This thread's server: {"proc", "pending"}, started at its first request."""
    with _PRELOADED_LOCK:
        slot = _PRELOADED.setdefault(threading.get_ident(), {})
    proc = slot.get("proc")
    if proc is None or proc.poll() is not None:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "preloaded_python.py")], cwd=REPO,
                                env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True)
        slot.update(proc=proc, pending=b"")
    return slot


def _preloaded_answer(slot: dict, timeout: float | None) -> dict | None:
    """The server's next answer (a JSON line), or None after `timeout` seconds without one."""
    import select
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    server = slot["proc"]
    while b"\n" not in slot["pending"]:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([server.stdout], [], [], left)[0]:
            return None
        chunk = os.read(server.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError("the preloaded Python ended")
        slot["pending"] += chunk
    line, _, slot["pending"] = slot["pending"].partition(b"\n")
    return json.loads(line)


def _preloaded_run(path: Path, args: list[str], env: dict[str, str], timeout: float, cwd: Path = REPO,
                   command: list | None = None) -> Result:
    """`python PATH ARGS` as a child of the preloaded Python; a hang past `timeout` kills the
    child's tree and fails the test with what it printed, as run() does."""
    import tempfile
    import time

    command = " ".join(map(str, command or [sys.executable, path, *args]))
    with tempfile.NamedTemporaryFile("r", suffix=".out") as out:
        server = _preloaded_server()
        start = time.monotonic()
        request = {"script": str(path), "args": args, "env": env, "cwd": str(cwd), "output": out.name}
        server["proc"].stdin.write((json.dumps(request) + "\n").encode())
        pid = _preloaded_answer(server, None)["pid"]
        done = _preloaded_answer(server, timeout)
        if done is None:
            kill_tree(pid)
            _preloaded_answer(server, None)
            pytest.fail(f"timed out after {timeout} s (a hang?): {command}\n{out.read()}")
        output = out.read()
    log_launch(command, time.monotonic() - start, done["cpu_seconds"])
    for sign in TEARDOWN_FAILURES:
        assert sign not in output, f"teardown problem ({sign!r}) in: {command}\n{output}"
    return Result(done["returncode"], output, time.monotonic() - start)


def torchrun(nproc: int, path: str, *args: str, env: dict[str, str] | None = None,
             timeout: float = 180) -> Result:
    """`torchrun --standalone --nproc_per_node=N script.py ...`"""
    cmd = [VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={nproc}", script(path), *args]
    return run(cmd, env=env, timeout=timeout)


def observed_writes(watch: Path, log: Path) -> dict[str, str]:
    """An environment in which every Python process (the ranks too) logs, to files in `log`,
    each write it makes into `watch`, with its rank: tests/observe/sitecustomize.py."""
    log.mkdir(parents=True, exist_ok=True)
    pythonpath = os.pathsep.join(filter(None, [str(REPO / "tests" / "observe"),
                                               os.environ.get("PYTHONPATH")]))
    return clean_env(PYTHONPATH=pythonpath, OBSERVE_WRITES_DIR=str(watch), OBSERVE_WRITES_LOG=str(log))


def writes_to(log: Path, target: Path, world_size: int) -> list[int]:
    """Per rank, how many times `target` got new content: a torch.save() onto it, or a
    rename of a finished file over it (an atomic save), as the processes' logs recorded."""
    counts = [0] * world_size
    target_text = os.path.abspath(target)
    for file in log.glob("*.log"):
        for line in file.read_text().splitlines():
            rank, kind, *paths = line.split("\t")
            if (kind == "save" and paths[0] == target_text) or (kind == "rename" and paths[1] == target_text):
                counts[int(rank)] += 1
    return counts


def mpi_env(mpi: str) -> dict[str, str]:
    """The environment of a shell where this MPI's venv comes first on PATH."""
    venv = MPI_VENVS[mpi]
    if not (venv / "bin" / "mpiexec").exists():
        message = f"{venv.name} is missing: `make test` builds it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    env = clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    if mpi == "openmpi":  # CI runs as root; Open MPI refuses that unless told twice
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpiexec(mpi: str, n: int, path: str, *args: str, launcher_args: tuple[str, ...] = (),
            timeout: float = 180, env_extra: dict[str, str] | None = None) -> Result:
    """`mpiexec -n N [launcher_args] python script.py ...` with Open MPI or MPICH.

    Open MPI gets --oversubscribe: it refuses more ranks than cores otherwise, and the
    test machine has two.
    """
    env = {**mpi_env(mpi), **(env_extra or {})}
    extra = ["--oversubscribe"] if mpi == "openmpi" else []
    cmd = ["mpiexec", "-n", str(n), *extra, *launcher_args, "python", script(path), *args]
    return run(cmd, env=env, timeout=timeout)


# --------------------------------------------------------------------------- captured runs
# Each captured command (docs/outputs/*.txt) runs once per session, and every test that asks
# for it gets that run: test_site compares it with the capture, the chapter's tests assert on
# it. Where the session compares captures (test_site), they start at once in the background,
# one at a time, while the chapter tests run in the foreground: a launch alone keeps about
# 1.5 of the 2 cores busy (start-up, imports, waits), and two side by side fill them. The
# background works from the last chapter back, the foreground from the first one forward.
#
# What a wall clock decides is not run beside anything: a TIMED_CAPTURES command, or a test
# marked `timed`, waits for the background's launch to end and holds the background back
# until it is done (background_paused()).
# A capture that reads what another one wrote runs after it (the background keeps each
# chapter's captures in name order anyway).
CAPTURE_NEEDS = {"17_checkpoint_bad_1.txt": ("17_checkpoint_bad.txt",)}
# (Chapter 12's loader runs: the good loader's workers must read ahead of the steps;
# 12b's benchmark fails its own run when its clock and a bare loop disagree by 2x. The
# scaling study, the model and the profiler table are asserted on their own arithmetic only:
# they run in the background like any capture.)
TIMED_CAPTURES = {"12_loader_bad.txt", "12_loader_good.txt", "12_loader_device.txt", "12b_comm_bench.txt"}
_CAPTURED_RUNS: dict[str, Future] = {}
_CLAIMED: set[str] = set()  # captures a runner (foreground or background) has taken
_CLAIM_LOCK = threading.Lock()
_CHAPTER_LOCKS: dict[str, threading.Lock] = {}  # one chapter's captures run one at a time
_BACKGROUND_SLOT = threading.Lock()  # held by the background while it runs a capture
_BACKGROUND_ALLOWED = threading.Event()
_BACKGROUND_ALLOWED.set()
_PAUSES = 0  # nesting depth of background_paused() (the foreground thread only)
_STOPPING = threading.Event()
_BACKGROUND_THREAD: threading.Thread | None = None


# A captured command that is one program and its arguments, nothing for a shell to read
# (no pipe, redirection, variable, quote or glob): run() runs it as the shell would, its
# torchrun agent or its one process forked from the preloaded Python where it can.
PLAIN_COMMAND = re.compile(r"(torchrun|python) [\w./=:,+@%-]+( [\w./=:,+@%-]+)*")


def _run_captured(name: str) -> Result:
    import time

    from captured_outputs import LOG_LINE, OUTPUTS, last_cpu_seconds, read, run_command

    command, _ = read(OUTPUTS / name)
    with ENVIRON_LOCK:
        session_env = dict(os.environ)
        env = clean_env(PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    if PLAIN_COMMAND.fullmatch(command):
        program, *args = command.split()
        program = VENV_BIN / "torchrun" if program == "torchrun" else sys.executable
        result = run([program, *args], env=env, timeout=300)
        output = "\n".join(line for line in result.output.splitlines() if not LOG_LINE.match(line))
        return Result(result.returncode, output, result.seconds)
    start = time.monotonic()
    code, output = run_command(command, base_env=session_env)
    log_launch(command, time.monotonic() - start, last_cpu_seconds())
    for sign in TEARDOWN_FAILURES:
        assert sign not in output, f"teardown problem ({sign!r}) in: {command}\n{output}"
    return Result(code, output, time.monotonic() - start)


def _future(name: str) -> Future:
    with _CLAIM_LOCK:
        return _CAPTURED_RUNS.setdefault(name, Future())


def _chapter_lock(name: str) -> threading.Lock:
    with _CLAIM_LOCK:
        return _CHAPTER_LOCKS.setdefault(name[:2], threading.Lock())


def _claim(name: str) -> bool:
    """True for the one runner that gets to run `name`."""
    with _CLAIM_LOCK:
        if name in _CLAIMED:
            return False
        _CLAIMED.add(name)
        return True


def _execute(name: str) -> None:
    done = _future(name)
    try:
        done.set_result(_run_captured(name))
    except BaseException as error:  # noqa: BLE001 - raised in every test that asks for it
        done.set_exception(error)


@contextlib.contextmanager
def background_paused():
    """Nothing runs in the background meanwhile: waits for its launch to end, holds it back."""
    global _PAUSES
    if _PAUSES == 0:
        _BACKGROUND_ALLOWED.clear()
        _BACKGROUND_SLOT.acquire()
    _PAUSES += 1
    try:
        yield
    finally:
        _PAUSES -= 1
        if _PAUSES == 0:
            _BACKGROUND_SLOT.release()
            _BACKGROUND_ALLOWED.set()


def captured_run(name: str) -> Result:
    """The fresh run of the command captured in docs/outputs/<name>, run once per session:
    test_site compares it with the capture, and the chapter's tests assert on the same run
    (one launch, many checks). Its output is what the page shows: launcher log lines dropped.
    Not run yet: it runs now, after what it needs (CAPTURE_NEEDS), if that has not run."""
    done = _future(name)
    if not done.done():
        with _chapter_lock(name):
            _run_unclaimed(name)
    return done.result()


def _run_unclaimed(name: str) -> None:
    """Run what `name` needs and `name`, those of them no runner has taken (the caller holds
    the chapter's lock)."""
    in_background = threading.current_thread() is _BACKGROUND_THREAD
    for needed in (*CAPTURE_NEEDS.get(name, ()), name):
        timed = needed in TIMED_CAPTURES
        if timed and in_background:
            return  # left to the foreground, which runs it with the background paused
        if _claim(needed):
            with background_paused() if timed else contextlib.nullcontext():
                _execute(needed)


def _run_in_background(names: list[str]) -> None:
    for name in names:
        _BACKGROUND_ALLOWED.wait()
        if _STOPPING.is_set():
            return
        with _BACKGROUND_SLOT:
            lock = _chapter_lock(name)
            if not lock.acquire(blocking=False):  # the foreground runs this chapter: leave it
                continue
            try:
                _run_unclaimed(name)
            finally:
                lock.release()


def prefetch_captured_runs(names: list[str]) -> None:
    """Run these captured commands in the background, one at a time, for captured_run() to
    pick up: the last chapter's first, each chapter's in name order. TIMED_CAPTURES are left
    to the foreground."""
    global _BACKGROUND_THREAD
    if _BACKGROUND_THREAD is not None or not names:
        return
    chapters = sorted({name[:2] for name in names}, reverse=True)
    queue = [name for chapter in chapters for name in sorted(names)
             if name[:2] == chapter and name not in TIMED_CAPTURES]
    _BACKGROUND_THREAD = threading.Thread(target=_run_in_background, args=(queue,),
                                          name="captures", daemon=True)
    _BACKGROUND_THREAD.start()


def selected_params(session: pytest.Session, test: str, param: str) -> list:
    """The values of `param` in the selected runs of the parametrized `test`: what this
    session (after -k, -m or node ids) will ask for, so that a fixture starts only that."""
    return [item.callspec.params[param] for item in session.items
            if getattr(item, "originalname", "") == test]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (mkdocs build --strict; no repository address:
    DDP_REPO_URL unset), built once per session for every test that reads it."""
    out = tmp_path_factory.mktemp("site") / "site"
    env = clean_env(NO_MKDOCS_2_WARNING="1")
    env.pop("DDP_REPO_URL", None)
    result = run([VENV_BIN / "mkdocs", "build", "--strict", "-d", out], env=env, timeout=120)
    assert result.returncode == 0, result.output
    return out


PBS_TORCHRUN_JOB = REPO / "scripts" / "13_multinode_and_hpc" / "pbs_torchrun.sh"


@pytest.fixture(scope="session")
def pbs_torchrun_job(tmp_path_factory) -> tuple[Path, Result, Result]:
    """Chapter 13's PBS job script under bash, as PBS Pro would run it (a node file that lists
    this machine once per CPU, a job id, the submit folder, HOME elsewhere), with a site file
    (SITE_ENV) that exports NCCL_SOCKET_IFNAME==lo and FI_PROVIDER=tcp. Its first launch is
    where_am_i.py at 2 ranks (pbs_common.sh's launch_torchrun), its second chapter 01's
    training. Returns the site file, the job's run and its where_am_i.py part: test_pbs_scripts
    checks the job, test_job_binding that the site file reached every rank, test_diagnostics
    what where_am_i.py reports of each rank (one job, where there were three launches)."""
    folder = tmp_path_factory.mktemp("pbs_job")
    site = folder / "site_env.sh"
    site.write_text('MODULES="${MODULES:-}"\nexport NCCL_SOCKET_IFNAME==lo FI_PROVIDER=tcp\n')
    (folder / "nodefile").write_text("localhost\nlocalhost\n")  # PBS: once per requested CPU
    env = clean_env(PBS_NODEFILE=str(folder / "nodefile"), PBS_JOBID="4242.pbs01", PBS_O_WORKDIR=str(REPO),
                    HOME=str(folder), VENV=str(Path(sys.executable).parents[1]), SITE_ENV=str(site))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    job = run(["bash", PBS_TORCHRUN_JOB], env=env, cwd=folder, timeout=400)
    where, _, _ = job.output.partition("+ torchrun --standalone --nproc_per_node=2 "
                                       "scripts/01_data_parallel_ddp/multinode_ddp_basic.py")
    assert "where_am_i.py" in where and where != job.output, job.output
    return site, job, Result(job.returncode, where, job.seconds)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker sends the order to the controller
def pytest_collection_finish(session):
    """The GPU lane's long cases first (longest_first; after -m and -k have deselected, so
    that the batches are of what runs). Start the captured commands that test_site will
    compare, in the background."""
    workers = getattr(session.config, "workerinput", {}).get("workercount", 1)
    session.items[:] = longest_first(session.items, workers)
    paths = selected_params(session, "test_captured_output_matches_a_fresh_run", "path")
    prefetch_captured_runs([path.name for path in paths])


@pytest.fixture(autouse=True)
def _alone_if_timed(request):
    """A test marked `timed` measures wall-clock time or races a window: nothing runs in the
    background meanwhile."""
    if request.node.get_closest_marker("timed") is None:
        yield
        return
    with background_paused():
        yield


def pytest_sessionfinish(session, exitstatus):
    """The background starts nothing more; its running launch ends within its timeout. The
    preloaded Python ends (its stdin closed) and is reaped, its children's CPU with it."""
    _STOPPING.set()
    _BACKGROUND_ALLOWED.set()
    if _BACKGROUND_THREAD is not None:
        _BACKGROUND_THREAD.join()
    with _PRELOADED_LOCK:
        servers = [slot["proc"] for slot in _PRELOADED.values() if "proc" in slot]
        _PRELOADED.clear()
    for server in servers:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_tree(server.pid)
            server.wait()


# `make test-quick` (pytest -m quick): the tests that launch nothing, and one launch of each
# chapter's pitfall (its bad run alone: the tests that set it beside the good run launch both),
# for the inner loop. `make test` runs everything, quick ones included.
QUICK_FILES = {"test_distributed_setup.py", "test_captured_outputs.py", "test_harness.py",
               "test_gpu_outputs.py"}
# ... but not these of QUICK_FILES: they wait out a timeout on purpose (about 28 s together).
NOT_QUICK = {
    "test_distributed_setup.py::test_two_launches_on_one_port_end_within_the_timeout",
    "test_distributed_setup.py::test_a_wait_that_torch_does_not_bound_ends_at_the_timeout",
    "test_distributed_setup.py::test_a_rank_that_reaches_another_launch_stops_at_once_and_that_launch_goes_on",
    "test_distributed_setup.py::test_unreachable_master_fails_within_the_timeout",
}
QUICK_TESTS = {
    "test_00_porting.py::test_torchrun_trains_and_only_rank_0_prints",
    "test_01_data_parallel_ddp.py::test_bad_without_sampler_every_rank_trains_on_the_whole_data_set",
    "test_02_collectives.py::test_bad_skipped_all_reduce_ends_at_the_timeout_with_its_cause",
    "test_03_distributed_sampler.py::test_bad_without_set_epoch_every_epoch_repeats_the_order",
    "test_04_logging_and_checkpoints.py::test_bad_saves_module_keys_and_a_plain_model_cannot_load_them",
    "test_05_gradient_accumulation.py::test_bad_without_no_sync_all_reduces_every_micro_batch",
    "test_06_mixed_precision.py::test_bad_fp16_without_grad_scaler_underflows_to_zero",
    "test_07_batchnorm_and_buffers.py::test_bad_plain_batchnorm_evaluates_differently_on_each_rank",
    "test_08_unused_parameters.py::test_bad_raises_pytorchs_error_and_the_replicas_already_differ",
    "test_09_uneven_inputs.py::test_bad_extra_all_reduce_ends_at_the_timeout_with_its_cause",
    "test_10_communication_overlap.py::test_bad_tiny_buckets_all_reduce_every_tensor_alone",
    "test_11_replica_consistency.py::test_bad_model_module_lets_the_replicas_drift_apart",
    "test_12_scaling_and_performance.py::test_bad_starved_loader_waits_for_its_reads_every_step",
    "test_13_debugging.py::test_hang_timeout_ends_it_and_detail_names_the_rank_that_did_not_arrive",
    "test_14_fault_tolerance.py::test_bad_save_killed_mid_write_leaves_a_file_the_restart_cannot_read",
    "test_15_torch_compile_ddp.py::test_other_order_carries_the_prefixes_the_other_way_round",
    "test_16_fsdp.py::test_bad_every_rank_saves_shards_not_a_model",
    "test_17_zero_and_beyond.py::test_bad_save_from_rank_0_alone_loses_the_other_shards",
    "test_18_transformer.py::test_bad_per_rank_mean_over_uneven_token_counts_is_not_one_process_gradient",
    "test_19_metrics_and_decisions.py::test_bad_mean_of_the_ranks_f1_is_off",
    "test_site.py::test_mkdocs_build_strict",
    "test_site.py::test_every_script_folder_has_its_chapter_in_the_nav",
    "test_site.py::test_numbers_on_a_page_come_from_its_captured_outputs",
}


def pytest_collection_modifyitems(config, items):
    """Mark the quick tests; a name in QUICK_TESTS that no longer exists is an error, and so
    is a chapter without one, so test-quick cannot silently lose a chapter."""
    found = set()
    for item in items:
        path = Path(str(item.fspath))
        key = f"{path.name}::{item.originalname}"
        if (path.name in QUICK_FILES and key not in NOT_QUICK) or key in QUICK_TESTS:
            item.add_marker(pytest.mark.quick)
            found.add(key)
    if config.getoption("-m") == "quick" and not config.getoption("keyword"):
        missing = QUICK_TESTS - found
        chapters = {p.name[5:-3] for p in (REPO / "tests").glob("test_[0-9][0-9]_*.py")}
        without = {c for c in chapters if not any(key.startswith(f"test_{c[:2]}_") for key in QUICK_TESTS)}
        if missing or without:
            raise pytest.UsageError(f"QUICK_TESTS names tests that do not exist: {sorted(missing)}; "
                                    f"chapters without a quick test: {sorted(without)}")


# `make test-gpu`: the GPU lane's longest cases, in seconds, as one H100 ran them with 12 tests
# side by side (../shared/gpu/h100-2026-11-27/lane/: each test's launches summed); a pattern
# covers the nccl lane of a 2+ GPU machine too. Issue 39: at -n 12 they started last, behind
# 90 others, and the lane did not finish in 281 s. They start first now, one per worker.
GPU_LANE_SECONDS = {
    "test_gpu.py::test_fault_tolerance[*]": 120,
    "test_gpu.py::test_checkpoints[*]": 80,
    "test_gpu.py::test_one_rank_under_nccl[compile_ddp-*]": 69,
    "test_gpu.py::test_multi_rank_pitfalls[*-compile_ddp-*]": 66,
    "test_gpu.py::test_multi_rank_pitfalls[*-compressed_gradients]": 64,
    "test_gpu.py::test_fsdp_checkpoint_saved_by_4_ranks_resumes_at_2_in_the_shared_mode": 48,
    "test_gpu.py::test_multi_rank_pitfalls[*-bucket_size-*]": 48,
    "test_gpu.py::test_monitor_records_gpu_use": 43,
}


def lane_seconds(item) -> int:
    """A test's duration in GPU_LANE_SECONDS (0: not one of the long ones)."""
    key = f"{Path(str(item.fspath)).name}::{item.name}"
    return max((s for pattern, s in GPU_LANE_SECONDS.items()  # "*": any text; "[": itself
                if re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), key)), default=0)


def longest_first(items: list, workers: int) -> list:
    """`items` in the order that starts the long ones (GPU_LANE_SECONDS) first, longest first.
    With pytest-xdist's --dist load (`make test-gpu`), worker k's first tests are a batch of
    consecutive items (xdist.scheduler.LoadScheduling.schedule: max(items per worker // 4, 2)
    items each; one each when there are fewer than 2 per worker), so each batch starts with one
    long case; the long ones left over come next, then the rest in their order."""
    long = sorted((item for item in items if lane_seconds(item)), key=lane_seconds, reverse=True)
    rest = [item for item in items if not lane_seconds(item)]
    if workers <= 1 or not long:
        return long + rest
    batch = 1 if len(items) < 2 * workers else max(len(items) // workers // 4, 2)
    order = []
    for head in long[:workers]:
        order += [head, *rest[:batch - 1]]
        rest = rest[batch - 1:]
    return order + long[workers:] + rest
