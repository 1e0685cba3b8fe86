"""Chapter 01 under every launcher the chapter shows, and its pitfall, bad versus good."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import captured_run, mpiexec, python, script_help

BASIC = "01_data_parallel_ddp/multinode_ddp_basic.py"
LOADER = "01_data_parallel_ddp/distributed_dataloader.py"
NUM_SAMPLES = 2048  # the script's default data set size


def checksums(result) -> list[float]:
    """Every rank's weights checksum after training, as rank 0 printed them."""
    line = next(ln for ln in result.output.splitlines() if ln.startswith("weights checksum per rank: "))
    return [float(x) for x in line.split(": ", 1)[1].split(", ")]


def assert_trained(result, world_size: int, launcher: str) -> None:
    """Exit 0, every rank took part, rank 0 alone printed, the loss went down, and the
    replicas ended identical (DDP averaged the gradients: every rank took the same steps)."""
    summary = result.clean_summary()
    assert summary["world_size"] == str(world_size)
    assert summary["launcher"] == launcher
    assert summary["backend"] == "gloo"
    assert float(summary["final_loss"]) < float(summary["first_loss"]), summary
    per_rank = NUM_SAMPLES // world_size
    assert f"samples per rank per epoch: {[per_rank] * world_size}" in result.output
    assert checksums(result) == [checksums(result)[0]] * world_size, result.output


@pytest.fixture(scope="module")
def torchrun_2():
    """The chapter's two-process run of the good variant: the run the page shows."""
    return captured_run("01_basic_good.txt")


@pytest.fixture(scope="module")
def global_batch():
    """One process on the global batch of two ranks of 32: what DDP must reproduce."""
    return python(BASIC, "--batch-size", "64")


def test_single_process_without_launcher(global_batch):
    assert_trained(global_batch, world_size=1, launcher="none")


def test_torchrun(torchrun_2):
    assert_trained(torchrun_2, world_size=2, launcher="torchrun")


def test_gradients_are_averaged_like_one_process_on_the_global_batch(torchrun_2, global_batch):
    """DistributedSampler gives rank r the samples r, r+2, ... of each global batch of 64 in
    the shuffled order, so two ranks of 32 see exactly the single process's batches. With
    the gradients averaged the weights end the same, up to float rounding (~1e-6); with
    summed or unsynchronized gradients they do not (each rank would step on its own half)."""
    (two,), (one,) = set(checksums(torchrun_2)), checksums(global_batch)
    assert two == pytest.approx(one, abs=1e-5), (torchrun_2.output, global_batch.output)
    assert torchrun_2.summary()["final_loss"] == global_batch.summary()["final_loss"]


def test_mpiexec_open_mpi():
    assert_trained(mpiexec("openmpi", 2, BASIC), world_size=2, launcher="openmpi")


def test_mpiexec_mpich_ppn_form():
    """MPICH in the PBS-style form `mpiexec -n N --ppn P` (here one 'node', this machine): the
    README's `mpiexec -n 8 --ppn 4`, and MPICH's launch with it. 2 ranks, not 4: the training is
    the same at any world size (4 ranks: the data loader's capture, 01_dataloader; 2 x 2 across
    two simulated nodes under MPICH: test_13's test_two_nodes_with_mpiexec_alone), and 2 ranks
    are about 7 CPU-s fewer."""
    assert_trained(mpiexec("mpich", 2, BASIC, launcher_args=("--ppn", "2")),
                   world_size=2, launcher="mpich")


def assert_every_rank_trained_on_everything(bad) -> None:
    """bad: each of the 2 ranks saw the whole data set, so the job did twice the work."""
    assert bad.returncode == 0, bad.output
    assert f"samples per rank per epoch: [{NUM_SAMPLES}, {NUM_SAMPLES}]" in bad.output
    assert bad.summary()["work"] == "2.00x"
    assert "WARNING: the ranks processed 2.0x the data set" in bad.output


def test_bad_without_sampler_every_rank_trains_on_the_whole_data_set():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_every_rank_trained_on_everything(captured_run("01_basic_bad.txt"))


def test_pitfall_without_sampler_every_rank_trains_on_everything(torchrun_2):
    bad, good = captured_run("01_basic_bad.txt"), torchrun_2  # the runs the page shows
    assert_every_rank_trained_on_everything(bad)
    assert good.returncode == 0, good.output
    good_summary = good.summary()
    # ... good: each rank saw its own half, once.
    assert f"samples per rank per epoch: [{NUM_SAMPLES // 2}, {NUM_SAMPLES // 2}]" in good.output
    assert good_summary["work"] == "1.00x"
    assert "WARNING" not in good.output


def loader_summary(result):
    return result.clean_summary()


def epoch_shards(output: str) -> dict[int, list[list[int]]]:
    """{epoch: [rank 0's indices, rank 1's, ...]} from the 'epoch E: rank 0: [...]  rank 1: ...' lines."""
    shards = {}
    for line in output.splitlines():
        if match := re.fullmatch(r"epoch (\d+): (.*)", line):
            parts = re.findall(r"rank (\d+): \[([\d, ]*)\]", match[2])
            assert [int(r) for r, _ in parts] == list(range(len(parts))), line
            shards[int(match[1])] = [[int(i) for i in ids.split(", ") if i] for _, ids in parts]
    return shards


@pytest.mark.parametrize("nproc", [2, 4])
def test_dataloader_shards_pad_and_drop(nproc):
    # 4 ranks: the run the page shows (torchrun); 2 ranks under MPICH's mpiexec
    result = captured_run("01_dataloader.txt") if nproc == 4 else mpiexec("mpich", nproc, LOADER)
    summary = result.clean_summary()
    samples, epochs = 11, 2  # the script's defaults
    per_rank_pad = -(-samples // nproc)  # ceil
    padded = per_rank_pad * nproc - samples
    # The shards the ranks drew, as printed: one line per epoch, one equal shard per rank,
    # disjoint but for the padding repeats, together the whole data set, new each epoch.
    shards = epoch_shards(result.output)
    assert sorted(shards) == list(range(epochs)), result.output
    for epoch, per_rank in shards.items():
        assert [len(shard) for shard in per_rank] == [per_rank_pad] * nproc, (epoch, per_rank)
        seen = Counter(i for shard in per_rank for i in shard)
        assert set(seen) == set(range(samples)), (epoch, per_rank)
        assert sum(seen.values()) - len(seen) == padded, (epoch, per_rank)  # repeats: the padding only
    assert shards[0] != shards[1]
    assert f"drop_last=False: {per_rank_pad} samples per rank;" in result.output
    assert f"drop_last=True: {samples // nproc} samples per rank;" in result.output
    assert summary["padded_per_rank"] == str(per_rank_pad)
    assert summary["drop_last_per_rank"] == str(samples // nproc)
    assert summary["padded"] == str(padded)
    assert summary["dropped"] == str(samples - (samples // nproc) * nproc)
    assert summary["reshuffled_each_epoch"] == "yes"


@pytest.fixture(scope="module")
def loader_one_process():
    return python(LOADER)


def test_dataloader_single_process(loader_one_process):
    # (under an MPI: test_dataloader_shards_pad_and_drop[2]; both MPIs' launches: test_mpiexec_*)
    assert loader_summary(loader_one_process)["padded"] == "0"


def test_dataloader_workers_start_with_forkserver_and_draw_the_same_shards(loader_one_process):
    """The GPU setting (worker processes, started with forkserver as DDP's docs ask for
    NCCL) hands out exactly the samples of the loader without workers."""
    plain, workers = loader_one_process, python(LOADER, "--num-workers", "2")
    assert "num_workers=2" in workers.output
    epochs = [[ln for ln in r.output.splitlines() if ln.startswith("epoch ")] for r in (plain, workers)]
    assert loader_summary(workers) == loader_summary(plain) and epochs[0] == epochs[1] and epochs[0]


def test_help_shows_the_launch_commands():
    result = script_help(BASIC)
    assert result.returncode == 0
    assert "torchrun --standalone --nproc_per_node=4" in result.output
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout", "--variant"):
        assert flag in result.output
