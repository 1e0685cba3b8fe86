"""Chapter 01 under every launcher the chapter shows, and its pitfall, bad versus good."""

from __future__ import annotations

import pytest
from conftest import mpiexec, python, torchrun

BASIC = "01_data_parallel_ddp/multinode_ddp_basic.py"
LOADER = "01_data_parallel_ddp/distributed_dataloader.py"
NUM_SAMPLES = 2048  # the script's default data set size


def assert_trained(result, world_size: int, launcher: str) -> None:
    """Exit 0, every rank took part, rank 0 alone printed, and the loss went down."""
    assert result.returncode == 0, result.output
    summary = result.summary()
    assert summary["world_size"] == str(world_size)
    assert summary["launcher"] == launcher
    assert summary["backend"] == "gloo"
    assert float(summary["final_loss"]) < float(summary["first_loss"]), summary
    assert result.count("summary:") == 1, "a line printed by more than rank 0"
    per_rank = NUM_SAMPLES // world_size
    assert f"samples per rank per epoch: {[per_rank] * world_size}" in result.output


def test_single_process_without_launcher():
    assert_trained(python(BASIC), world_size=1, launcher="none")


@pytest.mark.parametrize("nproc", [2, 4])
def test_torchrun(nproc):
    assert_trained(torchrun(nproc, BASIC), world_size=nproc, launcher="torchrun")


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_mpiexec(mpi):
    assert_trained(mpiexec(mpi, 4, BASIC), world_size=4, launcher=mpi)


def test_mpich_ppn_form():
    """The PBS-style `mpiexec -n N --ppn P` (here both 'nodes' are this machine)."""
    assert_trained(mpiexec("mpich", 4, BASIC, launcher_args=("--ppn", "2")),
                   world_size=4, launcher="mpich")


def test_pitfall_without_sampler_every_rank_trains_on_everything():
    bad = torchrun(2, BASIC, "--variant", "bad")
    good = torchrun(2, BASIC, "--variant", "good")
    assert bad.returncode == 0 and good.returncode == 0, bad.output + good.output
    bad_summary, good_summary = bad.summary(), good.summary()
    # bad: each of the 2 ranks saw the whole data set, so the job did twice the work ...
    assert f"samples per rank per epoch: [{NUM_SAMPLES}, {NUM_SAMPLES}]" in bad.output
    assert bad_summary["work"] == "2.00x"
    assert "WARNING: the ranks processed 2.0x the data set" in bad.output
    # ... good: each rank saw its own half, once.
    assert f"samples per rank per epoch: [{NUM_SAMPLES // 2}, {NUM_SAMPLES // 2}]" in good.output
    assert good_summary["work"] == "1.00x"
    assert "WARNING" not in good.output


def loader_summary(result):
    assert result.returncode == 0, result.output
    return result.summary()


@pytest.mark.parametrize("nproc", [2, 4])
def test_dataloader_shards_pad_and_drop(nproc):
    result = torchrun(nproc, LOADER)
    summary = loader_summary(result)
    samples = 11
    per_rank_pad = -(-samples // nproc)  # ceil
    assert summary["padded_per_rank"] == str(per_rank_pad)
    assert summary["drop_last_per_rank"] == str(samples // nproc)
    assert summary["padded"] == str(per_rank_pad * nproc - samples)
    assert summary["dropped"] == str(samples - (samples // nproc) * nproc)
    assert summary["reshuffled_each_epoch"] == "yes"
    # Each epoch's shards are disjoint (bar the padding) and together cover the data set.
    for line in (ln for ln in result.output.splitlines() if ln.startswith("epoch ")):
        shards = [eval(part.split(": ", 1)[1]) for part in line.split(": ", 1)[1].split("  ")]
        assert len(shards) == nproc
        seen = [i for shard in shards for i in shard]
        assert set(seen) == set(range(samples)), line


def test_dataloader_single_process_and_mpi():
    assert loader_summary(python(LOADER))["padded"] == "0"
    assert loader_summary(mpiexec("mpich", 4, LOADER))["padded"] == "1"
    assert loader_summary(mpiexec("openmpi", 2, LOADER))["padded"] == "1"


def test_dataloader_workers_start_with_forkserver_and_draw_the_same_shards():
    """The GPU setting (worker processes, started with forkserver as DDP's docs ask for
    NCCL) hands out exactly the samples of the loader without workers."""
    plain, workers = python(LOADER), python(LOADER, "--num-workers", "2")
    assert "num_workers=2" in workers.output
    epochs = [[ln for ln in r.output.splitlines() if ln.startswith("epoch ")] for r in (plain, workers)]
    assert loader_summary(workers) == loader_summary(plain) and epochs[0] == epochs[1] and epochs[0]


def test_help_shows_the_launch_commands():
    result = python(BASIC, "--help")
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=4" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant"):
        assert flag in result.output
