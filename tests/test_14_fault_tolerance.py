"""Chapter 14: restarts that resume bit for bit, a save killed mid-write (bad versus good),
preemption at a step every rank agrees on, under torchrun, MPI and a real Slurm."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from captured_outputs import LOG_LINE
from conftest import REPO, VENV_BIN, captured_run, mpiexec, parse_summary, script
from simulated_nodes import (
    NODE_ADDRESSES,
    Background,
    kill_leftovers,  # noqa: F401 - an autouse fixture: it acts by being imported here
    node_env,
    two_network_namespaces,
)
from slurm_cluster import shared_cluster

SCRIPT = "14_fault_tolerance/train_resilient.py"
JOB_SCRIPT = "scripts/14_fault_tolerance/slurm_preemptible.sh"
TOTAL_STEPS = 48  # 3 epochs of 256 samples per rank, batches of 16
ELASTIC_RECORDED = REPO / "docs" / "outputs" / "recorded" / "14_elastic_node0.txt"
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
        # Requeued, and the scheduler has said why it waits: Reason=None until it has looked
        # at the job (a moment longer while another job keeps the controller busy).
        while ((fields := slurm.job(job_id)).get("JobState") != "PENDING" or fields.get("Restarts") != "1"
               or fields.get("Reason") == "None"):
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


def test_the_restart_with_loader_workers_in_every_rank_ends_and_resumes(tmp_path):
    """The GPU lane's restart, on CPUs: every rank's loader has worker processes, as on a
    GPU (tests/loader_workers forces 2), the last rank is killed after step 10, torchrun
    restarts the group, and the run resumes from step 8 and ends; its output ends too."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO / "tests" / "loader_workers"),
                                               os.environ.get("PYTHONPATH")]))
    token = f"{os.getpid()}-{time.monotonic_ns()}"  # marks every process this launch starts
    env = {**os.environ, "PYTHONPATH": pythonpath, "LOADER_WORKERS_ON_CPU": "2", "CH14_LAUNCH": token,
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [str(VENV_BIN / "torchrun"), "--standalone", "--nproc_per_node=2", "--max-restarts=1",
         str(script(SCRIPT)), "--checkpoint-dir", str(tmp_path), "--fail-at-step", "10", "--epochs", "1"],
        cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        import psutil

        for leftover in psutil.process_iter():  # the launch's processes, whatever their session
            with contextlib.suppress(psutil.Error):
                if leftover.environ().get("CH14_LAUNCH") == token:
                    leftover.kill()
        output, _ = proc.communicate()
        pytest.fail(f"the restart's output never ended (a killed rank's loader workers?):\n{output}")
    assert proc.returncode == 0, output
    summary = parse_summary(output)
    assert (summary["restart"], summary["resumed_from_step"], summary["steps"]) == ("1", "8", "16/16"), output
    assert "rank 1: killed (SIGKILL) after step 10" in output


# --------------------------------------------------------------------------- elastic membership
@pytest.fixture
def two_nodes():
    with two_network_namespaces() as names:
        yield names


# 384 samples, global batches of 32: 12 steps per epoch, 36 in 3 epochs; node 1 is lost after
# step 6 (the last checkpoint: step 4), and has until step 36 (0.5 s per step) to come back.
ELASTIC_STEPS = 36
# needed for the restart and for the node that comes back (the chapter says why)
ELASTIC_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
# The command the page shows, run on each node; the test adds the simulated node's address.
ELASTIC_PAGE_COMMAND = (
    "torchrun", "--nnodes=1:2", "--nproc_per_node=1", "--max-restarts=3", "--rdzv-backend=c10d",
    "--rdzv-endpoint=node0:29400", "--rdzv-id=ch14", "--rdzv-conf=last_call_timeout=5",
    f"scripts/{SCRIPT}", "--checkpoint-dir", "/shared/ch14_elastic", "--global-batch-size", "32",
    "--num-samples", "384", "--lose-node-at-step", "6", "--sleep-per-step", "0.5")


def elastic_node(namespace: str, address: str, checkpoints: Path) -> Background:
    """The page's torchrun command on one simulated node: 1 to 2 nodes of one rank each.
    is_host says which node starts the rendezvous store (the nodes share a host name here,
    so torchrun cannot tell by name), --local-addr how the other node reaches this one."""
    is_host = "true" if address == NODE_ADDRESSES[0] else "false"
    torchrun, *args = (part.replace("node0", NODE_ADDRESSES[0]) for part in ELASTIC_PAGE_COMMAND)
    args = [arg.replace("last_call_timeout=5", f"last_call_timeout=5,is_host={is_host}") for arg in args]
    args[args.index("/shared/ch14_elastic")] = str(checkpoints)
    cmd = ["ip", "netns", "exec", namespace, VENV_BIN / torchrun, f"--local-addr={address}", *args]
    name, value = ELASTIC_ENV.split("=")
    return Background(cmd, env=node_env(address, **{name: value}), timeout=240)


@pytest.mark.timed
def test_elastic_a_node_leaves_and_one_joins_the_group_re_forms_and_trains_on(two_nodes, tmp_path):
    """Two simulated nodes, one rank each, torchrun --nnodes=1:2. Node 1 is lost after step 6
    (its torchrun and rank SIGKILLed): node 0's rank fails at its next collective, its
    torchrun restarts it, the rendezvous drops the dead node and completes with node 0 alone
    (world size 1), which resumes from the checkpoint of step 4. Then node 1 comes back: node
    0's torchrun sees a node waiting, stops its rank with SIGTERM (which saves at the step
    boundary, as a preemption does) and the group re-forms with world size 2 from there."""
    node0 = elastic_node(two_nodes[0], NODE_ADDRESSES[0], tmp_path)
    node1 = elastic_node(two_nodes[1], NODE_ADDRESSES[1], tmp_path)
    node1.wait_for("its node is lost after step 6", timeout=120)
    lost = node1.finish()
    node0.wait_for("world size 2 -> 1 since the checkpoint", timeout=120)
    rejoined = elastic_node(two_nodes[1], NODE_ADDRESSES[1], tmp_path)
    result, rejoined = node0.finish(), rejoined.finish()
    assert lost.returncode == -signal.SIGKILL, lost.output  # torchrun itself was killed
    assert result.returncode == 0, result.output
    assert rejoined.returncode == 0, rejoined.output
    assert "summary:" not in rejoined.output, "rank 0 of every group is on node 0 (its address sorts first)"
    node0_output = page_lines(result.output)
    check_elastic_run(node0_output)
    if os.environ.get("RECORD_OUTPUTS"):  # make outputs: the page shows this run
        ELASTIC_RECORDED.write_text(f"$ {ELASTIC_ENV} {' '.join(ELASTIC_PAGE_COMMAND)}  # on each node\n"
                                    f"{node0_output}\n")


def test_the_elastic_output_on_the_page_shows_what_the_test_checks():
    """The page shows node 0's output of one run of the test above (recorded with
    RECORD_OUTPUTS=1): it must pass the same checks as a fresh run."""
    command, output = ELASTIC_RECORDED.read_text().partition("\n")[::2]
    assert command.startswith(f"$ {ELASTIC_ENV} {' '.join(ELASTIC_PAGE_COMMAND)}"), command
    check_elastic_run(output)


def page_lines(output: str) -> str:
    """Node 0's output as the page shows it: torchrun's log lines dropped (as in every
    captured output), the traceback's frames too (its last line says what failed)."""
    frames = re.compile(r"^\[rank\d+\]:(\s{2,}| *[~^]+$)")
    return "\n".join(line for line in output.splitlines()
                     if not LOG_LINE.match(line) and not frames.match(line))


def check_elastic_run(output: str) -> None:
    """What the page says of the elastic run, checked on node 0's output."""
    starts = re.findall(r"^start: launcher=torchrun world_size=(\d) restart=(\d)", output, flags=re.M)
    # 2 nodes, then node 0 alone after the loss (a restart: it failed), then 2 again after the
    # join (a membership change: not counted against --max-restarts, so still restart=1)
    assert starts == [("2", "0"), ("1", "1"), ("2", "1")], output
    # the loss, as node 0's rank saw it: gloo's error for a peer whose connection is gone
    assert re.search(r"^\[rank0\]: [\w.]*Error: .*(reset|closed) by peer", output, flags=re.M), output
    assert output.count("global batch 32: 2 rank(s) x 16") == 2, output
    assert output.count("global batch 32: 1 rank(s) x 32") == 1, output
    assert "resumed from checkpoint_good.pt: step 4, epoch 1, batch 4 of the epoch" in output, output
    assert ("world size 2 -> 1 since the checkpoint: each rank takes 32 of the global batch of 32; step, "
            "learning rate and schedule go on") in output
    # the join: node 0's rank saved at the step boundary where SIGTERM found it, and the
    # re-formed group resumed at that very step: no step lost
    stopped = re.search(rf"^preempted: SIGTERM at step (\d+)/{ELASTIC_STEPS}: checkpoint saved", output,
                        flags=re.M)
    assert stopped and 4 < int(stopped[1]) < ELASTIC_STEPS, output
    assert f"resumed from checkpoint_good.pt: step {stopped[1]}," in output, output
    assert "world size 1 -> 2 since the checkpoint: each rank takes 16 of the global batch of 32" in output
    summary = parse_summary(output)
    assert summary["world_size"] == "2" and summary["steps"] == f"{ELASTIC_STEPS}/{ELASTIC_STEPS}", summary


# --------------------------------------------------------------------------- the global batch
def test_a_resume_on_fewer_ranks_refuses_another_global_batch_and_keeps_a_fixed_one():
    """A run of 2 ranks stopped at step 13, resumed by one process: with --batch-size (per
    rank) the global batch would halve under the checkpoint's step count, and the script
    refuses, saying what to pass; with --global-batch-size 32 it resumes and finishes."""
    bad = captured_run("14_elastic_bad.txt")
    assert bad.returncode == 1, bad.output
    assert ("cannot resume: the checkpoint's step counts global batches of 32 (2 ranks), this run's is 16 "
            "(1 rank(s) x 16). Pass --global-batch-size 32") in bad.output
    assert "summary:" not in bad.output and "resumed from" not in bad.output, bad.output
    good = captured_run("14_elastic_good.txt")
    assert good.returncode == 0, good.output
    assert "resumed from checkpoint_good.pt: step 13, epoch 1, batch 13 of the epoch" in good.output
    assert "world size 2 -> 1 since the checkpoint: each rank takes 32 of the global batch of 32" in \
        good.output
    summary = parse_summary(good.output)
    assert summary["world_size"] == "1" and summary["steps"] == "48/48", summary


def test_a_fixed_global_batch_holds_the_same_samples_whatever_the_world_size():
    """Why the step count survives a change of world size: DistributedSampler's order
    depends on seed and epoch only, and rank r takes every world-size-th index; so with
    batches of G / world size per rank, global batch k holds the same G samples for any
    world size, in a resumed epoch (SkipFirst) too."""
    sys.path.insert(0, str(script("14_fault_tolerance")))
    from torch.utils.data import DistributedSampler
    from train_resilient import SkipFirst

    global_batch = 32

    def global_batches(data: list[int], world_size: int, skip_batches: int) -> list[list[int]]:
        per_rank = global_batch // world_size
        shares = []
        for rank in range(world_size):
            sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0, drop_last=True)
            sampler.set_epoch(1)
            shares.append(list(SkipFirst(sampler, skip_batches * per_rank)))
        steps = len(shares[0]) // per_rank
        return [sorted(i for share in shares for i in share[k * per_rank:(k + 1) * per_rank])
                for k in range(steps)]

    for samples in (384, 512):  # the page's elastic run, and the script's default
        for skip in (0, 3):
            data = list(range(samples))
            one, two, four = (global_batches(data, world_size, skip) for world_size in (1, 2, 4))
            assert len(one) == samples // global_batch - skip and one == two == four
