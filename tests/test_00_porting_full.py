"""The porting page's real script: train_single_full.py and train_ddp_full.py (AdamW, warm-up
and cosine, clipping, autocast with a GradScaler for fp16, accumulation with no_sync, a sharded
evaluation, checkpoints that resume), plain PyTorch like the small pair.

Few launches, many checks:
- the page's captures: the single script trains; 2 ranks print one line per epoch; a run
  stopped after epoch 2 and resumed at 2 ranks prints the uninterrupted run's lines exactly
  (dropout on: every rank's generators restored);
- 2 ranks x 16 (observed from outside, dropout off, fp32, accumulation on) against 1 process
  x 32: the same losses and held-out numbers within fp32 rounding; every held-out sample
  counted once; one checkpoint, written by rank 0 alone, no `module.` keys, that loads into
  the plain model; that checkpoint resumed on 1 process goes on as the 1-process run;
- fp16 with the GradScaler at 2 ranks: no step skipped, the losses of fp32 within 2%.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys

import pytest
import torch
from conftest import REPO, VENV_BIN, captured_run, clean_env, observed_writes, run, writes_to

FOLDER = REPO / "scripts" / "00_porting"
TRAIN_DDP = FOLDER / "train_ddp_full.py"
EPOCH = re.compile(r"^epoch (\d+): loss (\S+) over (\d+) samples, held-out loss (\S+) accuracy (\S+) "
                   r"over (\d+) samples, step (\d+)$", flags=re.M)
TRAIN_SAMPLES, HELD_OUT = 1500, 297  # scikit-learn's 1797 digits, split once
STEPS_PER_EPOCH = 24  # 47 micro-batches of 32 (or 2 x 16) an epoch, 2 per optimizer step
# How far two computations of the same training may print apart: the sums of 2 ranks' gradients
# and of one process's round differently in fp32's last bits, and AdamW carries that on.
FP32_ROUNDING = 3e-4
FP16_RELATIVE = 0.02  # fp16 matmuls against fp32: the epoch losses within 2%


def load(name: str):
    """A script of the folder as a module (its DigitTransformer, parse_args), without running it."""
    spec = importlib.util.spec_from_file_location(f"porting_{name}", FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def epochs(output: str) -> list[tuple]:
    """Each epoch line as (epoch, loss, samples, held-out loss, accuracy, held-out samples, step)."""
    return [(int(e), float(loss), int(n), float(held_loss), float(acc), int(held), int(step))
            for e, loss, n, held_loss, acc, held, step in EPOCH.findall(output)]


def assert_ran(output: str, returncode: int, world_size: int, first_epoch: int, last_epoch: int) -> dict:
    """One summary (rank 0 alone), one line per epoch, every training and every held-out sample
    counted once per epoch, the optimizer steps counted on. Returns the summary."""
    assert returncode == 0, output
    assert output.count("summary:") == 1, f"a line printed by more than rank 0:\n{output}"
    summary = dict(re.findall(r"(\w+)=(\S+)", output.split("summary:")[-1]))
    lines = epochs(output)
    assert [line[0] for line in lines] == list(range(first_epoch, last_epoch + 1)), output
    for epoch, _, samples, _, _, held, step in lines:
        assert samples == TRAIN_SAMPLES and held == HELD_OUT, f"a sample counted twice or never:\n{output}"
        assert step == (epoch + 1) * STEPS_PER_EPOCH, output
    assert summary["world_size"] == str(world_size) and summary["eval_samples"] == str(HELD_OUT), summary
    assert summary["skipped_steps"] == "0", summary
    return summary


def assert_close(a: list[tuple], b: list[tuple], tolerance: float) -> None:
    """Two runs' epoch lines: the same epochs, counts and steps; losses within `tolerance`,
    the accuracy within one held-out sample."""
    assert len(a) == len(b), (a, b)
    for x, y in zip(a, b, strict=True):
        assert (x[0], x[2], x[5], x[6]) == (y[0], y[2], y[5], y[6]), (x, y)
        assert abs(x[1] - y[1]) <= tolerance * max(1.0, abs(y[1])), ("loss", x, y)
        assert abs(x[3] - y[3]) <= tolerance * max(1.0, abs(y[3])), ("held-out loss", x, y)
        assert abs(x[4] - y[4]) <= 1.01 / HELD_OUT, ("accuracy", x, y)


def test_the_pages_runs_and_a_resume_at_2_ranks_repeats_the_uninterrupted_run():
    """The page's captures: the single script and the DDP script both learn; the run stopped
    after epoch 2 and resumed prints the uninterrupted run's epoch lines, digit for digit,
    though dropout is on (each rank's generators come back from the checkpoint)."""
    single, ddp, resume = (captured_run(name) for name in ("00_full_single.txt", "00_full_ddp.txt",
                                                            "00_full_resume.txt"))
    assert_ran(single.output, single.returncode, 1, 0, 3)
    assert_ran(ddp.output, ddp.returncode, 2, 0, 3)
    assert "backend=gloo" in ddp.output
    for output in (single.output, ddp.output):
        assert epochs(output)[-1][1] < 0.7 * epochs(output)[0][1] and epochs(output)[-1][4] > 0.8, output
    stopped, _, resumed = resume.output.partition("resumed from /tmp/00_full_resume.pt: epoch 2, step 48\n")
    assert resumed, resume.output
    assert_ran(stopped, resume.returncode, 2, 0, 1)
    assert_ran(resumed, resume.returncode, 2, 2, 3)
    assert EPOCH.findall(stopped) + EPOCH.findall(resumed) == EPOCH.findall(ddp.output), resume.output
    assert resumed.split("summary:")[1].split("checkpoint=")[0] == ddp.output.split("summary:")[1].split(
        "checkpoint=")[0]


def test_diff_holds_every_change_and_neither_script_imports_the_repository():
    diff = captured_run("00_full_diff.txt")
    assert diff.returncode == 1, diff.output  # diff's "the files differ"
    added = [line[1:].strip() for line in diff.output.splitlines() if line.startswith("+ ")]
    code = [line for line in added if line and not line.startswith("#")]
    for change in ("check_launch()", "torch.cuda.set_device(local_rank)", "dist.init_process_group(",
                   "timeout=datetime.timedelta(minutes=5)", "DistributedSampler(train_set",
                   "Subset(held_out, range(rank, len(held_out), world_size))", "model = DDP(model",
                   "torch.manual_seed(args.seed + rank)", "model.module.load_state_dict(",
                   "set_rng_state(checkpoint[\"rng\"][rank]", "sampler.set_epoch(epoch)", "model.no_sync()",
                   "model.module(x)", "dist.all_reduce(totals)", "dist.all_reduce(counts)", "if rank == 0:",
                   "dist.all_gather_object(rng_states", "model.module.state_dict()", "del model",
                   "dist.barrier()", "dist.destroy_process_group()"):
        assert any(change in line for line in code), change
    # imported before init_process_group, so that destroy_process_group frees gloo (train_ddp.py too)
    assert "\n+import torch.distributed.nn  #" in diff.output, diff.output
    for path in (FOLDER / "train_single_full.py", TRAIN_DDP):
        assert not re.search(r"^\s*(from|import) utils\b|sys\.path", path.read_text(), flags=re.M), path


@pytest.fixture(scope="module")
def fp32_runs(tmp_path_factory) -> dict:
    """Dropout off, fp32, 2 micro-batches per step: 2 ranks x 16 for 2 epochs (its writes
    observed), 1 process x 32 for 4 epochs, and the 2 ranks' checkpoint resumed on 1 process."""
    tmp = tmp_path_factory.mktemp("full")
    out = tmp / "out"
    out.mkdir()
    common = ["--dropout", "0", "--accumulation-steps", "2"]
    two = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", TRAIN_DDP, *common,
               "--batch-size", "16", "--stop-after-epoch", "2", "--checkpoint", out / "two.pt"],
              env=observed_writes(out, tmp / "writes"), timeout=240)
    shutil.copy(out / "two.pt", tmp / "resume.pt")
    one = run([sys.executable, TRAIN_DDP, *common, "--batch-size", "32", "--checkpoint", tmp / "one.pt"],
              env=clean_env(), timeout=240)
    resumed = run([sys.executable, TRAIN_DDP, *common, "--batch-size", "32", "--resume",
                   "--checkpoint", tmp / "resume.pt"], env=clean_env(), timeout=240)
    return {"two": two, "one": one, "resumed": resumed, "tmp": tmp, "out": out}


def test_2_ranks_x_16_train_as_1_process_x_32_with_accumulation(fp32_runs):
    two, one = fp32_runs["two"], fp32_runs["one"]
    assert_ran(two.output, two.returncode, 2, 0, 1)
    assert_ran(one.output, one.returncode, 1, 0, 3)
    assert_close(epochs(two.output), epochs(one.output)[:2], FP32_ROUNDING)


def test_one_checkpoint_from_rank_0_with_plain_keys_that_loads_into_the_plain_model(fp32_runs):
    out, tmp = fp32_runs["out"], fp32_runs["tmp"]
    assert sorted(p.name for p in out.iterdir()) == ["two.pt"], "a temporary file left behind?"
    assert writes_to(tmp / "writes", out / "two.pt", world_size=2) == [2, 0]  # once per epoch, rank 0
    checkpoint = torch.load(out / "two.pt", map_location="cpu", weights_only=True)
    assert not [key for key in checkpoint["model"] if key.startswith("module.")], list(checkpoint["model"])
    load("train_single_full").DigitTransformer(dropout=0.0).load_state_dict(checkpoint["model"])
    assert (checkpoint["epoch"], checkpoint["step"], len(checkpoint["rng"])) == (2, 2 * STEPS_PER_EPOCH, 2)
    assert checkpoint["rng"][0]["torch"].ne(checkpoint["rng"][1]["torch"]).any(), "one generator for 2 ranks"
    assert checkpoint["scheduler"]["last_epoch"] == 2 * STEPS_PER_EPOCH
    assert checkpoint["optimizer"]["state"], "no AdamW moments saved"


def test_the_2_rank_checkpoint_resumes_on_1_process(fp32_runs):
    """Saved by 2 ranks x 16, resumed by 1 process x 32: the same global batch, so it goes on
    as the 1-process run did (new random generators, which dropout 0 does not use)."""
    resumed, one = fp32_runs["resumed"], fp32_runs["one"]
    assert "resumed from " in resumed.output and ": epoch 2, step 48" in resumed.output, resumed.output
    assert_ran(resumed.output, resumed.returncode, 1, 2, 3)
    assert_close(epochs(resumed.output), epochs(one.output)[2:], FP32_ROUNDING)


def test_fp16_with_the_scaler_skips_no_step_and_trains_as_fp32(fp32_runs, tmp_path):
    """fp16 autocast at 2 ranks: every optimizer step taken (the scale never dropped), and
    the epoch losses those of fp32 within 2%: the gradients were unscaled before clipping."""
    result = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", TRAIN_DDP,
                  "--precision", "fp16", "--dropout", "0", "--batch-size", "16", "--stop-after-epoch", "2",
                  "--checkpoint", tmp_path / "fp16.pt"], env=clean_env(), timeout=240)
    summary = assert_ran(result.output, result.returncode, 2, 0, 1)
    assert summary["precision"] == "fp16" and summary["steps"] == str(2 * STEPS_PER_EPOCH), summary
    assert torch.load(tmp_path / "fp16.pt", weights_only=True)["scaler"]["scale"] > 0
    for fp16, fp32 in zip(epochs(result.output), epochs(fp32_runs["two"].output), strict=True):
        assert abs(fp16[1] - fp32[1]) <= FP16_RELATIVE * fp32[1], (fp16, fp32)
        assert abs(fp16[3] - fp32[3]) <= FP16_RELATIVE * fp32[3], (fp16, fp32)


def test_bad_flags_a_finished_checkpoint_and_a_bad_launch_end_with_a_message(fp32_runs, capsys, tmp_path):
    for script in ("train_single_full", "train_ddp_full"):
        parse_args = load(script).parse_args
        for flags, message in ((["--accumulation-steps", "0"], "expected a whole number of at least 1"),
                               (["--dropout", "1"], "--dropout: expected a number from 0 and below 1"),
                               (["--lr", "-1"], "--lr: expected a number above 0"),
                               (["--precision", "fp8"], "invalid choice: 'fp8'"),
                               (["--checkpoint", str(tmp_path)], f"cannot write a file at '{tmp_path}'")):
            with pytest.raises(SystemExit) as exited:
                parse_args(flags)
            assert exited.value.code == 2
            assert message in capsys.readouterr().err, (script, flags)
    finished = fp32_runs["tmp"] / "one.pt"  # 4 epochs of 4 done
    result = run([sys.executable, FOLDER / "train_single_full.py", "--checkpoint", finished, "--resume"],
                 env=clean_env(), timeout=60)
    assert result.returncode == 1 and f"{finished} has done all 4 epochs: raise --epochs" in result.output
    assert "Traceback" not in result.output
    result = run([sys.executable, TRAIN_DDP, "--checkpoint", tmp_path / "x.pt"],
                 env=clean_env(WORLD_SIZE="2"), timeout=60)
    assert result.returncode == 1 and "WORLD_SIZE > 1 without MASTER_ADDR and MASTER_PORT" in result.output
    assert not (tmp_path / "x.pt").exists()


# --------------------------------------------------------------------------- on GPUs
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 visible CUDA GPUs ({GPUS} here)")
def test_ddp_full_under_nccl_in_bf16_and_resumed(tmp_path):
    """nccl, one GPU per process, bf16 autocast: it trains, counts every sample once, and the
    checkpoint (every rank's CUDA generator gathered over nccl) resumes on the same GPUs."""
    checkpoint = tmp_path / "full.pt"
    common = [VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={GPUS}", TRAIN_DDP,
              "--precision", "bf16", "--batch-size", "16", "--checkpoint", checkpoint]
    first = run([*common, "--stop-after-epoch", "2"], env=clean_env(), timeout=300)
    summary = assert_ran(first.output, first.returncode, GPUS, 0, 1) if GPUS == 2 else first.clean_summary()
    assert summary["device"] == "cuda" and summary["backend"] == "nccl", summary
    second = run([*common, "--resume"], env=clean_env(), timeout=300)
    assert second.returncode == 0 and ": epoch 2, step " in second.output, second.output
    assert torch.load(checkpoint, weights_only=True)["rng"][1]["cuda"] is not None
