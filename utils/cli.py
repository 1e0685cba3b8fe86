"""The one flag vocabulary every script shares.

Scripts build their parser with ``make_parser(__doc__)`` so that ``--help`` shows the
module docstring (with its launch commands) and the same spelling of every common flag.
"""

from __future__ import annotations

import argparse
import os

from utils.distributed import DEFAULT_TIMEOUT_S


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that fills in a --timeout left unset by add_variant_arg()."""

    bad_variant_timeout_s: float | None = None

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        if getattr(parsed, "timeout", 0) is None:
            parsed.timeout = (self.bad_variant_timeout_s if parsed.variant == "bad"
                              else _default_timeout())
        return parsed


def _default_timeout() -> float:
    return float(os.environ.get("DDP_TIMEOUT", DEFAULT_TIMEOUT_S))


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the flags every script takes: --backend, --timeout, --seed."""
    parser = _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--backend", choices=["auto", "nccl", "gloo"], default=os.environ.get("DDP_BACKEND", "auto"),
        help="process-group backend; auto = nccl with CUDA GPUs, else gloo "
        "(default: $DDP_BACKEND or auto)",
    )
    parser.add_argument(
        "--timeout", type=float, default=_default_timeout(),
        metavar="SECONDS",
        help="longest wait of any collective before it fails instead of hanging "
        "(default: $DDP_TIMEOUT or %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    return parser


def add_training_args(
    parser: argparse.ArgumentParser, *, epochs: int | None = 3, batch_size: int = 32,
    lr: float | None = 0.05,
) -> argparse.ArgumentParser:
    """Add --epochs (unless epochs=None), --batch-size (per rank) and --lr (unless
    lr=None), with a script's own defaults."""
    if epochs is not None:
        parser.add_argument("--epochs", type=int, default=epochs, help="epochs (default: %(default)s)")
    parser.add_argument(
        "--batch-size", type=int, default=batch_size,
        help="samples per forward/backward pass on each rank (default: %(default)s)",
    )
    if lr is not None:
        parser.add_argument("--lr", type=float, default=lr, help="learning rate (default: %(default)s)")
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
