"""ruff-clean Python across the repository."""

import sys
from pathlib import Path

from conftest import REPO, run


def test_ruff():
    result = run([Path(sys.executable).parent / "ruff", "check", REPO], timeout=120)
    assert result.returncode == 0, result.output
