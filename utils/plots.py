"""Plots saved to files: matplotlib without a display (a cluster node has none).

    with saved_figure(path, figsize=(7, 4)) as (figure, axes):
        axes.plot(...)

opens a figure (``plt.subplots(**subplots)``), and when the block ends lays it out, writes
it to ``path`` (its folder made if needed) and closes it. matplotlib is imported here, on
first use, so scripts that plot only on request do not pay for the import otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def saved_figure(path: Path, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """(figure, axes) of ``plt.subplots(dpi=100, **subplots)``, saved to ``path`` at the end."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed on a cluster node
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(**{"dpi": 100, **subplots})
    try:
        yield figure, axes
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)
