"""The one flag vocabulary every script shares.

Scripts build their parser with ``make_parser(__doc__)`` so that ``--help`` shows the
module docstring (with its launch commands) and the same spelling of every common flag.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from utils.distributed import DEFAULT_TIMEOUT_S

# --------------------------------------------------------------------------- flag types
# Each is an argparse `type=`: it turns the text into a value, or raises ArgumentTypeError
# with one sentence naming the value and what would work. argparse prints it after
# "argument --flag:", under the usage line, and exits 2 (rank 0 alone under a launcher).
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: datetime.timedelta and the C++ timeouts overflow far beyond
MAX_SEED = 2**32 - 1  # numpy's limit; torch takes 64 bits


def _number(text: str, kind: type, what: str) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give {what}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number: give {what}")
    return value


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """A type for whole numbers from `low` to `high` (inclusive; no upper end if None)."""
    what = f"a whole number from {low} to {high}" if high is not None else f"a whole number of {low} or more"

    def check(text: str) -> int:
        value = _number(text, int, what)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
        return value

    check.__name__ = f"int_range({low}, {high})"
    return check


def float_range(low: float, high: float | None = None, *, low_open: bool = False,
                high_open: bool = False) -> Callable[[str], float]:
    """A type for finite numbers between `low` and `high` (open ends: the bound itself is out)."""
    bounds = [f"{'above' if low_open else 'at least'} {low:g}"]
    if high is not None:
        bounds.append(f"{'below' if high_open else 'at most'} {high:g}")
    what = "a number " + " and ".join(bounds)

    def check(text: str) -> float:
        value = float(_number(text, float, what))
        if (value < low or (low_open and value == low) or high is not None
                and (value > high or (high_open and value == high))):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
        return value

    check.__name__ = f"float_range({low:g}, {high})"
    return check


positive_int = int_range(1)
positive_int.__name__ = "positive_int"
non_negative_int = int_range(0)
non_negative_int.__name__ = "non_negative_int"
positive_float = float_range(0.0, low_open=True)
positive_float.__name__ = "positive_float"
non_negative_float = float_range(0.0)
non_negative_float.__name__ = "non_negative_float"
fraction = float_range(0.0, 1.0, high_open=True)  # dropout, a share: 0 <= p < 1
fraction.__name__ = "fraction"
seed_int = int_range(0, MAX_SEED)
seed_int.__name__ = "seed_int"
timeout_seconds = float_range(0.0, MAX_TIMEOUT_S, low_open=True)
timeout_seconds.__name__ = "timeout_seconds"


def output_dir(text: str) -> Path:
    """A directory to write into: one that exists, or is made now; a file there must be
    writable (tried, as root passes every permission check on paper)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory: give a directory to write into")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"{text} is not a directory you can write to ({error.strerror}): give one that is") from None
    return path


def existing_dir(text: str) -> Path:
    """A directory that must already exist (to read from)."""
    path = Path(text)
    if not path.is_dir():
        why = "is a file" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {why}: give an existing directory")
    return path


def existing_file(text: str) -> Path:
    """A file that must already exist (to read from)."""
    path = Path(text)
    if not path.is_file():
        why = "is a directory" if path.is_dir() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {why}: give an existing file")
    return path


def output_file(text: str) -> Path:
    """A file to write (a plot, a CSV, a trace): not a directory, in a directory that exists
    or can be made."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory: give a file name, e.g. {path / 'out.png'}")
    try:
        output_dir(str(path.parent))
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{text} cannot be written: {error}") from None
    return path


# --------------------------------------------------------------------------- usage errors
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PALS_RANKID", "PMI_RANK", "SLURM_PROCID")
NON_ZERO_RANK_GRACE_S = 10.0  # the launcher ends the other ranks once rank 0 has exited
# Launchers that end every rank at the first one's failure (torchrun's agent, Open MPI): there
# the other ranks wait for rank 0's message. MPICH's Hydra and srun let each rank finish.
_ENDS_THE_JOB_AT_A_FAILURE = ("TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK")


def launch_rank() -> int:
    """This process's rank as the launcher set it, before any process group exists: 0 only
    when every rank variable present says 0 (mpiexec in a Slurm batch step inherits
    SLURM_PROCID=0 on every rank; its own OMPI_COMM_WORLD_RANK tells them apart)."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "0")
        if value.strip() not in ("", "0"):
            return int(value) if value.strip().isdigit() else -1
    return 0


_last_parser: argparse.ArgumentParser | None = None


def usage_error(message: str, parser: argparse.ArgumentParser | None = None, *, status: int = 2) -> NoReturn:
    """Exit 2 (or `status`) with argparse's usage line and `message`, printed once per job.

    Before the process group exists: rank 0 prints; the other ranks exit silently, under
    torchrun or Open MPI after a wait for the launcher, which ends them once rank 0 has exited
    (so that their exit cannot end rank 0 before its message is out).
    After setup_distributed(): call it on every rank with the same condition (one that depends
    on the flags and the world size only): rank 0 prints, every rank meets in a barrier (under
    the job's timeout), leaves the process group and exits.
    """
    parser = parser or _last_parser or argparse.ArgumentParser()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if dist.get_rank() == 0:
            parser.print_usage(sys.stderr)
            print(f"{parser.prog}: error: {message}", file=sys.stderr, flush=True)
        from utils.distributed import cleanup_distributed

        cleanup_distributed()
        sys.exit(status)
    if launch_rank() == 0:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(status)
    sys.stderr.flush()
    if any(name in os.environ for name in _ENDS_THE_JOB_AT_A_FAILURE):
        time.sleep(NON_ZERO_RANK_GRACE_S)
    sys.exit(status)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that fills in a --timeout left unset by add_variant_arg(), and
    prints a usage error once per job (usage_error())."""

    bad_variant_timeout_s: float | None = None

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        global _last_parser
        _last_parser = self
        parsed = super().parse_args(args, namespace)
        if getattr(parsed, "timeout", 0) is None:
            parsed.timeout = (self.bad_variant_timeout_s if parsed.variant == "bad"
                              else _default_timeout())
        return parsed

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        usage_error(message, self)


def _default_timeout() -> float:
    return float(os.environ.get("DDP_TIMEOUT", DEFAULT_TIMEOUT_S))


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the flags every script takes: --backend, --timeout, --seed."""
    parser = _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--backend", choices=["auto", "nccl", "gloo", "gloo-cuda"],
        default=os.environ.get("DDP_BACKEND", "auto"),
        help="process-group backend; auto = nccl with CUDA GPUs, else gloo; gloo-cuda = "
        "gloo on GPUs, several ranks per GPU allowed (learning, testing) "
        "(default: $DDP_BACKEND or auto)",
    )
    parser.add_argument(
        "--timeout", type=timeout_seconds, default=_default_timeout(),
        metavar="SECONDS",
        help="longest wait of any collective before it fails instead of hanging "
        "(default: $DDP_TIMEOUT or %(default)s)",
    )
    parser.add_argument("--seed", type=seed_int, default=0,
                        help=f"random seed, 0 to {MAX_SEED} (default: %(default)s)")
    return parser


def add_training_args(
    parser: argparse.ArgumentParser, *, epochs: int | None = 3, batch_size: int = 32,
    lr: float | None = 0.05,
) -> argparse.ArgumentParser:
    """Add --epochs (unless epochs=None), --batch-size (per rank) and --lr (unless
    lr=None), with a script's own defaults."""
    if epochs is not None:
        parser.add_argument("--epochs", type=positive_int, default=epochs,
                            help="epochs (default: %(default)s)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=batch_size,
        help="samples per forward/backward pass on each rank (default: %(default)s)",
    )
    if lr is not None:
        parser.add_argument("--lr", type=positive_float, default=lr,
                            help="learning rate (default: %(default)s)")
    return parser


def add_variant_arg(
    parser: argparse.ArgumentParser, *, bad: str, good: str, bad_timeout_s: float | None = None,
) -> argparse.ArgumentParser:
    """Add --variant {good,bad} (default good); `bad` and `good` say what each does.

    A script whose bad variant hangs passes `bad_timeout_s`: --timeout then defaults to
    that under --variant bad, so the hang ends in seconds, and to the usual one otherwise.
    """
    parser.add_argument("--variant", choices=["good", "bad"], default="good",
                        help=f"good: {good}; bad: {bad} (default: %(default)s)")
    if bad_timeout_s is not None:
        assert isinstance(parser, _Parser), "build the parser with make_parser()"
        parser.bad_variant_timeout_s = bad_timeout_s
        timeout = next(action for action in parser._actions if action.dest == "timeout")
        timeout.default = None
        timeout.help = (f"longest wait of any collective before it fails instead of hanging "
                        f"(default: {bad_timeout_s:g} with --variant bad, so the hang ends in "
                        f"seconds; else $DDP_TIMEOUT or {DEFAULT_TIMEOUT_S:g})")
    return parser
