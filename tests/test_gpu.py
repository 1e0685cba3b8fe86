"""The GPU lane: every chapter script under torchrun with nccl on all visible GPUs.

Run it with `make test-gpu` (`pytest -m gpu`) on a machine with at least 2 NVIDIA GPUs. It
is skipped, with the reason, where CUDA is absent or fewer than 2 GPUs are visible; no GPU
took part in writing it, so it is written from torch's source and the CPU tests, to pass.

What it checks, for N = torch.cuda.device_count() processes (one per GPU):
- every script starts with backend=nccl on a CUDA device, each rank on a GPU of its own
  (where_am_i.py: N distinct GPU UUIDs), and exits as its CPU test says: 0 for the good
  variants, 1 with the script's own explanation for the demonstrations of failures;
- the same outcomes as the CPU tests, stated for N ranks: the pitfall and its fix
  (work=N.00x vs 1.00x, the same data order every epoch vs reshuffled, all-reduces per
  step counted, zero gradients under fp16 without a scaler, replicas that diverge, ...);
- the demonstrations of hangs (02 collective order, 09 uneven inputs, 13 hang) end in the
  script's timeout explanation, as on CPUs, because they run over a gloo side group on
  GPU machines (utils/distributed.py's timeout_group), not by NCCL's watchdog abort.
Timings are not compared: they are the machine's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import pytest
import torch
from conftest import VENV_BIN, Result, clean_env, run, script

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS < 2, reason=(
        "needs CUDA and at least 2 visible GPUs (torch.cuda.is_available()="
        f"{torch.cuda.is_available()}, device_count={GPUS}, torch.version.cuda={torch.version.cuda})")),
]


def nccl_torchrun(path: str, *args: str, timeout: float = 300) -> Result:
    """`torchrun --standalone --nproc_per_node=<GPUs> script.py --backend nccl ...`"""
    cmd = [VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={GPUS}", script(path),
           "--backend", "nccl", *args]
    return run(cmd, env=clean_env(), timeout=timeout)


def ok(*expected: str) -> Callable[[Result], None]:
    """Exit 0, one summary line (rank 0's), backend nccl, and each expected fragment."""
    def check(result: Result) -> None:
        summary = result.clean_summary()
        assert summary.get("backend", "nccl") == "nccl", result.output
        for text in expected:
            assert text in result.output, f"{text!r} not in:\n{result.output}"
    return check


def fails(*expected: str) -> Callable[[Result], None]:
    """Exit 1 with the script's own explanation (the fragments), not a watchdog abort."""
    def check(result: Result) -> None:
        assert result.returncode == 1, result.output
        assert "Watchdog caught collective operation timeout" not in result.output, result.output
        for text in expected:
            assert text in result.output, f"{text!r} not in:\n{result.output}"
    return check


def profile_table(result: Result) -> None:
    """Chapter 12's profiler table on the GPU's timeline: every column at least 0, and data +
    compute + exposed communication the step but for zero_grad and the Python between ranges."""
    ok("steps=3")(result)
    rows = re.findall(r"^\s+\d+\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+(-?\d+\.\d+) s\s+"
                      r"(-?\d+\.\d+) s\s+(-?\d+\.\d+) s$", result.output, flags=re.M)
    assert len(rows) == 3, result.output
    for step, data, compute, exposed, _, overlapped in ((float(v) for v in row) for row in rows):
        assert min(data, compute, exposed, overlapped) >= 0, result.output
        assert abs(data + compute + exposed - step) <= 0.10 * step, result.output


N = GPUS
CASES: list[tuple[str, tuple[str, ...], Callable[[Result], None]]] = [
    ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "bad"), ok(f"work={N}.00x")),
    ("01_data_parallel_ddp/multinode_ddp_basic.py", ("--variant", "good"), ok("work=1.00x", "device=cuda")),
    ("01_data_parallel_ddp/distributed_dataloader.py", (),
     ok("reshuffled_each_epoch=yes", "pin_memory=True")),
    ("02_collectives/collectives_tour.py", (), ok("checks_passed=8/8")),
    ("02_collectives/collective_order.py", ("--variant", "bad"), fails("outcome=timeout")),
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
     ok("zero_grads=100.0%")),
    ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "fp16", "--variant", "good"),
     ok("scale=65536")),
    ("06_mixed_precision/amp_grad_scaler.py", ("--precision", "bf16", "--variant", "bad"),
     ok("precision=bf16")),
    ("06_mixed_precision/compressed_gradients.py", (), ok("fp16_ratio=0.50", "bf16_ratio=0.50")),
    ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "bad"), ok("eval_identical=no")),
    ("07_batchnorm_and_buffers/batchnorm_ddp.py", ("--variant", "good"), ok("eval_identical=yes")),
    ("08_unused_parameters/unused_parameters.py", ("--variant", "bad"), fails("outcome=error failed_step=2")),
    ("08_unused_parameters/unused_parameters.py", ("--variant", "good"), ok("replicas_equal=yes")),
    ("08_unused_parameters/which_fix_works.py", (), ok("every_2nd_find_unused=ok")),
    ("08_unused_parameters/time_find_unused.py", (), ok()),
    ("09_uneven_inputs/uneven_inputs.py", ("--variant", "bad"), fails("outcome=timeout")),
    ("09_uneven_inputs/uneven_inputs.py", ("--fix", "join"), ok("samples_dropped_per_epoch=0",
                                                                 "replicas_identical=yes")),
    ("09_uneven_inputs/uneven_inputs.py", ("--fix", "even"), ok("replicas_identical=yes")),
    ("10_communication_overlap/bucket_size.py", ("--variant", "bad"), ok("first_steps_allreduces=1,66,66")),
    ("10_communication_overlap/bucket_size.py", ("--variant", "good"), ok("allreduces_per_step=2 ")),
    ("10_communication_overlap/bucket_sweep.py", (), ok("allreduces_per_step=66,32,16,4,2,1")),
    ("11_replica_consistency/wrapper_bypass.py", ("--variant", "bad"), ok("replica_losses_equal=no")),
    ("11_replica_consistency/wrapper_bypass.py", ("--variant", "good"), ok("replica_losses_equal=yes")),
    ("11_replica_consistency/seeds_and_broadcast.py", (), ok("init_after_ddp=identical")),
    ("12_scaling_and_performance/train_ddp.py", ("--variant", "bad", "--steps-per-epoch", "8"),
     ok("variant=bad", "max_memory_allocated=")),
    ("12_scaling_and_performance/train_ddp.py", ("--variant", "good", "--steps-per-epoch", "8"),
     ok("variant=good", "max_memory_allocated=")),
    ("12_scaling_and_performance/comm_bench.py", ("--max-bytes", "268435456"), ok("bare_loop_agrees=yes")),
    ("12_scaling_and_performance/profile_step.py",
     ("--batch-size", "64", "--trace", "/tmp/ddp_trace_gpu.json"), profile_table),
    ("12_scaling_and_performance/lr_scaling.py", (), ok(f"effective_batch={16 * N}")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--variant", "bad", "--checkpoint-dir", "/tmp/ch15_gpu"),
     ok("subgraphs=5", "plain_load=failed", "tensors_equal=yes", "device=cuda")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--last-batch", "dynamic", "--checkpoint-dir", "/tmp/ch15_gpu"),
     ok("subgraphs=5", "recompiles=0", "plain_load=ok tensors_equal=yes")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--optimize-ddp", "off", "--checkpoint-dir", "/tmp/ch15_gpu"),
     ok("subgraphs=1")),
    ("15_torch_compile_ddp/compile_ddp.py", ("--order", "compile-inner", "--checkpoint-dir", "/tmp/ch15_gpu"),
     ok("subgraphs=5", "graph_breaks=0", "graphs=1 step1_s=", "plain_load=ok")),
    ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "good"), ok("outcome=completed")),
    ("13_multinode_and_hpc/hang_debugging.py", ("--variant", "bad", "--fault", "hang"),
     fails("outcome=timeout")),
]


@pytest.mark.parametrize(("path", "args", "check"), CASES,
                         ids=[f"{p.split('/')[1][:-3]}{'-' + '-'.join(a) if a else ''}" for p, a, _ in CASES])
def test_chapter_script_under_nccl(path, args, check):
    check(nccl_torchrun(path, *args))


def test_checkpoints_under_nccl(tmp_path):
    """Chapter 04: rank 0 alone writes, a plain model loads the saved state, and a run
    stopped after epoch 2 resumes with its random state restored."""
    path = "04_logging_and_checkpoints/train_with_checkpoints.py"
    first = nccl_torchrun(path, "--checkpoint-dir", str(tmp_path), "--resume", "--stop-after-epoch", "2")
    ok("plain_load=ok", f"writes_per_rank=2,{','.join(['0'] * (N - 1))}")(first)
    ok("start_epoch=2", "rng_restored=yes", "plain_load=ok")(
        nccl_torchrun(path, "--checkpoint-dir", str(tmp_path), "--resume"))


def test_dataparallel_against_ddp_on_the_gpus():
    """Chapter 12: one process; DataParallel over every GPU, then DDP's processes, both timed."""
    result = run([sys.executable, script("12_scaling_and_performance/dataparallel_vs_ddp.py"),
                  "--steps", "10"], env=clean_env(), timeout=300)
    assert result.returncode == 0, result.output
    assert re.search(r"^DataParallel: \d+ samples/s$", result.output, flags=re.M), result.output
    assert re.search(r"^DDP +: \d+ samples/s$", result.output, flags=re.M), result.output
    assert result.summary()["gpus"] == str(N)


def test_fault_tolerance_under_nccl(tmp_path):
    """Chapter 14: a rank killed and torchrun restarting the group, and a signal on one rank
    that stops every rank at one step; each run resumes from its checkpoint and finishes."""
    path = "14_fault_tolerance/train_resilient.py"
    restart = run([VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={GPUS}", "--max-restarts=1",
                   script(path), "--backend", "nccl", "--checkpoint-dir", str(tmp_path / "restart"),
                   "--fail-at-step", "10", "--num-samples", "4096"],
                  env=clean_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"), timeout=300)
    ok("restart=1 resumed_from_step=8", "rng_restored=yes")(restart)
    stopped = nccl_torchrun(path, "--checkpoint-dir", str(tmp_path / "preempt"), "--signal-at-step", "13",
                            "--num-samples", "4096")
    assert stopped.returncode != 0 and "at step 13/" in stopped.output, stopped.output
    ok("resumed_from_step=13", "rng_restored=yes")(
        nccl_torchrun(path, "--checkpoint-dir", str(tmp_path / "preempt"), "--num-samples", "4096"))


def test_where_am_i_gives_every_rank_its_own_gpu():
    result = nccl_torchrun("13_multinode_and_hpc/where_am_i.py")
    ok(f"world_size={N}")(result)
    devices = re.findall(r"^rank \d+/\d+ .*  device (cuda:\d+)  ", result.output, flags=re.M)
    uuids = re.findall(r"^    CUDA_VISIBLE_DEVICES=\S+  gpu .* uuid=(\S+)", result.output, flags=re.M)
    assert sorted(devices) == sorted(f"cuda:{i}" for i in range(N)), result.output
    assert len(set(uuids)) == N, result.output
