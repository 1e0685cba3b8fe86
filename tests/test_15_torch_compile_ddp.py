"""Chapter 15: torch.compile with DDP: DDPOptimizer's subgraphs with optimize_ddp on and off,
graph breaks, recompilation of the smaller last batch and its fixes, compile time against the
steady-state step time (cold and warm inductor cache), and the checkpoint saved from the
compiled wrapper (PyTorch's real error) against the plain model's state (loads, equal tensors).

The captured runs use inductor's default cache (torchinductor_$USER under tempfile.gettempdir(),
shared by every run on this machine, warm after the first run): inductor writes its cache files
atomically (torch 2.14: `write_atomic`), so ranks and parallel runs on one node may share it.
Nothing asserted here depends on a warm cache: dynamo traces, splits and counts graphs, breaks
and recompilations in every run; the cache saves inductor's code generation and C++ compilation
only. 15_cache.txt compiles into a fresh cache of its own, so its first run is really cold.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import REPO, captured_run, clean_env, mpiexec, parse_summary, run_as_main

SCRIPT = "15_torch_compile_ddp/compile_ddp.py"
KEYS = ["layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias", "layers.4.weight",
        "layers.4.bias", "layers.6.weight", "layers.6.bias", "layers.8.weight", "layers.8.bias",
        "layers.10.weight", "layers.10.bias"]
BUCKETS = 5  # 4.1 MiB of parameters in 1 MiB buckets


def seconds(value: str) -> float:
    return float(value.rstrip("s"))


# One launch, many checks: the captured runs (the page shows them; test_site compares them).
@pytest.fixture(scope="module")
def bad():
    result = captured_run("15_compile_bad.txt")  # torchrun, 2 ranks, the compiled wrapper's keys
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def good():
    result = captured_run("15_compile_good.txt")  # torchrun, 2 ranks, clean keys, mark_dynamic
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def off():
    result = captured_run("15_optimize_ddp_off.txt")
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def other_order():
    result = captured_run("15_other_order.txt")  # one process: DDP(torch.compile(model))
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def compile_inner():
    result = captured_run("15_compile_inner.txt")  # one process: model.compile(); DDP(model)
    return result, result.clean_summary()


@pytest.fixture(scope="module")
def cache():
    """One process, --last-batch drop, twice into a fresh inductor cache: cold, then warm (one
    process compiles what each rank of a job compiles, at a third of a 2-rank launch's CPU)."""
    result = captured_run("15_cache.txt")
    assert result.returncode == 0, result.output
    runs = re.split(r"^(?=inductor cache: )", result.output, flags=re.M)[1:]
    assert [run.splitlines()[0] for run in runs] == ["inductor cache: cold", "inductor cache: warm"]
    return result, parse_summary(runs[0]), parse_summary(runs[1])


@pytest.fixture(scope="module")
def mpi(tmp_path_factory):
    """Open MPI, 2 ranks, the good variant with the ragged last batch; checkpoint kept."""
    path = tmp_path_factory.mktemp("ch15")
    result = mpiexec("openmpi", 2, SCRIPT, "--checkpoint-dir", str(path), timeout=240)
    return result, result.clean_summary(), path


# --------------------------------------------------------------------------- the checkpoint
def test_bad_checkpoint_of_the_compiled_wrapper_does_not_load_into_a_plain_model(bad):
    result, summary = bad
    assert summary["variant"] == "bad" and summary["world_size"] == "2" and summary["launcher"] == "torchrun"
    assert "wrappers: OptimizedModule > DistributedDataParallel > MLP" in result.output
    assert "saved compiled_bad.pt: first key '_orig_mod.module.layers.0.weight'" in result.output
    # PyTorch's own error, naming every key on both sides.
    assert ("plain model: load_state_dict() failed: RuntimeError: Error(s) in loading state_dict "
            "for MLP:\n\tMissing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in KEYS)) in result.output
    assert ("Unexpected key(s) in state_dict: " + ", ".join(f'"_orig_mod.module.{k}"' for k in KEYS)
            in result.output)
    assert summary["plain_load"] == "failed"
    # utils/checkpoint.py's strip_prefixes() repairs the file: the plain model gets the trained weights.
    assert "loads after strip_prefixes()" in result.output and summary["tensors_equal"] == "yes"


def test_other_order_carries_the_prefixes_the_other_way_round(other_order):
    result, summary = other_order
    assert "wrappers: DistributedDataParallel > OptimizedModule > MLP" in result.output
    assert "first key 'module._orig_mod.layers.0.weight'" in result.output
    assert summary["plain_load"] == "failed" and "Unexpected key(s) in state_dict: \"module._orig_mod." \
        in result.output
    # torch 2.14 splits at DDP's buckets in this order too (DDP's forward marks itself active),
    # and dynamo does not trace DDP's forward at all: no graph breaks.
    assert summary["subgraphs"] == str(BUCKETS) and summary["graph_breaks"] == "0"


def test_compile_inner_has_no_compile_wrapper_and_only_ddps_prefix(compile_inner):
    result, summary = compile_inner
    assert summary["order"] == "compile-inner"
    assert "wrappers: DistributedDataParallel > MLP\n" in result.output  # no OptimizedModule
    assert "first key 'module.layers.0.weight'" in result.output and "_orig_mod" not in result.output
    # Split at DDP's buckets, one dynamo graph, no graph break (dynamo never sees DDP's forward).
    assert summary["subgraphs"] == str(BUCKETS) and summary["graphs"] == "1"
    assert summary["graph_breaks"] == "0"


def test_good_checkpoint_loads_into_a_plain_model_with_equal_tensors(good):
    result, summary = good
    assert summary["variant"] == "good" and summary["world_size"] == "2"
    assert "saved compiled_good.pt: first key 'layers.0.weight'" in result.output
    assert summary["plain_load"] == "ok" and summary["tensors_equal"] == "yes"
    assert "failed" not in result.output


def test_good_checkpoint_file_under_mpi_is_the_trained_model(mpi):
    """The test loads the file itself into an uncompiled model: clean keys, the trained values."""
    result, summary, path = mpi
    assert summary["launcher"] == "openmpi" and summary["world_size"] == "2"
    assert summary["plain_load"] == "ok" and summary["tensors_equal"] == "yes"
    checkpoint = torch.load(path / "compiled_good.pt", map_location="cpu", weights_only=True)
    assert list(checkpoint["model"]) == KEYS
    from torch import nn

    plain = nn.Sequential(nn.Linear(32, 512), nn.ReLU(),
                          *[m for _ in range(4) for m in (nn.Linear(512, 512), nn.ReLU())], nn.Linear(512, 4))
    fresh = {k: v.clone() for k, v in plain.state_dict().items()}
    plain.load_state_dict({k.removeprefix("layers."): v for k, v in checkpoint["model"].items()})
    for key, value in plain.state_dict().items():
        assert torch.equal(value, checkpoint["model"][f"layers.{key}"])
        assert not torch.equal(value, fresh[key])  # trained weights, not a fresh model's
    assert checkpoint["epoch"] == 2 and checkpoint["world_size"] == 2  # save_checkpoint()'s file


# --------------------------------------------------------------------------- graphs, breaks
def test_ddp_optimizer_compiles_one_subgraph_per_bucket_and_off_compiles_one(bad, off):
    on_result, on = bad
    off_result, off_summary = off
    assert on["buckets"] == off_summary["buckets"] == str(BUCKETS)
    assert on["optimize_ddp"] == "on" and on["subgraphs"] == str(BUCKETS)
    assert off_summary["optimize_ddp"] == "off" and off_summary["subgraphs"] == "1"
    # Dynamo's own count of the graphs it traced in step 1 (the model's forward), before the split.
    assert on["graphs"] == off_summary["graphs"] == "1"
    for result in (on_result, off_result):
        assert "dynamo graphs in step 1: 1 traced, compiled as " in result.output


def test_graph_breaks_are_in_ddps_forward_not_in_the_model(bad, good):
    for result, summary in (bad, good):
        assert summary["model_graph_breaks"] == "0"
        assert "the plain model alone (torch._dynamo.explain): 1 graph, 0 graph breaks" in result.output
        assert "x Attempted to call function marked as skipped: function " \
               "`DistributedDataParallel._inside_ddp_forward`" in result.output
    # 3 when DDP's forward is traced once; the ragged run traces it again at the recompilation.
    assert bad[1]["graph_breaks"] == "4" and good[1]["graph_breaks"] == "3"


def test_bucket_cap_below_the_first_bucket_is_refused_with_advice():
    # refused in parse_args(), before any process group: run in this process (run_as_main)
    result = run_as_main(REPO / "scripts" / SCRIPT, "--bucket-cap-mb", "0.5", env=clean_env())
    assert result.returncode == 2
    assert "--bucket-cap-mb 0.5 is below DDPOptimizer's first bucket (1 MiB)" in result.output
    assert "set --bucket-cap-mb 1 or more, or --optimize-ddp off" in result.output


# --------------------------------------------------------------------------- recompilation
def test_smaller_last_batch_recompiles_and_mark_dynamic_or_drop_last_do_not(bad, good, cache, mpi):
    bad_result, bad_summary = bad
    assert bad_summary["last_batch"] == "ragged" and bad_summary["recompiles"] == "2"
    # Both frames dynamo compiled: DDP's forward (args[0]) and the model's (x), at the batch of 4.
    assert ("step 4 (batch of 4) recompiled: 0/0: tensor 'args[0]' size mismatch at index 0. "
            "expected 32, actual 4") in bad_result.output
    assert "step 4 (batch of 4) recompiled: 4/0: tensor 'x' size mismatch at index 0." in bad_result.output
    assert mpi[1]["recompiles"] == "2"  # the same under Open MPI
    # The fixes: one graph for every batch size, or no smaller batch.
    assert good[1]["last_batch"] == "dynamic" and good[1]["recompiles"] == "0"
    assert good[1]["steps"] == bad_summary["steps"] == "8"  # the batch of 4 still trained
    _, cold, warm = cache
    assert cold["last_batch"] == warm["last_batch"] == "drop"
    assert cold["recompiles"] == warm["recompiles"] == "0"
    assert cold["steps"] == "12"  # 6 batches of 32 per epoch; the 7th (8 samples) dropped
    assert "recompiled" not in good[0].output + cache[0].output


# --------------------------------------------------------------------------- time
def test_compile_time_is_many_steady_steps_and_a_warm_cache_cuts_it(bad, good, off, cache):
    for summary in (bad[1], good[1], off[1], cache[1], cache[2]):
        assert seconds(summary["step1_s"]) > 20 * seconds(summary["step_s"]), summary
    _, cold, warm = cache
    assert seconds(warm["step1_s"]) < seconds(cold["step1_s"]), (cold, warm)
    # Every rank compiles: each reports its own compile time.
    per_rank = re.search(r"compile time per rank in step 1 \(dynamo's own timers\): (\S+) s, (\S+) s",
                         bad[0].output)
    # Compiling is part of step 1, which the ranks start together (a barrier): each rank's
    # timer is within rank 0's step-1 wall time (rounding and the barrier's exit aside).
    assert per_rank and all(0 < float(s) <= seconds(bad[1]["step1_s"]) + 0.05 for s in per_rank.groups())
