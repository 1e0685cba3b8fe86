"""GPU output on the pages (docs/outputs/gpu/, tests/gpu_outputs.py): every recording says
where it ran, every chapter shows one or says it has none, and every GPU number a page states
comes from a recording the page shows. Launches nothing: the recordings need a GPU, these
checks do not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from captured_outputs import OUTPUTS, read
from conftest import REPO
from gpu_outputs import (
    GPU_COMMANDS,
    GPU_OUTPUTS,
    NO_RECORDING,
    Machine,
    header,
    ranks_of,
    read_gpu,
    sharing,
    split_gpu_statements,
)
from test_site import NOT_MEASURED, NUMBER, _claim_or_nothing, _shown_by

RECORDINGS = sorted(GPU_OUTPUTS.glob("*.txt"))
CHAPTERS = sorted((REPO / "chapters").glob("*.md"))
INCLUDE = re.compile(r'--8<-- "docs/outputs/gpu/([^"]+)"')


def gpu_outputs_of(text: str) -> dict[str, str]:
    """The GPU recordings a page includes: name -> everything in the file (header too)."""
    return {name: (GPU_OUTPUTS / name).read_text() for name in INCLUDE.findall(text)}


# test_site's NUMBER, and thousands written with commas from the first digit on (22,975).
GPU_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d+(?:e-?\d+)?|\d{1,3}(?:,\d{3})+|\d{3,})(?![\w])")


def gpu_numbers(text: str) -> list[str]:
    """The numbers a page states in its GPU statements (gpu_outputs.split_gpu_statements):
    prose, and a number alone in inline code; code blocks and included outputs are not claims."""
    statements = split_gpu_statements(text)[0]
    prose = re.sub(r"```.*?```|`([^`\n]*)`", _claim_or_nothing, statements, flags=re.S)
    return [n.lstrip("+") for n in GPU_NUMBER.findall(prose) if n.lstrip("+") not in NOT_MEASURED]


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_every_gpu_recording_names_card_versions_ranks_date_and_commit(path):
    command, fields, output = read_gpu(path)
    assert fields["card"].startswith("NVIDIA "), fields
    assert int(fields["memory"].replace(",", "")) > 0 and fields["driver"], fields
    assert fields["torch"] and fields["cuda"] and fields["nccl"], fields
    assert ("nccl" in fields["how"]) != ("gloo-cuda" in fields["how"]), f"which backend? {fields['how']}"
    assert output.strip(), f"{path.name} holds no output"
    if (OUTPUTS / path.name).exists():  # the CPU capture's name: the same script
        script = re.compile(r"\bscripts/\S+\.py")
        assert script.findall(command) == script.findall(read(OUTPUTS / path.name)[0]), (
            f"{path.name}: the GPU recording runs another script than docs/outputs/{path.name}")
    else:
        assert path.name in GPU_COMMANDS or path.name.startswith(("00_", "01_")), (
            f"{path.name}: a GPU-only recording needs its command in gpu_outputs.GPU_COMMANDS")


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_shows_gpu_output_or_says_it_has_none(page):
    text = page.read_text()
    shown = gpu_outputs_of(text)
    says_none = [line for line in text.splitlines() if line.startswith(NO_RECORDING)]
    assert shown or len(says_none) == 1, (
        f"{page.name} includes no docs/outputs/gpu/ file and has no line starting '{NO_RECORDING}'")
    for name in shown:
        code = int(read_gpu(GPU_OUTPUTS / name)[1]["exit"])
        if code != 0:  # a failed run on the page: the page says what its exit code means
            said = split_gpu_statements(text)[0]
            assert re.search(rf"exit code {code}\b|exits? (?:with )?{code}\b", said), (
                f"{page.name} shows {name}, which exited {code}, and says nothing of its exit code")


def test_every_gpu_recording_is_on_a_page():
    shown = {name for page in CHAPTERS for name in INCLUDE.findall(page.read_text())}
    assert {p.name for p in RECORDINGS} <= shown, sorted({p.name for p in RECORDINGS} - shown)


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.stem)
def test_gpu_numbers_on_a_page_come_from_its_gpu_recordings(page):
    """A number in a GPU tab, an "On GPUs" note or a sentence naming the H200 is one that a
    GPU recording included on the same page shows (rounded or not)."""
    text = page.read_text()
    outputs = gpu_outputs_of(text)
    unshown = [number for number in gpu_numbers(text) if not _shown_by(outputs, number)]
    assert not unshown, (f"{page.name} states {unshown} about GPUs, which no GPU recording it includes "
                         "(docs/outputs/gpu/) shows")


def test_gpu_statements_are_told_from_cpu_prose():
    """What counts as a GPU statement, on a page made up for it."""
    page = ("The CPU run took 0.172 s. On the H200 it took 0.0137 s. Back on CPUs, 1.25 s.\n\n"
            '=== "CPU (2 processes)"\n\n    0.5 s here\n\n=== "GPU (H200, 2 ranks share it)"\n\n'
            "    1.75 s there\n\n"
            '!!! note "On GPUs: more"\n    3.25 GB/s\n\n'
            '??? note "Under the hood"\n    6.5 ms\n\n'
            "### On a GPU: batch 1024\n\n12.5 ms, and 25.5 ms.\n\n#### Detail\n\n50.5 ms\n\n"
            "## Next\n\n2.75 s\n")
    gpu, rest = split_gpu_statements(page)
    assert sorted(NUMBER.findall(gpu)) == ["0.0137", "1.75", "1024", "12.5", "25.5", "3.25", "50.5"]
    assert NUMBER.findall(rest) == ["0.172", "1.25", "0.5", "6.5", "2.75"]
    assert len(rest.splitlines()) == len(page.splitlines())


def test_the_ranks_run_under_nccl_where_they_fit_and_share_the_gpus_where_not():
    two = "torchrun --standalone --nproc_per_node=2 scripts/01_data_parallel_ddp/multinode_ddp_basic.py"
    assert sharing(two, gpus=1) == ({"DDP_BACKEND": "gloo-cuda"}, "2 ranks share 1 GPU over gloo with "
                                    "CUDA tensors (DDP_BACKEND=gloo-cuda)")
    assert sharing(two, gpus=2) == ({}, "2 ranks, one GPU each, under nccl")
    assert sharing(two, gpus=1, as_written=True)[0] == {}  # the newcomer's run: nccl, as typed
    assert sharing(f"{two} --backend gloo-cuda", gpus=8)[0] == {}  # the command chose the shared mode
    assert "gloo-cuda" in sharing(f"{two} --backend gloo-cuda", gpus=8)[1]
    assert sharing("python scripts/05_gradient_accumulation/grad_accumulation.py", gpus=1)[0] == {}
    assert ranks_of("for n in 1 2 4; do torchrun --nproc_per_node=$n x.py; done") == 4
    assert ranks_of("mpiexec -n 4 python x.py") == ranks_of("srun --ntasks=4 python x.py") == 4
    # and every capture of the pages reads: its ranks are those its output reports
    for path in RECORDINGS:
        command, fields, output = read_gpu(path)
        sizes = {int(n) for n in re.findall(r"world_size=(\d+)", output)}
        assert not sizes or ranks_of(command) == max(sizes) or "two_ranks" in path.name, (path.name, sizes)


def test_a_header_reads_back_as_written(tmp_path):
    machine = Machine("NVIDIA H100 80GB HBM3", 81559, "550.54.15", "2.14.1+cu130", "13.0", "2.27.3", 2)
    text = f"$ python x.py\n{header(machine, '1 rank under nccl', '2026-12-01', 'abc1234', 0)}\nout\n"
    path = tmp_path / "check.txt"
    path.write_text(text)
    command, fields, output = read_gpu(path)
    assert (command, output) == ("python x.py", "out")
    assert (fields["card"], fields["memory"], fields["nccl"], fields["commit"], fields["exit"]) == (
        "NVIDIA H100 80GB HBM3", "81,559", "2.27.3", "abc1234", "0")


def test_recording_again_without_cuda_stops_with_a_message():
    """No GPU visible (CUDA_VISIBLE_DEVICES empty, so on a GPU machine too): a message, exit 2,
    and no file of docs/outputs/gpu/ touched."""
    before = {p.name: p.read_text() for p in RECORDINGS}
    result = subprocess.run([sys.executable, "tests/captured_outputs.py", "--gpu", "06_"], cwd=REPO,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "needs NVIDIA GPUs" in result.stderr and "make outputs" in result.stderr, result.stderr
    assert {p.name: p.read_text() for p in sorted(GPU_OUTPUTS.glob("*.txt"))} == before  # nothing written


def test_recording_again_runs_each_page_command_under_the_backend_that_fits(tmp_path, monkeypatch):
    """make outputs-gpu on a made-up machine (its GPUs and runs faked): the page's command for
    each file, nccl where the ranks fit on the GPUs and the shared mode where not, the header
    read back as the copied recordings' is; a timed-out run leaves its file as it was."""
    import gpu_outputs

    names = ["06_amp_bad.txt", "05_accumulation_single.txt", "01_two_ranks_one_gpu.txt",
             "03_set_epoch_bad.txt", "12_gpu_ceiling.txt"]
    ran: dict[str, dict[str, str]] = {}

    def run_command(command: str, timeout: float = 300, env_extra=None) -> tuple[int, str]:
        if "set_epoch" in command and "timeout" in names:
            raise RuntimeError(f"timed out after {timeout} s: {command}")
        ran[command] = env_extra or {}
        return 0, "fresh output"

    def record(gpus: int) -> dict[str, tuple[str, dict[str, str], str]]:
        folder = tmp_path / f"gpus{gpus}"
        folder.mkdir()
        for name in names[:5]:
            (folder / name).write_text((GPU_OUTPUTS / name).read_text())
        monkeypatch.setattr(gpu_outputs, "GPU_OUTPUTS", folder)
        monkeypatch.setattr(gpu_outputs, "GPU_COMMANDS",
                            {n: GPU_COMMANDS[n] for n in names if n in GPU_COMMANDS})
        monkeypatch.setattr(gpu_outputs, "this_machine", lambda: Machine(
            "NVIDIA H100 80GB HBM3", 81559, "550.54.15", "2.14.1+cu130", "13.0", "2.27.3", gpus))
        monkeypatch.setattr(gpu_outputs, "run_command", run_command)
        ran.clear()
        code = gpu_outputs.main([])
        assert code == (1 if "timeout" in names else 0)
        return {name: read_gpu(folder / name) for name in names[:5]}

    one = record(gpus=1)
    page_command = read(OUTPUTS / "06_amp_bad.txt")[0]
    assert one["06_amp_bad.txt"][0] == page_command and ran[page_command] == {"DDP_BACKEND": "gloo-cuda"}
    assert "share 1 GPU" in one["06_amp_bad.txt"][1]["how"]
    assert one["06_amp_bad.txt"][1]["card"] == "NVIDIA H100 80GB HBM3"
    assert one["06_amp_bad.txt"][2] == "fresh output"
    # the page's command, not the one the H200's test lane ran
    assert one["03_set_epoch_bad.txt"][0] == read(OUTPUTS / "03_set_epoch_bad.txt")[0]
    assert ran[read(OUTPUTS / "05_accumulation_single.txt")[0]] == {}  # one process: the scripts' nccl
    assert ran[one["01_two_ranks_one_gpu.txt"][0]] == {}  # what a reader types: never the shared mode
    assert one["12_gpu_ceiling.txt"][0] == "python tests/gpu_ceiling.py"
    two = record(gpus=2)
    assert ran[page_command] == {} and two["06_amp_bad.txt"][1]["how"] == "one GPU each, under nccl"
    names.append("timeout")
    before = (GPU_OUTPUTS / "03_set_epoch_bad.txt").read_text()
    kept = record(gpus=4)
    assert kept["03_set_epoch_bad.txt"][2] == read_gpu(GPU_OUTPUTS / "03_set_epoch_bad.txt")[2]
    assert (GPU_OUTPUTS / "03_set_epoch_bad.txt").read_text() == before



H100 = Machine("NVIDIA H100 80GB HBM3", 81559, "550.54.15", "2.14.1+cu130", "13.0", "2.27.3", 1)


@pytest.fixture
def lane_repo(tmp_path, monkeypatch):
    """A git repository of its own with a docs/outputs/gpu/ of made-up recordings, for
    gpu_outputs.main on a made-up H100 whose runs are faked. Returns (repo, Runs, git)."""
    import gpu_outputs

    repo = tmp_path / "repo"
    folder = repo / "docs" / "outputs" / "gpu"
    folder.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (repo / "script.py").write_text("print('x')\n")
    h200 = Machine("NVIDIA H200", 143771, "580.159.04", "2.11.0+cu130", "13.0", "2.28.9", 1)
    # (name, the seconds its last recording took, None: not timed, its date)
    for name, seconds, date in [("05_slow.txt", 90, "2026-11-26"), ("05_quick.txt", 5, "2026-11-26"),
                                ("05_untimed.txt", None, "2026-11-26"), ("05_newer.txt", 1, "2026-11-27"),
                                ("17_checkpoint_bad.txt", 50, "2026-11-26"),
                                ("17_checkpoint_bad_1.txt", 2, "2026-11-26")]:
        text = header(h200, "1 rank on 1 GPU (nccl where the script makes a process group)", date,
                      "eefe6c3", 0, seconds)
        (folder / name).write_text(f"$ python script.py {name}\n{text}\nold output\n")
    (repo / "docs/outputs/05_extra.txt").write_text("$ python script.py 05_extra.txt\ncpu output\n")
    git("add", ".")
    git("commit", "-q", "-m", "recordings")
    runs = Runs()
    for module_name, value in [("REPO", repo), ("GPU_OUTPUTS", folder), ("OUTPUTS", folder.parent),
                               ("GPU_COMMANDS", {}), ("run_command", runs.run_command),
                               ("this_machine", lambda: H100)]:
        monkeypatch.setattr(gpu_outputs, module_name, value)
    return repo, runs, git


class Runs:
    """The faked runs: the file each command is for, in order; after `stop_after` runs, the
    machine's time runs out (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.stop_after: int | None = None

    def run_command(self, command: str, timeout: float = 300, env_extra=None) -> tuple[int, str]:
        if self.stop_after is not None and len(self.files) >= self.stop_after:
            raise KeyboardInterrupt
        self.files.append(command.split()[-1])
        return 0, "fresh output"


def test_the_commit_in_a_header_is_the_trees_before_the_run_wrote_anything(lane_repo):
    """Issue 39: the first file written made every later one '+local changes'. The mark is
    taken once, and the recordings themselves are no change to the code that ran."""
    import gpu_outputs

    repo, runs, git = lane_repo
    assert gpu_outputs.main([]) == 0 and len(runs.files) == 6
    head = git("rev-parse", "--short", "HEAD")
    marks = {(read_gpu(p)[1]["commit"], read_gpu(p)[1].get("dirty"))
             for p in (repo / "docs/outputs/gpu").glob("*.txt")}
    assert marks == {(head, None)}, marks
    (repo / "script.py").write_text("print('changed')\n")  # a real local change: every file says so
    assert gpu_outputs.main(["--force"]) == 0
    assert {read_gpu(p)[1].get("dirty") for p in (repo / "docs/outputs/gpu").glob("*.txt")} == {
        "+local changes"}


def test_outputs_gpu_says_how_long_records_the_most_useful_first_and_picks_up_where_it_stopped(
        lane_repo, capsys):
    import gpu_outputs

    repo, runs, _ = lane_repo
    runs.stop_after = 2  # the machine's time runs out during the third run
    with pytest.raises(KeyboardInterrupt):
        gpu_outputs.main(["--all"])
    said = capsys.readouterr().out
    # the estimate: 90 + 5 + 1 + 50 + 2 s recorded, and 2 files (05_untimed, 05_extra) not timed
    untimed = gpu_outputs.UNTIMED_SECONDS
    assert (f"7 file(s) to record on NVIDIA H100 80GB HBM3; about {round((148 + 2 * untimed) / 60)} min "
            f"(5 from the durations their last recordings took; 2 not timed yet, counted at {untimed} s "
            "each)") in said, said
    # the order: what a page shows before --all's extra; the oldest recording first, then the
    # quickest; 17_checkpoint_bad_1 right after the capture whose files it reads
    order = ["17_checkpoint_bad.txt", "17_checkpoint_bad_1.txt", "05_quick.txt", "05_untimed.txt",
             "05_slow.txt", "05_newer.txt", "05_extra.txt"]
    assert runs.files == order[:2], runs.files
    # run again: it goes on with the third, the first two being recorded at this commit on this card
    runs.files.clear()
    runs.stop_after = None
    assert gpu_outputs.main(["--all"]) == 0
    said = capsys.readouterr().out
    assert "5 file(s) to record" in said and "2 recorded at " in said, said
    assert runs.files == order[2:], runs.files
    assert re.search(r", took \d+ s$", (repo / "docs/outputs/gpu/05_extra.txt").read_text(), flags=re.M)
    runs.files.clear()
    assert gpu_outputs.main(["--all"]) == 0 and runs.files == []  # everything done at this commit
    assert gpu_outputs.main(["--all", "--force", "05_q"]) == 0 and runs.files == ["05_quick.txt"]
