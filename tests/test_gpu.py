"""The GPU lane (`make test-gpu`, marker gpu): the chapter scripts on NVIDIA GPUs, in three parts.

1. One rank under nccl (any machine with a GPU): every script at world size 1, asserting what
   one rank can show (backend=nccl on a CUDA device, the script's one-rank outcome), not the
   N-rank outcomes: a lane that can never pass on a one-GPU machine proves nothing there.
2. Two ranks in the shared mode (`--backend gloo-cuda`, any machine with a GPU): the
   multi-rank pitfalls with the same outcomes as the CPU tests, chapters 16 and 17 included.
3. nccl across every GPU (2 or more): the same multi-rank cases, one GPU per rank.

Besides: the duplicate-GPU message (two nccl ranks shown one GPU), chapter 04's checkpoints and
chapter 14's restarts in parts 2 and 3, where_am_i and DataParallel on 2+ GPUs, and the nvitop
monitor (installed if missing, else skipped with the reason). Skipped, with the reason, where
CUDA is absent. Timings are not compared: they are the machine's.

No GPU took part in writing parts 2 and 3 and the duplicate-GPU case: they are written from
torch's source, the CPU tests and issue 23's H100 run (part 1's cases come from that run).
Issue 30's H200 run (../shared/gpu/h200-2026-11-26/lane/) corrected them: chapter 04's writes
are observed as its CPU test observes them, chapter 09's Join case prints
replicas_identical=unchecked by design, chapter 16 exports through the CPU in the shared
mode, chapter 14's killed rank leaves no loader worker behind, chapter 17's mesh prints no
warning. Cases write into their own tmp_path ({tmp}): `make test-gpu` runs them in parallel.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
from conftest import VENV_BIN, Result, clean_env, observed_writes, run, script, writes_to

CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason=(
        f"needs CUDA (torch.cuda.is_available()={CUDA}, torch.version.cuda={torch.version.cuda})")),
]
TWO_GPUS = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 or more GPUs ({GPUS} visible)")
# Multi-rank lanes: (backend, processes). The shared mode runs everywhere; nccl on 2+ GPUs.
LANES = [("gloo-cuda", 2)] + ([("nccl", GPUS)] if GPUS >= 2 else [])
LANE_IDS = [f"{backend}-{n}" for backend, n in LANES]


TMP = "{tmp}"  # in a case's arguments: the test's own temporary directory (cases run in parallel)


def launch(path: str, *args: str, backend: str = "nccl", nproc: int = 1, timeout: float = 300,
           env: dict[str, str] | None = None, tmp: object = None) -> Result:
    """`torchrun --standalone --nproc_per_node=<nproc> script.py --backend <backend> ...`"""
    args = tuple(a.replace(TMP, str(tmp)) for a in args) if tmp is not None else args
    cmd = [VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={nproc}", script(path),
           "--backend", backend, *args]
    return run(cmd, env=env or clean_env(), timeout=timeout)


Check = Callable[[Result, str], None]  # (the run, the backend the process group should have)


def process_group(backend: str) -> str:
    """The process group's backend for a --backend value: the shared mode's is gloo."""
    return "gloo" if backend == "gloo-cuda" else backend


def ok(*expected: str) -> Check:
    """Exit 0, one summary line (rank 0's), the lane's backend where it is printed, and each
    expected fragment."""
    def check(result: Result, backend: str) -> None:
        summary = result.clean_summary()
        assert summary.get("backend", backend) == backend, result.output
        for text in expected:
            assert text in result.output, f"{text!r} not in:\n{result.output}"
    return check


def fails(*expected: str) -> Check:
    """Exit 1 with the script's own explanation (the fragments), not a watchdog abort."""
    def check(result: Result, backend: str) -> None:
        assert result.returncode == 1, result.output
        assert "Watchdog caught collective operation timeout" not in result.output, result.output
        for text in expected:
            assert text in result.output, f"{text!r} not in:\n{result.output}"
    return check


def no_warnings(*expected: str) -> Check:
    """ok(), and no warning printed: chapter 17's 2-D mesh used to print cuBLAS's 'no current
    CUDA context' warning (its backward began with a matrix multiply on autograd's GPU thread)."""
    def check(result: Result, backend: str) -> None:
        ok(*expected)(result, backend)
        assert "Warning" not in result.output, result.output
    return check


def profile_table(result: Result, backend: str) -> None:
    """Chapter 12's profiler table on the GPU's timeline: every column at least 0, and data +
    compute + exposed communication the step but for zero_grad and the Python between ranges."""
    ok("steps=3")(result, backend)
    rows = re.findall(r"^\s+\d+\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+"
                      r"(-?\d+\.\d+) s\s+(-?\d+\.\d+) s$", result.output, flags=re.M)
    assert len(rows) == 3, result.output
    for step, data, compute, exposed, _, overlapped in ((float(v) for v in row) for row in rows):
        assert min(data, compute, exposed, overlapped) >= 0, result.output
        assert abs(data + compute + exposed - step) <= 0.10 * step, result.output


def stops_together(result: Result, backend: str) -> None:
    """Chapter 19's early stopping with one decision: every rank stopped early, after the
    same epoch and the same number of steps (each rank's own count, gathered)."""
    ok("outcome=completed", "stopped=early")(result, backend)
    summary = result.summary()
    assert len(set(summary["stop_epoch_per_rank"].split(","))) == 1, result.output
    assert len(set(summary["steps_per_rank"].split(","))) == 1, result.output


CK15 = ("--checkpoint-dir", f"{TMP}/ch15")
PARAMS_16 = 135236  # chapter 16's BlockModel: its whole fp32 state is 4 * PARAMS_16 bytes
# --------------------------------------------------------------------------- 1. one rank, nccl
ONE_RANK: list[tuple[str, tuple[str, ...], Check]] = [
    ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "bad"), ok("work=1.00x")),
    ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "good"), ok("work=1.00x", "device=cuda")),
    ("01_data_parallel_ddp/distributed_dataloader.py", (),
     ok("reshuffled_each_epoch=yes", "pin_memory=True")),
    ("02_collectives/collectives_tour.py", (), ok("checks_passed=7/7")),  # send/recv needs 2 ranks
    ("02_collectives/collective_order.py", ("--variant", "bad"), ok("outcome=completed")),  # no one to miss
    ("02_collectives/collective_order.py", ("--variant", "good"), ok("outcome=completed")),
    ("03_distributed_sampler/set_epoch_shuffling.py", ("--variant", "bad"), ok("same_order_every_epoch=yes")),
    ("03_distributed_sampler/set_epoch_shuffling.py", ("--variant", "good"), ok("same_order_every_epoch=no")),
    ("03_distributed_sampler/distributed_eval.py", ("--variant", "good"), ok("matches_reference=yes")),
    ("05_gradient_accumulation/grad_accumulation.py", ("--variant", "bad", "--accumulation-steps", "4"),
     ok("allreduces_per_step=4")),
    ("05_gradient_accumulation/grad_accumulation.py", ("--variant", "good", "--accumulation-steps", "4"),
     ok("allreduces_per_step=1", "grads_equal=yes")),
    ("05_gradient_accumulation/time_no_sync.py", ("--accumulation-steps", "2", "--epochs", "1"), ok()),
    ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "fp16", "--variant", "bad"),
     ok("zero_grads=100.0%", "fp16 on cuda: 4e-08 -> 5.96e-08, 2.5e-08 -> 0")),
    ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "fp16", "--variant", "good"),
     ok("scale=65536")),
    ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "bf16", "--variant", "bad"),
     ok("precision=bf16")),
    ("06_mixed_precision/compressed_gradients.py", (), ok("fp16_ratio=0.50", "bf16_ratio=0.50")),
    ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "bad"), ok("eval_identical=yes")),  # one rank
    ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "good"), ok("eval_identical=yes")),
    ("08_unused_parameters/unused_parameters.py", ("--variant", "good"), ok("replicas_equal=yes")),
    ("08_unused_parameters/which_fix_works.py", (), ok("every_2nd_find_unused=ok")),
    ("08_unused_parameters/time_find_unused.py", (), ok()),
    ("09_uneven_inputs/uneven_inputs.py", ("--variant", "bad"), ok("outcome=completed")),  # nothing uneven
    ("09_uneven_inputs/uneven_inputs.py", ("--fix", "join"), ok("samples_dropped_per_epoch=0",
                                                                 "replicas_identical=unchecked")),
    ("09_uneven_inputs/uneven_inputs.py", ("--fix", "even"), ok("replicas_identical=yes")),
    ("10_communication_overlap/bucket_size.py", ("--variant", "bad"), ok("first_steps_allreduces=1,66,66")),
    ("10_communication_overlap/bucket_size.py", ("--variant", "good"), ok("allreduces_per_step=2 ")),
    ("10_communication_overlap/bucket_sweep.py", (), ok("allreduces_per_step=66,32,16,4,2,1")),
    ("11_replica_consistency/wrapper_bypass.py", ("--variant", "bad"), ok("replica_losses_equal=yes")),
    ("11_replica_consistency/wrapper_bypass.py", ("--variant", "good"), ok("replica_losses_equal=yes")),
    ("11_replica_consistency/seeds_and_broadcast.py", (), ok("init_after_ddp=identical")),
    ("12_scaling_and_performance/train_ddp.py", ("--variant", "bad", "--steps-per-epoch", "8"),
     ok("variant=bad", "max_memory_allocated=")),
    ("12_scaling_and_performance/train_ddp.py", ("--variant", "good", "--steps-per-epoch", "8"),
     ok("variant=good", "max_memory_allocated=")),
    ("12_scaling_and_performance/comm_bench.py", ("--max-bytes", "268435456"), ok("bare_loop_agrees=yes")),
    ("12_scaling_and_performance/profile_step.py",
     ("--batch-size", "64", "--trace", f"{TMP}/trace.json"), profile_table),
    ("12_scaling_and_performance/lr_scaling.py", (), ok("effective_batch=16")),
    ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "good"), ok("outcome=completed")),
    ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "bad", "--fault", "hang"),
     ok("outcome=completed")),
    ("13_multinode_and_hpc/where_am_i.py", (), ok("world_size=1")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--variant", "bad", *CK15),
     ok("subgraphs=5", "plain_load=failed", "tensors_equal=yes", "device=cuda")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--last-batch", "dynamic", *CK15),
     ok("subgraphs=5", "recompiles=0", "plain_load=ok tensors_equal=yes")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--optimize-ddp", "off", *CK15), ok("subgraphs=1")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--order", "compile-inner", *CK15),
     ok("subgraphs=5", "graph_breaks=0", "graphs=1 step1_s=", "plain_load=ok")),
    ("16_fsdp/fsdp_vs_ddp.py", ("--epochs", "2"), ok("world_size=1", "losses_match=yes")),
    ("17_zero_and_beyond/zero_optimizer.py", (), ok("world_size=1", "identical=yes")),
    ("17_zero_and_beyond/device_mesh_2d.py", (), no_warnings("world_size=1", "mesh=1x1", "dp_grads_ok=yes")),
    ("18_transformer/gpt_ddp.py", ("--steps", "30"), ok("world_size=1", "grad_diff=", "mfu=")),
    # after the first log point, a host sync in the step is an error (torch.cuda.set_sync_debug_mode)
    ("18_transformer/gpt_ddp.py", ("--steps", "30", "--log-every", "5", "--sync-debug", "error"),
     ok("world_size=1", "mfu=")),
    ("18_transformer/gpt_fsdp.py", ("--checkpoint-dir", TMP),
     ok("world_size=1", "losses_match=yes", "resume_equal=yes")),
    ("19_metrics_and_decisions/metric_across_ranks.py", ("--variant", "bad"),
     ok("matches_reference=yes")),  # one rank: its mean is the whole set's score
    ("19_metrics_and_decisions/metric_across_ranks.py", ("--variant", "good"), ok("matches_reference=yes")),
    ("19_metrics_and_decisions/early_stopping.py", ("--variant", "bad"),
     ok("outcome=completed", "stopped=early")),  # nobody to disagree with
    ("19_metrics_and_decisions/early_stopping.py", ("--fix", "broadcast"), stops_together),
    ("19_metrics_and_decisions/prepare_once.py", ("--variant", "bad", "--cache-dir", TMP),
     ok("failed_reads=0 reads_ok=1/1")),  # nobody to race
    ("19_metrics_and_decisions/prepare_once.py", ("--cache-dir", TMP),
     ok("writes_per_rank=1 ", "reads_ok=1/1")),
]


def case_id(path: str, args: tuple[str, ...]) -> str:
    shown = [a for a in args if "/" not in a and TMP not in a]
    return f"{path.split('/')[1][:-3]}{'-' + '-'.join(shown) if shown else ''}"


@pytest.mark.parametrize(("path", "args", "check"), ONE_RANK, ids=[case_id(p, a) for p, a, _ in ONE_RANK])
def test_one_rank_under_nccl(path, args, check, tmp_path):
    check(launch(path, *args, tmp=tmp_path), "nccl")


# --------------------------------------------------------------------------- 2. and 3. N ranks
def multi_rank_cases(n: int, backend: str) -> list[tuple[str, tuple[str, ...], Check]]:
    """The CPU tests' pitfall outcomes, stated for n ranks; under nccl also the timing and
    compile scripts (the shared mode is for outcomes, not for speed)."""
    return pitfalls(n) + (nccl_extras(n) if backend == "nccl" else [])


def pitfalls(n: int) -> list[tuple[str, tuple[str, ...], Check]]:
    return [
        ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "bad"), ok(f"work={n}.00x")),
        ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "good"),
         ok("work=1.00x", "device=cuda")),
        ("02_collectives/collectives_tour.py", (), ok("checks_passed=8/8")),
        ("02_collectives/collective_order.py", ("--variant", "bad"), fails("outcome=timeout")),
        ("02_collectives/collective_order.py", ("--variant", "good"), ok("outcome=completed")),
        ("03_distributed_sampler/set_epoch_shuffling.py", ("--variant", "bad"),
         ok("same_order_every_epoch=yes")),
        ("03_distributed_sampler/set_epoch_shuffling.py", ("--variant", "good"),
         ok("same_order_every_epoch=no")),
        ("03_distributed_sampler/distributed_eval.py", ("--variant", "good"), ok("matches_reference=yes")),
        ("05_gradient_accumulation/grad_accumulation.py", ("--variant", "bad", "--accumulation-steps", "4"),
         ok("allreduces_per_step=4")),
        ("05_gradient_accumulation/grad_accumulation.py", ("--variant", "good", "--accumulation-steps", "4"),
         ok("allreduces_per_step=1", "grads_equal=yes")),
        ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "fp16", "--variant", "bad"),
         ok("zero_grads=100.0%")),
        ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "fp16", "--variant", "good"),
         ok("scale=65536")),
        ("06_mixed_precision/compressed_gradients.py", (), ok("fp16_ratio=0.50", "bf16_ratio=0.50")),
        ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "bad"), ok("eval_identical=no")),
        ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "good"), ok("eval_identical=yes")),
        ("08_unused_parameters/unused_parameters.py", ("--variant", "bad"),
         fails("outcome=error failed_step=2")),
        ("08_unused_parameters/unused_parameters.py", ("--variant", "good"), ok("replicas_equal=yes")),
        ("09_uneven_inputs/uneven_inputs.py", ("--variant", "bad"), fails("outcome=timeout")),
        ("09_uneven_inputs/uneven_inputs.py", ("--fix", "join"), ok("samples_dropped_per_epoch=0",
                                                                     "replicas_identical=unchecked")),
        ("09_uneven_inputs/uneven_inputs.py", ("--fix", "even"), ok("replicas_identical=yes")),
        ("10_communication_overlap/bucket_size.py", ("--variant", "bad"),
         ok("first_steps_allreduces=1,66,66")),
        ("10_communication_overlap/bucket_size.py", ("--variant", "good"), ok("allreduces_per_step=2 ")),
        ("11_replica_consistency/wrapper_bypass.py", ("--variant", "bad"), ok("replica_losses_equal=no")),
        ("11_replica_consistency/wrapper_bypass.py", ("--variant", "good"), ok("replica_losses_equal=yes")),
        ("11_replica_consistency/seeds_and_broadcast.py", (), ok("init_after_ddp=identical")),
        ("12_scaling_and_performance/lr_scaling.py", (), ok(f"effective_batch={16 * n}")),
        ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "good"), ok("outcome=completed")),
        ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "bad", "--fault", "hang"),
         fails("outcome=timeout")),
        ("15_torch_compile_ddp/compile_ddp.py", ("--variant", "bad", *CK15),
         ok("plain_load=failed", "tensors_equal=yes", "device=cuda")),
        ("16_fsdp/fsdp_vs_ddp.py", ("--epochs", "2"), ok(f"world_size={n}", "losses_match=yes")),
        # the export: the shared mode's goes through CPU tensors (utils/shared_mode.py)
        ("16_fsdp/sharded_checkpoint.py", ("--variant", "bad", "--checkpoint-dir", TMP),
         ok("rank_file_load=failed", "plain_load=ok",
            f"export_bytes_per_rank={','.join([str(4 * PARAMS_16)] * n)} ")),
        ("16_fsdp/sharded_checkpoint.py", ("--checkpoint-dir", TMP),
         ok("rank_file_load=n/a", "plain_load=ok",
            f"export_bytes_per_rank={','.join([str(4 * PARAMS_16)] + ['0'] * (n - 1))} ")),
        ("17_zero_and_beyond/zero_optimizer.py", (), ok(f"world_size={n}", "identical=yes")),
        ("17_zero_and_beyond/zero_checkpoint.py",
         ("--variant", "bad", "--checkpoint-dir", TMP),
         ok("resume_equal=no", *(["right_shape_states=0/8"] if n == 2 else []))),
        ("17_zero_and_beyond/zero_checkpoint.py", ("--checkpoint-dir", TMP),
         ok("saved_states=8/8", "right_shape_states=8/8", "resume_equal=yes")),
        ("17_zero_and_beyond/device_mesh_2d.py", (), no_warnings(f"world_size={n}", "dp_grads_ok=yes")),
        ("18_transformer/gpt_ddp.py", ("--batching", "padded", "--variant", "bad", "--steps", "30"),
         ok(f"world_size={n}", "grad_diff=")),
        ("18_transformer/gpt_ddp.py", ("--loss-on", "answers", "--variant", "good", "--steps", "30",
                                       "--accumulation-steps", "2"),
         ok(f"world_size={n}", "grad_diff=", "mfu=")),
        ("18_transformer/gpt_fsdp.py", ("--checkpoint-dir", TMP),
         ok(f"world_size={n}", "losses_match=yes", "resume_equal=yes")),
        ("18_transformer/gpt_fsdp.py", ("--precision", "bf16", "--activation-checkpointing",
                                        "--checkpoint-dir", TMP),
         ok(f"world_size={n}", "losses_match=yes", "resume_equal=yes")),
        # chapter 19: whole files per rank, so at least one file per rank
        ("19_metrics_and_decisions/metric_across_ranks.py",
         ("--variant", "bad", "--num-files", str(max(8, n))), ok(f"world_size={n}", "matches_reference=no")),
        ("19_metrics_and_decisions/metric_across_ranks.py",
         ("--variant", "good", "--num-files", str(max(8, n))),
         ok(f"world_size={n}", "matches_reference=yes")),
        ("19_metrics_and_decisions/metric_across_ranks.py", ("--shards", "sampler"),
         ok(f"world_size={n}", "counted=2000 ", "matches_reference=yes")),
        ("19_metrics_and_decisions/early_stopping.py", ("--variant", "bad", "--num-files", str(max(4, n))),
         fails("outcome=timeout")),
        ("19_metrics_and_decisions/early_stopping.py", ("--fix", "all-reduce", "--num-files", str(max(4, n))),
         stops_together),
        ("19_metrics_and_decisions/early_stopping.py", ("--fix", "broadcast", "--num-files", str(max(4, n))),
         stops_together),
        ("19_metrics_and_decisions/prepare_once.py", ("--variant", "bad", "--cache-dir", TMP),
         fails(f"failed_reads={n - 1} ")),
        ("19_metrics_and_decisions/prepare_once.py", ("--cache-dir", TMP),
         ok(f"writes_per_rank={','.join(['1'] + ['0'] * (n - 1))} ", f"reads_ok={n}/{n}")),
    ]


def nccl_extras(n: int) -> list[tuple[str, tuple[str, ...], Check]]:
    return [
        ("01_data_parallel_ddp/distributed_dataloader.py", (),
         ok("reshuffled_each_epoch=yes", "pin_memory=True")),
        ("05_gradient_accumulation/time_no_sync.py", ("--accumulation-steps", "2", "--epochs", "1"), ok()),
        ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "bf16", "--variant", "bad"),
         ok("precision=bf16")),
        ("08_unused_parameters/which_fix_works.py", (), ok("every_2nd_find_unused=ok")),
        ("08_unused_parameters/time_find_unused.py", (), ok()),
        ("10_communication_overlap/bucket_sweep.py", (), ok("allreduces_per_step=66,32,16,4,2,1")),
        ("12_scaling_and_performance/train_ddp.py", ("--variant", "bad", "--steps-per-epoch", "8"),
         ok("variant=bad", "max_memory_allocated=")),
        ("12_scaling_and_performance/train_ddp.py", ("--variant", "good", "--steps-per-epoch", "8"),
         ok("variant=good", "max_memory_allocated=")),
        ("12_scaling_and_performance/comm_bench.py", ("--max-bytes", "268435456"),
         ok("bare_loop_agrees=yes")),
        ("12_scaling_and_performance/profile_step.py",
         ("--batch-size", "64", "--trace", f"{TMP}/trace.json"), profile_table),
        ("15_torch_compile_ddp/compile_ddp.py", ("--last-batch", "dynamic", *CK15),
         ok("subgraphs=5", "recompiles=0", "plain_load=ok tensors_equal=yes")),
        ("15_torch_compile_ddp/compile_ddp.py", ("--optimize-ddp", "off", *CK15), ok("subgraphs=1")),
        ("15_torch_compile_ddp/compile_ddp.py", ("--order", "compile-inner", *CK15),
         ok("subgraphs=5", "graph_breaks=0", "graphs=1 step1_s=", "plain_load=ok")),
    ]


MULTI = [(backend, n, *case) for backend, n in LANES for case in multi_rank_cases(n, backend)]


@pytest.mark.parametrize(("backend", "nproc", "path", "args", "check"), MULTI,
                         ids=[f"{b}-{n}-{case_id(p, a)}" for b, n, p, a, _ in MULTI])
def test_multi_rank_pitfalls(backend, nproc, path, args, check, tmp_path):
    check(launch(path, *args, backend=backend, nproc=nproc, tmp=tmp_path), process_group(backend))


@pytest.mark.parametrize(("backend", "nproc"), LANES, ids=LANE_IDS)
def test_checkpoints(backend, nproc, tmp_path):
    """Chapter 04 as its CPU test checks it: rank 0 alone writes the checkpoint (the writes
    as the file system saw them, tests/observe), a plain model loads it, and a run stopped
    after epoch 2 and resumed starts its epochs with the generator states (CPU and GPU) and
    ends them with the losses of an uninterrupted run."""
    path, pg = "04_logging_and_checkpoints/train_with_checkpoints.py", process_group(backend)
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    stopped.mkdir()
    env = observed_writes(stopped, tmp_path / "writes")
    first = launch(path, "--checkpoint-dir", str(stopped), "--resume", "--stop-after-epoch", "2",
                   backend=backend, nproc=nproc, env=env)
    ok("plain_load=ok", "epochs_done=2")(first, pg)
    assert writes_to(tmp_path / "writes", stopped / "checkpoint_good.pt", nproc) == [2] + [0] * (nproc - 1)
    again = launch(path, "--checkpoint-dir", str(stopped), "--resume", backend=backend, nproc=nproc)
    ok("start_epoch=2", "plain_load=ok", "resumed from checkpoint_good.pt: 2 epoch(s) done")(again, pg)
    whole = launch(path, "--checkpoint-dir", str(straight), backend=backend, nproc=nproc)
    ok("start_epoch=0")(whole, pg)
    parts = [r.summary() for r in (first, again, whole)]
    assert parts[0]["rng_states"].split(",") + parts[1]["rng_states"].split(",") == \
        parts[2]["rng_states"].split(","), (first.output, again.output, whole.output)
    resumed = [float(x) for p in parts[:2] for x in p["losses"].split(",")]
    assert resumed == pytest.approx([float(x) for x in parts[2]["losses"].split(",")], abs=1e-5)


def test_fsdp_checkpoint_saved_by_4_ranks_resumes_at_2_in_the_shared_mode(tmp_path):
    """Chapter 16's DCP resharding on one GPU (the page's CPU run saves at 2 ranks and resumes
    in one process): DCP saved by 4 ranks sharing it, loaded by 2, and both runs export through
    the CPU (rank 0 alone holds the whole model)."""
    path, whole = "16_fsdp/sharded_checkpoint.py", str(4 * PARAMS_16)
    at4 = launch(path, "--checkpoint-dir", str(tmp_path / "at4"), backend="gloo-cuda", nproc=4)
    ok(f"export_bytes_per_rank={whole},0,0,0 ", "plain_load=ok")(at4, "gloo")
    at2 = launch(path, "--checkpoint-dir", str(tmp_path / "at2"), "--resume-from",
                 str(tmp_path / "at4" / "epoch_1"), backend="gloo-cuda", nproc=2)
    ok("start_epoch=1", f"export_bytes_per_rank={whole},0 ", "plain_load=ok")(at2, "gloo")
    assert "resumed from epoch_1: 1 epoch(s) done, saved by 4 ranks, loaded by 2" in at2.output


@pytest.mark.parametrize(("backend", "nproc"), LANES, ids=LANE_IDS)
def test_fault_tolerance(backend, nproc, tmp_path):
    """Chapter 14: a rank killed and torchrun restarting the group, and a signal on one rank
    that stops every rank at one step; each run resumes from its checkpoint and finishes."""
    path, pg = "14_fault_tolerance/train_resilient.py", process_group(backend)
    restart = run([VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={nproc}", "--max-restarts=1",
                   script(path), "--backend", backend, "--checkpoint-dir", str(tmp_path / "restart"),
                   "--fail-at-step", "10", "--num-samples", "4096"],
                  env=clean_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"), timeout=300)
    ok("restart=1 resumed_from_step=8", "rng_restored=yes")(restart, pg)
    preempt = ("--checkpoint-dir", str(tmp_path / "preempt"), "--num-samples", "4096")
    stopped = launch(path, *preempt, "--signal-at-step", "13", backend=backend, nproc=nproc)
    assert stopped.returncode != 0 and "at step 13/" in stopped.output, stopped.output
    ok("resumed_from_step=13", "rng_restored=yes")(launch(path, *preempt, backend=backend, nproc=nproc), pg)


# --------------------------------------------------------------------------- GPUs and ranks
def test_two_nccl_ranks_on_one_gpu_stop_with_one_message():
    """Two nccl ranks that see one GPU (CUDA_VISIBLE_DEVICES=0): setup_distributed's message,
    with both ways out, before NCCL's own 'Duplicate GPU detected'."""
    result = launch("01_data_parallel_ddp/multinode_ddp_basic.py", nproc=2, timeout=120,
                    env=clean_env(CUDA_VISIBLE_DEVICES="0"))
    assert result.returncode != 0, result.output
    assert "would use the same GPU" in result.output, result.output
    assert "--nproc_per_node" in result.output and "--backend gloo-cuda" in result.output, result.output
    assert "ncclInvalidUsage" not in result.output, result.output  # NCCL never started


@TWO_GPUS
def test_where_am_i_gives_every_rank_its_own_gpu():
    result = launch("13_multinode_and_hpc/where_am_i.py", nproc=GPUS)
    ok(f"world_size={GPUS}")(result, "nccl")
    devices = re.findall(r"^rank \d+/\d+ .*  device (cuda:\d+)  ", result.output, flags=re.M)
    uuids = re.findall(r"^    CUDA_VISIBLE_DEVICES=\S+  gpu .* uuid=(\S+)", result.output, flags=re.M)
    assert sorted(devices) == sorted(f"cuda:{i}" for i in range(GPUS)), result.output
    assert len(set(uuids)) == GPUS, result.output


@TWO_GPUS
def test_dataparallel_against_ddp_on_the_gpus():
    """Chapter 12: one process; DataParallel over every GPU, then DDP's processes, both timed."""
    result = run([sys.executable, script("12_scaling_and_performance/dataparallel_vs_ddp.py"),
                  "--steps", "10"], env=clean_env(), timeout=300)
    assert result.returncode == 0, result.output
    assert re.search(r"^DataParallel: \d+ samples/s$", result.output, flags=re.M), result.output
    assert re.search(r"^DDP +: \d+ samples/s$", result.output, flags=re.M), result.output
    assert result.summary()["gpus"] == str(GPUS)


@pytest.fixture(scope="module")
def nvitop() -> None:
    """nvitop, installed into this Python if missing (pip); skip with the reason if it cannot be."""
    if importlib.util.find_spec("nvitop") is None:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "nvitop>=1.3"],
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            pytest.skip(f"nvitop is not installed and pip could not install it: {done.stderr.strip()[-300:]}")


def test_monitor_records_gpu_use(nvitop, tmp_path):
    """Chapter 12's monitor on a GPU: each GPU's utilisation in its CSV, and this job's memory."""
    import socket

    result = launch("12_scaling_and_performance/train_ddp.py", "--variant", "good", "--steps-per-epoch", "8",
                    "--monitor-dir", str(tmp_path))
    ok("variant=good")(result, "nccl")
    rows = list(csv.DictReader((tmp_path / f"monitor_{socket.gethostname()}.csv").open()))
    assert rows and "gpu0_util_percent" in rows[0], rows[:1]
    assert all(0 <= float(r["gpu0_util_percent"]) <= 100 for r in rows), rows
    assert "NVML" not in result.output and "FATAL" not in result.output, result.output
