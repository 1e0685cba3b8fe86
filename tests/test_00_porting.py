"""The porting page: a plain single-device script, its DDP version, and two job templates,
none of them importing anything from this repository.

- train_single.py and train_ddp.py as one process, and train_ddp.py under torchrun on 2
  processes (the page's captured runs): the DDP run reaches the single run's loss, and 2 x 16
  samples per step train exactly as 1 x 32; rank 0 alone prints.
- train_ddp.py under torchrun, watched from outside (tests/observe for the writes, and a
  sampler observer written here): one checkpoint, written by rank 0 alone, with no
  `module.` prefix, that loads into the plain model; each rank draws its own half of the
  data, in a new order every epoch; the gloo group is gone when the script leaves it (its
  threads end in destroy_process_group, not at exit after the other rank has gone).
- Bad flags: exit 2 with a message, no traceback.
- A launch torchrun did not set up: WORLD_SIZE without MASTER_ADDR/MASTER_PORT, and mpiexec
  -n 2 or srun -n 2 starting the script itself: one message each, exit 1, no checkpoint. A
  Slurm batch script with --ntasks=2 but no job step runs one process, which trains alone.
- More processes on a node than it has GPUs (GPUs faked by a sitecustomize): a message with
  the ways out, exit 1, before set_device.
- slurm_job.sh under the test cluster's sbatch (torchrun told that it hosts the rendezvous);
  pbs_job.sh through Slurm's qsub (its #PBS lines, place=scatter included; a faked GPU
  count: as many processes as GPUs), and on two simulated nodes (network namespaces, each
  with its own host name; the node file lists other names of the nodes than `hostname`
  says, as on HPE/Cray), mpiexec starting one torchrun per node. Under bash with stand-ins:
  two chunks on one node stop the job; each MPI's launch line binds no CPU (and Open MPI's
  mpiexec, for real, binds one core without --bind-to none).
- Each template copied alone into an empty folder with a train.py (no check_ddp.py) trains,
  after one line that says the preflight is skipped (slurm_job.sh with stand-ins for srun
  and scontrol: srun gets the job's --cpus-per-task); under sbatch (CI) the copied project
  with check_ddp.py runs the preflight first. Two PBS array subjobs get two ports.
- Troubleshooting's buffer: a positional table made as a transposed view fails DDP's first
  forward with PyTorch's message; built with unsqueeze(1), it trains.
- token_stream.py at 1 and 2 ranks: the same global batch (step 0's loss and gradient norm,
  the epochs), every held-out token counted once; columns too short to train: exit 2.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO,
    VENV_BIN,
    captured_run,
    clean_env,
    mpi_env,
    observed_writes,
    run,
    run_as_main,
    writes_to,
)
from simulated_nodes import INTERFACE, JOB_TIMEOUT_S, kill_leftovers  # noqa: F401 - autouse fixture
from slurm_cluster import shared_cluster
from test_13_multinode_and_hpc import (  # the two simulated nodes with HPE/Cray-like names
    CRAY_NAMES,
    CRAY_SSH,
    HSN_NAMES,
    cray_nodes,  # noqa: F401 - a fixture
    two_nodes,  # noqa: F401 - a fixture (cray_nodes asks for it)
)

from utils.rendezvous import job_port

FOLDER = REPO / "scripts" / "00_porting"
TRAIN_DDP = "scripts/00_porting/train_ddp.py"
# How far the DDP run's final loss may be from the single run's: they shuffle differently (the
# DataLoader draws its workers' base seed from its generator before the shuffle; the
# DistributedSampler seeds a generator with seed + epoch), so they see other batches.
LOSS_TOLERANCE = 0.15  # relative


def load(name: str):
    """A script of the folder as a module (its make_model, parse_args), without running it."""
    spec = importlib.util.spec_from_file_location(f"porting_{name}", FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def epoch_lines(output: str) -> list[str]:
    return re.findall(r"^epoch \d+: loss \S+ over \d+ samples$", output, flags=re.M)


def assert_trained(output: str, world_size: int) -> float:
    """What a run prints: 5 epoch lines and one summary (rank 0 alone), every sample's loss
    counted once per epoch (2048). Returns the final loss."""
    summary = dict(re.findall(r"(\w+)=(\S+)", output.split("summary:")[-1]))
    assert output.count("summary:") == 1, f"a line printed by more than rank 0:\n{output}"
    lines = epoch_lines(output)
    assert len(lines) == 5 and all(line.endswith("over 2048 samples") for line in lines), output
    assert summary["world_size"] == str(world_size) and summary["device"] == "cpu", summary
    assert lines[-1].split()[3] == summary["final_loss"], output
    return float(summary["final_loss"])


def test_torchrun_trains_and_only_rank_0_prints():
    """The page's torchrun run (the one quick launch of this page): 2 ranks, one line per
    epoch, every sample counted once, one summary."""
    ddp = captured_run("00_ddp.txt")
    assert ddp.returncode == 0, ddp.output
    assert_trained(ddp.output, 2)
    assert "backend=gloo" in ddp.output


def test_ddp_reaches_the_single_loss():
    single = captured_run("00_single.txt")
    alone = captured_run("00_ddp_alone.txt")
    ddp = captured_run("00_ddp.txt")
    for result in (single, alone, ddp):
        assert result.returncode == 0, result.output
    single_loss = assert_trained(single.output, 1)
    alone_loss = assert_trained(alone.output, 1)
    ddp_loss = assert_trained(ddp.output, 2)
    # The same training as one process with twice the batch: the two ranks' batches of 16 are
    # the 32 samples that one rank takes (DistributedSampler interleaves one shuffled order).
    assert epoch_lines(alone.output) == epoch_lines(ddp.output), (alone.output, ddp.output)
    assert abs(alone_loss - ddp_loss) <= 2e-4
    assert abs(ddp_loss - single_loss) <= LOSS_TOLERANCE * single_loss, (single_loss, ddp_loss)


def test_diff_holds_every_change_the_page_walks_through():
    """The page's diff, made from the files, holds each change the page walks through; and
    neither script imports anything from this repository."""
    diff = captured_run("00_diff.txt")
    assert diff.returncode == 1, diff.output  # diff's "the files differ"
    added = [line[1:].strip() for line in diff.output.splitlines() if line.startswith("+ ")]
    code = [line for line in added if line and not line.startswith("#")]
    for change in ("torch.cuda.set_device(local_rank)", "dist.init_process_group(",
                   "DistributedSampler(dataset", "sampler.set_epoch(epoch)", "model = DDP(model",
                   "dist.all_reduce(totals)", "if rank == 0:", "model.module.state_dict()",
                   "del model", "dist.barrier()", "dist.destroy_process_group()", "check_launch()",
                   "timeout=datetime.timedelta(minutes=5)"):
        assert any(change in line for line in code), change
    for path in (FOLDER / "train_single.py", FOLDER / "train_ddp.py"):
        assert not re.search(r"^\s*(from|import) utils\b|sys\.path", path.read_text(), flags=re.M), path


@pytest.fixture
def sampler_observer(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment in which every Python process records, per rank, each order a
    DistributedSampler hands out (and tests/observe records the writes into tmp_path/out)."""
    site, samples, out = tmp_path / "site", tmp_path / "samples", tmp_path / "out"
    for folder in (site, samples, out):
        folder.mkdir()
    env = observed_writes(out, tmp_path / "writes")
    (site / "sitecustomize.py").write_text(f"""\
import os, runpy
runpy.run_path({str(REPO / "tests" / "observe" / "sitecustomize.py")!r})  # the writes
from torch.utils.data import distributed as _distributed

_iterate = _distributed.DistributedSampler.__iter__


def _observed(self):
    indices = list(_iterate(self))
    with open(os.path.join({str(samples)!r}, f"rank{{self.rank}}.txt"), "a") as file:
        file.write(",".join(map(str, indices)) + "\\n")
    return iter(indices)


_distributed.DistributedSampler.__iter__ = _observed

# The threads of this process before init_process_group and after destroy_process_group.
import torch.distributed as _dist

_init, _destroy = _dist.init_process_group, _dist.destroy_process_group


def _threads():
    return len(os.listdir("/proc/self/task"))


def _observed_init(*args, **kwargs):
    _observed_init.before = _threads()
    return _init(*args, **kwargs)


def _observed_destroy(*args, **kwargs):
    rank = _dist.get_rank()
    _destroy(*args, **kwargs)
    with open(os.path.join({str(samples)!r}, f"threads{{rank}}.txt"), "w") as file:
        file.write(f"{{_observed_init.before}} {{_threads()}}")


_dist.init_process_group, _dist.destroy_process_group = _observed_init, _observed_destroy
""")
    env["PYTHONPATH"] = str(site)
    return env, tmp_path


def test_torchrun_saves_one_plain_checkpoint_from_rank_0_and_reshuffles(sampler_observer):
    env, tmp_path = sampler_observer
    checkpoint = tmp_path / "out" / "model.pt"
    result = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", REPO / TRAIN_DDP,
                  "--batch-size", "16", "--epochs", "3", "--checkpoint", checkpoint], env=env, timeout=180)
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1 and len(epoch_lines(result.output)) == 3, result.output
    # One file, written once, by rank 0.
    assert [p.name for p in checkpoint.parent.iterdir()] == ["model.pt"]
    assert writes_to(tmp_path / "writes", checkpoint, world_size=2) == [1, 0]
    # The plain model's keys (no "module." prefix), and it loads into the plain model.
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert not [key for key in state if key.startswith("module.")], list(state)
    load("train_single").make_model().load_state_dict(state)
    # Each rank drew its own half of the data, in a new order every epoch.
    orders = [[line.split(",") for line in (tmp_path / "samples" / f"rank{r}.txt").read_text().split()]
              for r in range(2)]
    assert [len(o) for o in orders] == [3, 3], orders
    for epoch in range(3):
        shards = [set(orders[r][epoch]) for r in range(2)]
        assert len(shards[0]) == len(shards[1]) == 1024 and not shards[0] & shards[1]
    assert orders[0][0] != orders[0][1] != orders[0][2], "the same order every epoch: no set_epoch?"
    # The group is freed where the script leaves it: the gloo threads are gone after
    # destroy_process_group (left to the exit, they were torn down after the other rank had
    # gone, which aborted rank 1 now and then).
    for r in range(2):
        before, after = map(int, (tmp_path / "samples" / f"threads{r}.txt").read_text().split())
        assert after <= before, f"rank {r}: {before} threads before init_process_group, {after} after destroy"


def test_bad_flags_exit_2_with_a_message(capsys, tmp_path):
    result = run_as_main(REPO / TRAIN_DDP, "--batch-size", "0", env=clean_env())
    assert result.returncode == 2, result.output
    assert "argument --batch-size: expected a whole number of at least 1, got '0'" in result.output
    assert "Traceback" not in result.output
    for script in ("train_single", "train_ddp"):
        parse_args = load(script).parse_args
        for flags, message in ((["--epochs", "-1"], "--epochs: expected a whole number of at least 1"),
                               (["--lr", "0"], "--lr: expected a number above 0, got '0'"),
                               (["--lr", "inf"], "--lr: expected a number above 0"),
                               (["--lr", "fast"], "--lr: expected a number above 0, got 'fast'"),
                               (["--seed", "1.5"], "--seed: expected a whole number from 0 to 4294967295"),
                               (["--checkpoint", str(tmp_path)], f"cannot write a file at '{tmp_path}'"),
                               (["--checkpoint", "/proc/no/model.pt"], "--checkpoint: cannot write a file")):
            with pytest.raises(SystemExit) as exited:
                parse_args(flags)
            assert exited.value.code == 2
            assert message in capsys.readouterr().err, (script, flags)
        assert parse_args(["--epochs", "2", "--lr", "1e-3"]).lr == 0.001


NO_TORCHRUN = "WORLD_SIZE > 1 without MASTER_ADDR and MASTER_PORT: launch with torchrun"
COPIES = "2 processes started without torchrun would each train alone: start one torchrun per node"


def test_a_launch_torchrun_did_not_set_up_exits_1_with_a_message(tmp_path):
    """No hang and no silent copies: WORLD_SIZE without torchrun's address (it waited forever
    before), and a launcher's size variable without WORLD_SIZE (mpiexec or srun starting the
    script N times, each training alone): one line that says what to do, exit 1, no checkpoint.
    The four environments run the script in this process (run_as_main: it stops before any
    process group); Open MPI's mpiexec runs it for real."""
    checkpoint = tmp_path / "model.pt"
    cases = [({"WORLD_SIZE": "2"}, NO_TORCHRUN),
             ({"WORLD_SIZE": "2", "MASTER_ADDR": "localhost"}, NO_TORCHRUN),
             ({"PMI_SIZE": "2", "PMI_RANK": "1"}, COPIES),
             ({"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, COPIES)]
    for extra, message in cases:
        result = run_as_main(REPO / TRAIN_DDP, "--checkpoint", checkpoint, env=clean_env(**extra),
                             cwd=tmp_path)
        assert result.returncode == 1 and message in result.output, (extra, result.output)
        assert "Traceback" not in result.output and not checkpoint.exists(), (extra, result.output)
    # The real thing: Open MPI's mpiexec -n 2, without torchrun. Each copy's exit code is
    # printed by a shell around it, so Open MPI ends no copy early (it ends the others once
    # one process fails, in no set order).
    each = (f"{sys.executable} {REPO / TRAIN_DDP} --checkpoint {checkpoint}; "
            'echo "copy $OMPI_COMM_WORLD_RANK exit $?"')
    result = run(["mpiexec", "-n", "2", "bash", "-c", each], env=mpi_env("openmpi"), cwd=tmp_path, timeout=60)
    assert "copy 0 exit 1" in result.output and "copy 1 exit 1" in result.output, result.output
    assert result.output.count(COPIES) == 2, result.output
    assert "summary:" not in result.output and not checkpoint.exists(), result.output


def fake_gpus(tmp_path: Path, count: int) -> dict[str, str]:
    """An environment in which torch.cuda answers as on a node with `count` GPUs (a
    sitecustomize on PYTHONPATH, read by every Python process: torchrun's workers too)."""
    site = tmp_path / "fake_gpus"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"""\
import torch

torch.cuda.is_available = lambda: {count} > 0
torch.cuda.device_count = lambda: {count}
""")
    return clean_env(PYTHONPATH=str(site))


GPU_SHORTAGE = ("2 processes on this node, but it has 1 GPU(s): start one process per GPU "
                "(torchrun --nproc_per_node=1), or train on the CPUs with gloo: hide the GPUs with "
                "CUDA_VISIBLE_DEVICES= in front of the command")


def test_more_processes_than_gpus_stop_before_set_device(tmp_path, monkeypatch):
    """torchrun --nproc_per_node=2 on a one-GPU workstation: set_device(1) ended in 'CUDA error:
    invalid device ordinal' (the H200 recording). Now each process says what happened and the
    ways out, and exits 1 before it touches a GPU. Local rank 1 of 2 alone, in this process
    with torch.cuda faked as fake_gpus fakes it (run_as_main); then torchrun's two processes."""
    env = fake_gpus(tmp_path, 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for path in (TRAIN_DDP, "scripts/00_porting/train_ddp_full.py"):  # the real-script pair too
        alone = run_as_main(REPO / path, env={**env, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
                            cwd=tmp_path)
        assert alone.returncode == 1 and GPU_SHORTAGE in alone.output, (path, alone.output)
        assert "Traceback" not in alone.output, alone.output
    result = run([VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2", REPO / TRAIN_DDP],
                 env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 1 and GPU_SHORTAGE in result.output, result.output
    assert "set_device" not in result.output and "summary:" not in result.output, result.output


# --------------------------------------------------------------------------- the templates
@pytest.fixture(scope="session")
def slurm(request):
    return shared_cluster(request.config)


def template_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a user sets in the templates' EDIT lines, as the environment they also read."""
    return {"VENV": str(Path(sys.executable).parents[1]),
            "TRAIN_ARGS": f"--batch-size 16 --epochs 2 --checkpoint {tmp_path / 'model.pt'}", **extra}


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def venv_that_shows_torchrun(tmp_path: Path) -> Path:
    """A VENV for the templates: the real one, with a torchrun in front that prints the
    arguments it was given ("torchrun got: ...") before it runs the real one."""
    venv, real = tmp_path / "venv", Path(sys.executable).parents[1]
    executable(venv / "bin" / "torchrun",
               f'#!/bin/bash\necho "torchrun got: $*"\nexec {real}/bin/torchrun "$@"\n')
    (venv / "bin" / "activate").write_text(f'source {real}/bin/activate\nexport PATH="{venv}/bin:$PATH"\n')
    return venv


def assert_job_trained(output: str, tmp_path: Path, job_id: str, nodes: int, world_size: int,
                       processes_per_node: int = 2) -> None:
    port = job_port(job_id)  # every digit of the job id, as utils/rendezvous.py derives it
    assert f"x {processes_per_node} process(es); rendezvous " in output and f":{port}\n" in output, output
    assert re.search(rf"^job {re.escape(job_id)}: {nodes} node\(s\) ", output, flags=re.M), output
    assert output.count("summary:") == 1, f"a summary printed by more than rank 0:\n{output}"
    checkpoint = re.escape(str(tmp_path / "model.pt"))
    assert re.search(rf"summary: world_size={world_size} device=cpu epochs=2 final_loss=\S+ "
                     rf"checkpoint={checkpoint} backend=gloo$", output, re.M), output
    assert (tmp_path / "model.pt").exists()


def test_templates_say_what_to_set(tmp_path):
    """What is missing, said before anything starts (bash alone, no scheduler: a second each)."""
    cases = [("slurm_job.sh", {}, "not inside a Slurm job: submit it with sbatch"),
             ("pbs_job.sh", {"VENV": str(tmp_path)}, f"no virtual environment at VENV={tmp_path}: set VENV"),
             ("pbs_job.sh", {"TRAIN_SCRIPT": "mine.py"}, f"no script at TRAIN_SCRIPT=mine.py in {tmp_path}"),
             ("pbs_job.sh", {"GPUS_PER_NODE": "four", "PBS_O_WORKDIR": str(REPO)},
              "GPUS_PER_NODE=four: expected a whole number above 0 (ngpus above)")]
    for template, extra, message in cases:
        env = clean_env(HOME=str(tmp_path), **{**template_env(tmp_path), **extra})
        result = run(["bash", FOLDER / template], env=env, cwd=tmp_path, timeout=30)
        assert result.returncode == 1 and message in result.output, (template, result.output)


def project(tmp_path: Path, *files: str) -> Path:
    """A reader's project folder: train.py (train_ddp.py, copied) and the given files of
    scripts/00_porting/, copied alone, nothing else of this repository."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(REPO / TRAIN_DDP, folder / "train.py")
    for name in files:
        shutil.copy(FOLDER / name, folder / name)
    return folder


PREFLIGHT_SKIPPED = ("preflight skipped: no check_ddp.py beside train.py "
                     "(copy it there to check the launch first)")


def test_slurm_template_under_sbatch(slurm, tmp_path):
    """The template copied into a project folder with train.py and check_ddp.py, as the page
    says, and submitted from there with sbatch, as it is but for what the one-node CPU test
    cluster lacks: --nodes=1 and no GPUs (given on the sbatch line, which overrides the
    #SBATCH lines). The preflight runs first, under the same launch. srun is told the job's
    --cpus-per-task. The node is called localhost, which torchrun would take for itself
    anyway: what torchrun was given shows that the template tells it to host the rendezvous."""
    folder = project(tmp_path, "slurm_job.sh", "check_ddp.py")
    output = tmp_path / "job.out"
    venv = venv_that_shows_torchrun(tmp_path)
    env = slurm.env(**template_env(tmp_path, VENV=str(venv), TRAIN_SCRIPT="train.py"))
    result = slurm.submit(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", f"--output={output}",
                           "slurm_job.sh"], output=output, env=env, cwd=folder)
    assert result.returncode == 0, result.output
    job_id = result.output.split()[0].split(";")[0]
    assert_job_trained(result.output, tmp_path, job_id, nodes=1, world_size=2)
    assert "preflight: launcher=torchrun world_size=2 " in result.output, result.output
    assert PREFLIGHT_SKIPPED not in result.output
    srun = "+ srun --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=1 --cpus-per-task=16 bash -c "
    assert srun in result.output, result.output
    given = re.findall(r"^torchrun got: (.*)$", result.output, flags=re.M)
    endpoint = f"--rdzv-endpoint=localhost:{job_port(job_id)} --rdzv-id={job_id} "
    assert len(given) == 2 and " ./check_ddp.py --preflight -- train.py" in given[0]
    assert " train.py " in given[1] and "check_ddp.py" not in given[1]
    for line in given:  # the preflight's torchrun and the training's
        assert line.startswith("--rdzv-conf=is_host=true ") and endpoint in line, line


def fake_slurm(tmp_path: Path) -> Path:
    """Stand-ins for what slurm_job.sh calls of Slurm's: `scontrol show hostnames` (the node
    list, here localhost) and `srun`, which prints its own options ("srun got: ...") and runs
    the command once, here: one node."""
    folder = tmp_path / "fake_slurm"
    executable(folder / "scontrol", '#!/bin/bash\n[[ "$1 $2" == "show hostnames" ]] && echo localhost\n')
    executable(folder / "srun", '#!/bin/bash\noptions=()\n'
               'while [[ "$1" == -* ]]; do options+=("$1"); shift; done\n'
               'echo "srun got: ${options[*]}"\nexec "$@"\n')
    executable(folder / "nvidia-smi", "#!/bin/sh\nexit 9\n")  # no GPU listed: CPU processes
    return folder


def test_templates_copied_alone_into_an_empty_folder_train(tmp_path):
    """Each template copied alone beside a reader's train.py (no check_ddp.py) runs: one line
    says the preflight is skipped and why, then 2 ranks train. pbs_job.sh under bash (no node
    file: this machine alone); slurm_job.sh under bash with a Slurm job's variables and
    stand-ins for scontrol and srun (test_slurm_template_under_sbatch runs it under a real
    Slurm, in CI): srun gets the job's --cpus-per-task (SRUN_CPUS_PER_TASK is honoured by
    Slurm 22.05 to 23.02 only), and torchrun is told that it hosts the rendezvous. The Slurm
    one with CPU_PROCESSES_PER_NODE=1 (a rank fewer, about 4 CPU-s): its 2 ranks train under
    sbatch in test_slurm_template_under_sbatch; pbs_job.sh's 2 ranks per node train here alone."""
    fake = fake_slurm(tmp_path)
    path = f"{fake}{os.pathsep}{os.environ['PATH']}"
    jobs = {"pbs_job.sh": ("4242.pbs01", 2, {}),
            "slurm_job.sh": ("4343", 1, {"SLURM_JOB_ID": "4343", "SLURM_JOB_NODELIST": "localhost",
                                         "SLURM_CPUS_PER_TASK": "2", "SLURM_NNODES": "1"})}
    for template, (job_id, processes, slurm_vars) in jobs.items():
        run_dir = tmp_path / template.split("_")[0]
        run_dir.mkdir()
        folder = project(run_dir, template)
        venv = venv_that_shows_torchrun(run_dir)
        env = clean_env(HOME=str(run_dir), PATH=path, PBS_JOBID=job_id, **slurm_vars,
                        CPU_PROCESSES_PER_NODE=str(processes),
                        **template_env(run_dir, VENV=str(venv), TRAIN_SCRIPT="train.py"))
        if template == "slurm_job.sh":
            del env["PBS_JOBID"]
        result = run(["bash", template], env=env, cwd=folder, timeout=180)
        assert result.returncode == 0, (template, result.output)
        assert result.count(PREFLIGHT_SKIPPED) == 1 and "can't open file" not in result.output, result.output
        assert_job_trained(result.output, run_dir, job_id, nodes=1, world_size=processes,
                           processes_per_node=processes)
        given = re.findall(r"^torchrun got: (.*)$", result.output, flags=re.M)
        assert len(given) == 1 and given[0].startswith("--rdzv-conf=is_host=true "), result.output
        assert given[0].endswith(f"--rdzv-id={job_id} train.py --batch-size 16 --epochs 2 "
                                 f"--checkpoint {run_dir / 'model.pt'}"), given
    assert "srun got: --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=1 --cpus-per-task=2\n" in result.output


def test_pbs_array_subjobs_on_one_node_get_two_ports(tmp_path):
    """Two subjobs of one PBS array job (123[4].pbs01, 123[5].pbs01) on one node: each gets its
    own rendezvous port, from every digit of its id, as utils/rendezvous.job_port derives it
    (the job number alone gave both 123's port: the second torchrun, told is_host=true, could
    not listen and failed instead of training). A stand-in torchrun prints what it got."""
    venv = tmp_path / "venv"
    executable(venv / "bin" / "torchrun", '#!/bin/bash\necho "torchrun got: $*"\n')
    (venv / "bin" / "activate").write_text(f'export PATH="{venv}/bin:$PATH"\n')
    folder = project(tmp_path, "pbs_job.sh")
    ports = []
    for job_id in ("123[4].pbs01", "123[5].pbs01"):
        no_gpu = fake_slurm(tmp_path / job_id)  # (its nvidia-smi lists no GPU)
        env = clean_env(HOME=str(tmp_path), PBS_JOBID=job_id, PATH=f"{no_gpu}:{os.environ['PATH']}",
                        **template_env(tmp_path, VENV=str(venv), TRAIN_SCRIPT="train.py"))
        result = run(["bash", "pbs_job.sh"], env=env, cwd=folder, timeout=30)
        assert result.returncode == 0, result.output
        ports.append(int(re.search(rf"--rdzv-endpoint=localhost:(\d+) --rdzv-id={re.escape(job_id)} ",
                                   result.output)[1]))
        assert ports[-1] == job_port(job_id), (job_id, ports)
    assert ports[0] != ports[1], ports


def test_slurm_batch_script_trains_alone_and_srun_copies_stop(slurm, tmp_path):
    """A batch script of a job with --ntasks=2 runs the script itself: one process, outside
    any job step (SLURM_NTASKS=2, no SLURM_STEP_ID), which trains alone (world_size=1). Then
    srun -n 2 starts it twice, without torchrun: each task says so and exits 1 (a shell
    around each prints its exit code)."""
    output, alone, copies = tmp_path / "job.out", tmp_path / "alone.pt", tmp_path / "copies.pt"
    script = f"{sys.executable} {REPO / TRAIN_DDP}"
    command = (f"{script} --epochs 1 --checkpoint {alone}; "
               f"srun -n 2 bash -c '{script} --checkpoint {copies}; echo task $SLURM_PROCID exit $?'")
    result = slurm.submit(["sbatch", "--parsable", "--nodes=1", "--ntasks=2", f"--output={output}",
                           f"--wrap={command}"], output=output, env=slurm.env())
    assert result.returncode == 0, result.output
    assert result.count("summary:") == 1 and "summary: world_size=1 device=cpu epochs=1 " in result.output
    assert alone.exists(), result.output
    assert "task 0 exit 1" in result.output and "task 1 exit 1" in result.output, result.output
    assert result.count(COPIES) == 2 and not copies.exists(), result.output


def test_pbs_template_through_slurms_qsub(slurm, tmp_path):
    """Slurm's qsub hands the template to sbatch, which reads its #PBS lines (place=scatter
    included); one node here (select=1 on the qsub line). Slurm's qsub removes PBS_NODEFILE:
    the job runs on this machine alone, as `bash pbs_job.sh` does, and its port comes from
    Slurm's job id. A stand-in nvidia-smi lists one GPU, fewer than GPUS_PER_NODE (4): the
    job starts one process and says why (torch, without a GPU, trains it on the CPU)."""
    output, fake = tmp_path / "job.out", tmp_path / "fake"
    executable(fake / "nvidia-smi", '#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    env = slurm.env(**template_env(tmp_path), PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = slurm.submit(["qsub", "-l", "select=1:ncpus=4", "-j", "oe", "-o", output, FOLDER / "pbs_job.sh"],
                          output=output, env=env)
    assert result.returncode == 0, result.output
    job_id = result.output.split()[0]
    assert "GPUS_PER_NODE=4, but nvidia-smi lists 1 GPU(s) here: 1 process(es) per node" in result.output
    assert_job_trained(result.output, tmp_path, job_id, nodes=1, world_size=1, processes_per_node=1)
    assert slurm.job(job_id)["JobName"] == "ddp_train"


def test_pbs_template_on_two_simulated_nodes(cray_nodes, tmp_path):  # noqa: F811 - the fixture
    """pbs_job.sh as PBS Pro runs it on the first of two nodes: the node file lists the nodes'
    high-speed-network names (nid001000.hsn.cm.example) where `hostname` says nid001000, each
    twice (mpiprocs=2), and MPICH's mpiexec (through an ssh stand-in) starts one torchrun per
    node, which hosts the rendezvous on the first: the preflight, then training. One rank per
    node (CPU_PROCESSES_PER_NODE=1, the template's setting for a CPU test): the names and the
    launch are the point here, and 4 processes fewer; 2 ranks per node on two nodes:
    test_13's test_two_nodes_train_together_with_torchrun_c10d, 2 per node from this template:
    test_templates_copied_alone_into_an_empty_folder_train."""
    ssh = tmp_path / "cray_ssh"
    ssh.write_text(CRAY_SSH.format(*HSN_NAMES, *cray_nodes, *CRAY_NAMES))
    ssh.chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"{name}\n{name}\n" for name in HSN_NAMES))  # twice each, as with mpiprocs=2
    mpiexec = mpi_env("mpich")["PATH"].split(os.pathsep)[0] + "/mpiexec"
    job_id = f"{os.getpid()}.pbs"
    qstat = executable(tmp_path / "bin" / "qstat", QSTAT.format(chunks=2))  # PBS Pro's qstat -f, in part
    env = clean_env(PBS_NODEFILE=str(nodefile), PBS_JOBID=job_id, PBS_O_WORKDIR=str(REPO), HOME=str(tmp_path),
                    GLOO_SOCKET_IFNAME=INTERFACE, CPU_PROCESSES_PER_NODE="1", **template_env(tmp_path),
                    PATH=f"{qstat.parent}{os.pathsep}{os.environ['PATH']}",
                    NODE_LAUNCHER=f"{mpiexec} -launcher ssh -launcher-exec {ssh} -iface {INTERFACE} "
                                  f"-hosts {','.join(HSN_NAMES)} -ppn 1")
    result = run(["ip", "netns", "exec", cray_nodes[0], "unshare", "--uts", "bash", "-c",
                  f"hostname {CRAY_NAMES[0]} && cd {tmp_path} && bash {FOLDER / 'pbs_job.sh'}"],
                 env=env, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.output
    assert f"2 node(s) [{' '.join(HSN_NAMES)}]" in result.output and "not checked" not in result.output
    assert_job_trained(result.output, tmp_path, job_id, nodes=2, world_size=2, processes_per_node=1)
    # the preflight ran first, under the same launch, a rank on each node (its short name)
    assert "preflight: launcher=torchrun world_size=2 nodes=2 " in result.output, result.output
    assert f"nodes: 0={CRAY_NAMES[0]}  1={CRAY_NAMES[1]}\n" in result.output, result.output
    assert "preflight: OK" in result.output, result.output


QSTAT = """#!/bin/sh
echo "Job Id: $2"
echo "    Resource_List.ncpus = 32"
echo "    Resource_List.nodect = {chunks}"
echo "    Resource_List.place = free"
"""
MPIEXEC = """#!/bin/bash
if [[ "$1" == --version ]]; then echo "{version}"; exit 0; fi
echo "RAN mpiexec $*"
"""


def test_pbs_template_on_nodes_it_checks_and_binds_no_cpu(tmp_path):
    """pbs_job.sh under bash with stand-ins for PBS Pro's qstat and node file and for each MPI's
    mpiexec (they print what they were asked to run; nothing trains):

    - two chunks that PBS put on one node (the node file names it twice, qstat counts 2
      chunks): the job stops before it starts anything, with what to do;
    - the line that starts one torchrun per node does not bind it to a CPU: Open MPI gets
      --bind-to none, Cray PALS --cpu-bind none, MPICH's Hydra nothing (it binds nothing
      unless asked), and a NODE_LAUNCHER that binds is kept as it is;
    - why: Open MPI's real mpiexec with --map-by ppr:1:node binds its process to one core."""
    qstat = executable(tmp_path / "bin" / "qstat", QSTAT.format(chunks=2))
    executable(tmp_path / "bin" / "nvidia-smi", "#!/bin/sh\n" + "".join(
        f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"\n' for i in range(4)))
    folders = {"openmpi": tmp_path / "openmpi", "mpich": tmp_path / "mpich",
               "pals": tmp_path / "pals" / "bin"}  # PALS's under a .../pals/... path, as on HPE
    for mpi, version in (("openmpi", "mpiexec (Open MPI) 5.0.3"), ("mpich", "HYDRA build details:"),
                         ("pals", "mpiexec version 1.4.0")):
        executable(folders[mpi] / "mpiexec", MPIEXEC.format(version=version))

    def job(nodes: tuple[str, ...], mpi: str, **extra: str):
        nodefile = tmp_path / "nodefile"
        nodefile.write_text("".join(f"{node}\n" for node in nodes))
        env = clean_env(PBS_NODEFILE=str(nodefile), PBS_JOBID="77.pbs", PBS_O_WORKDIR=str(REPO),
                        HOME=str(tmp_path), PATH=f"{folders[mpi]}:{qstat.parent}:{os.environ['PATH']}",
                        **template_env(tmp_path), **extra)
        return run(["bash", FOLDER / "pbs_job.sh"], env=env, timeout=30)

    shared = job(("x1000c0s0b0n0", "x1000c0s0b0n0"), "mpich")
    assert shared.returncode == 1 and "RAN" not in shared.output, shared.output
    assert ("the job asked for 2 chunks (select=2) but got 1 node(s) [x1000c0s0b0n0]: chunks share a node, "
            "where one torchrun would leave GPUs idle. Keep '#PBS -l place=scatter'") in shared.output
    two = ("x1000c0s0b0n0", "x1000c0s0b0n1")
    for mpi, launcher, line in [
            ("openmpi", "mpiexec --map-by ppr:1:node", "mpiexec --map-by ppr:1:node --bind-to none -n 2"),
            ("pals", None, "mpiexec --ppn 1 --cpu-bind none -n 2"),
            ("mpich", None, "mpiexec --ppn 1 -n 2"),
            ("openmpi", "mpiexec --map-by ppr:1:node:PE=8 --bind-to core",
             "mpiexec --map-by ppr:1:node:PE=8 --bind-to core -n 2")]:
        result = job(two, mpi, **({"NODE_LAUNCHER": launcher} if launcher else {}))
        assert result.returncode == 0, result.output
        assert "job 77.pbs: 2 node(s) [x1000c0s0b0n0 x1000c0s0b0n1] x 4 process(es)" in result.output
        assert result.count(f"RAN {line} bash -c ") == 2, (mpi, result.output)  # preflight, training
    # Open MPI's own default, on this machine: --map-by ppr:1:node binds to one core.
    cores = len(os.sched_getaffinity(0))
    if cores >= 2:
        show = ["bash", "-c", "grep Cpus_allowed_list /proc/self/status"]
        one_per_node = ["mpiexec", "-n", "1", "--map-by", "ppr:1:node"]
        bound = run([*one_per_node, *show], env=mpi_env("openmpi"), timeout=60)
        free = run([*one_per_node, "--bind-to", "none", *show], env=mpi_env("openmpi"), timeout=60)
        allowed = [re.search(r"Cpus_allowed_list:\s+(\S+)", r.output)[1] for r in (bound, free)]
        assert re.fullmatch(r"\d+", allowed[0]) and allowed[1] != allowed[0], allowed


# --------------------------------------------------------------------------- on GPUs
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 visible CUDA GPUs ({GPUS} here)")
def test_ddp_under_nccl_one_gpu_per_process(tmp_path):
    checkpoint = tmp_path / "model.pt"
    result = run([VENV_BIN / "torchrun", "--standalone", f"--nproc_per_node={GPUS}", REPO / TRAIN_DDP,
                  "--checkpoint", checkpoint], env=clean_env(), timeout=300)
    assert result.returncode == 0 and result.count("summary:") == 1, result.output
    assert f"world_size={GPUS} device=cuda" in result.output and "backend=nccl" in result.output
    load("train_single").make_model().load_state_dict(torch.load(checkpoint, weights_only=True))


# --------------------------------------------------------------------------- troubleshooting
def test_a_buffer_built_as_a_transposed_view_fails_ddps_first_forward():
    """The troubleshooting page's buffer: a (positions, 1, width) table made with
    .unsqueeze(0).transpose(0, 1) wraps in DDP, then the first forward fails with PyTorch's
    own message, as one process (DDP copies the buffers before each training forward). It
    counts as contiguous, so .contiguous() changes nothing; .unsqueeze(1) makes the same table
    in the usual layout, and the forward and backward run."""
    bad, good = captured_run("00_buffer_bad.txt"), captured_run("00_buffer_good.txt")
    assert bad.returncode == 1 and "wrapped in DDP\n" in bad.output, bad.output
    assert ("first forward failed: RuntimeError: unsupported operation: some elements of the input tensor "
            "and the written-to tensor refer to a single memory location.") in bad.output, bad.output
    assert "strides (16, 1024, 1) is_contiguous=True; .contiguous() keeps strides (16, 1024, 1)" in bad.output
    assert "Traceback" not in bad.output and "first_forward=failed" in bad.output
    assert good.returncode == 0 and "strides (16, 16, 1) is_contiguous=True" in good.output, good.output
    assert re.search(r"^first forward and backward: loss \d+\.\d+$", good.output, flags=re.M), good.output


# --------------------------------------------------------------------------- a token stream
def stream_run(name: str) -> tuple[tuple[float, float], list[str], dict[str, str]]:
    """(step 0's loss and gradient norm, the epoch lines, the summary) of a token_stream.py capture."""
    result = captured_run(name)
    summary = result.clean_summary()
    step0 = re.search(r"^step 0: loss (\S+) gradient norm (\S+)$", result.output, flags=re.M)
    assert step0, result.output
    epoch_lines = re.findall(r"^epoch \d+: .*$", result.output, flags=re.M)
    return (float(step0[1]), float(step0[2])), epoch_lines, summary


def test_a_token_stream_split_by_columns_trains_as_one_process():
    """The porting page's token stream: one process with 16 columns and two ranks with 8 each
    train on the same global batch, window by window: step 0's loss (the ranks' means,
    averaged) and gradient norm agree to fp32's rounding, the epochs print the same numbers,
    and every token, held-out ones included, is counted once (16 columns x 1023 predicted
    tokens; 10 held-out columns x 408, dealt 5 and 5 to the ranks)."""
    (loss_one, norm_one), epochs_one, one = stream_run("00_stream_one.txt")
    (loss_two, norm_two), epochs_two, two = stream_run("00_stream_two.txt")
    assert (one["world_size"], two["world_size"]) == ("1", "2") and one["global_batch"] == two["global_batch"]
    assert abs(loss_one - loss_two) <= 1e-5 * loss_one and abs(norm_one - norm_two) <= 1e-5 * norm_one
    assert len(epochs_one) == 2 and epochs_one == epochs_two, (epochs_one, epochs_two)
    assert one["train_tokens"] == two["train_tokens"] == str(16 * 1023)
    assert one["held_out_tokens"] == two["held_out_tokens"] == str(10 * 408)
    assert all(f"over {16 * 1023} tokens, held-out loss " in line for line in epochs_two), epochs_two


def test_a_token_stream_too_short_for_its_columns_ends_with_a_usage_message(capsys, monkeypatch):
    """Columns of fewer than 2 tokens have no (input, target) pair: token_stream.py said 'loss
    nan over 0 tokens' and trained nothing. Now it exits 2 with the largest value that works,
    on the world size it is launched at, before any process group exists."""
    main = load("token_stream").main
    for argv, env, message in (
            (["--batch-size", "9000"], {}, "--batch-size 9000 on 1 process(es) leaves columns of fewer "
                                            "than 2 of the 16384 tokens: at most 8192"),
            (["--batch-size", "4097"], {"WORLD_SIZE": "2", "RANK": "1"},
             "on 2 process(es) leaves columns of fewer than 2 of the 16384 tokens: at most 4096"),
            (["--eval-columns", "2049"], {}, "--eval-columns: at most 2048, got 2049")):
        monkeypatch.setattr(sys, "argv", ["token_stream.py", *argv])
        for name in ("WORLD_SIZE", "RANK"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 2 and message in capsys.readouterr().err, argv
