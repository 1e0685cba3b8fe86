"""The porting page's real script: train_single_full.py and train_ddp_full.py (AdamW, warm-up
and cosine, clipping, autocast with a GradScaler for fp16, accumulation with no_sync, a sharded
evaluation, checkpoints that resume), plain PyTorch like the small pair.

Few launches, many checks:
- the page's captures: the single script trains; 2 ranks print one line per epoch; a run
  stopped after epoch 2 and resumed at 2 ranks prints the uninterrupted run's lines exactly
  (dropout on: every rank's generators restored);
- 2 ranks x 16 (observed from outside, dropout off, fp32, accumulation on) against 1 process
  x 32: step 0's gradient norm within fp32 rounding, the first epoch's numbers to the printed
  digits, the next within the drift AdamW grows from that rounding; each gradient bucket
  all-reduced once per optimizer step (no_sync); every held-out sample counted once; one
  checkpoint, written by rank 0 alone and renamed into place, no `module.` keys, that loads
  into the plain model; that checkpoint resumed on 1 process goes on as the 1-process run;
- a save killed mid-write (one process) leaves the last checkpoint whole; each save is
  flushed to disk (fsync) before the rename, and the folder after it;
- fp16 with the GradScaler at 2 ranks: no step skipped, the losses of fp32 within 2%.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, VENV_BIN, captured_run, clean_env, observed_writes, run, run_as_main, writes_to

FOLDER = REPO / "scripts" / "00_porting"
TRAIN_DDP = FOLDER / "train_ddp_full.py"
EPOCH = re.compile(r"^epoch (\d+): loss (\S+) over (\d+) samples, held-out loss (\S+) accuracy (\S+) "
                   r"over (\d+) samples, step (\d+)$", flags=re.M)
TRAIN_SAMPLES, HELD_OUT = 1500, 297  # scikit-learn's 1797 digits, split once
STEPS_PER_EPOCH = 24  # 47 micro-batches of 32 (or 2 x 16) an epoch, 2 per optimizer step
# How far two computations of the same training may print apart. Step 0's gradient: the sums of
# 2 ranks' 16 samples and of one process's 32 round differently in fp32's last bits only.
GRADIENT_ROUNDING = 1e-5  # relative
# The first epoch's losses: to the printed digits, give or take one.
FP32_ROUNDING = 3e-4
# After that, AdamW at a learning rate of 1e-2 carries the rounding on and grows it, step by step
# (measured on a 2-core Xeon: 0.0012 apart in the held-out loss after 2 epochs, 48 steps).
DRIFT = 5e-3
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


# Loaded by every Python process of a run (PYTHONPATH), after tests/observe's: each call of
# DDP's gradient all-reduce (a comm hook that counts, then runs DDP's default all-reduce), each
# gradient norm clip_grad_norm_ returns and each optimizer step, with the rank, one line each,
# in a file per process.
COUNT_ALLREDUCES = """\
import builtins, os, runpy, sys

runpy.run_path({observe!r})  # tests/observe: the writes
_LOG, _import = {log!r}, builtins.__import__


def _record(line):
    import torch.distributed as dist
    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(os.path.join(_LOG, f"{{os.getpid()}}.log"), "a") as file:
        file.write(f"{{rank}} {{line}}\\n")


def _patch():
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def counting_hook(state, bucket):
        _record(f"allreduce bucket={{bucket.index()}}")
        return allreduce_hook(state, bucket)

    init = DistributedDataParallel.__init__

    def counted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(None, counting_hook)

    DistributedDataParallel.__init__ = counted_init
    register_optimizer_step_post_hook(lambda *_: _record("step"))
    clip = torch.nn.utils.clip_grad_norm_

    def recorded_clip(*args, **kwargs):
        norm = clip(*args, **kwargs)
        _record(f"gradnorm {{norm.item()!r}}")
        return norm

    torch.nn.utils.clip_grad_norm_ = recorded_clip


def _hook(name, *args, **kwargs):
    global _depth
    _depth += 1
    try:
        module = _import(name, *args, **kwargs)
    finally:
        _depth -= 1
    if _depth == 0 and "torch" in sys.modules:  # the script's `import torch` is complete
        builtins.__import__ = _import
        _patch()
    return module


_depth = 0


builtins.__import__ = _hook
"""


def count_allreduces(out: Path, log: Path, writes: Path) -> dict[str, str]:
    """An environment in which every process records its DDP all-reduces, gradient norms and
    optimizer steps into `log` (COUNT_ALLREDUCES), and its writes into `out` into `writes`
    (tests/observe)."""
    site = log.with_name(f"{log.name}_site")
    site.mkdir()
    log.mkdir()
    (site / "sitecustomize.py").write_text(COUNT_ALLREDUCES.format(
        observe=str(REPO / "tests" / "observe" / "sitecustomize.py"), log=str(log)))
    return {**observed_writes(out, writes), "PYTHONPATH": str(site)}


def recorded(log: Path, rank: int) -> list[str]:
    """What COUNT_ALLREDUCES recorded for `rank`, in order."""
    lines = [line for file in sorted(log.glob("*.log")) for line in file.read_text().splitlines()]
    return [what for who, what in (line.split(" ", 1) for line in lines) if int(who) == rank]


def allreduces_per_step(log: Path, rank: int) -> list[list[int]]:
    """Per optimizer step of `rank`, the buckets DDP all-reduced since the step before."""
    steps, current = [], []
    for what in recorded(log, rank):
        if what == "step":
            steps.append(sorted(current))
            current = []
        elif what.startswith("allreduce "):
            current.append(int(what.split("=")[1]))
    return steps


def gradient_norms(log: Path) -> list[float]:
    """Rank 0's gradient norm at each optimizer step, as clip_grad_norm_ returned it."""
    return [float(what.split()[1]) for what in recorded(log, 0) if what.startswith("gradnorm ")]


def renames_onto(log: Path, target: Path, world_size: int) -> list[int]:
    """Per rank, how many finished files were renamed over `target` (os.replace, os.rename):
    a save written in place (torch.save onto it) counts none."""
    counts = [0] * world_size
    for file in log.glob("*.log"):
        for line in file.read_text().splitlines():
            rank, kind, *paths = line.split("\t")
            if kind == "rename" and paths[1] == str(target):
                counts[int(rank)] += 1
    return counts


@pytest.fixture(scope="module")
def fp32_runs(tmp_path_factory) -> dict:
    """Dropout off, fp32, 2 micro-batches per step: 2 ranks x 16 for 2 epochs (its writes, its
    all-reduces, gradient norms and optimizer steps observed), 1 process x 32 for 4 epochs
    (its gradient norms observed), and the 2 ranks' checkpoint resumed on 1 process."""
    tmp = tmp_path_factory.mktemp("full")
    out = tmp / "out"
    out.mkdir()
    common = ["--dropout", "0", "--accumulation-steps", "2"]
    two = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", TRAIN_DDP, *common,
               "--batch-size", "16", "--stop-after-epoch", "2", "--checkpoint", out / "two.pt"],
              env=count_allreduces(out, tmp / "allreduces", tmp / "writes"), timeout=240)
    shutil.copy(out / "two.pt", tmp / "resume.pt")
    one = run([sys.executable, TRAIN_DDP, *common, "--batch-size", "32", "--checkpoint", tmp / "one.pt"],
              env=count_allreduces(out, tmp / "one_allreduces", tmp / "one_writes"), timeout=240)
    resumed = run([sys.executable, TRAIN_DDP, *common, "--batch-size", "32", "--resume",
                   "--checkpoint", tmp / "resume.pt"], env=clean_env(), timeout=240)
    return {"two": two, "one": one, "resumed": resumed, "tmp": tmp, "out": out}


def test_2_ranks_x_16_train_as_1_process_x_32_with_accumulation(fp32_runs):
    """The training of one process with twice the batch: step 0's gradient norm the same to
    fp32's rounding, the first epoch's numbers to the printed digits, the next within the
    drift AdamW grows from that rounding. And no_sync at work: on each rank, every optimizer
    step all-reduced each of DDP's gradient buckets once, not once per micro-batch (2 per step
    here; the epoch's last step has 1)."""
    two, one, tmp = fp32_runs["two"], fp32_runs["one"], fp32_runs["tmp"]
    assert_ran(two.output, two.returncode, 2, 0, 1)
    assert_ran(one.output, one.returncode, 1, 0, 3)
    norms_two, norms_one = gradient_norms(tmp / "allreduces"), gradient_norms(tmp / "one_allreduces")
    assert len(norms_two) == 2 * STEPS_PER_EPOCH and len(norms_one) == 4 * STEPS_PER_EPOCH
    assert abs(norms_two[0] - norms_one[0]) <= GRADIENT_ROUNDING * norms_one[0], (norms_two[0], norms_one[0])
    assert_close(epochs(two.output)[:1], epochs(one.output)[:1], FP32_ROUNDING)
    assert_close(epochs(two.output), epochs(one.output)[:2], DRIFT)
    for rank in range(2):
        steps = allreduces_per_step(fp32_runs["tmp"] / "allreduces", rank)
        assert len(steps) == 2 * STEPS_PER_EPOCH and steps[0], (rank, steps)
        buckets = sorted(set(steps[-1]))
        assert all(step == buckets for step in steps), f"rank {rank}: buckets all-reduced per step: {steps}"


def test_one_checkpoint_from_rank_0_with_plain_keys_that_loads_into_the_plain_model(fp32_runs):
    out, tmp = fp32_runs["out"], fp32_runs["tmp"]
    assert sorted(p.name for p in out.iterdir()) == ["two.pt"], "a temporary file left behind?"
    assert writes_to(tmp / "writes", out / "two.pt", world_size=2) == [2, 0]  # once per epoch, rank 0
    # each time a finished file renamed over it, never written in place
    assert renames_onto(tmp / "writes", out / "two.pt", world_size=2) == [2, 0]
    checkpoint = torch.load(out / "two.pt", map_location="cpu", weights_only=True)
    assert not [key for key in checkpoint["model"] if key.startswith("module.")], list(checkpoint["model"])
    load("train_single_full").DigitTransformer(dropout=0.0).load_state_dict(checkpoint["model"])
    assert (checkpoint["epoch"], checkpoint["step"], len(checkpoint["rng"])) == (2, 2 * STEPS_PER_EPOCH, 2)
    assert checkpoint["rng"][0]["torch"].ne(checkpoint["rng"][1]["torch"]).any(), "one generator for 2 ranks"
    assert checkpoint["scheduler"]["last_epoch"] == 2 * STEPS_PER_EPOCH
    assert checkpoint["optimizer"]["state"], "no AdamW moments saved"


# Loaded by the process (PYTHONPATH): records each fsync (a file's size, or "folder") and
# each rename, in order; the second torch.save writes half its bytes, then the process is
# killed (SIGKILL), as a job out of time or a node's failure would end it mid-write.
KILL_THE_SECOND_SAVE = """\
import builtins, io, os, signal, stat, sys

_LOG, _import = {log!r}, builtins.__import__


def _record(line):
    with open(_LOG, "a") as file:
        file.write(line + "\\n")


def _patch(torch):
    save, fsync, replace = torch.save, os.fsync, os.replace
    calls = []

    def killed_save(obj, f, *args, **kwargs):
        if isinstance(f, io.BytesIO):  # in memory (all_gather_object pickles tensors so)
            return save(obj, f, *args, **kwargs)
        calls.append(f)
        if len(calls) < 2:
            return save(obj, f, *args, **kwargs)
        data = io.BytesIO()
        save(obj, data, *args, **kwargs)
        file = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
        file.write(data.getvalue()[: len(data.getvalue()) // 2])
        file.flush()
        _record("killed mid-write")
        os.kill(os.getpid(), signal.SIGKILL)

    def recorded_fsync(fd):
        st = os.fstat(fd)
        _record("fsync folder" if stat.S_ISDIR(st.st_mode) else f"fsync {{st.st_size}} bytes")
        return fsync(fd)

    def recorded_replace(src, dst, *args, **kwargs):
        _record(f"rename {{os.path.basename(src)}} {{os.path.basename(dst)}} {{os.path.getsize(src)}} bytes")
        return replace(src, dst, *args, **kwargs)

    torch.save, os.fsync, os.replace = killed_save, recorded_fsync, recorded_replace


def _hook(name, *args, **kwargs):
    global _depth
    _depth += 1
    try:
        module = _import(name, *args, **kwargs)
    finally:
        _depth -= 1
    if _depth == 0 and "torch" in sys.modules:  # the script's `import torch` is complete
        builtins.__import__ = _import
        _patch(sys.modules["torch"])
    return module


_depth = 0
builtins.__import__ = _hook
"""


def test_a_save_killed_mid_write_leaves_the_last_checkpoint(tmp_path):
    """One process whose second checkpoint save is killed halfway through: the first one is
    still there, whole, and loads (epoch 1 done); the half-written bytes went to the
    temporary file. And each complete save was written, flushed to disk (fsync, at its full
    size), renamed over the checkpoint, then the folder flushed, in that order."""
    site, log, checkpoint = tmp_path / "site", tmp_path / "events.log", tmp_path / "full.pt"
    site.mkdir()
    (site / "sitecustomize.py").write_text(KILL_THE_SECOND_SAVE.format(log=str(log)))
    result = run([sys.executable, TRAIN_DDP, "--epochs", "2", "--batch-size", "128", "--dropout", "0",
                  "--checkpoint", checkpoint], env=clean_env(PYTHONPATH=str(site)), timeout=120)
    assert result.returncode == -9 and len(epochs(result.output)) == 2, result.output
    events = log.read_text().splitlines()
    assert events[-1] == "killed mid-write", events
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)  # the first save, whole
    assert (saved["epoch"], saved["step"]) == (1, epochs(result.output)[0][6]), saved["epoch"]
    load("train_single_full").DigitTransformer(dropout=0.0).load_state_dict(saved["model"])
    size = checkpoint.stat().st_size
    first_save = [f"fsync {size} bytes", f"rename full.pt.tmp full.pt {size} bytes", "fsync folder"]
    assert events[:3] == first_save, events
    assert 0 < (tmp_path / "full.pt.tmp").stat().st_size < size  # the killed save's half


def test_the_2_rank_checkpoint_resumes_on_1_process(fp32_runs):
    """Saved by 2 ranks x 16, resumed by 1 process x 32: the same global batch, so it goes on
    as the 1-process run did (new random generators, which dropout 0 does not use)."""
    resumed, one = fp32_runs["resumed"], fp32_runs["one"]
    assert "resumed from " in resumed.output and ": epoch 2, step 48" in resumed.output, resumed.output
    assert_ran(resumed.output, resumed.returncode, 1, 2, 3)
    assert_close(epochs(resumed.output), epochs(one.output)[2:], DRIFT)


def test_fp16_with_the_scaler_skips_no_step_and_trains_as_fp32(fp32_runs, tmp_path):
    """fp16 autocast at 2 ranks: every optimizer step taken (the scale never dropped), and
    the epoch losses those of fp32 within 2%: the gradients were unscaled before clipping."""
    result = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", TRAIN_DDP,
                  "--precision", "fp16", "--dropout", "0", "--batch-size", "16", "--stop-after-epoch", "2",
                  "--checkpoint", tmp_path / "fp16.pt"], env=clean_env(), timeout=240)
    summary = assert_ran(result.output, result.returncode, 2, 0, 1)
    assert summary["precision"] == "fp16" and summary["steps"] == str(2 * STEPS_PER_EPOCH), summary
    # GradScaler's first scale, 2**16, unchanged: no step found an inf (that halves it), and
    # 48 steps are short of growth_interval's 2000 (torch.amp.GradScaler's defaults)
    assert torch.load(tmp_path / "fp16.pt", weights_only=True)["scaler"]["scale"] == 2.0 ** 16
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
    result = run_as_main(FOLDER / "train_single_full.py", "--checkpoint", finished, "--resume",
                         env=clean_env())
    assert result.returncode == 1 and f"{finished} has done all 4 epochs: raise --epochs" in result.output
    assert "Traceback" not in result.output
    result = run_as_main(TRAIN_DDP, "--checkpoint", tmp_path / "x.pt", env=clean_env(WORLD_SIZE="2"))
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
