"""Chapter 04: rank-0 logging, checkpoints of a DDP model, exact resume; bad versus good."""

from __future__ import annotations

import io
import logging
import os
import shutil
import stat
import struct
from pathlib import Path

import pytest
import torch
from conftest import (
    captured_run,
    mpiexec,
    observed_writes,
    parse_summary,
    python,
    script_help,
    torchrun,
    writes_to,
)
from torch import nn

from utils.checkpoint import (
    TEMP_PREFIX,
    atomic_torch_save,
    fingerprint_states,
    generator_states,
    strip_prefixes,
    unwrap_model,
)
from utils.logging_utils import get_logger

SCRIPT = "04_logging_and_checkpoints/train_with_checkpoints.py"
EPOCHS = 4  # the script's default


def train(launch, tmp_path, *args: str):
    """Run the script with its checkpoints in tmp_path; return (result, summary)."""
    result = launch(SCRIPT, "--checkpoint-dir", str(tmp_path), *args)
    assert result.returncode == 0, result.output
    return result, result.summary()


def plain_model() -> nn.Module:
    """The script's model, built here as an inference script would: no DDP."""
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 4))


def losses(summary: dict[str, str]) -> list[str]:
    return summary["losses"].split(",")


def rng_states(summary: dict[str, str]) -> list[str]:
    """The fingerprint of every rank's RNG state at the start of each epoch the run trained."""
    return summary["rng_states"].split(",")


def observed(tmp_path_factory, name: str) -> tuple[Path, dict[str, str]]:
    """A checkpoint directory, and an environment that logs who writes into it."""
    path = tmp_path_factory.mktemp(name)
    return path, observed_writes(path, path.parent / f"{path.name}_writes")


def writes(path: Path, world_size: int, variant: str = "good") -> list[int]:
    """Per rank, how often the checkpoint file got new content, as the file system saw it."""
    return writes_to(path.parent / f"{path.name}_writes", path / f"checkpoint_{variant}.pt", world_size)


def epoch_lines(output: str, epoch: int, epochs: int = EPOCHS) -> list[str]:
    return [ln for ln in output.splitlines() if f"epoch {epoch}/{epochs}  loss" in ln]


# Runs that several tests read (each launch costs seconds on a loaded 2-core machine).
STOPPED = 2  # the epoch after which good_2 stops


@pytest.fixture(scope="module")
def straight():
    """The page's uninterrupted run (04_good: torchrun, 2 ranks, 4 epochs): its output and summary."""
    result = captured_run("04_good.txt")
    assert result.returncode == 0, result.output
    return result, result.summary()


@pytest.fixture(scope="module")
def good_2(tmp_path_factory):
    """The good variant at 2 ranks under torchrun, its writes observed: --resume in a fresh
    directory (it starts from scratch, as a job that may be restarted would) and stopped
    after epoch 2; test_resume_under_mpiexec_matches_torchrun resumes its checkpoint under MPICH."""
    path, env = observed(tmp_path_factory, "good_2")
    return (*train(lambda *a: torchrun(2, *a, env=env), path, "--resume", "--stop-after-epoch", str(STOPPED)),
            path)


@pytest.fixture(scope="module")
def bad_2(tmp_path_factory):
    """bad at 2 ranks, its writes observed: a copy of each line and a write per rank (2 ranks
    show it as 3 do, with a rank's 3.6 CPU-s fewer; the page's run, 04_bad, is at 2 too)."""
    path, env = observed(tmp_path_factory, "bad_2")
    return (*train(lambda *a: torchrun(2, *a, env=env), path, "--variant", "bad"), path)


@pytest.fixture(scope="module")
def single_good(tmp_path_factory):
    path, env = observed(tmp_path_factory, "single")
    return (*train(lambda *a: python(*a, env=env), path), path)


# --------------------------------------------------------------------------- logging
def test_single_process_logs_saves_and_loads(single_good):
    result, summary, path = single_good
    assert summary["world_size"] == "1" and summary["launcher"] == "none"
    assert writes(path, 1) == [EPOCHS]
    assert summary["plain_load"] == "ok"
    assert len(losses(summary)) == EPOCHS and float(losses(summary)[-1]) < float(losses(summary)[0])
    assert all(len(epoch_lines(result.output, e)) == 1 for e in range(1, EPOCHS + 1))


def test_bad_every_rank_logs_every_line(bad_2):
    result, summary, _ = bad_2
    assert summary["world_size"] == "2", summary
    for epoch in range(1, EPOCHS + 1):
        lines = sorted(epoch_lines(result.output, epoch))
        assert [ln.split("]")[0] for ln in lines] == ["[rank 0", "[rank 1"], result.output
    assert result.count("] saved checkpoint_bad.pt after epoch") == 2 * EPOCHS
    assert result.count("summary:") == 1  # the summary is rank 0's, in both variants


def test_good_only_rank_0_logs(straight):
    result, _ = straight
    for epoch in range(1, EPOCHS + 1):
        assert epoch_lines(result.output, epoch) == [epoch_lines(result.output, epoch)[0]]
        assert not epoch_lines(result.output, epoch)[0].startswith("[rank")
    assert result.count("saved checkpoint_good.pt after epoch") == EPOCHS
    assert "[rank" not in result.output


def test_logger_filters_by_rank_and_prefixes_on_request(monkeypatch):
    """get_logger() reads the rank from the launcher's variables before any process group."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    quiet, loud = io.StringIO(), io.StringIO()
    get_logger("test04.quiet", stream=quiet).info("hello")
    get_logger("test04.loud", all_ranks=True, stream=loud).info("hello")
    assert quiet.getvalue() == "" and loud.getvalue() == "[rank 1] hello\n"
    monkeypatch.setenv("RANK", "0")
    logger = get_logger("test04.quiet", stream=quiet)  # again: reconfigured, not a second handler
    logger.info("once")
    assert quiet.getvalue() == "once\n"
    assert len(logger.handlers) == 1 and not logger.propagate
    assert logging.getLogger("test04.quiet") is logger


# --------------------------------------------------------------------------- checkpoints
def test_bad_saves_module_keys_and_a_plain_model_cannot_load_them(bad_2):
    result, summary, path = bad_2
    assert writes(path, 2, "bad") == [EPOCHS] * 2  # every rank wrote the one file
    assert summary["plain_load"] == "failed"
    # PyTorch's own message, as the script printed it ...
    assert 'Missing key(s) in state_dict: "0.weight", "0.bias", "3.weight", "3.bias".' in result.output
    assert 'Unexpected key(s) in state_dict: "module.0.weight"' in result.output
    # ... and the same failure here, in a process with no DDP at all.
    saved = torch.load(path / "checkpoint_bad.pt", map_location="cpu", weights_only=True)
    assert all(key.startswith("module.") for key in saved["model"])
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "module\.0\.weight"'):
        plain_model().load_state_dict(saved["model"])
    plain_model().load_state_dict(strip_prefixes(saved["model"]))  # the repair for old files


def test_good_saves_clean_keys_once_atomically(good_2):
    result, summary, path = good_2
    assert writes(path, 2) == [STOPPED, 0]  # rank 0 alone wrote, once per epoch
    assert summary["plain_load"] == "ok"
    assert "its outputs equal the trained model's" in result.output
    assert sorted(p.name for p in path.iterdir()) == ["checkpoint_good.pt"]  # no temp file left
    saved = torch.load(path / "checkpoint_good.pt", map_location="cpu", weights_only=True)
    plain_model().load_state_dict(saved["model"])  # clean keys: loads as it is
    assert saved["epoch"] == STOPPED and saved["world_size"] == 2
    assert len(saved["rng"]) == 2 and not torch.equal(saved["rng"][0]["torch"], saved["rng"][1]["torch"])


class FailsMidSave:
    """An object whose pickling fails, as a full disk would, halfway through a save."""

    def __reduce__(self):
        raise OSError("No space left on device (simulated)")


def test_atomic_save_keeps_the_old_file_when_a_save_fails(tmp_path):
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"epoch": 1}, path)
    with pytest.raises(OSError, match="simulated"):
        atomic_torch_save({"epoch": 2, "weights": torch.ones(1000), "tail": FailsMidSave()}, path)
    assert torch.load(path, weights_only=True) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_atomic_save_syncs_the_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    """A rename survives a power cut only if the file's bytes reached the disk before it
    (fsync of the temporary file) and the directory entry after it (fsync of the directory).
    The calls are recorded in order, each fsync with what its descriptor points at."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        calls.append(("fsync", st.st_ino, "directory" if stat.S_ISDIR(st.st_mode) else st.st_size))
        real_fsync(fd)

    def replace(src, dst) -> None:
        calls.append(("replace", Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"weights": torch.ones(1000)}, path)
    saved = path.stat()  # the renamed temporary file: same inode
    assert calls == [
        ("fsync", saved.st_ino, saved.st_size),  # the temporary file, complete, before the rename
        ("replace", f"{TEMP_PREFIX}checkpoint.pt.{os.getpid()}.tmp", "checkpoint.pt"),
        ("fsync", tmp_path.stat().st_ino, "directory"),  # the directory holding the new name
    ]


def test_unwrap_and_strip_prefixes():
    model = plain_model()
    assert unwrap_model(model) is model
    wrapped = {f"module._orig_mod.{k}": v for k, v in model.state_dict().items()}
    assert list(strip_prefixes(wrapped)) == list(model.state_dict())


# --------------------------------------------------------------------------- resume
def summaries(output: str) -> list[dict[str, str]]:
    """The key=value pairs of every 'summary:' line, in order."""
    return [parse_summary(line) for line in output.splitlines() if line.startswith("summary:")]


def test_good_resume_reproduces_the_uninterrupted_run(straight):
    """The page's run (04_resume_good): stopped after epoch 2 by one torchrun, resumed by
    the next; against the uninterrupted run (04_good)."""
    _, straight = straight
    result = captured_run("04_resume_good.txt")
    assert result.returncode == 0, result.output
    first, resumed = summaries(result.output)
    assert first["start_epoch"] == "0" and first["epochs_done"] == "2"
    assert resumed["start_epoch"] == "2" and resumed["epochs_done"] == str(EPOCHS)
    assert "resumed from checkpoint_good.pt: 2 epoch(s) done" in result.output
    # The fingerprint moves every epoch (dropout draws from the CPU's generator here) ...
    assert len(set(rng_states(straight))) == EPOCHS, straight["rng_states"]
    # ... every rank's RNG state at the start of epochs 3 and 4 is the uninterrupted run's ...
    assert rng_states(first) + rng_states(resumed) == rng_states(straight)
    # ... and so is every loss, to the last printed digit.
    assert losses(first) + losses(resumed) == losses(straight)


def cuda_state(seed: int, offset: int) -> torch.Tensor:
    """What torch.cuda.get_rng_state() returns for CUDA's Philox generator: its seed and its
    offset (which every random kernel advances), 8 bytes each."""
    return torch.frombuffer(bytearray(struct.pack("<QQ", seed, offset)), dtype=torch.uint8)


def test_fingerprint_moves_with_each_generator_of_each_rank():
    """The rng_states fingerprint covers both generators of both ranks: moving any one alone
    changes it. The GPU's state is injected, as torch.cuda.get_rng_state() would give it."""
    torch.manual_seed(0)
    cpu_0 = torch.get_rng_state()
    torch.rand(1)
    cpu_1 = torch.get_rng_state()
    states = [[cpu_0, cuda_state(0, 0)], [cpu_1, cuda_state(1, 0)]]
    fingerprint = fingerprint_states(states)
    assert fingerprint_states([[s.clone() for s in rank] for rank in states]) == fingerprint  # states alone
    moved = {
        "rank 0's CPU": [[cpu_1, cuda_state(0, 0)], states[1]],
        "rank 0's GPU": [[cpu_0, cuda_state(0, 4)], states[1]],  # dropout on the GPU advanced the offset
        "rank 1's GPU": [states[0], [cpu_1, cuda_state(1, 4)]],
    }
    for what, changed in moved.items():
        assert fingerprint_states(changed) != fingerprint, f"missed a move of {what} generator"


def test_generator_states_hold_the_gpus_generator_on_a_gpu(monkeypatch):
    """On a CUDA device the states are the CPU's and that GPU's (faked here), and the
    fingerprint moves with either; on a CPU, the CPU's alone."""
    gpu = {"state": cuda_state(7, 0)}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": gpu["state"])
    cuda = torch.device("cuda", 0)
    before = fingerprint_states([generator_states(cuda)])
    assert [s.numel() for s in generator_states(cuda)] == [torch.get_rng_state().numel(), 16]
    gpu["state"] = cuda_state(7, 4)  # only the GPU's generator moves
    assert fingerprint_states([generator_states(cuda)]) != before
    assert len(generator_states(torch.device("cpu"))) == 1
    cpu_print = fingerprint_states([generator_states(torch.device("cpu"))])
    torch.rand(1)  # only the CPU's generator moves
    assert fingerprint_states([generator_states(torch.device("cpu"))]) != cpu_print


def test_bad_resume_does_not(straight):
    """The bad resume restores weights, optimizer and epoch but no RNG state: epoch 3 starts
    with the RNG state epoch 1 started with (the script's seed), so its dropout masks are
    epoch 1's, and the losses depart from the uninterrupted run's (the page's run,
    04_resume_bad, against the good variant's uninterrupted run: the variants train alike)."""
    _, straight = straight
    result = captured_run("04_resume_bad.txt")
    assert result.returncode == 0, result.output
    first, resumed = summaries(result.output)
    assert first["variant"] == resumed["variant"] == "bad"
    assert losses(first) == losses(straight)[:2]  # same training until the interruption
    assert rng_states(first) == rng_states(straight)[:2]
    assert resumed["start_epoch"] == "2"
    # The divergence: the RNG starts over, where the uninterrupted run's had moved on ...
    assert rng_states(resumed)[0] == rng_states(straight)[0] != rng_states(straight)[2]
    # ... while the weights and momentum were restored: the loss goes on from epoch 2's
    # level (a restart from scratch would be back near epoch 1's), but not to the same value.
    assert float(losses(resumed)[0]) < float(losses(straight)[1])
    assert losses(resumed)[0] != losses(straight)[2]


def test_resume_under_mpiexec_matches_torchrun(tmp_path, good_2, straight):
    """Stopped under torchrun, resumed under MPICH: the same losses as the uninterrupted
    torchrun run. --resume on every launch, as a job that may be restarted would: the first
    starts fresh. (The first half is good_2, its checkpoint copied: one launch fewer.)"""
    _, straight = straight
    result, first, path = good_2
    assert "no checkpoint_good.pt in the checkpoint directory yet" in result.output
    assert first["start_epoch"] == "0" and first["epochs_done"] == str(STOPPED)
    shutil.copy(path / "checkpoint_good.pt", tmp_path / "checkpoint_good.pt")
    _, resumed = train(lambda *a: mpiexec("mpich", 2, *a), tmp_path, "--resume")
    assert first["launcher"] == "torchrun" and resumed["launcher"] == "mpich"
    assert resumed["start_epoch"] == str(STOPPED) and resumed["epochs_done"] == str(EPOCHS)
    assert rng_states(first) + rng_states(resumed) == rng_states(straight)
    assert losses(first) + losses(resumed) == losses(straight)


def test_help_shows_the_launch_commands():
    result = script_help(SCRIPT)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=2" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant",
                 "--checkpoint-dir", "--resume", "--stop-after-epoch"):
        assert flag in result.output
