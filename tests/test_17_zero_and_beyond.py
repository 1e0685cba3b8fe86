"""Chapter 17: ZeroRedundancyOptimizer against plain DDP (memory per rank, the same step), its
checkpoints (rank 0's shard alone versus consolidated), and a two-dimensional DeviceMesh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import captured_run, mpiexec

CHECKPOINT = "17_zero_and_beyond/zero_checkpoint.py"
# zero_optimizer.py's default model: Linear(32, 128), 4 x Linear(128, 128), Linear(128, 4)
SHAPES = [(128, 32), (128,)] + [(128, 128), (128,)] * 4 + [(4, 128), (4,)]
# zero_checkpoint.py's model: Linear(32, 64), 2 x Linear(64, 64), Linear(64, 4)
CHECKPOINT_SHAPES = [(64, 32), (64,), (64, 64), (64,), (64, 64), (64,), (4, 64), (4,)]


def numel(shape: tuple[int, ...]) -> int:
    return int(torch.Size(shape).numel())


def expected_shards(shapes: list[tuple[int, ...]], world_size: int) -> list[list[int]]:
    """The parameters (sizes) each rank updates, by the rule ZeroRedundancyOptimizer states:
    whole tensors, largest first, each to the rank with the fewest elements so far (the first
    such rank on a tie)."""
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for size in sorted((numel(s) for s in shapes), reverse=True):
        sums = [sum(shard) for shard in shards]
        shards[sums.index(min(sums))].append(size)
    return shards


def adam_bytes(sizes: list[int]) -> int:
    """exp_avg and exp_avg_sq in fp32 (8 bytes per element) and a 0-dim fp32 step per tensor."""
    return 8 * sum(sizes) + 4 * len(sizes)


def ints(summary: dict[str, str], key: str) -> list[int]:
    return [int(x) for x in summary[key].split(",")]


@pytest.fixture(scope="module")
def zero_4():
    return captured_run("17_zero_4.txt")  # torchrun, 4 ranks (the page's run)


@pytest.fixture(scope="module")
def zero_1():
    return captured_run("17_zero_1.txt")  # one process


@pytest.fixture(scope="module")
def zero_2():
    return captured_run("17_zero_2.txt")  # torchrun, 2 ranks (the page's run; Open MPI: the checkpoint test)


@pytest.fixture(scope="module")
def bad():
    """The page's run (torchrun, 2 ranks): its checkpoint directory is its own, /tmp/ch17_bad,
    removed first, so the file read below is this run's (the one-process bad run writes
    /tmp/ch17)."""
    return captured_run("17_checkpoint_bad.txt"), Path("/tmp/ch17_bad")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good")
    return mpiexec("openmpi", 2, CHECKPOINT, "--checkpoint-dir", str(path)), path


# --------------------------------------------------------------------------- memory, step
@pytest.mark.parametrize("run, world_size, launcher",
                         [("zero_1", 1, "none"), ("zero_2", 2, "torchrun"), ("zero_4", 4, "torchrun")])
def test_adam_state_per_rank_equals_the_arithmetic(request, run, world_size, launcher):
    summary = request.getfixturevalue(run).clean_summary()
    assert summary["world_size"] == str(world_size) and summary["launcher"] == launcher
    everything = [numel(s) for s in SHAPES]
    assert int(summary["params"]) == sum(everything)
    # Plain DDP: every rank holds the state of every parameter.
    assert ints(summary, "ddp_state_bytes") == [adam_bytes(everything)] * world_size
    # ZeRO: each rank the state of its shard, whole tensors, as ZeroRedundancyOptimizer assigns them.
    shards = expected_shards(SHAPES, world_size)
    assert ints(summary, "zero_state_bytes") == [adam_bytes(shard) for shard in shards]
    assert ints(summary, "zero_tensors") == [len(shard) for shard in shards]
    assert ints(summary, "zero_elements") == [sum(shard) for shard in shards]
    assert sum(ints(summary, "zero_state_bytes")) == adam_bytes(everything)  # nothing lost, nothing twice
    if world_size > 1:
        assert max(ints(summary, "zero_state_bytes")) < adam_bytes(everything) / world_size * 1.25


@pytest.mark.parametrize("run", ["zero_1", "zero_2", "zero_4"])
def test_zero_parameters_equal_plain_ddps_after_the_steps(request, run):
    """Bit for bit: each element gets the same Adam arithmetic on the same all-reduced gradient,
    and the broadcast after ZeRO's step copies bits."""
    result = request.getfixturevalue(run)
    summary = result.clean_summary()
    assert summary["identical"] == "yes" and float(summary["max_param_diff"]) == 0.0
    assert "after 10 steps: largest |DDP+Adam - ZeRO+Adam|" in result.output


def test_the_page_table_rows_add_up(zero_4):
    """The table on the page: the arithmetic column is the measured one, row by row."""
    rows = [line.split() for line in zero_4.output.splitlines()
            if line.split() and line.split()[0] in {"0", "1", "2", "3"} and len(line.split()) == 7]
    assert len(rows) == 4
    for _, ddp, tensors, elements, zero, arithmetic, ratio in rows:
        assert int(zero) == int(arithmetic) == 8 * int(elements) + 4 * int(tensors)
        assert abs(float(ratio) - int(zero) / int(ddp)) < 1e-3


# --------------------------------------------------------------------------- checkpoints
def test_bad_save_from_rank_0_alone_loses_the_other_shards(bad):
    result, path = bad
    summary = result.clean_summary()
    assert summary["variant"] == "bad" and summary["world_size"] == "2"
    # PyTorch refuses the unconsolidated state_dict(), with its own message ...
    assert ("optimizer.state_dict() failed: RuntimeError: Optimizer state has not been "
            "consolidated on this rank. Please call `consolidate_state_dict(to=0)`") in result.output
    # ... and the shard rank 0 saved instead holds its parameters' state only.
    held = ints(summary, "held")
    assert sum(held) == len(CHECKPOINT_SHAPES) and held[0] < len(CHECKPOINT_SHAPES)
    saved = torch.load(path / "zero_bad.pt", map_location="cpu", weights_only=True)["optimizer"]
    assert len(saved["state"]) == held[0] == int(summary["saved_states"].split("/")[0])
    assert summary["saved_states"] == f"{held[0]}/{len(CHECKPOINT_SHAPES)}"


def test_bad_resume_fails_with_pytorchs_errors_and_does_not_continue_the_run(bad):
    result, _ = bad
    summary = result.clean_summary()
    assert ("optimizer.load_state_dict() failed on rank 0: ValueError: loaded state dict contains "
            "a parameter group that doesn't match the size of optimizer's group") in result.output
    assert summary["right_shape_states"] == "0/8" and int(summary["wrong_shape_states"]) > 0
    assert "resume: step 5 failed on rank 0: RuntimeError: The size of tensor a" in result.output
    assert summary["resumed_steps"] == "0/4" and summary["resume_equal"] == "no"


def test_bad_in_one_process_saves_everything_and_still_loads_it_onto_the_wrong_parameters():
    """One rank's "shard" is the whole state, numbered in the partition's order (largest
    first), not the model's: the load passes PyTorch's check and the first step fails."""
    result = captured_run("17_checkpoint_bad_1.txt")  # the page's run
    summary = result.clean_summary()
    assert summary["saved_states"] == "8/8" and "load_state_dict() failed" not in result.output
    assert int(summary["wrong_shape_states"]) > 0 and summary["resumed_steps"] == "0/4"
    assert "resume: step 5 failed on rank 0: RuntimeError: The size of tensor a" in result.output


def test_good_consolidated_save_resumes_exactly(good):
    result, path = good
    summary = result.clean_summary()
    assert summary["variant"] == "good" and summary["launcher"] == "openmpi"
    assert summary["saved_states"] == "8/8" and summary["right_shape_states"] == "8/8"
    assert summary["wrong_shape_states"] == "0" and summary["resumed_steps"] == "4/4"
    assert summary["resume_equal"] == "yes"
    assert "failed" not in result.output
    # The file holds every parameter's moments, each of its parameter's shape.
    saved = torch.load(path / "zero_good.pt", map_location="cpu", weights_only=True)["optimizer"]
    assert sorted(saved["state"]) == list(range(len(CHECKPOINT_SHAPES)))
    for index, shape in enumerate(CHECKPOINT_SHAPES):
        assert tuple(saved["state"][index]["exp_avg"].shape) == shape
        assert saved["state"][index]["step"].item() == 4.0  # saved after step 4
    # The loss table: the resumed column equals the uninterrupted one, digit for digit.
    rows = [line.split() for line in result.output.splitlines()
            if line.split()[:1] in (["5"], ["6"], ["7"], ["8"])]
    assert len(rows) == 4 and all(row[1] == row[2] for row in rows)


# --------------------------------------------------------------------------- device mesh
def test_two_dimensional_mesh_coordinates_groups_tp_and_dp():
    result = captured_run("17_mesh.txt")  # torchrun, 4 ranks as 2 x 2
    summary = result.clean_summary()
    assert summary["mesh"] == "2x2" and summary["coordinates"] == "0,0;0,1;1,0;1,1"
    table = [line.split(maxsplit=1) for line in result.output.splitlines() if line[:4].strip() in "0123"
             and line[:4].strip()]
    assert [row[1] for row in table] == ["(0, 0)    [0, 2]        [0, 1]", "(0, 1)    [1, 3]        [0, 1]",
                                          "(1, 0)    [0, 2]        [2, 3]", "(1, 1)    [1, 3]        [2, 3]"]
    assert "each rank holds a 16x16 slice of the 32x16 first weight" in result.output
    assert float(summary["tp_output_diff"]) < 1e-5  # fp32: the sum over two halves, in another order
    assert "gradient per rank [1.0, 2.0, 1.0, 2.0]" in result.output and summary["dp_grads_ok"] == "yes"
