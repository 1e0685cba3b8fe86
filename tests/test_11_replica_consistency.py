"""Chapter 11: replicas stay identical through the wrapper and drift apart around it;
DDP's constructor equalizes different initial weights; per-rank seeds give per-rank dropout
masks; utils/replicas.py finds a perturbed rank and names the tensor.

Run as a script (``torchrun --nproc_per_node=2 tests/test_11_replica_consistency.py``) this
file is the worker of test_verify_replicas_under_torchrun: the checks at its end run on
every rank.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import captured_run, mpiexec, python

BYPASS = "11_replica_consistency/wrapper_bypass.py"
TABLE_ROW = re.compile(r"^\s*(\d+)((?:\s+-?\d+\.\d{10})+)\s+(\d+\.\d{10})\s+(identical|DIFFER.*)$", re.M)


def table(result) -> list[tuple[int, list[float], float, str]]:
    """The rows of the step table: step, each rank's checksum, max |w - w0|, verdict."""
    return [(int(step), [float(c) for c in checksums.split()], float(difference), verdict)
            for step, checksums, difference, verdict in TABLE_ROW.findall(result.output)]


def assert_replicas_drift_apart(bad_run) -> None:
    """bad: equal at step 0 (DDP's broadcast), different from the first step on, further
    apart with (nearly) every step, and two different models at the end."""
    bad = bad_run.clean_summary()
    assert bad["world_size"] == "2" and bad["launcher"] == "torchrun", bad
    assert bad["steps"] == "8", bad  # 256 samples / 2 ranks / 32 per batch x 2 epochs
    rows = table(bad_run)
    assert [row[0] for row in rows] == list(range(9)), bad_run.output
    assert rows[0][1][0] == rows[0][1][1] and rows[0][2] == 0.0 and rows[0][3] == "identical"
    for _, checksums, difference, verdict in rows[1:]:
        assert checksums[0] != checksums[1] and difference > 0 and verdict.startswith("DIFFER"), rows
    differences = [row[2] for row in rows]
    assert differences[-1] > 5 * differences[1], differences
    assert bad["identical_checks"] == "1/9" and bad["first_divergence_step"] == "1", bad
    assert bad["differing_tensors"] == "4/4" and bad["replica_losses_equal"] == "no", bad
    assert len(set(bad["replica_losses"].split(","))) == 2, bad
    assert "WARNING: the replicas differ from step 1 on" in bad_run.output


def test_bad_model_module_lets_the_replicas_drift_apart():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_replicas_drift_apart(captured_run("11_bypass_bad.txt"))


def test_pitfall_model_module_lets_the_replicas_drift_apart():
    bad_run = captured_run("11_bypass_bad.txt")  # torchrun, 2 ranks: the runs the page shows
    good_run = captured_run("11_bypass_good.txt")
    assert_replicas_drift_apart(bad_run)
    good = good_run.clean_summary()
    assert good["world_size"] == "2" and good["launcher"] == "torchrun", good
    assert good["steps"] == "8", good
    # good: identical at every check, digit for digit, and the same model at the end.
    rows = table(good_run)
    assert len(rows) == 9 and all(r[1][0] == r[1][1] and r[2] == 0.0 and r[3] == "identical" for r in rows)
    assert rows[-1][1] != rows[0][1], "the good run did not train"
    assert good["identical_checks"] == "9/9" and good["first_divergence_step"] == "none", good
    assert good["differing_tensors"] == "0/4" and float(good["max_param_diff"]) == 0.0, good
    assert good["replica_losses_equal"] == "yes" and "WARNING" not in good_run.output


def test_bypass_under_mpich_checked_every_other_step():
    summary = mpiexec("mpich", 2, BYPASS, "--variant", "bad", "--epochs", "1",
                      "--check-every", "2").clean_summary()
    assert summary["launcher"] == "mpich" and summary["world_size"] == "2", summary
    # 256 samples / 2 ranks / 32 per batch = 4 steps, checked at steps 0, 2 and 4.
    assert summary["steps"] == "4" and summary["identical_checks"] == "1/3", summary
    assert summary["first_divergence_step"] == "2" and summary["differing_tensors"] == "4/4", summary
    assert summary["replica_losses_equal"] == "no" and float(summary["max_param_diff"]) > 0, summary


def test_one_process_cannot_drift():
    result = python(BYPASS, "--variant", "bad")
    summary = result.clean_summary()
    assert summary["world_size"] == "1" and summary["identical_checks"] == "17/17", summary
    assert "one process has one replica" in result.output


def test_ddp_broadcasts_rank_0_and_per_rank_seeds_give_per_rank_masks():
    result = captured_run("11_seeds.txt")  # the page's run, under torchrun (the launcher is not the subject)
    summary = result.clean_summary()
    assert summary["launcher"] == "torchrun" and summary["world_size"] == "2", summary
    # Part 1: different seeds, different weights; DDP(model) copies rank 0's to every rank.
    assert summary["init_before_ddp"] == "differ" and summary["init_after_ddp"] == "identical", summary
    before, after = (re.search(rf"^{when}.*: checksums rank 0 (\S+), rank 1 (\S+)", result.output, re.M)
                     for when in ("before", "after"))
    assert before.group(1) != before.group(2) and after.group(1) == after.group(2) == before.group(1)
    # Part 2: the same seed gives every rank the same masks (32 distinct in a batch of 64);
    # one seed per rank gives its own (about half the elements agree, as chance has it).
    assert summary["same_seed_mask_agreement"] == "100.0%", summary
    assert summary["same_seed_distinct_masks"] == "32/64", summary
    assert 30.0 < float(summary["per_rank_mask_agreement"].rstrip("%")) < 70.0, summary
    assert summary["per_rank_distinct_masks"] == "64/64", summary
    # Either way the wrapper averages the gradients: the replicas stay identical.
    assert summary["replicas_after_training"] == "identical", summary


def test_verify_replicas_under_mpich():
    result = mpiexec("mpich", 2, str(Path(__file__).resolve()))
    assert result.returncode == 0, result.output
    assert "replica checks passed: 7/7" in result.output, result.output


def test_checksums_see_swaps_and_sum_keeping_changes():
    """No process group: one rank, identical; the checksum reacts to what a plain sum misses."""
    import torch
    from torch import nn

    from utils.replicas import max_parameter_difference, parameter_checksum, tensor_checksums, verify_replicas

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    report = verify_replicas(model)
    assert report.identical and report.ranks == (0,) and report.tensor_counts == (7,)
    assert max_parameter_difference(model) == 0.0
    names, sums = tensor_checksums(model)
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                     "1.num_batches_tracked"] and sums.dtype == torch.float64 and sums.shape == (7,)
    assert len(tensor_checksums(model, include_buffers=False)[0]) == 4
    before = parameter_checksum(model).item()
    with torch.no_grad():
        bias = model[0].bias
        bias[0], bias[1] = bias[1].item(), bias[0].item()  # a swap: the plain sum is unchanged
    assert parameter_checksum(model).item() != before
    before = parameter_checksum(model).item()
    with torch.no_grad():
        bias += torch.tensor([0.5, -0.5, 0.25, -0.25])  # a change that sums to 0
    assert parameter_checksum(model).item() != before


if __name__ == "__main__":  # a rank of test_verify_replicas_under_mpich
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for utils/
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.distributed import cleanup_distributed, print0, setup_distributed
    from utils.replicas import max_parameter_difference, verify_replicas

    ctx = setup_distributed("gloo", 60)
    assert ctx.world_size == 2, "run with 2 processes"
    passed = 0

    def check(name: str, condition: bool, report=None) -> None:
        global passed
        assert condition, f"rank {ctx.rank}: {name}: {report}"
        passed += 1
        print0(f"ok: {name}: {report if report is not None else ''}")

    torch.manual_seed(ctx.rank)  # different weights on the two ranks
    plain = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    report = verify_replicas(plain)
    check("different seeds: rank 1 differs", not report.identical and report.differing_ranks == (1,)
          and report.tensor_counts == (9, 9) and len(report.differing_tensors) == 4, report)
    model = DDP(plain)
    report = verify_replicas(model)
    check("after DDP(...): identical", report.identical and report.max_difference == 0.0
          and len(set(report.checksums)) == 1, report)
    with torch.no_grad():
        if ctx.rank == 1:
            model.module[2].bias[0] += 1e-3
    report = verify_replicas(model)
    check("rank 1's bias perturbed: named", report.differing_ranks == (1,)
          and report.differing_tensors == ("2.bias",), report)
    difference = max_parameter_difference(model)
    check("max_parameter_difference measures it", abs(difference - 1e-3) < 1e-6, difference)
    report = verify_replicas(model, tolerance=1e-2)
    check("within a tolerance: identical", report.identical, report)
    with torch.no_grad():
        if ctx.rank == 1:
            model.module[2].bias[0] -= 1e-3
            model.module[1].running_mean[3] = 7.0  # a buffer only
    report = verify_replicas(model)
    without_buffers = verify_replicas(model, include_buffers=False)
    check("a buffer differs: seen, unless buffers are left out", report.differing_tensors
          == ("1.running_mean",) and without_buffers.identical, report)
    other = nn.Linear(2, 2) if ctx.rank == 0 else nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    report = verify_replicas(other)
    check("different models: no hang, reported", report.tensor_counts == (2, 4)
          and "not even the same model" in str(report), report)
    print0(f"replica checks passed: {passed}/7")
    del model
    cleanup_distributed()
