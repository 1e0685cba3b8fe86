"""Real output on the site: docs/outputs/*.txt are produced by running the scripts.

Each file starts with the command that made it (``$ torchrun ...``) followed by what the
command printed; docs/outputs/exit_codes.json holds each command's exit code. The chapters
include these files; test_site.py re-runs every command and checks that the exit code is the
same and the output still matches under the rules below.

Regenerate them after changing a script:  make outputs  (python tests/captured_outputs.py),
or only some:  python tests/captured_outputs.py 02_   (files whose name starts with 02_).
On NVIDIA GPUs, `make outputs-gpu` (--gpu) records docs/outputs/gpu/ (tests/gpu_outputs.py).
A file whose fresh output matches it under the rules below keeps its text (so the timings a
page quotes stay those of the page); --rewrite writes every file anew.

How a fresh run is compared with a capture (`differences`): the text must be identical, and so
must the exit code. The numbers in it:

- Integers (counts, bytes, world sizes, steps) and zeros (identical replicas differ by exactly
  0) are exact.
- Wall-clock readings (`0.172 s`, `epoch_time=0.163s`, `10303 samples/s`, `21838 tokens/s`,
  `0.69 GB/s`) are masked: they differ on every run; so are ratios of them, printed as
  `...share=`, `...efficiency=`, `...speedup=` or `...timing_ratio=` (`data_wait_share=18.2%`,
  `weak_efficiency=0.93`).
- Checksums of fp32 weights (`weights_crc=ac892451`) are masked: equal for two runs on one
  machine, which the chapter's tests check, but not on another CPU (below).
- Other decimals (fp32 losses, checksums, differences between two computations) may move by one
  unit of their last printed digit plus fp32's drift, 1e-6 + 1e-5 * |value| (no 1e-6 floor
  for a number printed with an exponent, 2.57e-08: its digits are significant ones). The scripts run
  on one thread with fixed seeds, so a machine repeats them to the last digit, run after run,
  but another CPU need not: ATen, MKL and oneDNN pick their kernels by instruction set, and a
  sum vectorized 8-wide instead of 16-wide rounds differently in fp32's last bits (a
  10-decimal checksum moves in its 7th digit; a difference of 2e-8 between two equal
  computations becomes 3e-8). A value at a rounding boundary can also print one digit off.
  A real change is far larger: a gradient difference 1000x larger, a loss off in its 4th
  digit by more than one, an "identical" that becomes "DIFFER".
- Numbers that depend on the CPU's arithmetic more than that are compared within a stated
  tolerance (`TOLERANCES`, each with its reason). A page may state such a number only as
  precisely as its tolerance holds (test_site.py checks the prose).

test_site.py reruns some captures with AVX-512 switched off, to show the rules hold there;
tests/test_captured_outputs.py shows what each rule catches.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = REPO / "docs" / "outputs"
EXIT_CODES = OUTPUTS / "exit_codes.json"
# torchrun's and c10d's own log lines (timestamps, PIDs) are not the script's output
LOG_LINE = re.compile(r"^\[?[WIE]\d{4} |^\*{5,}|^\s*$")
# Wall clock, masked: durations ("0.172 s", "epoch_time=0.163s") and rates ("10303 samples/s",
# "21838 tokens/s").
# A difference of two readings can be negative ("DDP extra -0.1034 s": noise): its sign is
# masked too, and the spaces that right-align it in a column.
SECONDS = re.compile(r"(?<![\w.-]) *-?\d+(\.\d+)? ?s\b")
RATE = re.compile(r"(?<![\w.])\d+ (?:samples|tokens)/s\b|(?<![\w.])\d+(\.\d+)? ?GB/s\b")  # and 0.69 GB/s
# Ratios of wall-clock readings, masked with them: a value printed after a key that ends in
# "share", "efficiency", "speedup" or "timing_ratio" ("data_wait_share=18.2%",
# "weak_efficiency=1.00,0.93").
TIMED_RATIO = re.compile(
    r"((?:share|efficiency|speedup|timing_ratio)=)[-+]?\d+(?:\.\d+)?%?(?:,[-+]?\d+(?:\.\d+)?%?)*")
# Checksums of fp32 weights ("weights_crc=ac892451"), masked: two runs on one machine give the
# same one (the chapter's tests compare them), but another CPU rounds fp32 sums differently in
# the last bits (its kernels vectorize differently), and a checksum has no "close".
CHECKSUM = re.compile(r"(_crc=)[0-9a-f]{8}\b")
# A number as the scripts print them: 1024, -0.1829554661, 1.0784, 2.57e-08, 100.0 (of 100.0%).
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?")


@dataclass(frozen=True)
class Tolerance:
    """How far a number of the files whose names match `files` may move: a percentage by
    `points` percentage points, any other number by `absolute` plus `relative` of its
    captured value. `why` says why the numbers may differ at all."""

    files: str
    relative: float
    points: float
    why: str
    absolute: float = 0.0
    lines: str = ""  # a regex: only the numbers of lines it finds move (others are exact)

    def margin(self, captured: str) -> float:
        """How far from `captured` (a NUMBER match, "%" included) a fresh value may be."""
        if captured.endswith("%"):
            return self.points
        return self.absolute + self.relative * abs(float(captured))

    def covers(self, line: str) -> bool:
        return re.search(self.lines, line) is not None

    def allows(self, captured: str, fresh: str) -> bool:
        return abs(float(fresh.rstrip("%")) - float(captured.rstrip("%"))) <= self.margin(captured)


TOLERANCES = [
    Tolerance("06_amp_bf16.txt", relative=0.01, points=0.3, lines=r"^(epoch|summary)",
              why="bf16 matmuls on a CPU round differently with and without AVX-512 BF16 "
                  "instructions (oneDNN picks the kernel by CPU): the loss moves in its 4th digit "
                  "and a few gradient elements more or fewer are zero (0.0% to 0.2%)"),
    Tolerance("16_bf16_*.txt", relative=0.01, points=0.3, absolute=2e-3,
              why="FSDP2 with bf16 parameters: bf16 matmuls round differently with and without "
                  "AVX-512 BF16 (oneDNN), so the losses move in their 4th digit and their "
                  "differences from fp32 DDP (a few 1e-4, the script's tolerance is 0.02) move "
                  "by up to 1e-4 (seen with AVX-512 off)"),
    Tolerance("12_loader_*.txt", relative=0.01, points=0.0, lines=r"^epoch \d+: loss",
              why="ResNet-18's fp32 convolutions: oneDNN picks its kernels by instruction set, and "
                  "BatchNorm on random images amplifies the rounding over the steps (at 8 steps: 2.4723 "
                  "on the capturing CPU, 2.4843 on one with AMX and AVX-512 FP16)"),
    Tolerance("12_accuracy_*.txt", relative=0.1, points=0.0, absolute=0.15,
              lines=r"^epoch \d+: loss|^summary: .* accuracy=",
              why="the small model's fp32 convolutions over 218 steps: oneDNN picks its kernels by "
                  "instruction set, and the runs drift apart (with AVX-512 off, as test_site's "
                  "OTHER_CPU: epoch 1's accuracy 0.6472 against 0.7889 here, the last loss 0.2037 "
                  "against 0.2206, the final accuracy 0.9806 against 0.9722); the chapter's test "
                  "asserts what holds: both runs above 95% and within 2 points of each other"),
    Tolerance("18_*.txt", relative=0.0, points=0.0, absolute=1e-6,
              lines=r"max relative difference|grad_diff=",
              why="the good variant's gradient minus one process's is fp32 rounding noise (the same "
                  "sums in another order): its size depends on the CPU's kernels (1.5e-07 on the "
                  "capturing CPU, 8.9e-08 with AVX-512 off); the chapter's test bound is 1e-5"),
    Tolerance("17_mesh.txt", relative=0.0, points=0.0, absolute=1e-6,
              lines=r"largest \|sharded MLP - whole MLP\||tp_output_diff=",
              why="the tensor-parallel output minus the whole MLP's is fp32 rounding noise (the "
                  "same sum in another order): its size depends on the CPU's kernels (6.0e-08 on "
                  "the capturing CPU, 3.0e-08 on one with AMX); the script's bound is 1e-5"),
]


def tolerance_for(name: str) -> Tolerance | None:
    return next((t for t in TOLERANCES if fnmatch.fnmatch(name, t.files)), None)


class CpuPopen(subprocess.Popen):
    """Popen that keeps the CPU seconds (user + system) of the process and of every process
    it waited for (torchrun's workers, a loader's workers...), from wait4(): load-independent
    to first order, unlike the wall clock. `cpu_seconds` is None until it has been reaped."""

    cpu_seconds: float | None = None

    def _try_wait(self, wait_flags):
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:  # as subprocess does: waiting was disabled, no status
            return self.pid, 0
        if pid == self.pid:
            self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return pid, status


_LAST = __import__("threading").local()  # the CPU seconds of this thread's last run_command


def last_cpu_seconds() -> float | None:
    return getattr(_LAST, "cpu_seconds", None)


def run_command(command: str, timeout: float = 300, env_extra: dict[str, str] | None = None,
                base_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command as a user would from the repository root, with .venv's tools first.
    Returns (exit code, output); with pipefail, a failure anywhere in a pipeline counts.
    The CPU seconds it took: last_cpu_seconds(), in the same thread."""
    base = os.environ if base_env is None else base_env  # base_env: a copy taken under a lock
    env = {k: v for k, v in base.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env_extra or {}))
    proc = CpuPopen(["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    text=True, start_new_session=True)
    _LAST.cpu_seconds = None
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.path.insert(0, str(Path(__file__).parent))
        from conftest import kill_tree

        kill_tree(proc.pid)
        output, _ = proc.communicate()
        raise RuntimeError(f"timed out after {timeout} s: {command}\n{output}") from None
    _LAST.cpu_seconds = proc.cpu_seconds
    return proc.returncode, "\n".join(line for line in output.splitlines() if not LOG_LINE.match(line))


def read(path: Path) -> tuple[str, str]:
    """(command, output) of a captured file."""
    first, _, rest = path.read_text().partition("\n")
    assert first.startswith("$ "), f"{path}: the first line must be '$ <command>'"
    return first[2:], rest.rstrip("\n")


def exit_codes() -> dict[str, int]:
    return json.loads(EXIT_CODES.read_text()) if EXIT_CODES.exists() else {}


def last_digit(number: str) -> float:
    """The value of one unit in the last printed digit: 0.0001 for 1.0784, 1e-10 for 2.57e-08."""
    mantissa, _, exponent = number.rstrip("%").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def within_fp32_drift(captured: str, fresh: str) -> bool:
    """Whether a decimal moved no more than another CPU's fp32 arithmetic moves it (see the
    module's docstring). Integers and zeros never move."""
    value = float(captured.rstrip("%"))
    if not re.search(r"[.e]", captured) or value == 0:
        return False
    # A number printed with an exponent (2.57e-08) states its significant digits: no floor.
    floor = 0.0 if "e" in captured.lower() else 1e-6
    return abs(float(fresh.rstrip("%")) - value) <= last_digit(captured) + floor + 1e-5 * abs(value)


def numbers(text: str) -> list[str]:
    """The numbers of `text` as printed, a percentage with its "%"."""
    return [m.group(0) for m in NUMBER.finditer(text)]


def without_wall_clock(text: str) -> str:
    """`text` with wall-clock readings, their ratios and weight checksums masked."""
    text = CHECKSUM.sub(r"\1<checksum>", text)
    return TIMED_RATIO.sub(r"\1<ratio>", SECONDS.sub("<seconds>", RATE.sub("<rate>", text)))


def differences(name: str, captured: str, fresh: str) -> list[str]:
    """What differs between a captured output and a fresh run's, under the rules above
    (an empty list: they match)."""
    captured, fresh = without_wall_clock(captured), without_wall_clock(fresh)
    file_tolerance = tolerance_for(name)
    found = []
    captured_lines, fresh_lines = captured.splitlines(), fresh.splitlines()
    if len(captured_lines) != len(fresh_lines):
        found.append(f"{len(captured_lines)} lines captured, {len(fresh_lines)} now")
    for number, (old, new) in enumerate(zip(captured_lines, fresh_lines, strict=False), start=1):
        if NUMBER.sub("#", old) != NUMBER.sub("#", new):
            found.append(f"line {number}: text differs:\n  captured: {old}\n  now:      {new}")
            continue
        tolerance = file_tolerance if file_tolerance and file_tolerance.covers(old) else None
        for was, now in zip(numbers(old), numbers(new), strict=True):
            if was == now or within_fp32_drift(was, now) or (tolerance and tolerance.allows(was, now)):
                continue
            rule = f" (beyond the tolerance of {tolerance.files})" if tolerance else ""
            found.append(f"line {number}: {was} captured, {now} now{rule}:\n  {new}")
    return found


def main() -> None:
    """Re-run the captured commands (all, or those whose file names start with the given
    prefixes). A file whose fresh output differs from it only where the rules above allow
    (wall clock, drift) keeps its text, so the numbers a page quotes from it stay put;
    --rewrite writes every fresh output. --gpu records docs/outputs/gpu/ on NVIDIA GPUs
    instead (make outputs-gpu; tests/gpu_outputs.py)."""
    if "--gpu" in sys.argv[1:]:
        from gpu_outputs import main as record_gpu

        sys.exit(record_gpu([a for a in sys.argv[1:] if a != "--gpu"]))
    args = [a for a in sys.argv[1:] if a != "--rewrite"]
    rewrite = "--rewrite" in sys.argv[1:]
    prefixes = tuple(args) or ("",)
    codes = exit_codes()
    for path in sorted(p for p in OUTPUTS.glob("*.txt") if p.name.startswith(prefixes)):
        command, captured = read(path)
        print(f"$ {command}", flush=True)
        code, output = run_command(command)
        same = (codes.get(path.name, code) == code and bool(captured.strip())
                and not differences(path.name, captured, output))
        codes[path.name] = code
        if rewrite or not same:
            path.write_text(f"$ {command}\n{output}\n")
        else:
            print("  (unchanged but for wall clock and drift: kept)", flush=True)
    codes = {name: code for name, code in sorted(codes.items()) if (OUTPUTS / name).exists()}
    EXIT_CODES.write_text(json.dumps(codes, indent=1) + "\n")


if __name__ == "__main__":
    main()
