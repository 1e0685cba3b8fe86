"""Chapter 14: restarts that resume bit for bit, a save killed mid-write (bad versus good),
preemption at a step every rank agrees on, under torchrun, MPI and a real Slurm."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import captured_run, mpiexec, parse_summary
from slurm_cluster import shared_cluster

SCRIPT = "14_fault_tolerance/train_resilient.py"
JOB_SCRIPT = "scripts/14_fault_tolerance/slurm_preemptible.sh"
TOTAL_STEPS = 48  # 3 epochs of 256 samples per rank, batches of 16
ZIP_ERROR = "PytorchStreamReader failed reading zip archive: failed finding central directory"


def final_weights(directory: str) -> dict[str, torch.Tensor]:
    return torch.load(Path(directory) / "final_weights.pt", weights_only=True)


def assert_bit_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:  # torch.equal: same shape and every element equal, not merely close
        assert torch.equal(a[key], b[key]), f"{key} differs by {(a[key] - b[key]).abs().max()}"


# One launch each, shared by the page (test_site) and the tests below.
@pytest.fixture(scope="module")
def reference():
    result = captured_run("14_reference.txt")
    assert result.returncode == 0, result.output
    return result, final_weights("/tmp/ch14_reference")


@pytest.fixture(scope="module")
def restarted():
    result = captured_run("14_restart.txt")
    assert result.returncode == 0, result.output
    return result, final_weights("/tmp/ch14_restart")


# --------------------------------------------------------------------------- restarts
def test_a_killed_rank_is_restarted_and_the_run_resumes_mid_epoch_bit_for_bit(reference, restarted):
    ref, ref_weights = reference
    result, weights = restarted
    assert "rank 1: killed (SIGKILL) after step 10" in result.output
    assert "restart=1" in result.output, "torchrun did not restart the group"
    # the last checkpoint before step 10 was step 8: mid-epoch (16 steps per epoch)
    assert "resumed from checkpoint_good.pt: step 8, epoch 1, batch 8 of the epoch" in result.output
    assert "rng_restored=yes" in result.output
    summary = parse_summary(result.output)
    assert summary["resumed_from_step"] == "8" and summary["steps"] == f"{TOTAL_STEPS}/{TOTAL_STEPS}"
    assert_bit_equal(weights, ref_weights)
    assert summary["weights_crc"] == parse_summary(ref.output)["weights_crc"]
    # the losses the page shows after the restart are the uninterrupted run's
    for step in (16, 32, 48):
        line = re.search(rf"^step {step}/48  loss \S+$", ref.output, flags=re.M)[0]
        assert line in result.output


def test_mpiexec_run_trains_the_same_weights(reference, tmp_path):
    """The script under Open MPI's mpiexec: a launch torchrun has no part in, same weights."""
    result = mpiexec("openmpi", 2, SCRIPT, "--checkpoint-dir", str(tmp_path))
    assert result.returncode == 0, result.output
    assert "launcher=openmpi world_size=2" in result.output
    assert_bit_equal(final_weights(str(tmp_path)), reference[1])


# --------------------------------------------------------------------------- the pitfall
def test_bad_save_killed_mid_write_leaves_a_file_the_restart_cannot_read():
    result = captured_run("14_save_bad.txt")
    assert result.returncode != 0, result.output
    assert "rank 0: killed while writing the checkpoint of step 12 (after 100000 bytes)" in result.output
    assert "restart=1" in result.output
    assert f"cannot resume: checkpoint_bad.pt is not a complete checkpoint: {ZIP_ERROR}" in result.output
    assert "summary:" not in result.output, "the bad run was not lost"
    # what is left on disk: the first 100000 bytes of a checkpoint, and no other
    truncated = Path("/tmp/ch14_save_bad/checkpoint_bad.pt")
    assert truncated.stat().st_size == 100_000
    with pytest.raises(RuntimeError, match=ZIP_ERROR):
        torch.load(truncated, weights_only=True)


def test_good_save_killed_mid_write_keeps_the_previous_checkpoint_and_resumes(reference):
    result = captured_run("14_save_good.txt")
    assert result.returncode == 0, result.output
    assert "rank 0: killed while writing the checkpoint of step 12" in result.output
    assert "removed the temporary file of a save that never finished" in result.output
    assert "resumed from checkpoint_good.pt: step 8," in result.output  # step 12's never landed
    assert_bit_equal(final_weights("/tmp/ch14_save_good"), reference[1])
    assert not list(Path("/tmp/ch14_save_good").glob(".*.tmp"))


# --------------------------------------------------------------------------- preemption
def test_a_signal_on_one_rank_stops_every_rank_at_one_step_and_the_resume_is_exact(reference):
    result = captured_run("14_preempt.txt")
    assert "rank 1: got SIGUSR1 after step 13" in result.output
    # rank 0 never got the signal, yet stopped at the same step: the all-reduce told it
    assert ("preempted: a signal on another rank at step 13/48: checkpoint saved, exit code 75"
            in result.output)
    assert "resumed from checkpoint_good.pt: step 13," in result.output
    assert_bit_equal(final_weights("/tmp/ch14_preempt"), reference[1])


@pytest.fixture(scope="module")
def slurm(request):
    return shared_cluster(request.config)


def test_slurm_job_signalled_saves_exits_75_and_requeues_and_the_next_job_resumes(slurm, reference, tmp_path):
    """The job script under the real Slurm: SIGUSR1 to the batch shell (what
    --signal=B:USR1@60 sends), passed on to the ranks; they save at one step and exit 75;
    the job script requeues the job. Slurm holds a requeued job back until the first run's
    job credential has expired (BeginTime, about two minutes; starting it sooner fails with
    "Job credential revoked"), so the test cancels the requeued job and submits the job
    script again with the same checkpoint directory, as a resubmission would: it resumes
    at that step and ends with the reference's weights. --heartbeat: the step count moves."""
    output, checkpoints = tmp_path / "job.out", tmp_path / "checkpoints"
    env = slurm.env(CHECKPOINT_DIR=str(checkpoints))
    args = ("--sleep-per-step", "0.2", "--heartbeat", "1")
    submitted = slurm.command("sbatch", "--parsable", f"--output={output}", "--export=ALL", JOB_SCRIPT, *args,
                              env=env)
    job_id = submitted.stdout.split(";")[0].strip()
    assert submitted.returncode == 0 and job_id.isdigit(), submitted.stdout
    try:
        slurm.wait_for_output(output, "step 1/48", timeout=120)
        signalled = slurm.command("scancel", "--signal=USR1", "--batch", job_id)
        assert signalled.returncode == 0, signalled.stdout
        slurm.wait_for_output(output, "requeueing job", timeout=120)
        deadline = time.monotonic() + 60
        while (fields := slurm.job(job_id)).get("JobState") != "PENDING" or fields.get("Restarts") != "1":
            assert time.monotonic() < deadline, f"job {job_id} not requeued: {fields}\n{output.read_text()}"
            time.sleep(0.2)
    finally:
        slurm.command("scancel", job_id)
    first = output.read_text()
    assert "job script: got SIGUSR1, passing it to the ranks" in first
    stopped = re.search(r"^preempted: SIGUSR1 at step (\d+)/48: checkpoint saved, exit code 75", first,
                        flags=re.M)
    assert stopped, first
    assert f"the ranks saved a checkpoint and exited with 75: requeueing job {job_id}" in first
    assert fields["Reason"] == "BeginTime", fields  # queued again, to start later

    again_output = tmp_path / "again.out"
    again = slurm.submit(["sbatch", "--parsable", f"--output={again_output}", "--export=ALL", JOB_SCRIPT,
                          *args], output=again_output, env=env)
    assert again.returncode == 0, again.output
    assert f"resumed from checkpoint_good.pt: step {stopped[1]}," in again.output
    summary = parse_summary(again.output)
    assert summary["launcher"] == "slurm" and summary["steps"] == "48/48"
    assert "job script: training exited with code 0" in again.output
    assert_bit_equal(final_weights(str(checkpoints)), reference[1])
    beats = [int(n) for n in re.findall(r"^heartbeat: step (\d+), ", first + again.output, flags=re.M)]
    assert len(beats) >= 2 and beats == sorted(beats) and beats[-1] > beats[0], first + again.output


# --------------------------------------------------------------------------- pieces
def test_dies_mid_write_kills_its_process_at_the_byte_count(tmp_path):
    """The fault injection itself: a child process that torch.saves through DiesMidWrite
    dies by SIGKILL with exactly the bytes asked for on disk."""
    code = ("import sys, torch; sys.path.insert(0, 'scripts/14_fault_tolerance'); "
            "from train_resilient import DiesMidWrite; from pathlib import Path; "
            f"f = DiesMidWrite(Path({str(tmp_path / 'x.pt')!r}), 5000); "
            "torch.save(torch.zeros(10000), f); print('not killed')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert (tmp_path / "x.pt").stat().st_size == 5000
