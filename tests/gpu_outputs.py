"""GPU output on the pages: docs/outputs/gpu/*.txt, recorded on NVIDIA GPUs.

Each file has the form of a CPU capture (docs/outputs/NAME.txt), with a header after the
command that says where it ran:

    $ torchrun --standalone --nproc_per_node=2 scripts/06_mixed_precision/amp_grad_scaler.py --variant bad
    # gpu: NVIDIA H200 (143,771 MiB), driver 580.159.04
    # software: torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9
    # ranks: 2 ranks share 1 GPU over gloo with CUDA tensors (DDP_BACKEND=gloo-cuda)
    # recorded: 2026-11-26, repository at commit eefe6c3, exit code 0
    <what the command printed>

A file has the name of the CPU capture of the same command where there is one
(docs/outputs/gpu/06_amp_bad.txt beside docs/outputs/06_amp_bad.txt); runs only a GPU makes
(chapter 12 at batch 256 and 1024) are named 12_gpu_*.txt. The chapters show them beside the
CPU output in content tabs, "CPU (2 processes)" and "GPU (H200, ...)".

Record them again on a machine with NVIDIA GPUs (one command):

    make outputs-gpu                                 # every file of docs/outputs/gpu/
    .venv/bin/python tests/captured_outputs.py --gpu 06_ 12_gpu_   # those whose names start so
    .venv/bin/python tests/captured_outputs.py --gpu --all          # and every CPU capture too
    .venv/bin/python tests/captured_outputs.py --gpu --force        # the ones done already too

It first says how long it will take (from the durations the files' headers recorded; a file
not timed yet counts as UNTIMED_SECONDS), then records the most useful files first
(`recording_order`: the GPU tabs a page shows before --all's extra captures, the oldest
recordings first, the quickest first), each with its duration in its header. Stopped, it
picks up where it stopped: a file already recorded at this commit on this card is skipped
(--force records it again). The commit in a header is the tree's before the first file is
written, and changes under docs/outputs/gpu/ (its own writes) are no "local changes".

A command whose ranks fit on the GPUs (one process per GPU) runs as written: the scripts pick
nccl. A command that starts more ranks than there are GPUs runs in the shared mode,
DDP_BACKEND=gloo-cuda (utils/devices.py: gloo over CUDA tensors, any number of ranks per GPU),
as the H200 recordings of 2026-11-26 did. Without CUDA it stops with a message and exit 2.

tests/test_gpu_outputs.py checks the headers, and that every GPU number a page states comes
from one of these files (`gpu_statements` says what counts as a GPU statement).
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from captured_outputs import OUTPUTS, REPO, read, run_command  # noqa: E402

GPU_OUTPUTS = OUTPUTS / "gpu"

# What each header line must name, as a regex (tests/test_gpu_outputs.py checks every file).
HEADER_FIELDS = {
    "gpu": r"^(?P<card>.+) \((?P<memory>[\d,]+) MiB\), driver (?P<driver>\d[\w.]*)$",
    "software": r"^torch (?P<torch>\d[\w.+]*), CUDA (?P<cuda>\d[\d.]*), NCCL (?P<nccl>\d[\d.]*)$",
    "ranks": r"^(?P<ranks>\d+) ranks?,? (?P<how>.*(?:nccl|gloo-cuda).*)$",  # the backend named
    "recorded": r"^(?P<date>\d{4}-\d\d-\d\d), repository at commit (?P<commit>[0-9a-f]{7,40})"
                r"(?P<dirty>\+local changes)?, exit code (?P<exit>-?\d+)(?:, took (?P<seconds>\d+) s)?$",
}
# A file whose header has no duration yet (the recordings of 2026-11-26 and 2026-11-27), in the
# estimate of `make outputs-gpu`: the H100 lane's launches took 20 to 70 s at 12 side by side.
UNTIMED_SECONDS = 60
# A capture that reads what another one wrote is recorded right after it (its /tmp files).
NEEDS = {"17_checkpoint_bad_1.txt": ("17_checkpoint_bad.txt",)}

# Runs only a GPU makes (chapter 12 at the batch sizes a GPU needs), as they are run again:
# one rank under nccl, FakeData, the script's own ceiling measured after training.
TRAIN_DDP = ("torchrun --standalone --nproc_per_node=1 scripts/12_scaling_and_performance/train_ddp.py "
             "--data fake --epochs 1 --ceiling-steps 20")
GPU_COMMANDS = {
    "12_gpu_b256_bad.txt": f"{TRAIN_DDP} --fake-size 8192 --batch-size 256 --variant bad",
    "12_gpu_b256_good.txt": f"{TRAIN_DDP} --fake-size 8192 --batch-size 256 --variant good",
    "12_gpu_b256_device.txt": f"{TRAIN_DDP} --fake-size 8192 --batch-size 256 --variant device",
    "12_gpu_b256_device_cl_bf16.txt":
        f"{TRAIN_DDP} --fake-size 8192 --batch-size 256 --variant device --channels-last --bf16",
    "12_gpu_b1024_device_cl.txt":
        f"{TRAIN_DDP} --fake-size 20480 --batch-size 1024 --variant device --channels-last",
    "12_gpu_b1024_device_cl_bf16.txt":
        f"{TRAIN_DDP} --fake-size 20480 --batch-size 1024 --variant device --channels-last --bf16",
    # the recording of 2026-11-26 ran its own script (tools/gpu_ceiling.py, not in the repository)
    "12_gpu_ceiling.txt": "python tests/gpu_ceiling.py",
}
# What a reader with one GPU types first: the scripts' own choice (nccl), never the shared mode.
AS_WRITTEN = {"00_ddp_two_ranks_one_gpu.txt", "01_two_ranks_one_gpu.txt"}


# On a chapter page, a GPU statement is (tests/test_gpu_outputs.py holds each number in one to
# the page's GPU recordings; test_site.py holds the rest of the prose to the CPU captures):
# - the body of a content tab whose label starts with "GPU" (=== "GPU (H200, ...)");
# - the body of an admonition whose title starts with "On GPUs", "On a GPU", "On the GPU" or
#   "On the H200" (!!! note "On GPUs", ??? note "On GPUs: ...");
# - a section whose heading starts so (### On a GPU: ...), up to the next heading of its level;
# - elsewhere, a sentence that names the recorded card (H200).
GPU_BLOCK = re.compile(r'^(?P<indent> *)(?:=== "GPU\b'
                       r'|(?:!!!|\?\?\?\+?) \w+ "On (?:GPUs|a GPU|the GPU|the H200)\b)')
GPU_HEADING = re.compile(r"^(?P<level>#{2,6}) On (?:GPUs|a GPU|the GPU|the H200)\b")
GPU_SENTENCE = re.compile(r"H200")
# The one line of a chapter that has no GPU recording.
NO_RECORDING = "No GPU recording"


def split_gpu_statements(text: str) -> tuple[str, str]:
    """(the GPU statements of a page's markdown, the rest of it), as defined above. The rest
    keeps its line count, so sections and offsets stay where they were."""
    gpu, rest = [], []
    lines, i = text.splitlines(keepends=True), 0
    while i < len(lines):
        block, heading = GPU_BLOCK.match(lines[i]), GPU_HEADING.match(lines[i])
        if not block and not heading:
            rest.append(lines[i])
            i += 1
            continue
        end = i + 1
        if heading:
            level = len(heading.group("level"))
            while end < len(lines) and not re.match(rf"#{{1,{level}}} ", lines[end]):
                end += 1
        indent = len(block.group("indent")) if block else 0
        while block and end < len(lines) and (not lines[end].strip()
                                              or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        gpu.extend(lines[i:end])
        rest.extend("\n" for _ in lines[i:end])
        i = end
    others = []
    for paragraph in re.split(r"(\n\s*\n)", "".join(rest)):
        sentences = re.split(r"(?<=[.!?])(\s+)(?=[A-Z`(*])", paragraph)
        for sentence in sentences:
            structure = sentence.lstrip().startswith(("|", "#", "=== ", "--8<--"))
            if GPU_SENTENCE.search(sentence) and not structure:
                gpu.append(sentence + "\n")
                others.append(re.sub(r"[^\n]", " ", sentence))
            else:
                others.append(sentence)
    return "".join(gpu), "".join(others)


@dataclass(frozen=True)
class Machine:
    """Where a recording ran: what the header names."""

    card: str  # "NVIDIA H200"
    memory_mib: int
    driver: str
    torch: str
    cuda: str
    nccl: str
    gpus: int


def ranks_of(command: str) -> int:
    """The most processes one launch of `command` starts: torchrun's --nproc_per_node, mpiexec's
    and srun's -n/-np/--ntasks, a `for n in 1 2 4` loop's largest value; 1 for `python ...`."""
    loops = {m.group(1): max(map(int, m.group(2).split()))
             for m in re.finditer(r"for (\w+) in ((?:\d+ ?)+);", command)}
    counts = [1]
    for m in re.finditer(r"(?:--nproc[_-]per[_-]node[= ]|(?<!\S)-n[p]? |--ntasks[= ])(\$?\w+)", command):
        value = m.group(1)
        counts.append(loops.get(value.lstrip("$"), 1) if value.startswith("$") else
                      int(value) if value.isdigit() else 1)
    return max(counts)


def sharing(command: str, gpus: int, as_written: bool = False) -> tuple[dict[str, str], str]:
    """(environment, header words) for `command` on `gpus` GPUs: nccl with one GPU per rank
    where its ranks fit, the shared mode (gloo over CUDA tensors) where not, or where the
    command asks for it. `as_written`: the scripts' own choice, whatever it gives."""
    ranks = ranks_of(command)
    if "--backend gloo-cuda" in command:
        return {}, f"{ranks} rank{'s' if ranks > 1 else ''} share {gpus} GPU{'s' if gpus > 1 else ''} " \
                   "over gloo with CUDA tensors (--backend gloo-cuda)"
    if ranks == 1:
        return {}, "1 rank on 1 GPU (nccl where the script makes a process group)"
    if ranks <= gpus:
        return {}, f"{ranks} ranks, one GPU each, under nccl"
    if as_written:
        return {}, f"{ranks} ranks on {gpus} GPU{'s' if gpus > 1 else ''} under nccl (the scripts' choice)"
    return ({"DDP_BACKEND": "gloo-cuda"},
            f"{ranks} ranks share {gpus} GPU{'s' if gpus > 1 else ''} over gloo with CUDA tensors "
            "(DDP_BACKEND=gloo-cuda)")


def header(machine: Machine, ranks_words: str, date: str, commit: str, exit_code: int,
           seconds: float | None = None) -> str:
    """The header lines (without the command line above them)."""
    took = "" if seconds is None else f", took {round(seconds)} s"
    return "\n".join([
        f"# gpu: {machine.card} ({machine.memory_mib:,} MiB), driver {machine.driver}",
        f"# software: torch {machine.torch}, CUDA {machine.cuda}, NCCL {machine.nccl}",
        f"# ranks: {ranks_words}",
        f"# recorded: {date}, repository at commit {commit}, exit code {exit_code}{took}",
    ])


def read_gpu(path: Path) -> tuple[str, dict[str, str], str]:
    """(command, header fields, output) of a GPU recording; AssertionError where a field is
    missing or malformed."""
    command, rest = read(path)
    lines = rest.splitlines()
    fields: dict[str, str] = {}
    for key, pattern in HEADER_FIELDS.items():
        line = lines.pop(0) if lines else ""
        assert line.startswith(f"# {key}: "), f"{path.name}: no header line '# {key}: ...', found {line!r}"
        match = re.match(pattern, line[len(f"# {key}: "):])
        assert match, f"{path.name}: '# {key}:' does not read as {pattern}: {line!r}"
        fields.update({k: v for k, v in match.groupdict().items() if v is not None})
    return command, fields, "\n".join(lines)


def this_machine() -> Machine:
    """The GPUs here, or SystemExit with a message where there is no CUDA."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("captured_outputs.py --gpu records GPU output and needs NVIDIA GPUs: "
                 "torch.cuda.is_available() is False here"
                 f"{'' if torch is None else f' (torch {torch.__version__})'}. "
                 "Run it on a machine with an NVIDIA GPU and a CUDA build of torch; "
                 "on CPUs, `make outputs` records the CPU captures.", file=sys.stderr)
        sys.exit(2)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, check=False).stdout.split("\n")[0].strip()
    properties = torch.cuda.get_device_properties(0)
    nccl = torch.cuda.nccl.version()
    return Machine(card=torch.cuda.get_device_name(0), memory_mib=properties.total_memory // 2**20,
                   driver=driver or "unknown", torch=torch.__version__, cuda=str(torch.version.cuda),
                   nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                   gpus=torch.cuda.device_count())


def commit() -> str:
    """The repository's commit, '+local changes' when the tree differs from it outside
    docs/outputs/gpu/ (what make outputs-gpu writes is no change to the code that ran)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout
    head = git("rev-parse", "--short", "HEAD").strip() or "0000000"
    own = GPU_OUTPUTS.relative_to(REPO).as_posix() if GPU_OUTPUTS.is_relative_to(REPO) else None
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  *([f":(exclude){own}"] if own else [])).strip()
    return head + ("+local changes" if changed else "")


@dataclass(frozen=True)
class Planned:
    """A file to record: its name, and what its last recording says (None: none yet)."""

    name: str
    on_page: bool  # a GPU tab shows it (a file of docs/outputs/gpu/ or GPU_COMMANDS)
    fields: dict | None

    @property
    def seconds(self) -> int | None:
        took = (self.fields or {}).get("seconds")
        return int(took) if took else None

    def done_at(self, mark: str, card: str) -> bool:
        """Recorded at this commit (the same local-changes mark) on this card already."""
        if not self.fields:
            return False
        head, _, dirty = mark.partition("+")
        same = head.startswith(self.fields["commit"]) or self.fields["commit"].startswith(head)
        return same and bool(dirty) == bool(self.fields.get("dirty")) and self.fields["card"] == card


def last_recording(name: str) -> dict | None:
    """The header fields of docs/outputs/gpu/<name>, None where there is none or it is unreadable."""
    try:
        return read_gpu(GPU_OUTPUTS / name)[1]
    except (OSError, AssertionError):
        return None


def recording_order(planned: list[Planned]) -> list[Planned]:
    """The most useful first: what a page shows before --all's extra captures; among them the
    oldest recording first (none yet: first of all), then the quickest (most tabs per minute;
    not timed yet: as UNTIMED_SECONDS); a file that reads what another one wrote (NEEDS) right
    after that one."""
    def key(item: Planned) -> tuple:
        date = (item.fields or {}).get("date", "")
        return (not item.on_page, date, item.seconds or UNTIMED_SECONDS, item.name)
    order = sorted(planned, key=key)
    by_name = {item.name: item for item in order}
    result: list[Planned] = []
    for item in order:
        if item in result:
            continue
        first = [by_name[n] for n in NEEDS.get(item.name, ()) if n in by_name]
        result.extend(needed for needed in first if needed not in result)
        result.append(item)
    return result


def estimate(items: list[Planned]) -> str:
    """'about 12 min (...)': the planned files' recorded durations, UNTIMED_SECONDS for the rest."""
    timed = [i.seconds for i in items if i.seconds is not None]
    untimed = len(items) - len(timed)
    total = sum(timed) + untimed * UNTIMED_SECONDS
    parts = [f"{len(timed)} from the durations their last recordings took"] if timed else []
    if untimed:
        parts.append(f"{untimed} not timed yet, counted at {UNTIMED_SECONDS} s each")
    return f"about {max(1, round(total / 60))} min ({'; '.join(parts)})"


def main(args: list[str]) -> int:
    """Record docs/outputs/gpu/ again on this machine's GPUs: every file there (or those whose
    names start with the given prefixes); --all adds every CPU capture that has none yet;
    --force records again the files already recorded at this commit on this card. Each
    runs the CPU capture's command where there is one (GPU_COMMANDS, else its own, where not)."""
    machine = this_machine()
    mark = commit()  # once, before this run writes anything
    prefixes = tuple(a for a in args if not a.startswith("--")) or ("",)
    shown = {p.name for p in GPU_OUTPUTS.glob("*.txt")} | set(GPU_COMMANDS)
    names = set(shown)
    if "--all" in args:
        names |= {p.name for p in OUTPUTS.glob("*.txt")}
    GPU_OUTPUTS.mkdir(exist_ok=True)
    planned = recording_order([Planned(n, n in shown, last_recording(n))
                               for n in sorted(names) if n.startswith(prefixes)])
    force = "--force" in args
    done = {item.name for item in planned if not force and item.done_at(mark, machine.card)}
    # what a file to record needs runs again with it (it writes the /tmp files read next)
    needed = {n for item in planned if item.name not in done for n in NEEDS.get(item.name, ())}
    todo = [item for item in planned if item.name not in done or item.name in needed]
    skipped = f"; {len(planned) - len(todo)} recorded at {mark} on this card already (--force: again)" \
        if len(todo) < len(planned) else ""
    print(f"make outputs-gpu: {len(todo)} file(s) to record on {machine.card}{skipped}; "
          f"{estimate(todo)}. The most useful first; stopped, it goes on from there.", flush=True)
    failed = []
    for number, item in enumerate(todo, start=1):
        name, path = item.name, GPU_OUTPUTS / item.name
        # the page's command where the CPU capture has one, so that both tabs show one command
        command = GPU_COMMANDS.get(name) or read(OUTPUTS / name if (OUTPUTS / name).exists() else path)[0]
        env, words = sharing(command, machine.gpus, as_written=name in AS_WRITTEN)
        print(f"[{number}/{len(todo)}] $ {command}\n  ({words}; {estimate(todo[number - 1:])} left)",
              flush=True)
        start = time.monotonic()
        try:
            code, output = run_command(command, env_extra=env)
        except RuntimeError as error:  # a timeout: the file keeps its last recording
            print(f"  {str(error).splitlines()[0]}: {name} not written", flush=True)
            failed.append(name)
            continue
        date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        took = time.monotonic() - start
        path.write_text(f"$ {command}\n{header(machine, words, date, mark, code, took)}\n{output}\n")
        print(f"  exit code {code} in {took:.0f} s: wrote "
              f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}", flush=True)
    if failed:
        print(f"not recorded (timed out): {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
