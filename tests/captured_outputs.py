"""Real output on the site: docs/outputs/*.txt are produced by running the scripts.

Each file starts with the command that made it (``$ torchrun ...``) followed by what the
command printed. The chapters include these files; test_site.py re-runs every command and
checks that the output still matches, with wall-clock numbers masked.

Regenerate them after changing a script:  make outputs  (python tests/captured_outputs.py),
or only some:  python tests/captured_outputs.py 02_   (files whose name starts with 02_)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = REPO / "docs" / "outputs"
# torchrun's and c10d's own log lines (timestamps, PIDs) are not the script's output
LOG_LINE = re.compile(r"^\[?[WIE]\d{4} |^\*{5,}|^\s*$")
SECONDS = re.compile(r"\b\d+(\.\d+)? ?s\b")  # durations: "0.172 s", "epoch_time=0.163s"
RATE = re.compile(r"\b\d+ samples/s\b")
LONG_DECIMAL = re.compile(r"(\d+\.\d\d)\d+")


def run_command(command: str, timeout: float = 300) -> str:
    """Run a command as a user would from the repository root, with .venv's tools first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                          timeout=timeout, start_new_session=True)
    return "\n".join(line for line in proc.stdout.splitlines() if not LOG_LINE.match(line))


def read(path: Path) -> tuple[str, str]:
    """(command, output) of a captured file."""
    first, _, rest = path.read_text().partition("\n")
    assert first.startswith("$ "), f"{path}: the first line must be '$ <command>'"
    return first[2:], rest.rstrip("\n")


def masked(text: str) -> str:
    """The output with what varies from run to run (timings, last float digits) masked."""
    text = SECONDS.sub("<seconds>", RATE.sub("<rate>", text))
    return LONG_DECIMAL.sub(r"\1", text)


def main() -> None:
    prefixes = tuple(sys.argv[1:]) or ("",)
    for path in sorted(p for p in OUTPUTS.glob("*.txt") if p.name.startswith(prefixes)):
        command, _ = read(path)
        print(f"$ {command}", flush=True)
        path.write_text(f"$ {command}\n{run_command(command)}\n")


if __name__ == "__main__":
    main()
