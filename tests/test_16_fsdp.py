"""Chapter 16: FSDP2 against DDP (losses, memory per rank) and its checkpoints, bad versus good."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from conftest import (
    REPO,
    VENV_BIN,
    captured_run,
    clean_env,
    mpiexec,
    parse_summary,
    python,
    run,
    run_as_main,
    script_help,
)

from utils.fsdp import BlockModel

COMPARE = "16_fsdp/fsdp_vs_ddp.py"
CHECKPOINT = "16_fsdp/sharded_checkpoint.py"
PARAMS = sum(p.numel() for p in BlockModel().parameters())  # 135236
LOSS_TOLERANCE = 1e-5  # fp32: FSDP2's loss against DDP's, and a resume at another world size


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


# One launch, many checks: the captured runs (the page shows them; test_site compares them).
@pytest.fixture(scope="module")
def compare_2():
    result = captured_run("16_compare.txt")
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def bf16_2():
    result = captured_run("16_bf16_keep_gathered.txt")
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def checkpoint_bad():
    result = captured_run("16_checkpoint_bad.txt")
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def checkpoint_good():
    """Saved by 2 ranks, then resumed from its epoch 1 by one process (two summaries)."""
    result = captured_run("16_checkpoint_good.txt")
    assert result.returncode == 0, result.output
    runs = re.split(r"^(?=launcher=)", result.output, flags=re.M)[1:]  # each run's first line
    assert len(runs) == 2, result.output
    return result, parse_summary(runs[0]), parse_summary(runs[1])


# --------------------------------------------------------------------------- FSDP2 vs DDP
def test_fsdp2_trains_and_its_loss_matches_ddps(compare_2):
    result, summary = compare_2
    assert summary["world_size"] == "2" and summary["launcher"] == "torchrun"
    rows = re.findall(r"^\s+\d+\s+(\S+)\s+(\S+)\s+\S+$", result.output, flags=re.M)
    ddp, fsdp = ([float(r[i]) for r in rows] for i in (0, 1))
    assert len(ddp) == 8 and fsdp[-1] < fsdp[0] - 0.5  # it trains
    assert max(abs(a - b) for a, b in zip(ddp, fsdp, strict=True)) <= LOSS_TOLERANCE
    assert summary["losses_match"] == "yes" and float(summary["tolerance"]) == LOSS_TOLERANCE


def test_memory_per_rank_equals_the_arithmetic(compare_2):
    """2 ranks: DDP holds 16 bytes per parameter on every rank, FSDP2 16/2, on each rank."""
    _, summary = compare_2
    assert int(summary["params"]) == PARAMS
    assert int(summary["ddp_bytes"]) == 16 * PARAMS
    assert summary["fsdp2_bytes_per_rank"] == f"{8 * PARAMS},{8 * PARAMS}"
    # Between forward and backward only the root's own parameters (embed, head) stay whole.
    model = BlockModel()
    root = sum(p.numel() for m in (model.embed, model.head) for p in m.parameters())
    assert int(summary["between_fwd_bwd"]) == 4 * root


def test_memory_table_at_1_2_4_ranks(compare_2):
    """1 and 4 ranks in 16_memory.txt; 2 ranks: the comparison's run (the page shows it above),
    whose table is the same script's."""
    result = captured_run("16_memory.txt")
    assert result.returncode == 0, result.output
    tables = re.findall(r"world size (\d+)\):\n.*\nddp\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\n"
                        r"fsdp2\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", result.output)
    tables += re.findall(r"world size (\d+)\):\n.*\nddp\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\n"
                         r"fsdp2\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", compare_2[0].output)
    assert [int(t[0]) for t in tables] == [1, 4, 2], result.output
    for n, *cells in tables:
        n, cells = int(n), [int(c) for c in cells]
        ddp, fsdp = cells[:5], cells[5:]
        assert ddp == [4 * PARAMS, 4 * PARAMS, 8 * PARAMS, 16 * PARAMS, 16 * PARAMS]
        assert fsdp == [4 * PARAMS // n, 4 * PARAMS // n, 8 * PARAMS // n, 16 * PARAMS // n,
                        16 * PARAMS // n]


def shard_sizes(world_size: int) -> list[int]:
    """Parameters each rank of `world_size` holds after shard_model(): every rank's FSDP2
    shards built in this one process, rank by rank, over a fake process group (no
    collectives run: fully_shard only cuts the tensors)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from utils.fsdp import build_model, local_bytes, shard_model

    sizes = []
    for rank in range(world_size):
        dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
        try:
            mesh = init_device_mesh("cpu", (world_size,))
            model = shard_model(build_model(0, torch.device("cpu")), mesh)
            sizes.append(local_bytes(model.parameters()) // 4)  # fp32: 4 bytes each
        finally:
            dist.destroy_process_group()
    return sizes


def test_16p_over_n_is_exact_up_to_4_ranks_and_not_at_8():
    """The page: 16P/N holds while N divides every first dimension; at 8 ranks the head's 4
    rows (and 4 biases) go to ranks 0-3, which then hold 65 parameters more than ranks 4-7."""
    assert shard_sizes(4) == [PARAMS // 4] * 4
    at_8 = shard_sizes(8)
    assert sum(at_8) == PARAMS and PARAMS % 8 == 4
    head = BlockModel().head
    assert head.weight.shape == (4, 64) and head.bias.shape == (4,)
    assert at_8[:4] == [at_8[4] + 65] * 4 and at_8[4:] == [at_8[4]] * 4


def test_bf16_policy_and_parameters_kept_gathered(bf16_2):
    _, summary = bf16_2
    assert summary["precision"] == "bf16"
    # every block kept whole until backward, in bf16: 2 bytes per parameter
    assert int(summary["between_fwd_bwd"]) == 2 * PARAMS
    # the optimizer's sharded parameters stay fp32: the memory table does not change
    assert summary["fsdp2_bytes_per_rank"] == f"{8 * PARAMS},{8 * PARAMS}"
    assert 0 < float(summary["max_loss_diff"]) <= float(summary["tolerance"])
    assert summary["losses_match"] == "yes"


def test_fsdp2_matches_ddp_under_open_mpi(compare_2):
    result = mpiexec("openmpi", 2, COMPARE)
    summary = result.clean_summary()
    assert summary["launcher"] == "openmpi" and summary["losses_match"] == "yes"
    assert summary["fsdp2_bytes_per_rank"] == compare_2[1]["fsdp2_bytes_per_rank"]
    assert summary["max_loss_diff"] == compare_2[1]["max_loss_diff"]


# --------------------------------------------------------------------------- checkpoints
def test_bad_every_rank_saves_shards_not_a_model(checkpoint_bad):
    result, summary = checkpoint_bad
    assert summary["rank_file_load"] == "failed"
    assert (f"rank0.pt: blocks.0.up.weight is a DTensor, local shard [128, 64] of [256, 64]; "
            f"the file holds {2 * PARAMS} of {4 * PARAMS} parameter bytes") in result.output
    # PyTorch's own words, as the script printed them
    assert "Error(s) in loading state_dict for BlockModel:" in result.output
    assert "size mismatch for embed.weight: copying a param with shape torch.Size([32, 32])" in result.output
    # The gather on every rank: each rank held the whole model at once.
    assert summary["export_bytes_per_rank"] == f"{4 * PARAMS},{4 * PARAMS}"
    assert summary["plain_load"] == "ok"


def test_good_dcp_save_at_2_resumes_in_one_process_and_exports_from_rank_0(checkpoint_good):
    """2 shards read into one process's whole tensors (saved_at_1 below: 1 shard into 2)."""
    result, at2, at1 = checkpoint_good
    assert at2["world_size"] == "2" and at1["world_size"] == "1" and at1["start_epoch"] == "1"
    assert at2["launcher"] == "torchrun" and at1["launcher"] == "none"
    assert "epoch_3 holds: .metadata __0_0.distcp __1_0.distcp\n" in result.output
    assert "epoch_3 holds: .metadata __0_0.distcp\n" in result.output
    assert "resumed from epoch_1: 1 epoch(s) done, saved by 2 ranks, loaded by 1" in result.output
    # every value restored: the checksum after the load is the one printed after the save
    loaded = float(re.search(r"loaded by 1; checksum (\S+)", result.output)[1])
    assert loaded == pytest.approx(floats(at2["checksums"])[0], rel=1e-12)
    # the resumed run continues the 2-rank run (other world size: rounding only)
    assert floats(at1["losses"]) == pytest.approx(floats(at2["losses"])[1:], abs=LOSS_TOLERANCE)
    # the export: rank 0 alone held the whole model; a plain model loads it
    assert at2["export_bytes_per_rank"] == f"{4 * PARAMS},0"
    assert at1["export_bytes_per_rank"] == f"{4 * PARAMS}"
    assert at2["plain_load"] == at1["plain_load"] == "ok" and at2["rank_file_load"] == "n/a"


def test_the_shared_modes_cpu_gather_gives_what_the_two_exports_give():
    """The shared mode (--backend gloo-cuda) exports through utils/shared_mode.py's
    gather_through_cpu, because gloo's all-gather of CUDA tensors kills the process. On
    CPUs, at 2 ranks, it must give exactly what it stands in for: full_tensor() on every
    rank (bad), and get_model_state_dict(full_state_dict, cpu_offload) on rank 0 with an
    empty dict elsewhere (good), for the chapter's model and for shards of uneven size; and
    it copies each shard to the CPU (`copied`: counted, since on CPUs the copy changes nothing
    that can be seen, while in the shared mode a shard left on the GPU crashes gloo)."""
    result = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2",
                  REPO / "tests" / "shared_mode_probe.py"], timeout=180)
    assert result.clean_summary() == {f"{model}_{check}": "yes" for model in ("block", "uneven")
                                      for check in ("to_all", "rank0", "cpu", "copied")}, result.output


@pytest.fixture(scope="module")
def saved_at_1(tmp_path_factory):
    path = tmp_path_factory.mktemp("at1")
    result = python(CHECKPOINT, "--checkpoint-dir", str(path))
    return path, result.clean_summary()


def test_resume_at_the_same_world_size_is_exact(saved_at_1, tmp_path):
    path, straight = saved_at_1
    resumed = python(CHECKPOINT, "--checkpoint-dir", str(tmp_path), "--resume-from",
                     str(path / "epoch_1")).clean_summary()
    assert resumed["losses"].split(",") == straight["losses"].split(",")[1:]  # every digit
    assert resumed["checksums"].split(",") == straight["checksums"].split(",")[1:]


def test_dcp_checkpoint_of_1_rank_resumes_under_mpich_at_2(saved_at_1, tmp_path):
    path, straight = saved_at_1
    copy = tmp_path / "epoch_1"
    shutil.copytree(path / "epoch_1", copy)
    result = mpiexec("mpich", 2, CHECKPOINT, "--checkpoint-dir", str(tmp_path / "run"),
                     "--resume-from", str(copy))
    summary = result.clean_summary()
    assert summary["launcher"] == "mpich"
    assert "saved by 1 ranks, loaded by 2" in result.output
    assert floats(summary["losses"]) == pytest.approx(floats(straight["losses"])[1:], abs=LOSS_TOLERANCE)
    assert sorted(p.name for p in (tmp_path / "run" / "epoch_3").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_dcp_checkpoint_loads_offline_into_a_plain_model(saved_at_1, tmp_path):
    """No process group: DCP's format_utils turns the sharded checkpoint into one torch.save
    file, and its 'model' entry is a complete plain state_dict."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path, _ = saved_at_1
    dcp_to_torch_save(path / "epoch_3", tmp_path / "full.pt")
    state = torch.load(tmp_path / "full.pt", weights_only=False)
    assert state["epoch"] == 3
    model = BlockModel()
    model.load_state_dict(state["model"])  # strict: every key, every shape
    exported = torch.load(path / "model.pt", weights_only=True)
    assert all(torch.equal(exported[k], v) for k, v in state["model"].items())


def test_bad_input_gets_a_clear_message(tmp_path):
    # refused in parse_args(), before any process group: run in this process (run_as_main)
    result = run_as_main(REPO / "scripts" / CHECKPOINT, "--checkpoint-dir", tmp_path,
                         "--resume-from", tmp_path, env=clean_env())
    assert result.returncode == 1
    assert f"--resume-from {tmp_path}: not a DCP checkpoint (no .metadata file in it)" in result.output
    assert "Traceback" not in result.output


def test_help_shows_the_launch_commands():
    result = script_help(CHECKPOINT)  # (fsdp_vs_ddp.py shares the flags: utils.fsdp.add_fsdp_args)
    assert result.returncode == 0 and "torchrun --standalone --nproc_per_node=4" in result.output
    for flag in ("--epochs", "--global-batch-size", "--lr", "--seed", "--backend", "--timeout",
                 "--variant", "--checkpoint-dir", "--resume-from"):
        assert flag in result.output
