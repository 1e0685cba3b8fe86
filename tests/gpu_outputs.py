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
                r"(?P<dirty>\+local changes)?, exit code (?P<exit>-?\d+)$",
}

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


def header(machine: Machine, ranks_words: str, date: str, commit: str, exit_code: int) -> str:
    """The header lines (without the command line above them)."""
    return "\n".join([
        f"# gpu: {machine.card} ({machine.memory_mib:,} MiB), driver {machine.driver}",
        f"# software: torch {machine.torch}, CUDA {machine.cuda}, NCCL {machine.nccl}",
        f"# ranks: {ranks_words}",
        f"# recorded: {date}, repository at commit {commit}, exit code {exit_code}",
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
    """The repository's commit, '+local changes' when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout
    head = git("rev-parse", "--short", "HEAD").strip() or "0000000"
    return head + ("+local changes" if git("status", "--porcelain", "--untracked-files=no").strip() else "")


def main(args: list[str]) -> int:
    """Record docs/outputs/gpu/ again on this machine's GPUs: every file there (or those whose
    names start with the given prefixes); --all adds every CPU capture that has none yet. Each
    runs the CPU capture's command where there is one (GPU_COMMANDS, else its own, where not)."""
    machine = this_machine()
    prefixes = tuple(a for a in args if not a.startswith("--")) or ("",)
    names = {p.name for p in GPU_OUTPUTS.glob("*.txt")} | set(GPU_COMMANDS)
    if "--all" in args:
        names |= {p.name for p in OUTPUTS.glob("*.txt")}
    GPU_OUTPUTS.mkdir(exist_ok=True)
    failed = []
    for name in sorted(n for n in names if n.startswith(prefixes)):
        path = GPU_OUTPUTS / name
        # the page's command where the CPU capture has one, so that both tabs show one command
        command = GPU_COMMANDS.get(name) or read(OUTPUTS / name if (OUTPUTS / name).exists() else path)[0]
        env, words = sharing(command, machine.gpus, as_written=name in AS_WRITTEN)
        print(f"$ {command}\n  ({words})", flush=True)
        try:
            code, output = run_command(command, env_extra=env)
        except RuntimeError as error:  # a timeout: the file keeps its last recording
            print(f"  {str(error).splitlines()[0]}: {name} not written", flush=True)
            failed.append(name)
            continue
        date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        path.write_text(f"$ {command}\n{header(machine, words, date, commit(), code)}\n{output}\n")
        print(f"  exit code {code}: wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}",
              flush=True)
    if failed:
        print(f"not recorded (timed out): {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
