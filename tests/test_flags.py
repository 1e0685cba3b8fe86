"""Every flag of every script: a bad value gets a clear message, never a traceback.

The walk finds every script (scripts/*/*.py), and every flag of its parser that takes a value,
and feeds each numeric and path flag a small table of bad values (0, -1, nan, inf, a file where
a directory is expected, a path that cannot exist or be made...), plus a few combinations of
flags that are wrong together (a data set smaller than one global batch, ...). Each case must
end in an exit with a non-zero code within a few seconds, with the flag's name in what it
printed, and no traceback. A flag whose kind the walk does not know (a plain text flag), or a
value that a script accepts, fails the test: give the flag a type with limits
(utils/cli.py), or list it below with the reason (VALID). A value VALID lists is walked too,
and must be accepted.

When it was written (issue 27), the walk tried 724 cases on the 37 scripts of then
(commit 5da3997) and 639 of them failed: the value was accepted (the script went to work, or
ran to the end, or crashed later with a traceback).

Cheap: one Python process runs every case of every script in turn (`python tests/test_flags.py
--walk ROOT`): it runs each script as __main__ with the case's argv, and stops a script that
got past its checks at the first sign of work (a DDP model, a data loader's first batch, a
subprocess, ...); one process here means `import torch` once. setup_distributed() runs for
real, as a process group of one, so the checks made after it (with the world size) are
walked too. A few launches under torchrun show the message printed once per job.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CASE_SECONDS = 15.0  # "within a few seconds" (on a loaded machine): longer, a script that went to work

# Bad values by the kind of flag; {FILE}, {DIR}, {EMPTY_DIR} are made by the walk.
BAD_VALUES = {
    "int": ["0", "-1"],
    "float": ["0", "-1", "nan", "inf"],
    "dir": ["{FILE}", "/proc/flag-walk/missing"],  # a file for a directory; cannot exist or be made
    "file": ["{DIR}", "/proc/flag-walk/missing/out.png"],  # a directory for a file; cannot be written
    "codes": ["XYZ", "DDP999"],  # rule codes (or their prefixes) that no rule has
}
# Bad values a flag gets besides its kind's (huge ones where they matter).
EXTRA_BAD = {
    "--seed": ["4294967296"],  # numpy's seeds end at 2**32 - 1
    "--timeout": ["1e15"],  # datetime.timedelta overflows
    "--data-dir": ["{EMPTY_DIR}"],  # a directory without CIFAR-10 in it
    "--resume-from": ["{EMPTY_DIR}"],  # a directory without a checkpoint in it
}
# Values that are legitimately valid for a flag ("flag" or "script.py:flag"), with the reason.
VALID = {
    "--seed": {"0": "seed 0 is a seed"},
    "--num-workers": {"0": "DataLoader's num_workers=0: load in the main process"},
    "--workers": {"0": "DataLoader's num_workers=0: load in the main process"},
    "--barrier-delay": {"0": "no delay before the barrier"},
    "--heartbeat": {"0": "no heartbeat (the default)"},
    "--sleep-per-step": {"0": "no sleep (the default)"},
    "--read-latency-ms": {"0": "no added latency (the default)"},
    "--dropout": {"0": "Dropout(p=0): keeps every feature"},
    "--aux-every": {"0": "0 = never add the auxiliary loss (its help says so)"},
    "--faulty-rank": {"0": "rank 0 is a rank"},
    "--fail-at-step": {"0": "step 0 is a step"},
    "--fail-during-save": {"0": "step 0's checkpoint is a checkpoint"},
    "--lose-node-at-step": {"0": "step 0 is a step"},
    "--signal-at-step": {"0": "step 0 is a step"},
    "--warm-up": {"0": "no step left out of the timings"},
    "--warmup": {"0": "no untimed steps first"},
    "--warmup-steps": {"0": "no learning-rate warm-up"},
    "--overlap": {"0": "a share of the all-reduce hidden behind backward: none (on CPUs)"},
    "--gpu-overlap": {"0": "a share of the all-reduce hidden behind backward: none"},
    # 0 refused on purpose: the first step builds DDP's buckets and is timed unlike the others
    "dataparallel_vs_ddp.py:--warmup": {},
    "profile_step.py:--warmup": {},
}
# A valid value that the walk's own launch (one process, no launcher) cannot run, and the
# message the script refuses it with instead ("script.py:flag": message): that message, and
# no complaint about the value, counts as accepted.
NEEDS_LAUNCHER = {"train_resilient.py:--lose-node-at-step": "launch the script with torchrun"}
# Flags that take text and are neither numbers nor paths (none yet): {"flag": "reason"}.
TEXT_FLAGS: dict[str, str] = {}
# Flags whose type the walk cannot see from the parser: {"flag": kind}.
KIND = {"--bucket-caps": "float",  # numbers of MiB or 'default', checked after parsing
        "--select": "codes", "--ignore": "codes"}  # check_ddp.py's rule codes, as ruff takes them
# Flags that are wrong together: (script glob, argv, the flag the message must name[, the
# scripts where the combination is fine: {script name: reason}]).
COMBINATIONS = [
    # a data set smaller than one global batch (here, one rank: the per-rank batch)
    ("*", ["--num-samples", "8", "--batch-size", "16"], "--num-samples",
     {name: "not training: a partial batch is what it shows" for name in
      ("distributed_dataloader.py", "distributed_eval.py", "set_epoch_shuffling.py")}),
    ("*", ["--num-samples", "8", "--global-batch-size", "16"], "--num-samples"),
    ("*/train_single.py", ["--fake-size", "3", "--batch-size", "4"], "--fake-size"),
    ("*/train_with_checkpoints.py", ["--epochs", "2", "--stop-after-epoch", "3"], "--stop-after-epoch"),
    ("*/grad_accumulation.py", ["--num-samples", "32", "--batch-size", "16", "--accumulation-steps", "4"],
     "--accumulation-steps"),
    ("*/time_no_sync.py", ["--num-samples", "32", "--batch-size", "16", "--accumulation-steps", "4"],
     "--accumulation-steps"),
    ("*/uneven_inputs.py", ["--num-samples", "64", "--num-files", "100"], "--num-files"),
    ("*/zero_checkpoint.py", ["--steps", "4", "--save-at", "4"], "--save-at"),
    ("*/hang_debugging.py", ["--faulty-rank", "1"], "--faulty-rank"),
    ("*/device_mesh_2d.py", ["--tp", "2"], "--tp"),
]
# Names that say a flag is a path, when its type alone does not.
DIR_NAMES = re.compile(r"(_dir|_from)$")
FILE_NAMES = re.compile(r"^(plot|csv|trace|output|log_file)$")


def scripts(root: Path = REPO) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("scripts/*/*.py"))


# --------------------------------------------------------------------------- the walk
class _Reached(BaseException):
    """The script went past its checks and started to work."""


def _kind(action) -> str | None:
    """int, float, dir, file, choice, or None (text) for a flag that takes a value."""
    flag = max(action.option_strings, key=len)
    if flag in KIND:
        return KIND[flag]
    if action.choices is not None:
        return "choice"
    name = (action.type.__name__ if action.type else "").lower()
    dest, metavar = action.dest, str(action.metavar or "")
    if DIR_NAMES.search(dest) or metavar == "DIR" or "dir" in name:
        return "dir"
    if FILE_NAMES.search(dest) or metavar in ("PNG", "CSV", "FILE") or "file" in name:
        return "file"
    for text in ("7", "0.5", "0") if action.type is not None else ():
        try:
            probe = action.type(text)
        except Exception:
            continue
        if isinstance(probe, bool):
            return None
        if isinstance(probe, int):
            return "int"
        if isinstance(probe, float):
            return "float"
        if isinstance(probe, Path):
            return "dir"
    return None


def _stops() -> None:
    """Make the first signs of work raise _Reached."""
    import subprocess as sp

    import torch.utils.data
    from torch.nn.parallel import DistributedDataParallel

    def reached(what):
        def stop(*args, **kwargs):
            raise _Reached(what)
        return stop

    DistributedDataParallel.__init__ = reached("DistributedDataParallel")
    # one process trains without DDP where a script wraps only for 2+ ranks (gpt_ddp.py): its
    # first backward is work (the walk let its valid values train to the end, about 7 s each)
    torch.Tensor.backward = reached("a backward pass")
    torch.utils.data.DataLoader.__iter__ = reached("a data loader's first batch")
    sp.Popen.__init__ = reached("a subprocess")
    try:
        import torch.distributed.fsdp as fsdp
        fsdp.fully_shard = reached("fully_shard")
    except ImportError:
        pass
    try:
        import torch.distributed.optim as dopt
        dopt.ZeroRedundancyOptimizer.__init__ = reached("ZeroRedundancyOptimizer")
    except (ImportError, AttributeError):
        pass


def _run_case(path: Path, argv: list[str], keep: int = 2000) -> dict:
    """Run the script as __main__ with argv; what happened (the last `keep` characters of
    what it printed)."""
    import io
    import runpy
    import signal

    import torch.distributed as dist

    out = io.StringIO()
    saved = sys.stdout, sys.stderr, sys.argv[:], list(sys.path), os.getcwd()
    sys.stdout = sys.stderr = out
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))  # as `python script.py` does: its folder first

    def too_long(*_):
        raise _Reached(f"still running after {CASE_SECONDS:g} s")

    signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    start = time.monotonic()
    outcome, code = "", None
    try:
        runpy.run_path(str(path), run_name="__main__")
        outcome = "accepted: ran to the end"
    except SystemExit as exit_:
        code = exit_.code
        if isinstance(code, str):
            out.write(code + "\n")
            code = 1
        outcome = "exit" if code else "accepted: exited 0"
    except _Reached as reached:
        outcome = f"accepted: reached {reached.args[0]}"
    except Exception as error:  # a traceback for a user
        import traceback

        out.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception_only(error)))
        outcome = f"traceback: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout, sys.stderr, sys.argv, sys.path[:], cwd = saved
        os.chdir(cwd)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return {"outcome": outcome, "code": code, "output": out.getvalue()[-keep:],
            "seconds": round(time.monotonic() - start, 2)}


def _get_parser(path: Path):
    """The script's parser: run it until it parses its arguments."""
    import argparse

    found = []
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        found.append(self)
        raise _Reached("parse")

    argparse.ArgumentParser.parse_known_args = capture
    try:
        result = _run_case(path, [])
    finally:
        argparse.ArgumentParser.parse_known_args = original
    if not found:
        raise RuntimeError(f"{path}: no argparse parser found ({result['outcome']})\n{result['output']}")
    return found[0]


def _prepare(root: Path) -> Path:
    """This process as the walk runs scripts in: no launcher's variables, one thread, in a
    folder of its own (whatever a script writes lands there), work stopped at its first sign."""
    work = Path(tempfile.mkdtemp(prefix="flag-walk-"))
    os.environ.update(OMP_NUM_THREADS="1", DDP_BACKEND="gloo")
    for name in list(os.environ):
        if re.match(r"^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|OMPI_.*|"
                    r"PMIX_.*|PMI_.*|PALS_.*|SLURM_.*|PBS_.*)$", name):
            del os.environ[name]
    os.chdir(work)
    sys.path.insert(0, str(root))
    _stops()
    return work


def help_texts(root: Path, names: list[str]) -> dict[str, dict]:
    """`python SCRIPT --help` of each script: {name: its exit code and everything it printed},
    each run as __main__ in turn in this one process (conftest.script_help)."""
    _prepare(root)
    return {name: _run_case(root / name, ["--help"], keep=100_000) for name in names}


def walk(root: Path, names: list[str]) -> list[dict]:
    """Every case of every script in `names`; one dict per case."""
    work = _prepare(root)
    places = {"FILE": work / "a_file.txt", "DIR": work / "a_dir", "EMPTY_DIR": work / "empty_dir"}
    places["FILE"].write_text("not a directory\n")
    places["DIR"].mkdir()
    places["EMPTY_DIR"].mkdir()
    cases = []
    for name in names:
        path = root / name
        try:
            parser = _get_parser(path)
        except RuntimeError as error:
            cases.append({"script": name, "flag": "(parser)", "value": "", "kind": None,
                          "outcome": f"no parser: {error}", "output": "", "seconds": 0})
            continue
        todo = []
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.dest == "help":
                continue
            flag = max(action.option_strings, key=len)
            kind = _kind(action)
            if kind == "choice" or flag in TEXT_FLAGS:
                continue
            if kind is None:
                cases.append({"script": name, "flag": flag, "value": "", "kind": None,
                              "outcome": "unknown kind: a text flag without a type", "output": "",
                              "seconds": 0})
                continue
            valid = VALID.get(f"{Path(name).name}:{flag}", VALID.get(flag, {}))
            for value in BAD_VALUES[kind] + EXTRA_BAD.get(flag, []):
                value = value.format(**places)
                # a value the list calls valid must be accepted: walked as such, not skipped
                todo.append((flag, "valid" if value in valid else kind, [flag, value],
                             None if value in valid else flag))
        flags = {s for action in parser._actions for s in action.option_strings}
        for pattern, argv, expect, *exempt in COMBINATIONS:
            if Path(name).name in (exempt or [{}])[0]:
                continue
            if fnmatch.fnmatch(name, pattern) and all(a in flags for a in argv if a.startswith("--")):
                todo.append((expect, "combination", argv, expect))
        for flag, kind, argv, expect in todo:
            result = _run_case(path, argv)
            cases.append({"script": name, "flag": flag, "value": " ".join(argv), "kind": kind,
                          "expect": expect, **result})
        for module in [m for m, mod in sys.modules.items()  # a sibling script imported as a module
                       if str(getattr(mod, "__file__", "") or "").startswith(str(path.parent))]:
            del sys.modules[module]
    return cases


def verdict(case: dict) -> str | None:
    """None when the case got what a user should see; else what went wrong. A value that
    VALID lists must be accepted (the script went to work, or ran to the end)."""
    if case["kind"] == "valid":
        if "Traceback" in case["output"]:
            return "a valid value: a traceback"
        launcher = NEEDS_LAUNCHER.get(f"{Path(case['script']).name}:{case['flag']}")
        if launcher and launcher in case["output"] and "out of range" not in case["output"]:
            return None
        return None if case["outcome"].startswith("accepted") else (
            f"a valid value refused ({case['outcome']} {case['code']}): {case['output'].strip()[-200:]}")
    if case["kind"] is None or not case["outcome"].startswith("exit"):
        return case["outcome"]
    if "Traceback" in case["output"]:
        return "a traceback"
    if case["expect"] not in case["output"]:
        return f"exit {case['code']}, but the message does not name {case['expect']}"
    if case["seconds"] > CASE_SECONDS:
        return f"took {case['seconds']} s"
    return None


def run_walk(root: Path = REPO, names: list[str] | None = None, timeout: float = 600) -> list[dict]:
    """The walk in a process of its own (so that nothing a script does stays in pytest's):
    conftest.run, which forks it from the preloaded Python. Its cases are the JSON lines."""
    from conftest import run

    walk = run([sys.executable, __file__, "--walk", str(root), *(names or [])], timeout=timeout, cwd=root)
    lines = [line for line in walk.output.splitlines() if line.startswith('{"script": ')]
    assert walk.returncode == 0 and lines, f"the walk failed:\n{walk.output[-6000:]}"
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def walked() -> dict[str, list[dict]]:
    by_script: dict[str, list[dict]] = {}
    for case in run_walk():
        by_script.setdefault(case["script"], []).append(case)
    return by_script


# Scripts whose authors are giving their flags limits right now: a failure there is expected
# for the moment, and a pass is welcome (not strict). {script: reason}
IN_PROGRESS: dict[str, str] = {}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(reason=IN_PROGRESS[name], strict=False))
    if name in IN_PROGRESS else name for name in scripts()])
def test_every_bad_value_gets_a_message(walked, name):
    cases = walked.get(name)
    assert cases, f"the walk found no flags in {name}"
    failed = [f"{c['value'] or c['flag']}: {why}\n    {c['output'].strip()[-300:]}"
              for c in cases if (why := verdict(c))]
    assert not failed, (f"{len(failed)} of {len(cases)} bad inputs to {name} did not get a clear "
                        "message:\n" + "\n".join(failed))


BASIC = "01_data_parallel_ddp/multinode_ddp_basic.py"


@pytest.mark.quick
def test_a_bad_value_exits_2_with_the_usage_line_and_no_traceback():
    """(Run in this process, as the walk runs every case: conftest.run_as_main.)"""
    from conftest import clean_env, run_as_main, script

    result = run_as_main(script(BASIC), "--batch-size", "0", env=clean_env())
    assert result.returncode == 2, result.output
    assert result.output.startswith("usage: multinode_ddp_basic.py"), result.output
    assert ("multinode_ddp_basic.py: error: argument --batch-size: 0 is out of range: give a whole "
            "number of 1 or more") in result.output
    assert "Traceback" not in result.output


def test_every_script_is_walked_and_every_flag_has_a_kind(walked):
    """The walk covers what the glob finds, and each value-taking flag is a number, a path, a
    choice or listed: a new script or flag cannot slip past it."""
    assert sorted(walked) == scripts() and len(scripts()) >= 30
    flags = {case["flag"] for case in walked[f"scripts/{BASIC}"]}
    assert {"--epochs", "--batch-size", "--lr", "--seed", "--timeout", "--num-samples"} <= flags
    unknown = [case for cases in walked.values() for case in cases
               if case["kind"] is None and case["script"] not in IN_PROGRESS]
    assert not unknown, unknown


@pytest.mark.quick
@pytest.mark.parametrize("env, rank", [
    ({}, 0), ({"RANK": "1"}, 1), ({"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "0"}, 3),
    ({"PMI_RANK": "0", "SLURM_PROCID": "0"}, 0), ({"SLURM_PROCID": "2"}, 2)])
def test_the_rank_before_any_process_group(monkeypatch, capsys, env, rank):
    """Rank 0 prints a usage error; any other rank (by the launcher's variables) exits 2 silently."""
    import argparse

    import utils.cli
    from utils.cli import _RANK_VARIABLES, launch_rank, usage_error

    monkeypatch.setattr(utils.cli, "NON_ZERO_RANK_GRACE_S", 0.0)  # the wait for Open MPI's kill
    for name in (*_RANK_VARIABLES, "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launch_rank() == rank
    with pytest.raises(SystemExit) as exit_:
        usage_error("--flag 0 is out of range", argparse.ArgumentParser(prog="script.py"))
    assert exit_.value.code == 2
    expected = "usage: script.py [-h]\nscript.py: error: --flag 0 is out of range\n"
    assert capsys.readouterr().err == (expected if rank == 0 else "")


def test_under_torchrun_rank_0_alone_prints_the_message():
    """A bad value under torchrun x2: the usage line and the message once per job, from rank 0;
    the other rank exits without repeating it (torchrun's own report of the failure follows)."""
    from conftest import torchrun

    result = torchrun(2, BASIC, "--batch-size", "0", timeout=120)
    assert result.returncode != 0
    assert result.count("error: argument --batch-size: 0 is out of range") == 1, result.output
    assert result.count("usage: multinode_ddp_basic.py") == 1, result.output
    assert "exitcode  : 2" in result.output  # rank 0's code, as torchrun reports it


def test_under_torchrun_a_check_after_setup_prints_once_and_ends_every_rank():
    """40 samples are fewer than one global batch of 2 ranks x 32: known after
    setup_distributed(), printed by rank 0 once, and every rank exits (no hang)."""
    from conftest import torchrun

    result = torchrun(2, BASIC, "--num-samples", "40", "--batch-size", "32", timeout=120)
    assert result.returncode != 0
    message = ("error: --num-samples 40 is smaller than one optimizer step's samples (--batch-size 32 "
               "x 2 ranks = 64): give --num-samples 64 or more, or a smaller --batch-size.")
    assert result.count(message) == 1, result.output
    assert result.count("usage: multinode_ddp_basic.py") == 1, result.output
    assert "summary:" not in result.output and "epoch 1/" not in result.output


def test_under_torchrun_a_global_batch_that_does_not_split_ends_every_rank_once():
    """The walk runs at world size 1, where every number divides: here 2 ranks and a global
    batch of 33 (utils/checks.py check_divisible), after setup_distributed(). Exit 2, the
    message once (rank 0), no rank trains, no hang."""
    from conftest import torchrun

    result = torchrun(2, "16_fsdp/fsdp_vs_ddp.py", "--global-batch-size", "33", timeout=120)
    assert result.returncode != 0 and "exitcode  : 2" in result.output, result.output
    message = "error: --global-batch-size 33 does not split equally over 2 ranks: give a multiple of 2."
    assert result.count(message) == 1, result.output
    assert result.count("usage: fsdp_vs_ddp.py") == 1, result.output
    assert "summary:" not in result.output and "launcher=torchrun" not in result.output, result.output


def _main() -> None:
    """--walk ROOT [SCRIPT...]: a JSON line per case; --help-texts ROOT [SCRIPT...]: one JSON
    line, {script: its --help}."""
    root = Path(sys.argv[2]).resolve()
    names = sys.argv[3:] or scripts(root)
    real_stdout = sys.stdout
    if sys.argv[1] == "--help-texts":
        print(json.dumps(help_texts(root, names)), file=real_stdout, flush=True)
        return
    for case in walk(root, names):
        print(json.dumps(case), file=real_stdout, flush=True)


if __name__ == "__main__" and sys.argv[1:2] in (["--walk"], ["--help-texts"]):
    _main()
