"""scripts/00_porting/check_ddp.py: the checker over every script of the repository (each
chapter's bad variant flagged with its chapter's rule, nothing else flagged), over fixture
scripts for what no chapter shows (tests/check_fixtures/: the shapes real scripts give each
pitfall, their false alarms and misses), its command line as a user meets it, the corpus
measurement's script (tests/check_corpus.py, without the corpus); and the preflight under
torchrun, Open MPI's and MPICH's mpiexec, srun and on two simulated nodes, with the messages
of a broken launch (a missing variable, two ranks on one GPU, a CPU job on GPU nodes)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO, VENV_BIN, clean_env, mpiexec, run
from simulated_nodes import (  # kill_leftovers: an autouse fixture
    NODE_ADDRESSES,
    Background,
    kill_leftovers,  # noqa: F401
    node_env,
    two_network_namespaces,
)
from slurm_cluster import shared_cluster

CHECKER = REPO / "scripts" / "00_porting" / "check_ddp.py"
FIXTURES = REPO / "tests" / "check_fixtures"
spec = importlib.util.spec_from_file_location("check_ddp", CHECKER)
check_ddp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_ddp)

# Each chapter's bad variant whose pitfall is in its own code, and the rules it must get
# (with --variant bad), no more. The chapters' other bad variants are out of the checker's
# reach, as docs/check.md says: 08 (unused parameters), 09 (uneven inputs), 10 (bucket
# size), 12 (a starved loader), 14 (a save killed mid-write), 17's zero_optimizer.py.
BAD_VARIANTS = {
    "01_data_parallel_ddp/multinode_ddp_basic.py": {"DDP010"},
    "02_collectives/collective_order.py": {"DDP020"},
    "03_distributed_sampler/set_epoch_shuffling.py": {"DDP030"},
    "03_distributed_sampler/distributed_eval.py": {"DDP031"},
    "04_logging_and_checkpoints/train_with_checkpoints.py": {"DDP040", "DDP041", "DDP042"},
    "05_gradient_accumulation/grad_accumulation.py": {"DDP050"},
    "06_mixed_precision/amp_grad_scaler.py": {"DDP060"},
    "07_batchnorm_and_buffers/batchnorm_ddp.py": {"DDP070"},
    "11_replica_consistency/wrapper_bypass.py": {"DDP110"},
    "13_multinode_and_hpc/fixed_port.py": {"DDP130"},
    "15_torch_compile_ddp/compile_ddp.py": {"DDP150"},
    "16_fsdp/sharded_checkpoint.py": {"DDP160"},
    "17_zero_and_beyond/zero_checkpoint.py": {"DDP170"},
    "18_transformer/gpt_ddp.py": {"DDP180"},
    "19_metrics_and_decisions/metric_across_ranks.py": {"DDP190"},
    "19_metrics_and_decisions/early_stopping.py": {"DDP191"},
}


def findings(path):
    text, tree = check_ddp.read_source(str(path))
    return check_ddp.check_source(text, tree, str(path))


def expected_in(path):
    """(line, code, severity is note) of every `# expect: CODE` (or `# expect: CODE note`)
    comment of a fixture."""
    return {(number, code, note == " note") for number, line in enumerate(path.read_text().splitlines(), 1)
            for code, note in re.findall(r"# expect: (DDP\d{3})( note)?", line)}


def found_in(path):
    return {(f["line"], f["code"], f["severity"] == "note") for f in findings(path)}


def test_every_rule_has_a_chapter_that_exists_and_a_section_on_the_page():
    page = (REPO / "docs" / "check.md").read_text()
    nav = (REPO / "mkdocs.yml").read_text()
    for code, rule in check_ddp.RULES.items():
        assert rule.page.startswith(f"chapters/{rule.chapter}_"), code
        if rule.page not in nav:  # a chapter being written: the page names it, it links it once it is there
            assert f"]({rule.page})" not in page and f"`{rule.page}`" in page, code
        else:
            assert (REPO / rule.page).exists() and f"]({rule.page})" in page, code
        assert code.startswith(f"DDP{rule.chapter}"), code  # the code names its chapter
        assert rule.severity in check_ddp.SEVERITIES, code
        assert re.search(rf"^## {code} ", page, re.M), f"{code} has no section on docs/check.md"


def test_each_chapters_bad_variant_is_flagged_with_its_chapters_rule():
    for script, codes in BAD_VARIANTS.items():
        found = findings(REPO / "scripts" / script)
        assert {f["code"] for f in found} == codes, (script, found)
        assert all(f["variant"] == "bad" for f in found), (script, found)  # none in the good variant
        chapter = script[:2]
        assert all(f["chapter"] == chapter for f in found), (script, found)
    # chapter 13's port is a fallback (setdefault): it never runs under torchrun, which sets
    # MASTER_PORT, so the checker says it as a note; mpiexec and srun set none
    [port] = findings(REPO / "scripts" / "13_multinode_and_hpc" / "fixed_port.py")
    assert port["severity"] == "note" and port["message"].startswith(
        "MASTER_PORT falls back to 29500 where the launcher set none: torchrun always sets one"), port


def test_no_false_alarm_in_good_variants_porting_scripts_and_utils():
    scripts = sorted(REPO.glob("scripts/*/*.py")) + sorted(REPO.glob("utils/*.py"))
    assert len(scripts) > 40 and CHECKER in scripts
    for path in scripts:
        found = findings(path)
        rel = str(path.relative_to(REPO / "scripts")) if "scripts" in path.parts else str(path)
        if rel not in BAD_VARIANTS:
            assert found == [], found
        assert [f for f in found if f["variant"] is None] == [], found


def test_fixtures_get_exactly_the_expected_findings():
    """Each fixture gets exactly its `# expect:` lines, notes as notes; the clean ones nothing,
    not even a note."""
    fixtures = sorted(p for p in FIXTURES.glob("*.py") if not p.name.startswith("clean"))
    assert len(fixtures) >= 6
    for fixture in fixtures:
        assert found_in(fixture) == expected_in(fixture), fixture.name
    pitfalls = {code for _, code, _ in expected_in(FIXTURES / "pitfalls.py")}
    assert pitfalls >= {"DDP010", "DDP020", "DDP130", "DDP131", "DDP060", "DDP180"}
    # no function at all: the training loop at module level still gets DDP030 (its loop over
    # range(num_epochs), len(loader) no hand-off), a sampler built inside DataLoader(...) and
    # read under no_grad DDP031, the whole set read on every rank then all-reduced DDP032
    module_level = expected_in(FIXTURES / "pitfalls_module_level.py")
    assert sorted(code for _, code, _ in module_level) == ["DDP030", "DDP031", "DDP031", "DDP032"]
    notes = expected_in(FIXTURES / "notes.py")
    assert notes and all(note for _, _, note in notes)
    metrics = expected_in(FIXTURES / "metrics.py")
    assert {code for _, code, _ in metrics} == {"DDP190", "DDP191"}
    cleans = sorted(FIXTURES.glob("clean*.py"))
    assert len(cleans) >= 10
    for clean in cleans:
        assert findings(clean) == [], clean.name


def test_decisions_ports_and_passes_of_the_second_review():
    """The shapes behind a fresh review's false alarms and misses, each a fixture of our own:
    a loop left on a value one rank computed alone, but not on values every rank shares
    (decisions.py, clean_decisions.py); a fixed port that defers to the launcher is a note
    (port_fallbacks.py), but a warning in code that runs under srun, which sets no port; a
    shuffling sampler read pass after pass with no epoch loop
    (set_epoch_passes.py)."""
    assert sorted(expected_in(FIXTURES / "decisions.py")) == [
        (45, "DDP191", False), (50, "DDP191", False), (52, "DDP191", False), (59, "DDP191", False),
        (65, "DDP191", False)]
    ports = expected_in(FIXTURES / "port_fallbacks.py")
    assert sorted(note for _, code, note in ports if code == "DDP130") == [False] * 3 + [True] * 7
    assert [code for _, code, _ in expected_in(FIXTURES / "set_epoch_passes.py")] == ["DDP030"] * 3
    for name in ("decisions.py", "port_fallbacks.py", "set_epoch_passes.py"):
        assert found_in(FIXTURES / name) == expected_in(FIXTURES / name), name
    for name in ("clean_decisions.py", "clean_set_epoch_passes.py"):
        assert findings(FIXTURES / name) == [], name
    by_line = {f["line"]: f["message"] for f in findings(FIXTURES / "decisions.py")}
    assert "leaves the loop on `stopper.early_stop`, a value this rank computed alone" in by_line[50]
    assert "only on the ranks where `rank == 0 and os.path.exists('STOP')` holds" in by_line[52]
    assert "leaves the loop on `held_out`, a value this rank computed alone" in by_line[59]
    passes = [f["message"] for f in findings(FIXTURES / "set_epoch_passes.py")]
    assert "read again and again (forever(), called at line 26, reads it in a loop)" in passes[0]
    fallback = findings(FIXTURES / "port_fallbacks.py")[0]["message"]
    assert fallback.startswith("MASTER_PORT falls back to 12355 where the launcher set none")


PROJECT = FIXTURES / "project"


def test_the_modules_of_the_scripts_own_project_are_followed():
    """project/train.py's pitfalls are in helpers/ (a port option given to setup_dist(), a
    sampler made by a helper, an evaluation that all-reduces two modules deep, saves on every
    rank in validation() and save_checkpoint(), a wrap helper): each is reported at the call,
    naming the helper and its file. Alone (follow=False) the file shows none of them."""
    train = PROJECT / "train.py"
    assert found_in(train) == expected_in(train)
    assert sorted(code for _, code, _ in expected_in(train)) == [
        "DDP020", "DDP030", "DDP031", "DDP031", "DDP040", "DDP040", "DDP041", "DDP130", "DDP130"]
    messages = {(f["line"], f["code"]): f["message"] for f in findings(train)}
    assert messages[(48, "DDP040")].startswith(
        "validation() (helpers/engine.py) runs torch.save (helpers/io.py:12) on every rank")
    assert messages[(45, "DDP020")].startswith(
        "evaluate() (helpers/engine.py) calls all_reduce() (helpers/metrics.py:7) only on the ranks where")
    assert messages[(17, "DDP130")].startswith("setup_dist() (helpers/dist.py:12) sets MASTER_PORT to 29512")
    assert messages[(28, "DDP031")].startswith("the DistributedSampler that make_data_sampler() "
                                               "(helpers/data.py) returns pads the shards")
    builders = PROJECT / "train_builders.py"  # a config object, a default port, tuples, a sampler class
    assert found_in(builders) == expected_in(builders)
    assert sorted(code for _, code, _ in expected_in(builders)) == ["DDP031"] * 4 + ["DDP130"] * 2
    messages = {(f["line"], f["code"]): f["message"] for f in findings(builders)}
    assert messages[(23, "DDP130")].startswith(
        "init_method 'tcp://127.0.0.1:23459' (through cfg.dist_url, set in")
    assert messages[(22, "DDP130")].startswith(
        "init_distributed() (helpers/dist.py:24) sets MASTER_PORT to 40111")
    assert messages[(29, "DDP031")].startswith("the PaddedShardSampler of the loader that make_eval_loader()")
    assert messages[(27, "DDP031")].startswith("the PaddedShardSampler of the loader that build_loaders()")
    assert messages[(32, "DDP031")].startswith("the PaddedShardSampler of the loader that make_eval_loader()")
    text, tree = check_ddp.read_source(str(train))
    alone = check_ddp.check_source(text, tree, str(train), follow=False)
    assert alone == []  # the file by itself shows none of them
    assert findings(PROJECT / "clean_train.py") == []


def test_shapes_of_the_third_review():
    """A fresh review's false alarms and misses, each a fixture of our own. Quiet
    (clean_review5.py): a rank compared with -1 or on the line between -1 and 0
    (`local_rank >= 0`); a counter restored from a file every rank reads (a loss written with
    the json module does not make json a value of this rank); a save in the branch where the
    model was never compiled; a batch skipped whole before its backward(); a save of
    `model.state_dict()` in the else of `isinstance(model, DDP)`. Quiet too
    (project/train_review5.py): an exact evaluation split returned beside a training sampler,
    a loader helper that makes its own DistributedSampler. Said: the step skipped with
    `continue` until the last micro-batch, and a resume checkpoint of DDP(torch.compile(m))
    loaded back into the wrapper as a note (review5.py); a per-rank worker that starts nccl
    and trains in a file with no `__main__` (review5_worker.py; a setup helper, or one that
    also wraps and returns, stays quiet); a step helper told to step every few micro-batches,
    a wrapper a helper returns in a tuple, a loader helper whose sampler is a RandomSampler,
    an evaluation loader a helper builds on `DistributedSampler(...) if distributed else None`
    (project/train_review5.py); a sampler a function of the file returns, read by a validate()
    of lib/, which the script puts on sys.path (syspath_project/)."""
    def flag(source):
        return check_ddp.is_flag_test(ast.parse(source, mode="eval").body)

    assert all(map(flag, ("local_rank >= 0", "0 <= args.local_rank", "rank < 0", "rank != -1", "rank > -1")))
    assert not any(map(flag, ("rank > 0", "local_rank <= 0", "rank == 0", "0 < rank", "rank >= 1")))
    review = FIXTURES / "review5.py"
    assert sorted(expected_in(review)) == [(35, "DDP050", False), (41, "DDP041", True)]
    assert found_in(review) == expected_in(review)
    note = next(f["message"] for f in findings(review) if f["code"] == "DDP041")
    assert note.endswith("a plain model cannot: save model.module._orig_mod.state_dict()"), note
    worker = FIXTURES / "review5_worker.py"
    assert found_in(worker) == expected_in(worker) == {(18, "DDP131", False)}
    for name in ("clean_review5.py", "clean_review5_helpers.py"):
        assert findings(FIXTURES / name) == [], name
    train = PROJECT / "train_review5.py"
    assert found_in(train) == expected_in(train)
    assert sorted(code for _, code, _ in expected_in(train)) == ["DDP010", "DDP031", "DDP041", "DDP050"]
    messages = {f["code"]: f["message"] for f in findings(train)}
    assert messages["DDP050"].startswith(
        "apply_gradients() runs backward() on every micro-batch and steps when told, every few")
    assert messages["DDP041"].startswith(
        "model is the DDP wrapper: its state_dict()'s keys start with 'module.'")
    # lib/ put on sys.path by `import _init_paths` (its add_path() helper): validate() is found
    # there, and the sampler that a function of the file returns pads the evaluation
    syspath = FIXTURES / "syspath_project" / "tools" / "train.py"
    assert found_in(syspath) == expected_in(syspath) == {(27, "DDP031", False)}
    [padded] = findings(syspath)
    assert padded["message"].startswith("the DistributedSampler that get_sampler() returns pads the shards")


def test_shapes_of_the_fourth_review():
    """A fourth review's false alarms and misses, each a fixture of our own. Quiet
    (clean_review6.py): a name read as the resumed file's step counter, then reused further
    down for a dict that holds this rank's loss (the taint follows statement order: a plain
    assignment replaces what the name held); the plain model's output drawn for a log only,
    never reaching backward(). Quiet (project/clean_review6.py): nccl whose set_device is in
    the constructor of a project class made after the group starts. Said (review6.py): the
    rendezvous URL as init_process_group's second positional argument, the plain model's
    output reaching backward() through names, a loop left on a name after it got this rank's
    loss, and one left on the output of the module an optimizer holds (not wrapped in DDP;
    gradients all-reduced by hand) beside a class named Sync... (no synchronising call); an
    evaluation loader read through a reader wrapped around it (review6_eval.py); loaders that
    a method of a project class returns as a tuple, built by its private methods
    (project/train_review6.py); a URL built with += whose port is an environment read's
    default (a note, review6.py)."""
    review = FIXTURES / "review6.py"
    assert sorted(expected_in(review)) == [
        (18, "DDP130", False), (23, "DDP110", False), (37, "DDP191", False), (63, "DDP191", False),
        (70, "DDP130", True)]
    assert found_in(review) == expected_in(review)
    messages = {(f["line"], f["code"]): f["message"] for f in findings(review)}
    assert messages[(18, "DDP130")].startswith("init_method 'tcp://127.0.0.1:23456': a fixed port")
    assert messages[(70, "DDP130")].startswith("init_method 'tcp://localhost:23500' (through url)")
    for line, name in ((37, "watched"), (63, "drift.item")):  # drift: the output of the optimizer's module
        assert messages[(line, "DDP191")].startswith(f"this break leaves the loop on `{name}`, a value")
    assert findings(FIXTURES / "clean_review6.py") == []
    assert findings(PROJECT / "clean_review6.py") == []
    # an evaluation loader read through a reader around it (reader.next() in a while loop of
    # a validate() that calls .eval()); the training loader read the same way is no evaluation
    evaluation = FIXTURES / "review6_eval.py"
    assert found_in(evaluation) == expected_in(evaluation) == {(59, "DDP031", False)}
    steps = FIXTURES / "review6_steps.py"  # but a batch taken with next() under no_grad is no reader
    assert all(map(check_ddp.EVAL_NAME.search, ("evaluation", "validate", "run_eval", "test_epoch")))
    assert not any(map(check_ddp.EVAL_NAME.search, ("evaluator", "testing_helper", "latest")))
    assert found_in(steps) == expected_in(steps) == {(19, "DDP030", False)}
    # loaders returned as a tuple by a method of a project class, built by its private methods
    train = PROJECT / "train_review6.py"
    assert found_in(train) == expected_in(train) == {(34, "DDP031", False)}
    [padded] = findings(train)
    assert padded["message"].startswith(
        "the DistributedSampler of the loader that loaders() (helpers/loaders.py) returns pads the shards")


def test_shapes_of_the_fifth_review():
    """A fifth review's false alarms and misses, each a fixture of our own. Quiet
    (clean_review7.py): an FSDP1 model's state_dict() at FSDP1's default, the whole model
    (torch 2.14: _FSDPState._state_dict_type = FULL_STATE_DICT), saved by rank 0. Said
    (review7.py): FSDP1 told to give its sharded state, then torch.save; the optimizer of an
    FSDP1 model saved (its state is this rank's shards; review7_fsdp1.py); nccl as the default
    of a setup function's parameter, without set_device (review7_nccl.py). Quiet
    (project/clean_review7.py): a launcher helper given "torchrun", whose Slurm branch with
    the port never runs; a shuffling loader in the else of `if opt["dist"]:`. Said
    (project/train_review7.py): the same helper given "slurm"; an epoch helper of the project
    whose loss scaler is told update_grad=apply_update, a name that counts micro-batches, with
    no no_sync() (at the call of the helper); a port fallback in a branch that an option picks
    and that reads Open MPI's variables: a warning (project/train_review7_mpi.py); a padding
    sampler read by an
    evaluation that writes each sample's id with its result (a note, not a warning)."""
    review = FIXTURES / "review7.py"
    assert found_in(review) == expected_in(review)
    assert (27, "DDP160", False) in expected_in(review)
    assert findings(FIXTURES / "clean_review7.py") == []
    assert findings(PROJECT / "clean_review7.py") == []
    fsdp1 = FIXTURES / "review7_fsdp1.py"  # FSDP1's model whole, its optimizer's state in shards
    assert found_in(fsdp1) == expected_in(fsdp1) == {(27, "DDP160", False)}
    nccl = FIXTURES / "review7_nccl.py"  # nccl as a parameter's default, no set_device
    assert found_in(nccl) == expected_in(nccl) == {(14, "DDP131", False)}
    train = PROJECT / "train_review7.py"
    assert found_in(train) == expected_in(train) == {
        (19, "DDP130", False), (33, "DDP050", False), (35, "DDP031", True)}
    messages = {f["code"]: f["message"] for f in findings(train)}
    assert messages["DDP050"].startswith("train_one_epoch() (helpers/epochs.py) calls loss_scaler(..., "
                                         "update_grad=...) (helpers/epochs.py:10)")
    assert messages["DDP130"].startswith("init_dist() (helpers/launchers.py:26) sets MASTER_PORT to 29561")
    mpi = PROJECT / "train_review7_mpi.py"  # an option picks the mpiexec branch: its fallback always runs
    assert found_in(mpi) == expected_in(mpi) == {(17, "DDP130", False)}
    [port] = findings(mpi)
    assert "sets MASTER_PORT to 29562 where none is set, in code that runs under srun or mpiexec" \
        in port["message"]
    # an evaluation that writes each sample's id beside its result: a merge may drop the repeats
    assert "keeps its results by sample id, which drops the repeats" in messages["DDP031"]


def test_shapes_of_the_sixth_round():
    """What the fifth review left, and shapes like it, each a fixture of our own (deeplib/ is a
    library three and four modules below the scripts). Said at the script's call, with the
    module's file:line: a thin script whose run() spawns workers that make a Trainer wrapping DDP
    (its torch.load without map_location, its float16 autocast with no GradScaler, its save on
    every rank in a method, which no rule follows itself) and a Config
    that starts the group from a URL of its settings, where the script's --port default ends up
    (project/train_review8_wrapper.py); a backend made from a dict of classes by name, so the
    script is distributed and its every-rank save is one (train_review8_backend.py); a factory's
    model, then a method that loads weights two calls down in a base class, and a launch helper
    picked with getattr(module, "init_dist_%s" % launcher), whose Slurm one sets the port from
    an option (train_review8_factory.py); a torchmetrics metric, or a class of ours with
    dist_reduce_fx, computed after every rank read the whole set (review8_metrics.py); a whole
    recipe in one function of the library, whose save runs on every rank
    (train_review8_recipe.py). Quiet
    (project/clean_review8.py): the loading method on rank 0 alone, a data file read with
    torch.load, the launch helper named in full; a library class that may wrap in DDP, where
    no group is started (project/clean_review8_local.py); saves under Hugging Face's
    is_world_process_zero guards (clean_review8_hf.py); the model inside one of two exclusive
    wraps (apex's or torch's) saved by rank 0 (clean_review8_rewrap.py); rank 0 goes first
    with a barrier pair whose tests share `and not evaluate` (clean_review8_barrier.py)."""
    wrapper = PROJECT / "train_review8_wrapper.py"
    assert found_in(wrapper) == expected_in(wrapper) == {
        (13, "DDP130", False), (15, "DDP040", False), (15, "DDP042", False), (15, "DDP060", False)}
    messages = {f["code"]: f["message"] for f in findings(wrapper)}
    assert messages["DDP040"].startswith("deeplib/engine/trainer.py:27: torch.save runs on every rank")
    assert messages["DDP042"].startswith("deeplib/engine/trainer.py:16: torch.load without map_location")
    assert messages["DDP060"].startswith(
        "deeplib/engine/trainer.py:22: autocast in float16 and no GradScaler")
    assert messages["DDP130"].startswith("--port defaults to 5679, and the project's config carries it into "
                                         "init_method at deeplib/config.py:14")
    for name in ("train_review8_backend.py", "train_review8_factory.py", "train_review8_recipe.py"):
        assert found_in(PROJECT / name) == expected_in(PROJECT / name), name
    [recipe] = findings(PROJECT / "train_review8_recipe.py")  # a whole recipe in one library function
    assert recipe["message"].startswith("deeplib/recipe.py:25: torch.save runs on every rank")
    [save] = findings(PROJECT / "train_review8_backend.py")
    assert save["message"].startswith("torch.save runs on every rank")
    factory = {f["code"]: f["message"] for f in findings(PROJECT / "train_review8_factory.py")}
    assert factory["DDP042"].startswith("deeplib/models/nets.py:17: torch.load without map_location")
    assert factory["DDP130"].startswith("init_dist_slurm() (deeplib/dist/launchers.py:10) sets MASTER_PORT "
                                        "to 18888, given here")
    assert findings(PROJECT / "clean_review8.py") == []
    # a DDP wrap in the library, never run (told init_data_parallel=False), no group started:
    # one process, so its load without map_location is no finding
    assert findings(FIXTURES / "clean_review8_hf.py") == []  # is_world_process_zero: a rank-0 guard
    assert findings(FIXTURES / "clean_review8_rewrap.py") == []  # apex's wrap or torch's: no DDP inside
    assert findings(FIXTURES / "clean_review8_barrier.py") == []  # rank 0 first, both under `not evaluate`
    local = PROJECT / "clean_review8_local.py"
    assert findings(local) == []
    _, tree = check_ddp.read_source(str(local))
    assert not check_ddp.Checker(tree, project=check_ddp.Project(local), path=local).distributed
    metrics = FIXTURES / "review8_metrics.py"
    assert found_in(metrics) == expected_in(metrics) == {
        (53, "DDP032", False), (62, "DDP032", False), (69, "DDP032", True)}
    assert "metric.compute() syncs the metric's states across the ranks" in findings(metrics)[0]["message"]


def test_shapes_of_the_sixth_review():
    """A sixth review's false alarms, each a fixture of our own. Quiet
    (project/clean_review9.py): a snapshot helper of the project called in its load mode (its
    save runs only if a model is given; the call gives none); an epoch helper whose save waits
    on `opts.keep_snapshots`, which the script sets from the rank. Said
    (project/train_review9.py): the same helper given the model on every rank, and the option
    set the same on every rank. Quiet (clean_review9.py): a name that holds the model inside
    DDP in one assignment and the wrapper in another, or that is called alone (nothing kept),
    or that holds the inside of a wrapper that is not DDP; a save under `if rank0_only() and
    ...:`; under `self.writes`, set from the rank in another method; float16 autocast around a
    call of an evaluation that runs no backward; a training and an evaluation function that each
    name their own `sampler`; a per-sequence mean (`mask.sum(dim=1)`, a count per row). Said
    (review9.py): the wrapper's state_dict() through a converter in one arm, loaded back into
    the wrapper: one note, not a note and an error; the evaluation's padding sampler alone;
    autocast around a call that runs backward; a loss over the rank's whole token count; the
    model inside DDP trained through an alias (`net = model.module if ... else model`)."""
    assert findings(PROJECT / "clean_review9.py") == []
    train = PROJECT / "train_review9.py"
    assert found_in(train) == expected_in(train) == {(28, "DDP040", False), (29, "DDP040", False)}
    # one file: rank0_only() in an `and`; self.writes set from the rank in another method;
    # float16 autocast around an evaluation only; each function's own `sampler`; a per-row count
    assert findings(FIXTURES / "clean_review9.py") == []
    review = FIXTURES / "review9.py"  # the same shapes where they are pitfalls, and one note
    assert found_in(review) == expected_in(review) == {
        (24, "DDP180", False), (34, "DDP110", False), (46, "DDP060", False), (52, "DDP031", False),
        (77, "DDP041", True), (79, "DDP041", True)}
    assert len(findings(review)) == 6  # one note for the two arms of a save
    assert any(f["message"].startswith("net is model.module (the model inside DDP): net(...) bypasses DDP's "
                                       "forward") for f in findings(review))


def test_shapes_of_the_seventh_round():
    """The sixth review's misses, each a shape of our own. Said (project/train_review10.py):
    the nccl group started in a helper of the project that picks no GPU, with no set_device
    anywhere it reaches (DDP131, at the call); a shuffling DataLoader subclass with no sampler
    inside a generator helper, or a DataLoader over data the helper makes (notes: which ranks
    read it, and what data it gets, are out of sight); an evaluation sampler that a helper
    reached through a star import makes, batched by another helper and given as
    batch_sampler=; cached features, then a loop of micro-batches with backward and one step.
    (project/train_review10_modes.py): a port default in an options class's parser, set as
    MASTER_PORT under srun; a runner's training method picked by getattr at run time.
    (review10.py): an evaluation loader kept in self.held_out_loader, read in another method
    under no_grad, on BatchSampler(padded) or BatchSampler(DistributedSampler(...));
    accumulation said once, at the micro-batch loop, not at a plain branch whose test names
    the accumulation. Quiet (clean_review10.py, both): the GPU picked after the helper's start;
    no_sync() around the helper's epoch; the sampler helper told the job is not distributed;
    a loader in an attribute that trains."""
    train = PROJECT / "train_review10.py"
    assert found_in(train) == expected_in(train) == {
        (19, "DDP131", False), (23, "DDP010", True), (24, "DDP050", False), (25, "DDP010", True),
        (27, "DDP031", False)}
    said = {f["line"]: f["message"] for f in findings(train)}
    assert said[19].startswith("helpers/workdir.py:16: init_process_group with nccl and no "
                                     "torch.cuda.set_device anywhere")
    assert said[24].startswith("helpers/workdir.py:60: backward() on every micro-batch")
    assert said[23].startswith("helpers/workdir.py:28: PrefetchLoader(shuffle=...) without a sampler")
    assert said[25].startswith("helpers/workdir.py:35: DataLoader(shuffle=...) without a sampler")  # a note
    modes = PROJECT / "train_review10_modes.py"
    assert found_in(modes) == expected_in(modes) == {(11, "DDP130", False), (13, "DDP050", False)}
    said = {f["code"]: f["message"] for f in findings(modes)}
    assert said["DDP130"].startswith("start_under_srun() (helpers/modes.py:29) sets MASTER_PORT to 12411")
    assert said["DDP050"].startswith("helpers/modes.py:43: backward() on every micro-batch")
    review = FIXTURES / "review10.py"
    assert found_in(review) == expected_in(review) == {
        (21, "DDP031", False), (23, "DDP031", False), (37, "DDP050", False)}
    assert findings(PROJECT / "clean_review10.py") == []
    assert findings(FIXTURES / "clean_review10.py") == []


def test_shapes_of_the_seventh_review():
    """A seventh review's (set review10) false alarms and misses, each a shape of our own.
    Quiet (clean_seventh_review.py): a port option's default that the `__main__` block
    replaces with a free port before main() reads it; `rank not in ("cpu", "cuda")`, a test of
    whether the job is distributed, not a branch on the rank. Said (seventh_review.py): the
    default replaced only under a test (DDP130); `os.environ["RANK"] == "0"` (DDP020); a
    sampler read through tqdm(), never told the epoch (DDP030); a break on a loss the DDP
    model returns, after convert_sync_batchnorm (DDP191); DDP(compiled) in one branch and the
    compiled model in the other, saved and resumed: DDP041's note, not DDP150. Said
    (project/train_seventh_review.py): mp.spawn of a function that a package star-imports,
    which fixes MASTER_PORT: at the spawn; nothing at the same function called with "cpu" for
    its rank, nor at a trial that sets its own rank to a device word."""
    assert findings(FIXTURES / "clean_seventh_review.py") == []
    review = FIXTURES / "seventh_review.py"
    assert found_in(review) == expected_in(review) == {
        (33, "DDP041", True), (39, "DDP020", False), (44, "DDP030", False), (54, "DDP191", False),
        (60, "DDP130", False)}
    said = {f["line"]: f["message"] for f in findings(review)}
    assert said[33].startswith("self.model is the DDP wrapper: its state_dict()'s keys start with 'module.'")
    assert said[54].startswith("this break leaves the loop on `total`, a value this rank computed alone")
    spawn = PROJECT / "train_seventh_review.py"
    assert found_in(spawn) == expected_in(spawn) == {(18, "DDP130", False)}
    [port] = findings(spawn)
    assert port["message"].startswith("workers/worker.py:20: MASTER_PORT set to a fixed number")


def test_accumulation_in_a_method_called_once_per_batch():
    """Review 10's ddpm-torch and Pointcept shape (DDP050): a method that runs backward() on
    every call and steps only when a counter says so (a count passed in, `global_step %
    k`; an attribute it adds to, `self.count >= self.every`) accumulates, wherever the loop
    that calls it is. Quiet: a step on every call with a log every few, a step skipped on a
    non-finite loss, a backward under the counter's test too. In a trainer of the project:
    said at the call that reaches it; quiet where the script reaches a no_sync() helper."""
    methods = FIXTURES / "accumulating_methods.py"
    assert found_in(methods) == expected_in(methods) == {(20, "DDP050", False), (36, "DDP050", False)}
    said = {f["line"]: f["message"] for f in findings(methods)}
    assert said[20].startswith("step() runs backward() on every call and steps the optimizer only when "
                               "a counter says so")
    assert said[36].startswith("run_step() runs backward() on every call")
    assert findings(FIXTURES / "clean_accumulating_methods.py") == []
    entry = PROJECT / "train_accumulating.py"
    assert found_in(entry) == expected_in(entry) == {(17, "DDP050", False)}
    [found] = findings(entry)
    assert found["message"].startswith("helpers/stepper.py:17: step() runs backward() on every call")
    assert findings(PROJECT / "clean_train_accumulating.py") == []


def test_batchnorm_inside_the_projects_model_classes():
    """Review 10's M9 (DDP070): the DDP model is built from a class of the project
    (`from nets import PlainNet`), whose blocks build BatchNorm2d: a warning that names the
    layer's file and line. Picked by name from a package (`getattr(nets, name)()`) where only
    some classes have BatchNorm: a note. Quiet: BatchNorm kept in eval mode (by the class or
    by the script), GroupNorm, no norm, a registry lookup, a helper of the project that
    converts to SyncBatchNorm, apex's convert_syncbn_model."""
    models = PROJECT / "train_project_models.py"
    assert found_in(models) == expected_in(models) == {(15, "DDP070", False), (17, "DDP070", True)}
    said = {f["line"]: f["message"] for f in findings(models)}
    assert said[15].startswith("the model is a PlainNet, whose BatchNorm2d (nets/blocks.py:10) runs in "
                               "the DDP model without SyncBatchNorm")
    assert "2 of 5 build BatchNorm (ConvBlock, PlainNet)" in said[17]
    assert findings(PROJECT / "clean_train_project_models.py") == []
    assert findings(PROJECT / "train_synced_project_model.py") == []
    assert findings(PROJECT / "train_apex_synced_model.py") == []  # apex's convert_syncbn_model


def test_a_model_class_picked_at_run_time_is_each_class_it_can_be():
    """A model class picked at run time is read as each class of the project it can be: those
    that register with `@MODELS.register_module()` (for `MODELS.build(cfg)` and
    `HEADS.get(name)()`, also through a factory of the project), a dict of classes, and what
    `eval(cfg["MODEL"])` can name among the model classes the file imports (data sets are no
    models). Where every candidate builds BatchNorm: DDP070 as for a named class; where only
    some do: a note that names them. A trainer built by a registry (`TRAINERS.build(cfg)`) is
    followed where every registered class runs the same method: DDP050 at the call; quiet where
    they differ. Quiet: an empty dict of classes (the clean fixture)."""
    picked = PROJECT / "train_runtime_models.py"
    assert found_in(picked) == expected_in(picked)
    said = {f["line"]: f["message"] for f in findings(picked)}
    assert said[21].startswith("the model is one of the classes registered with `MODELS`, and each builds "
                               "BatchNorm (NormedNet: zoo/normed.py:14)")
    assert said[22].startswith("the model is one of the classes registered with `HEADS`, chosen by a name "
                               "this file does not fix; 1 of 2 build BatchNorm (NormedNet)")
    assert said[28].startswith("the model is one of the classes registered with `MODELS`, as build_model() "
                               "(zoo/factory.py) picks, and each builds BatchNorm")
    assert said[35].startswith("the model is one of the classes of `EVERY_NORMED`, and each builds BatchNorm")
    assert "1 of 2 build BatchNorm (NormedNet)" in said[36]
    assert "2 of 3 build BatchNorm (NormedNet, WideNormedNet)" in said[43]  # LinearNet has none
    named = PROJECT / "train_runtime_eval.py"
    assert found_in(named) == expected_in(named) == {(16, "DDP070", False)}
    [found] = findings(named)
    assert found["message"].startswith("the model is one of the model classes `eval(cfg['MODEL'])` can name, "
                                       "and each builds BatchNorm (NormedNet: zoo/normed.py:14)")
    assert findings(PROJECT / "clean_train_project_models.py") == []
    assert findings(PROJECT / "clean_train_foreign_registry.py") == []  # registries not the project's
    trainer = PROJECT / "train_registry_trainer.py"  # followed where every registered class agrees
    assert found_in(trainer) == expected_in(trainer) == {(18, "DDP050", False)}
    [found] = findings(trainer)
    assert found["message"].startswith("zoo/trainers.py:20: step() runs backward() on every call")
    held = PROJECT / "train_held_models.py"  # a block held to build later, a package's `import *`
    assert found_in(held) == expected_in(held) == {(12, "DDP070", False), (13, "DDP070", False)}
    said = {f["line"]: f["message"] for f in findings(held)}
    assert said[12].startswith("the model is a StackNet, whose BatchNorm1d (zoo/held.py:13) runs")
    assert said[13].startswith("the model is a PartsNet, whose BatchNorm2d (zoo/parts/common.py:8) runs")


def test_nccl_named_by_a_config_file():
    """Review 10's M10 (DDP131): `init_process_group(backend=settings["launch_backend"])`, the
    model on cuda and no set_device anywhere; every value the project's files give that key is
    nccl (JSON, or a bare YAML value): a warning that names the file it read. A parameter
    given an option whose default is nccl: a warning. A backend from an option with no
    default: a note. Quiet: the option's default is gloo; a settings line that names nccl and
    gloo; set_device called."""
    entry = PROJECT / "train_configured_backend.py"
    assert found_in(entry) == expected_in(entry) == {(18, "DDP131", False), (24, "DDP131", True),
                                                     (29, "DDP131", False), (34, "DDP131", False)}
    said = {f["line"]: f for f in findings(entry)}
    assert said[18]["severity"] == said[29]["severity"] == "warning"
    assert said[18]["message"].startswith(
        "the backend is `settings['launch_backend']`, nccl in every value the project's files give "
        "`launch_backend` (launch_configs/gpus.json)")
    assert said[24]["message"].startswith("the backend is `args.group_kind`, which this file does not fix")
    assert said[29]["message"].startswith("the backend is `args.start_backend`, nccl by its option's default")
    assert "nccl in every value the project's files give `node_backend` (launch_configs/nodes.yaml)" \
        in said[34]["message"]
    assert findings(PROJECT / "clean_train_configured_backend.py") == []  # "nccl" if ... else "gloo"
    assert findings(PROJECT / "clean_train_configured_backend.py") == []
    assert findings(PROJECT / "clean_train_configured_device.py") == []


def test_a_save_under_a_test_out_of_sight_is_a_note():
    """Precision where the evidence passes through what the checker cannot read
    (review10_guards.py): a save under a call of an installed package, under a flag of an
    object made out of sight, under self.writes set only from such a value: a note that names
    the test. Where the code in view shows it, an error: a test of the epoch, an option of the
    file's own parser, a number out of sight compared (not a flag). float16 autocast in a
    validate() that calls .eval() and runs no backward: nothing; in a step whose loss goes to
    backward(): DDP060."""
    guards = FIXTURES / "review10_guards.py"
    assert found_in(guards) == expected_in(guards) == {
        (34, "DDP060", False), (46, "DDP040", True), (58, "DDP040", True), (60, "DDP040", True),
        (62, "DDP040", False), (64, "DDP040", False), (66, "DDP040", False)}
    said = {f["line"]: f["message"] for f in findings(guards)}
    assert said[58].startswith("torch.save under `if should_write(args):`, a test the checker cannot read")
    assert said[46].startswith("torch.save under `if self.writes:`")


def test_a_sampler_and_a_dtype_followed_into_the_projects_classes():
    """A seventh review's denoiser and OLMo shapes (project/train_review10_lab.py): a shuffling
    sampler from a project helper whose loader a solver class keeps, reads through a wrapper
    and tells `loader.epoch = epoch` (an attribute torch never reads): DDP030 at the helper's
    call. A padding sampler three helpers deep, its loader kept in a scorer's field, read in
    the solver's evaluate(): DDP031 at the call that builds the scorers. A config property that
    returns float16 in one branch, no GradScaler in reach: a DDP060 warning, in the solver's
    step and where the property is passed to a parameter; so is a dataclass field whose
    default is float16; a dtype named at run time, with float16 in the project: a note. Quiet
    (clean_review10_lab.py): the sampler's `epoch` set itself; the scorers' loaders read only
    to train; a property and a field that give no float16."""
    lab = PROJECT / "train_review10_lab.py"
    assert found_in(lab) == expected_in(lab) == {
        (22, "DDP060", False), (28, "DDP060", True), (35, "DDP060", False), (47, "DDP030", False),
        (50, "DDP031", False), (55, "DDP060", False)}
    said = {f["line"]: f["message"] for f in findings(lab)}
    # data.py returns kind(dataset, sampler=sampler): a loader class passed in, so a loader's sampler
    assert said[47].startswith("the DistributedSampler of the loader that ")
    assert "its loader goes to Solver() (lab/solver.py), whose epoch loop (lab/solver.py:16) reaches no " \
        "set_epoch() (lab/solver.py:33 sets `loader.epoch`, which torch never reads)" in said[47]
    assert said[50].startswith(
        "the DistributedSampler that make_score_loader() builds (lab/evaluation.py:16, drop_last False by "
        "default at lab/config.py:30) pads the shards with repeated samples; its loader, kept in "
        "`.score_loader`, is read in evaluate() (lab/solver.py:23), an evaluation")
    assert said[55].startswith("lab/solver.py:35: autocast's dtype `self.cfg.amp_dtype` can be float16 "
                               "(config.py:17 returns torch.float16) and no GradScaler is in reach")
    assert said[22].startswith("autocast's dtype `cfg.amp_dtype` (passed at line 51) can be float16 "
                               "(lab/config.py:17 returns torch.float16)")
    assert said[28].startswith("autocast's dtype `getattr(torch, cfg.dtype_name)` is out of the checker's "
                               "sight")
    assert said[35].startswith("autocast's dtype `amp.autocast_dtype` can be float16 (lab/config.py:35 "
                               "defaults to torch.float16)")
    assert findings(PROJECT / "clean_review10_lab.py") == []


def test_an_fsdp_optimizer_state_judged_by_its_arm_and_its_file():
    """An eighth review's DDP160 false alarms (open_lm, Lumina-T2X), shapes of our own. Quiet
    (clean_eighth_fsdp_saves.py): `optimizer_state if args.fsdp else optimizer.state_dict()`,
    where the FSDP arm holds FSDP.optim_state_dict() (the plain arm serves the model without
    FSDP); each rank's optimizer state saved to a file named by its rank and loaded back by
    that rank; the model's state_dict() inside `FSDP.state_dict_type(model, ...)` (no DDP041,
    though the name holds DDP elsewhere). Said (eighth_fsdp_saves.py): the optimizer's state
    saved to one path, in a choice whose other arm is no FSDP state, and to a file named by
    the rank that nothing loads back."""
    assert findings(FIXTURES / "clean_eighth_fsdp_saves.py") == []
    said = FIXTURES / "eighth_fsdp_saves.py"
    assert found_in(said) == expected_in(said) == {(23, "DDP160", False), (25, "DDP160", False),
                                                   (26, "DDP160", False)}
    assert all(f["message"].startswith("torch.save of the optimizer of an FSDP model: its state_dict() holds "
                                       "this rank's shards") for f in findings(said))


def test_a_wrap_chosen_by_a_flag_and_a_save_under_a_flag_passed_in():
    """An eighth review's DDP041 false alarm (semantic-segmentation) and the DDP040 that open_lm's
    DDP160 hid, shapes of our own. Quiet (clean_eighth_flag_wrap.py): `model.module.state_dict()
    if cfg["DDP"] else model.state_dict()` (and its if/else), where the same flag chose the
    DDP wrap; a save under `if args.write_files:`, set from the rank by the only caller before
    it passes `args`. Said (eighth_flag_wrap.py): the plain arm under another flag; a wrap
    made whatever the flag; a flag set from an option, not the rank."""
    assert findings(FIXTURES / "clean_eighth_flag_wrap.py") == []
    said = FIXTURES / "eighth_flag_wrap.py"
    assert found_in(said) == expected_in(said) == {(18, "DDP040", False), (33, "DDP041", False),
                                                   (34, "DDP041", False)}
    messages = {f["line"]: f["message"] for f in findings(said)}
    assert messages[33].startswith("model is the DDP wrapper: its state_dict()'s keys start with 'module.'")
    assert messages[18].startswith("torch.save runs on every rank")


def test_a_loader_builder_out_of_sight_is_a_note():
    """An eighth review's DDP010 false alarm (openpi: its package under src/, out of the
    checker's sight), shapes of our own. A `*_loader(shuffle=True)` builder the checker cannot
    read: a note, since it may make the DistributedSampler there. Quiet
    (project/clean_train_eighth_feed.py): a builder of the project that returns what another
    builds, with a DistributedSampler under `if dist.is_initialized():`. Said
    (project/train_eighth_feed.py): a builder of the project that makes no sampler: an error."""
    assert findings(PROJECT / "clean_train_eighth_feed.py") == []
    said = PROJECT / "train_eighth_feed.py"
    assert found_in(said) == expected_in(said) == {(18, "DDP010", False), (19, "DDP010", True)}
    messages = {f["line"]: f["message"] for f in findings(said)}
    assert messages[19].startswith("build_shuffled_loader(shuffle=...) without a sampler, from a builder out "
                                   "of the checker's sight")
    assert messages[18].startswith("make_plain_loader(shuffle=...) without a sampler: every rank iterates")


def test_a_class_chosen_through_a_name_a_spawned_worker_and_an_epoch_function_are_followed():
    """An eighth review's misses (project/train_review11.py, lab11/): `Exp = Forecast` in an if/elif,
    then `Exp(...).fit()`: each class the name can hold is followed (DDP042 in Forecast.fit),
    and an object called like a function, `stopper(loss, model, path)`, runs its class's
    `__call__` (DDP040 in the save it reaches). An epoch function of the project: its no_sync
    runs only under `isinstance(model, FSDP)`, so the DDP model accumulates without it (DDP050);
    it returns on rank 0 alone inside the loop (DDP191). A BatchNorm four classes down (DDP070).
    A helper's (data, loader) pair whose loader is read under no_grad: an evaluation (DDP031), so
    no DDP030. A script that spawns another module's function, which wraps and builds a worker whose method
    accumulates (DDP050, naming both methods that do); the worker's save runs on rank 0 alone:
    quiet. Quiet (clean_review11.py): map_location and a stopper that saves on rank 0 in each
    class the name can hold, no_sync for any wrapper, a stop all-reduced, SyncBatchNorm, a
    spawned worker with no_sync, a loop left on `world_size == 1` where `world_size, rank =
    world_size_and_rank()` (the world size is every rank's: no DDP020, no DDP191)."""
    entry, spawn = PROJECT / "train_review11.py", PROJECT / "train_review11_spawn.py"
    assert found_in(entry) == expected_in(entry) == {
        (25, "DDP031", False), (33, "DDP070", False), (42, "DDP040", False), (42, "DDP042", False),
        (44, "DDP050", False), (44, "DDP191", False)}
    said = {(f["line"], f["code"]): f["message"] for f in findings(entry)}
    assert len(findings(entry)) == 6  # line 25's DDP031 once, though two nodes of it hold the sampler
    assert said[42, "DDP042"].startswith("lab11/experiments.py:13: torch.load without map_location")
    assert said[42, "DDP040"].startswith("lab11/stopping.py:17: torch.save runs on every rank")
    assert said[44, "DDP050"].startswith("lab11/steps.py:24: backward() on every micro-batch")
    assert said[44, "DDP191"].startswith("lab11/steps.py:28: this return leaves the loop only on the ranks "
                                         "where `dist.get_rank() == 0 and inputs.isnan().any()` holds")
    assert said[33, "DDP070"].startswith("the model is a Policy, whose BatchNorm2d (lab11/nets.py:10)")
    assert found_in(spawn) == expected_in(spawn) == {(9, "DDP050", False)}
    assert findings(spawn)[0]["message"].startswith("lab11/worker.py:15: backward() on every micro-batch")
    assert "(also lab11/worker.py:21, in train_actor())" in findings(spawn)[0]["message"]  # one a call
    assert findings(PROJECT / "clean_review11.py") == []
    # llm-baselines' shape: the micro-batches in a context a backend object gives, handed the model
    assert findings(PROJECT / "clean_review11_backend.py") == []


def test_a_ninth_reviews_flags_constants_and_layers():
    """A ninth review's false alarms and a miss, shapes of our own. A model of the project
    (project/lab12/ctr.py) whose BatchNorm is built only under a constructor flag, and whose
    fit() saves only where it is given a path. Quiet (project/clean_review12.py): no call turns
    the flag on; the path is a module constant that is None. Said (project/train_review12.py):
    the flag turned on (DDP070), a path given (DDP040), nccl named by a module constant with no
    set_device (DDP131, an error: the file fixes it); settings through ** (a note). This file's
    own layers (review12.py): one model's three BatchNorm layers, one finding that names the
    others; converted by apex's convert_syncbn_model (clean_review12.py): quiet. An option with
    one dash (`-init`) fills `args.init`: its default port reaches init_method (DDP130). A file
    with no `__main__` block whose main() runs `fire.Fire(train)` (review12_entry.py): train()
    is checked as a `__main__` block's functions are (DDP030)."""
    assert findings(PROJECT / "clean_review12.py") == []
    entry, settings = PROJECT / "train_review12.py", PROJECT / "train_review12_settings.py"
    assert found_in(entry) == expected_in(entry) == {
        (14, "DDP131", False), (17, "DDP070", False), (18, "DDP040", False)}
    said = {f["code"]: f for f in findings(entry)}
    assert said["DDP131"]["severity"] == "error"
    assert said["DDP131"]["message"].startswith("init_process_group with nccl and no torch.cuda.set_device")
    assert said["DDP070"]["message"].startswith("lab12/ctr.py:16: BatchNorm1d in a DDP model")
    assert said["DDP040"]["message"].startswith(  # a method called on the model: followed as a helper
        "fit() (lab12/ctr.py) runs torch.save (lab12/ctr.py:35) on every rank")
    assert found_in(settings) == expected_in(settings) == {(17, "DDP070", True)}
    assert findings(settings)[0]["message"].startswith(
        "lab12/ctr.py:16: built only under a flag that WideDeep(...) may set through ** (out of sight)")
    assert findings(FIXTURES / "clean_review12.py") == []
    layers, port = findings(FIXTURES / "review12.py")
    assert layers["line"] == 16 and layers["message"].startswith(
        "BatchNorm1d (and 2 more: lines 19, 29) in a DDP model without SyncBatchNorm")
    assert port["code"] == "DDP130" and port["message"].startswith(  # `-init`, one dash: args.init
        "init_method 'tcp://127.0.0.1:23456' (through args.init): a fixed port")
    # no __main__ block: main(), a console script's entry, hands train() to fire; train() is checked
    entry = {f["code"]: f for f in findings(FIXTURES / "review12_entry.py")}
    assert entry["DDP030"]["line"] == 18 and entry["DDP030"]["message"].startswith(
        "DistributedSampler shuffles, but set_epoch() is never called")


def test_a_port_from_a_key_that_every_config_file_sets_to_a_number():
    """so-vits-svc's shape (project/train_review11_config.py): `os.environ["MASTER_PORT"] =
    hps.train.port`, a key of a JSON config read at run time, 8001 in every config file of the
    project that sets it: DDP130. Quiet (clean_review11_config.py): a key that one config file
    sets to `auto` and another to a number."""
    entry = PROJECT / "train_review11_config.py"
    assert found_in(entry) == expected_in(entry) == {(20, "DDP130", False)}
    assert findings(entry)[0]["message"].startswith(
        "MASTER_PORT is `hps.train.port`, 8001 in every config file of the project that sets `port` "
        "(lab11/configs/voice.json): a fixed port")
    assert findings(PROJECT / "clean_review11_config.py") == []


def test_shapes_of_the_ninth_review():
    """A ninth review's misses (set review12), each a shape of our own. Said (follow12.py): an
    evaluation defined inside main() that reads main()'s loader on a padding sampler (DDP031);
    backward() in one method, the step in another it calls, when `step - self.last_step >= k`
    (DDP050). Quiet (clean_follow12.py): a function inside main() that trains on main()'s loader
    while another one calls .eval() (that .eval() is its own), and an evaluation of a loader of
    its own; a step method called after backward() that steps every time, or skips a bad loss."""
    review = FIXTURES / "follow12.py"
    assert found_in(review) == expected_in(review) == {(19, "DDP031", False), (41, "DDP050", False)}
    said = {(f["line"], f["code"]): f["message"] for f in findings(review)}
    assert said[19, "DDP031"].startswith("an evaluation loader's DistributedSampler pads the shards with "
                                         "repeated samples: they are counted twice")
    assert said[41, "DDP050"].startswith("train_batch() runs backward() on every call and maybe_step() steps "
                                         "the optimizer only when a counter says so")
    assert findings(FIXTURES / "clean_follow12.py") == []
    # a fallback port in an srun branch: a number plus the node's GPU count (DDP130); quiet where
    # the offset is the job id's, or one each job is given
    port = FIXTURES / "follow12_port.py"
    assert found_in(port) == expected_in(port) == {(19, "DDP130", False)}
    assert findings(port)[0]["message"].startswith(
        "MASTER_PORT falls back to 23400 + gpus_here where none is set, in code that runs under srun")
    assert findings(FIXTURES / "clean_follow12_port.py") == []


def test_a_save_helper_of_the_project_given_the_wrapper_by_keyword():
    """A ninth review's hubert shape (project/train_follow12.py): `save_snapshot(net=net)` of
    another module saves `net.state_dict()` and is given the DDP wrapper; a plain model here
    reads the snapshot's "net" key: DDP041, an error. A note (train_follow12_resume.py) where
    the file loads it back into the wrapper alone. Quiet (clean_follow12.py): net.module given,
    by keyword and by position; the wrapper given to a helper that saves
    `net.module.state_dict() if hasattr(net, "module") else net.state_dict()`; a name that is
    the model inside the wrapper in one arm, the plain model in the other."""
    entry = PROJECT / "train_follow12.py"
    assert found_in(entry) == expected_in(entry) == {(21, "DDP041", False)}
    assert findings(entry)[0]["message"].startswith(
        "save_snapshot() (lab12/snapshots.py) saves net.state_dict() (lab12/snapshots.py:10), given the DDP "
        "wrapper net: its keys start with 'module.'; pass net.module")
    resume = PROJECT / "train_follow12_resume.py"
    assert found_in(resume) == expected_in(resume) == {(18, "DDP041", True)}
    assert "this file loads them back into the wrapper" in findings(resume)[0]["message"]
    assert findings(PROJECT / "clean_follow12.py") == []


def test_a_loader_a_helper_returns_kept_by_a_class_for_its_evaluation():
    """A ninth review's CMGAN shape (project/train_follow12_loaders.py): the held-out loader
    that a helper of the project returns in a tuple, on a padding DistributedSampler, given to
    a class of the file that keeps it in a field read by its test() (DDP031, at the helper's
    call). Quiet (project/clean_follow12.py): both loaders kept and trained on, none evaluated;
    a held-out DataLoader on no sampler, returned beside a loader on one, read by a closure."""
    entry = PROJECT / "train_follow12_loaders.py"
    assert found_in(entry) == expected_in(entry) == {(44, "DDP031", False)}
    assert findings(entry)[0]["message"].startswith(
        "the DistributedSampler of the loader that make_loaders() (lab12/data.py) returns pads the shards "
        "with repeated samples: they are counted twice")
    assert findings(PROJECT / "clean_follow12.py") == []


def test_methods_of_a_trainer_of_the_project_called_on_every_rank():
    """A ninth review's stylegan2 shape (project/train_follow12_trainer.py): `trainer.load()`
    and `trainer.save()` of a class of the project, called on every rank: its load has no
    map_location (DDP042), its save no test on the rank (DDP040), though the module's own call
    of each is rank 0's. Quiet (project/clean_follow12.py): restore() with map_location, save()
    on rank 0, load() in the parent process before mp.spawn."""
    entry = PROJECT / "train_follow12_trainer.py"
    assert found_in(entry) == expected_in(entry) == {(14, "DDP042", False), (17, "DDP040", False)}
    said = {f["code"]: f["message"] for f in findings(entry)}
    assert said["DDP042"].startswith("lab12/gan.py:34: torch.load without map_location")
    assert said["DDP040"].startswith("save() (lab12/gan.py) runs torch.save (lab12/gan.py:31) on every rank")
    assert findings(PROJECT / "clean_follow12.py") == []


def test_an_entry_that_names_torch_distributed_is_distributed(capsys):
    """A sixth review's torchtitan shape (project/clean_review9_entry.py): a trainer made from
    a config, out of sight, and torch.distributed called through `import torch` alone. Not 'no
    torch.distributed in it': a note that says what it could not follow; exit 0."""
    entry = str(PROJECT / "clean_review9_entry.py")
    assert check_ddp.main([entry]) == 0
    out = capsys.readouterr().out
    assert "no torch.distributed" not in out
    assert out.startswith(f"no findings; note: {entry} calls torch.distributed, but the checker could not "
                          "follow where the model is wrapped or the group started")
    assert check_ddp.main([entry, "--format", "json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["not_followed"] == [entry] and said["not_distributed"] == []


def test_a_thin_script_over_its_library_is_distributed(capsys):
    """Not 'no torch.distributed in it': the script's DDP is made three modules down, through
    mp.spawn and a class, or through a dict of classes; the text report says what it found."""
    for name in ("train_review8_wrapper.py", "train_review8_backend.py"):
        _, tree = check_ddp.read_source(str(PROJECT / name))
        project = check_ddp.Project(PROJECT / name)
        assert check_ddp.Checker(tree, project=project, path=PROJECT / name).distributed
        assert not check_ddp.Checker(tree).distributed  # alone: nothing distributed in sight
    assert check_ddp.main([str(PROJECT / "train_review8_backend.py")]) == 1
    out = capsys.readouterr().out
    assert "no torch.distributed" not in out and "1 finding in 1 file (1 error)" in out


def write_project(root, files):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_following_stops_at_two_modules_fifty_files_and_the_project(tmp_path):
    """Bounded: a collective two modules deep is seen, three deep is not; at most 50 modules
    are read; a module that does not parse is skipped without a word; nothing above the folder
    that holds .git, nothing under site-packages, no module imported at run time."""
    reduce = "import torch.distributed as dist\n\n\ndef f(x):\n    dist.all_reduce(x)\n"
    write_project(tmp_path / "repo", {
        ".git/HEAD": "ref: refs/heads/main\n",
        "one.py": "from two import f as g\n\n\ndef f(x):\n    g(x)\n",
        "two.py": reduce,
        "deep1.py": "from deep2 import f as g\n\n\ndef f(x):\n    g(x)\n",
        "deep2.py": "from deep3 import f as g\n\n\ndef f(x):\n    g(x)\n",
        "deep3.py": reduce,
        "broken.py": "def f(:\n",
        "train.py": (
            "import importlib\nimport torch\nimport one, deep1, broken, above, mods\n"
            "from torch.distributed import all_reduce\n\nrank = int(torch.distributed.get_rank())\n"
            "if rank == 0:\n    one.f(torch.ones(1))\n    deep1.f(torch.ones(1))\n    broken.f(1)\n"
            "    above.f(torch.ones(1))\n    importlib.import_module('two').f(torch.ones(1))\n"
            + "".join(f"    mods.m{i}.f(torch.ones(1))\n" for i in range(60))),
        "mods/__init__.py": "",
        **{f"mods/m{i}.py": "def f(x):\n    return x\n" for i in range(60)},
    })
    write_project(tmp_path / "repo", {
        "launch.py": "import torch.distributed as dist\n\n\ndef start():\n    dist.init_process_group()\n",
        "job.py": "import torch\nimport launch\n\nlaunch.start()\nmodel = torch.nn.Linear(2, 2)\n"})
    _, job = check_ddp.read_source(str(tmp_path / "repo" / "job.py"))
    assert check_ddp.Checker(job, project=check_ddp.Project(tmp_path / "repo" / "job.py")).distributed
    assert not check_ddp.Checker(job).distributed  # alone: a neutral name, nothing distributed in sight
    installed = tmp_path / "lib" / "site-packages" / "pkg"  # an installed package is never followed
    write_project(installed, {"__init__.py": "", "helper.py": reduce, "train.py": (
        "import torch.distributed as dist\nfrom pkg import helper\n\nif dist.get_rank() == 0:\n"
        "    helper.f(1)\n")})
    assert findings(installed / "train.py") == []
    (tmp_path / "above.py").write_text(reduce)  # beside the project, not in it
    train = tmp_path / "repo" / "train.py"
    assert [(f["line"], f["code"]) for f in findings(train)] == [(8, "DDP020")]  # one.f, not deep1.f
    project = check_ddp.Project(train)
    assert project.roots == [tmp_path / "repo"]
    text, tree = check_ddp.read_source(str(train))
    check_ddp.Checker(tree, project=project, path=train).check()
    assert len(project.read) == 50 and (tmp_path / "repo" / "broken.py") in project.skipped


def test_a_file_is_distributed_in_any_spelling_of_ddp_a_sampler_or_a_group():
    """Not 'no torch.distributed in it' for a file that wraps its model in DDP (any spelling),
    builds a DistributedSampler or starts the group through a helper of its project."""
    def distributed(source):
        return check_ddp.Checker(ast.parse(source)).distributed

    assert distributed("import torch\nmodel = torch.nn.parallel.DistributedDataParallel(net)\n")
    assert distributed("from torch import nn\nmodel = nn.parallel.DistributedDataParallel(net)\n")
    assert distributed("from apex.parallel import DistributedDataParallel as ADDP\nmodel = ADDP(net)\n")
    assert distributed("from utils import smart_DDP\nmodel = smart_DDP(model)\n")
    assert distributed("import torch\nsampler = torch.utils.data.DistributedSampler(data)\n")
    assert distributed("import utils\nutils.init_distributed_mode(args)\n")
    assert distributed("from my.dist_util import setup_dist\nsetup_dist()\n")
    assert not distributed("import torch\nmodel = torch.nn.Linear(2, 2)\nprint(model)\n")
    assert not distributed("from utils import setup_logging\nsetup_logging()\n")


def test_a_byte_order_mark_is_read_as_python_reads_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(
        "\ufeffimport torch.distributed as dist\n\nif rank == 0:\n    dist.barrier()\n".encode()
    )
    assert [f["code"] for f in findings(script)] == ["DDP020"]


def test_device_id_alone_is_not_set_device(tmp_path):
    """init_process_group(device_id=) binds the group to a GPU but leaves the current device at
    GPU 0, where all_gather_object puts its tensors (torch 2.14: _object_to_tensor(obj,
    "cuda")): DDP131 still fires; a set_device anywhere silences it."""
    body = ("import os\nimport torch\nimport torch.distributed as dist\n\n\ndef main():\n"
            "    local_rank = int(os.environ['LOCAL_RANK'])\n{set_device}"
            "    dist.init_process_group('nccl', device_id=torch.device('cuda', local_rank))\n"
            "    objects = [None] * dist.get_world_size()\n"
            "    dist.all_gather_object(objects, dist.get_rank())\n\n\nmain()\n")
    script = tmp_path / "train.py"
    script.write_text(body.format(set_device=""))
    assert [f["code"] for f in findings(script)] == ["DDP131"]
    script.write_text(body.format(set_device="    torch.cuda.set_device(local_rank)\n"))
    assert findings(script) == []


def test_a_thousand_line_script_is_read_in_well_under_a_second():
    entry = 'if __name__ == "__main__":\n    main(64, 2, 4)\n'
    body = (FIXTURES / "pitfalls.py").read_text().replace(entry, "")
    copies = [body.replace("def main(", f"def main_{i}(") for i in range(30)]
    text = "\n".join(copies) + "\nif __name__ == '__main__':\n" + "".join(f"    main_{i}(64, 2, 4)\n"
                                                                          for i in range(30))
    assert len(text.splitlines()) >= 1500
    start = time.process_time()  # CPU time: the other processes of a busy machine do not count
    found = check_ddp.check_source(text, ast.parse(text))
    seconds = time.process_time() - start
    expected = expected_in(FIXTURES / "pitfalls.py")
    assert [code for _, code, _ in expected].count("DDP070") == 1
    assert len(found) == 30 * (len(expected) - 1) + 1  # each copy's; the file's BatchNorm layers said once
    [layers] = [f for f in found if f["code"] == "DDP070"]
    assert layers["message"].startswith("BatchNorm1d (and 29 more: lines ")
    assert seconds < 1.0, f"{seconds:.2f} s of CPU time for {len(text.splitlines())} lines"


def test_command_line_as_a_user_meets_it(tmp_path):
    # findings: linters' format, exit 1, a summary line
    bad = run([sys.executable, CHECKER, "scripts/03_distributed_sampler/set_epoch_shuffling.py"], timeout=60)
    assert bad.returncode == 1, bad.output
    assert re.search(r"^scripts/03_distributed_sampler/set_epoch_shuffling\.py:\d+:\d+: DDP030 warning: "
                     r"DistributedSampler shuffles, but set_epoch\(\) is never called.* "
                     r"\(with --variant bad\) \(chapter 03: chapters/03_distributed_sampler\.md\)$",
                     bad.output, re.M), bad.output
    assert bad.output.rstrip().endswith("1 finding in 1 file (1 warning) (1 file(s) checked)"), bad.output
    # json, and files that cannot be read: one line each, exit 2
    (tmp_path / "broken.py").write_text("def main(:\n")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01torch")
    paths = ["scripts/00_porting/train_ddp.py", tmp_path / "missing.py", tmp_path / "broken.py",
             tmp_path / "data.bin", tmp_path]
    result = run([sys.executable, CHECKER, *paths], timeout=60)
    assert result.returncode == 2, result.output
    lines = result.output.splitlines()
    for message in (f"check_ddp: {tmp_path}/missing.py: no such file",
                    f"check_ddp: {tmp_path}/broken.py:1:10: a syntax error (invalid syntax): fix it",
                    f"check_ddp: {tmp_path}/data.bin: a binary file, not a Python script",
                    f"check_ddp: {tmp_path}: is a directory; give the .py files"):
        assert sum(line.startswith(message) for line in lines) == 1, (message, result.output)
    assert "Traceback" not in result.output and lines[-1] == "no findings (1 file(s) checked, 4 unreadable)"
    machine = run([sys.executable, CHECKER, "--format", "json", FIXTURES / "pitfalls.py"], timeout=60)
    assert machine.returncode == 1
    report = json.loads(machine.output)
    assert {(f["line"], f["code"], f["severity"] == "note") for f in report["findings"]} == expected_in(
        FIXTURES / "pitfalls.py")
    assert {f["severity"] for f in report["findings"]} == {"error", "warning"}
    # --explain: the rule's section of docs/check.md
    explained = run([sys.executable, CHECKER, "--explain", "ddp030"], timeout=60)
    assert explained.returncode == 0 and explained.output.startswith("## DDP030 "), explained.output
    assert "set_epoch" in explained.output and "## DDP031" not in explained.output
    clean = run([sys.executable, CHECKER, FIXTURES / "clean.py"], timeout=60)
    assert clean.returncode == 0 and clean.output == "no findings (1 file(s) checked)\n", clean.output
    # a one-device script: the rules do not apply, and the summary says so (exit 0, a json field)
    single = "scripts/00_porting/train_single.py"
    note = (f"{single}: no torch.distributed in it: the DDP rules do not apply (check the DDP version of "
            "your script)")
    plain = run([sys.executable, CHECKER, single], timeout=60)
    assert plain.returncode == 0 and plain.output == f"{note} (1 file(s) checked)\n", plain.output
    both = run([sys.executable, CHECKER, single, FIXTURES / "clean.py"], timeout=60)
    assert both.returncode == 0 and both.output == f"no findings; {note} (2 file(s) checked)\n", both.output
    machine = run([sys.executable, CHECKER, "--format", "json", single, FIXTURES / "clean.py"], timeout=60)
    assert machine.returncode == 0 and json.loads(machine.output) == {
        "findings": [], "errors": [], "not_distributed": [single]}, machine.output


def test_select_ignore_and_severity_pick_the_findings_and_notes_alone_exit_0(capsys):
    """--select/--ignore take codes and prefixes, as ruff does; --severity the least one shown;
    a file with notes alone exits 0 (nothing the checker is sure of), with errors 1."""
    pitfalls = str(FIXTURES / "pitfalls.py")

    def codes_shown(*argv):
        code = check_ddp.main([*argv, pitfalls])
        out = capsys.readouterr().out
        return code, re.findall(r": (DDP\d{3}) (error|warning|note): ", out), out

    code, shown, _ = codes_shown("--select", "DDP04")
    assert code == 1 and sorted(c for c, _ in shown) == ["DDP040", "DDP041", "DDP042"]
    _, shown, _ = codes_shown("--ignore", "DDP04,DDP18", "--ignore", "DDP070")
    assert {c for c, _ in shown} == {"DDP010", "DDP020", "DDP030", "DDP050", "DDP060", "DDP110", "DDP130",
                                     "DDP131"}
    _, shown, out = codes_shown("--select", "DDP0", "--ignore", "DDP010", "--severity", "error")
    assert {s for _, s in shown} == {"error"} and "DDP030" not in out and "DDP010" not in out
    assert out.rstrip().endswith("(1 file(s) checked)")
    code, shown, out = codes_shown("--select", "DDP130")
    assert code == 1 and shown == [("DDP130", "warning")]
    assert "1 finding in 1 file (1 warning)" in out
    with pytest.raises(SystemExit) as stop:
        check_ddp.main(["--ignore", "XYZ1", pitfalls])
    assert (
        stop.value.code == 2
        and "no rule starts with XYZ1 (--list shows the codes)" in capsys.readouterr().err
    )
    assert check_ddp.main([str(FIXTURES / "notes.py")]) == 0  # notes alone
    out = capsys.readouterr().out
    assert out.rstrip().endswith("6 findings in 1 file (6 notes) (1 file(s) checked)"), out
    assert check_ddp.main(["--select", "DDP180", str(FIXTURES / "notes.py"), pitfalls]) == 1
    capsys.readouterr()
    check_ddp.main(["--list"])
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(check_ddp.RULES) and listed[0].startswith("DDP010  error    chapter 01  ")


def test_a_closed_pipe_ends_it_quietly_with_its_exit_code():
    """`check_ddp.py ... | head -1`: the reader goes away; no BrokenPipeError traceback, and the
    exit code still says there were findings."""
    many = [str(FIXTURES / "pitfalls.py")] * 60  # more than a pipe holds (64 KiB)
    proc = subprocess.Popen([sys.executable, str(CHECKER), *many], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert first.startswith(b"tests/check_fixtures/pitfalls.py:") or b"pitfalls.py:" in first
    assert stderr == "", stderr


def test_the_corpus_script_skips_without_the_corpus_and_measures_a_folder(tmp_path, capsys):
    """tests/check_corpus.py: without the folder it says so and exits 0 (the suite never needs
    the corpus); the table docs/check.md includes is the label file's; on a folder it matches
    findings to the rows by line and code, each file in the folder of its repository (--alone:
    by itself), and --record writes what the checker says."""
    spec = importlib.util.spec_from_file_location("check_corpus", REPO / "tests" / "check_corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    assert corpus.main([str(tmp_path / "absent")]) == 0
    assert "no corpus folder at" in capsys.readouterr().out
    rows = corpus.read_labels()
    assert len({r["repo"] for r in rows}) >= 25 and len({(r["repo"], r["path"]) for r in rows}) >= 40
    assert all(re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and r["reason"] for r in rows)
    assert {r["label"] for r in rows} <= {"true", "false", "note", "clean"}  # nothing left unlabelled
    assert {r[column] for r in rows for column in ("before", "alone", "after")} <= {
        "error", "warning", "note", "yes", "-"}
    modules = corpus.read_labels(corpus.MODULES)  # what each entry imports from its repository
    entries = {(r["repo"], r["commit"], r["path"]) for r in rows}
    assert len(modules) >= 100 and all((m["repo"], m["commit"], m["entry"]) in entries for m in modules)
    assert (REPO / "tests" / "check_corpus.md").read_text() == corpus.table(rows)
    page = (REPO / "docs" / "check.md").read_text()
    assert '--8<-- "tests/check_corpus.md:numbers"' in page and '--8<-- "tests/check_corpus.md:files"' in page
    # a corpus of one file of our own: one pitfall found, one missed, one false alarm
    folder = tmp_path / "corpus" / "someone__project"
    folder.mkdir(parents=True)
    helper_call = "\nfrom saver import save_all\n\nsave_all(model)\n"  # line 79: a save in saver.py
    (folder / "train.py").write_text((FIXTURES / "pitfalls.py").read_text() + helper_call)
    (folder / "saver.py").write_text("import torch\n\n\ndef save_all(net):\n    torch.save(net, 'a.pt')\n")
    labels = tmp_path / "labels.tsv"
    labels.write_text(
        "\t".join(corpus.COLUMNS)
        + "\n"
        + "".join(
            f"someone/project\t{'0' * 40}\ttrain.py\tdev\t{line}\t{code}\t{label}\t-\t-\t-\t{why}\n"
            for line, code, label, why in [
                (14, "DDP130", "true", "a fixed port"),
                (21, "DDP131", "false", "said so"),
                (5, "DDP130", "true", "made up: missed"),
            ]
        )
    )
    arguments = [str(tmp_path / "corpus"), "--labels", str(labels), "--select", "DDP13"]
    assert corpus.main(arguments) == 0
    out = capsys.readouterr().out
    assert "someone/project\ttrain.py\t14\tDDP130\trecorded '-', now 'warning'\ttrue\ta fixed port" in out
    assert "errors and warnings: 2 (1 true, 1 false)" in out
    assert (
        "precision (errors and warnings): 0.50 (1/2)" in out
        and "recall (errors and warnings): 0.50 (1/2)" in out
    )
    assert corpus.main([*arguments, "--record", "after"]) == 0
    recorded = corpus.read_labels(labels)
    assert [(r["line"], r["after"]) for r in recorded] == [("5", "-"), ("14", "warning"), ("21", "error")]
    assert (
        "| `train.py` | 5 DDP130 missed; 14 DDP130 warning ✓; 21 DDP131 error ✗ | 5 DDP130 missed; 14 DDP130 "
        "missed | 5 DDP130 missed; 14 DDP130 missed |" in corpus.table(recorded)
    )
    # in its repository the helper's save is seen at the call (an unlabelled finding); alone it is not
    in_repository = [str(tmp_path / "corpus"), "--labels", str(labels), "--select", "DDP040"]
    capsys.readouterr()
    assert corpus.main(in_repository) == 0
    said = capsys.readouterr().out
    assert "someone/project\ttrain.py\t79\tDDP040\trecorded '-', now 'error'\tUNLABELLED" in said
    assert corpus.main([*in_repository, "--alone"]) == 0
    assert "\t79\tDDP040" not in capsys.readouterr().out
    # one finding for a model's BatchNorm layers names the others ("and 2 more: lines 19, 29"): each is said
    found, _ = corpus.run_checker(check_ddp, FIXTURES / "review12.py", ["DDP070"])
    assert found == {("16", "DDP070"): "warning", ("19", "DDP070"): "warning", ("29", "DDP070"): "warning"}


@pytest.mark.parametrize(
    "review, flagged, flagged_true, pitfalls, false_left, not_distributed_left, heading", [
    ("review5", 20, 15, 26, 0, 0, "### A third review"),
    ("review6", 22, 18, None, 0, 0, "### A fourth review"),
    ("review7", 19, 15, None, 0, 0, "### A fifth review (blind)"),
    ("review9", 22, 11, 24, 0, 0, "### A sixth review (blind)"),
    ("review10", 15, 13, 30, 0, 0, "### A seventh review (blind)"),
    ("review11", 17, 13, 28, 0, 0, "### An eighth review (blind)"),
    ("review12", 26, 20, 31, 0, 0, "### A ninth review (blind)"),
    ("review13", 31, 20, 30, 11, 0, "### A tenth review (blind)"),
])
def test_each_fresh_reviews_files_are_labelled_and_tabled(review, flagged, flagged_true, pitfalls, false_left,
                                                           not_distributed_left, heading):
    """tests/check_corpus_<review>.tsv: a fresh review's 15 files, labelled by (or from the
    table of) the reviewer, with what the reviewed version and this one said. The reviewed
    version's counts are the reviewer's own; the false alarms left (none after the earlier ones);
    docs/check.md includes the table made from the label file, and the table is the file's."""
    spec = importlib.util.spec_from_file_location("check_corpus", REPO / "tests" / "check_corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    rows = corpus.read_labels(REPO / "tests" / f"check_corpus_{review}.tsv")
    assert len({(r["repo"], r["path"]) for r in rows}) == 15 and {r["set"] for r in rows} == {review}
    assert {r["label"] for r in rows} <= {"true", "false", "note", "clean"} and all(r["reason"] for r in rows)
    before, after = corpus.tally(rows, "before"), corpus.tally(rows, "after")
    assert (before["flagged"], before["flagged_true"]) == (flagged, flagged_true)  # the review's own run
    if pitfalls is not None:
        assert before["pitfalls"] == pitfalls
    assert after["flagged"] - after["flagged_true"] == false_left  # the false alarms left on these files
    # the files called not distributed though they wrap DDP, call torch.distributed or spawn ranks
    assert after[corpus.NOT_DISTRIBUTED] == not_distributed_left
    table = corpus.review_table(rows)
    assert (REPO / "tests" / f"check_corpus_{review}.md").read_text() == table
    version = corpus.REVIEWED[review]
    assert f"| {version}, the review's run | {flagged} ({flagged_true}, {flagged - flagged_true}) |" in table
    page = (REPO / "docs" / "check.md").read_text()
    assert heading in page
    for part in ("numbers", "files"):
        assert f'--8<-- "tests/check_corpus_{review}.md:{part}"' in page


# the label files of the blind reviews, in order
BLIND_REVIEWS = ("review7", "review9", "review10", "review11", "review12", "review13")


def test_the_pages_summary_of_the_blind_reviews_is_their_tables():
    """docs/check.md opens its measures with a row per blind review: its checker's commit,
    precision and recall, each the reviewed version's row of that review's table."""
    page = (REPO / "docs" / "check.md").read_text()
    summary = page[page.index("## Measured on real scripts"):page.index("The rules were fixed on real")]
    rows = re.findall(r"^\| \w+ \| `(\w+)` \| ([0-9.]+ \([0-9/]+\)) \| ([0-9.]+ \([0-9/]+\)) \|$",
                      summary, re.M)
    run = r"^\| (\w+), the review's run \|[^\n]*\| ([0-9.]+ \([0-9/]+\)) \| ([0-9.]+ \([0-9/]+\)) \|$"
    blind = [re.search(run, (REPO / "tests" / f"check_corpus_{review}.md").read_text(), re.M).groups()
             for review in BLIND_REVIEWS]
    assert rows == blind, (rows, blind)


# --------------------------------------------------------------------------- preflight
def assert_preflight_ok(output: str, launcher: str, world: int, nodes: int = 1) -> None:
    header = f"preflight: launcher={launcher} world_size={world} nodes={nodes} backend=gloo rendezvous="
    assert header in output, output
    rows = re.findall(r"^ +(\d+) +(\d+) +(\d+)  cpu +- +\S+$", output, re.M)
    assert [int(r[0]) for r in rows] == list(range(world)), output  # every rank once, in order
    assert "NCCL variables: NCCL_DEBUG=WARN" in output, output  # what the ranks were given
    assert re.search(r"^all_reduce of known values: right on every rank; \d+\.\d\d GB/s bus bandwidth "
                     r"\(1 MiB, gloo\)$", output, re.M), output
    assert re.search(rf"^preflight: OK in \d+\.\d s: {world} rank\(s\) ready to train$", output, re.M), output
    assert output.count("preflight: OK") == 1, "printed by more than rank 0"


PREFLIGHT = [CHECKER, "--preflight", "--megabytes", "1", "--timeout", "60"]


def test_preflight_under_torchrun_and_both_mpiexecs():
    env = clean_env(NCCL_DEBUG="WARN")
    torchrun = [VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2"]
    result = run([*torchrun, *PREFLIGHT], env=env, timeout=120)
    assert result.returncode == 0, result.output
    assert_preflight_ok(result.output, "torchrun", 2)
    for mpi, launcher in (("openmpi", "openmpi"), ("mpich", "mpich/pals")):
        extra = ("-x", "NCCL_DEBUG=WARN") if mpi == "openmpi" else ("-genv", "NCCL_DEBUG", "WARN")
        result = mpiexec(mpi, 2, str(CHECKER), *PREFLIGHT[1:], launcher_args=extra, timeout=120)
        assert result.returncode == 0, result.output
        assert_preflight_ok(result.output, launcher, 2)
        assert "rendezvous=127.0.0.1:" in result.output  # one node, a port of this launch


def test_preflight_under_srun(request):
    slurm = shared_cluster(request.config)
    result = run(["srun", "--ntasks=2", "--time=5", sys.executable, *PREFLIGHT],
                 env=slurm.env(NCCL_DEBUG="WARN"), timeout=120)
    assert result.returncode == 0, result.output
    assert_preflight_ok(result.output, "slurm", 2)


def test_preflight_on_two_simulated_nodes():
    with two_network_namespaces() as names:
        port = "29411"
        nodes = [Background(["ip", "netns", "exec", ns, VENV_BIN / "torchrun", "--nnodes=2",
                             "--nproc_per_node=1", "--rdzv-backend=c10d",
                             f"--rdzv-endpoint={NODE_ADDRESSES[0]}:{port}",  # a namespace's own port
                             "--rdzv-id=preflight", f"--rdzv-conf=is_host={str(ns == names[0]).lower()}",
                             f"--local-addr={address}",  # the namespaces share one host name
                             *PREFLIGHT], env=node_env(address, NCCL_DEBUG="WARN"), timeout=150)
                 for ns, address in zip(reversed(names), reversed(NODE_ADDRESSES), strict=True)]
        node1, node0 = (node.finish() for node in nodes)
    assert node0.returncode == 0 and node1.returncode == 0, (node0.output, node1.output)
    assert_preflight_ok(node0.output, "torchrun", 2)  # nodes=1: the namespaces share one host name
    assert "preflight:" not in node1.output  # rank 1 prints nothing when all is well


def test_preflight_names_a_missing_variable_and_exits_1():
    """A broken launch: a missing or wrong variable, an address that does not resolve, a rank
    whose rank 0 never comes; one line each, exit 1, no hang."""
    env = clean_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")  # torchrun's, without the address
    result = run([sys.executable, *PREFLIGHT], env=env, timeout=60)
    assert result.returncode == 1, result.output
    assert result.output.strip().endswith("torchrun variables incomplete: MASTER_ADDR, MASTER_PORT not set "
                                          "(start it with the launcher's own line: torchrun, mpiexec, srun)")
    env = clean_env(OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0")
    result = run([sys.executable, *PREFLIGHT], env=env, timeout=60)
    assert result.returncode == 1 and "openmpi variables disagree: OMPI_COMM_WORLD_RANK=3" in result.output
    env = clean_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="nowhere.invalid", MASTER_PORT="1")
    result = run([sys.executable, *PREFLIGHT], env=env, timeout=60)
    assert result.returncode == 1, result.output
    assert "the rendezvous address 'nowhere.invalid' does not resolve" in result.output
    # rank 1 of 2 alone: rank 0 never comes, and the wait ends at --timeout with a line, no traceback
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = clean_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    result = run([sys.executable, *PREFLIGHT[:-1], "3"], env=env, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.output, result.output
    assert "preflight: FAIL on rank 1 (" in result.output
    assert f"the ranks did not all meet at 127.0.0.1:{port} within --timeout 3 s" in result.output


FAKE_ONE_GPU = """\
import types
import torch
torch.cuda.is_available = lambda: True  # one GPU, the same for every rank (check_ddp preflight test)
torch.cuda.device_count = lambda: 1
torch.cuda.set_device = lambda device: None
torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(uuid="GPU-aaaa")
"""


def test_preflight_stops_two_ranks_on_one_gpu(tmp_path):
    """torchrun --nproc_per_node=2 on a one-GPU node: both ranks would use the same GPU under
    nccl. The GPU is faked (its UUID), as tests/test_gpu_binding.py fakes it."""
    (tmp_path / "sitecustomize.py").write_text(FAKE_ONE_GPU)
    env = clean_env(PYTHONPATH=str(tmp_path))
    torchrun = [VENV_BIN / "torchrun", "--standalone", "--nproc_per_node=2"]
    result = run([*torchrun, *PREFLIGHT], env=env, timeout=120)
    assert result.returncode == 1, result.output  # torchrun's own code for a worker that exits 1
    assert re.search(r"^preflight: FAIL in \d+\.\d s: ranks 0 and 1 on \S+ share one GPU \(GPU-aaaa\) under "
                     r"nccl: start at most one process per GPU", result.output, re.M), result.output
    assert "preflight: rank 1 stops: ranks 0 and 1" in result.output
    assert "all_reduce of known values: skipped" in result.output


FAKE_TWO_GPUS = FAKE_ONE_GPU.replace("device_count = lambda: 1", "device_count = lambda: 2")


def test_preflight_warns_of_a_cpu_job_on_gpu_nodes(tmp_path):
    """GPUs visible, but the ranks would train on the CPUs: the training script's GPU flag is
    missing (given after --), or --backend gloo. A warning line, exit 0: the job may mean it.
    One process, two GPUs faked as above."""
    (tmp_path / "sitecustomize.py").write_text(FAKE_TWO_GPUS)
    train = tmp_path / "train.py"
    train.write_text("import argparse\nparser = argparse.ArgumentParser()\n"
                     "parser.add_argument('--cuda', action='store_true', help='use CUDA')\n"
                     "parser.add_argument('--epochs', type=int, default=3)\n")
    env = clean_env(PYTHONPATH=str(tmp_path), NCCL_DEBUG="WARN")
    result = run([sys.executable, *PREFLIGHT, "--backend", "gloo", "--", train, "--epochs", "1"], env=env,
                 timeout=60)
    assert result.returncode == 0, result.output
    lines = result.output.splitlines()
    assert (
        "preflight: warning: 2 GPU(s) visible to each rank, but --backend gloo checks the ranks on the CPU: "
        "if the training should use the GPUs, check it with nccl" in lines
    ), result.output
    assert (
        "preflight: warning: 2 GPU(s) visible to each rank, but train.py --cuda is not given: it trains on "
        "the CPU: give it its GPU flag, or ignore this if the CPUs are meant" in lines
    ), result.output
    assert re.search(r"^preflight: OK in \d+\.\d s: 1 rank\(s\) ready to train \(2 warnings above\)$",
                     result.output, re.M), result.output


def test_training_device_reads_the_training_commands_gpu_flags(tmp_path):
    """What the preflight's warning rests on: the script's own options and the command line."""
    script = tmp_path / "train.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\n"
                      "p.add_argument('--cuda', action='store_true')\n"
                      "p.add_argument('--no-gpu', action='store_true')\n"
                      "p.add_argument('--device', default='cpu')\n"
                      "p.add_argument('--dist-backend', default='nccl')\n")
    device = check_ddp.training_device
    assert device(str(script), []) == "train.py --cuda is not given: it trains on the CPU"
    assert device(str(script), ["--cuda", "--no-gpu"]) == "train.py --no-gpu is given: it trains on the CPU"
    assert (
        device(str(script), ["--cuda", "--device", "cpu:0"])
        == "train.py --device is 'cpu:0': it trains on the CPU"
    )
    assert (
        device(str(script), ["--cuda"]) == "train.py --device is 'cpu': it trains on the CPU"
    )  # its default
    assert device(str(script), ["--cuda", "--device=cuda"]) is None
    assert device(str(script), ["--cuda", "--device", "cuda", "--dist-backend", "gloo"]) == (
        "train.py --dist-backend is 'gloo': its ranks meet with gloo, on the CPU")
    assert device(str(tmp_path / "missing.py"), []) is None  # nothing to read: nothing to say


def test_shared_gpus_tells_per_task_binding_from_two_ranks_on_one_gpu():
    def report(rank, host, gpu):
        return {"rank": rank, "host": host, "gpu": gpu}
    per_task = [report(0, "n1", "GPU-a"), report(1, "n1", "GPU-b"), report(2, "n2", "GPU-a")]
    assert check_ddp.shared_gpus(per_task) == []  # one UUID on two hosts: two GPUs
    [message] = check_ddp.shared_gpus([report(0, "n1", "GPU-a"), report(1, "n1", "GPU-b"),
                                       report(2, "n1", "GPU-b")])
    assert message.startswith("ranks 1 and 2 on n1 share one GPU (GPU-b) under nccl")


UNREAD = FIXTURES / "unread"


def test_a_run_names_the_places_where_it_stopped_reading(capsys):
    """After the summary, a run lists where its reading stopped, so that 'no findings' is not
    read as 'no pitfall': a trainer a registry builds, a model class eval picks, a package of a
    src/ layout it did not find; each at its line, no code, no severity, exit 0. JSON lists them
    under "unread"; --severity warning hides them as it hides notes; a script it read whole
    prints no such block (clean.py's whole output is asserted in the command-line test)."""
    expected = {
        "registry_trainer.py": "14: `trainer`: TRAINERS.build({'type': args.trainer}) "
                               "(a registry builds it from a name known at run time)",
        "eval_model.py": "24: `model`: DDP(eval(args.arch)()) (picked at run time by eval)",
        "src_layout.py": "5: `import labkit` (src/labkit) "
                         "(not beside the script or above it: a src/ layout?)",
        "config_port.py": "15: `init_method=settings['dist']['url']` "
                          "(the port, from a config the checker did not read)",
    }
    for name, said in expected.items():
        entry = str(UNREAD / name)
        assert check_ddp.main([entry]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "no findings (1 file(s) checked)", "not followed (check these by hand):", f"  {entry}:{said}"]
    entries = [str(UNREAD / name) for name in expected]
    assert check_ddp.main(["--format", "json", *entries]) == 0
    listed = json.loads(capsys.readouterr().out)["unread"]
    assert [(p["path"], p["line"]) for p in listed] == [(entries[0], 14), (entries[1], 24), (entries[2], 5),
                                                        (entries[3], 15)]
    assert check_ddp.main(["--severity", "warning", *entries]) == 0
    assert capsys.readouterr().out == "no findings (4 file(s) checked)\n"
    assert check_ddp.main(["--select", "DDP070", entries[1]]) == 0  # a rule picked: still said
    assert "not followed (check these by hand):" in capsys.readouterr().out
    # picks that need no reading by hand (torch.optim's class, an object's method or attribute,
    # a command-line backend): no block
    assert check_ddp.main([str(UNREAD / "resolved.py")]) == 0
    assert capsys.readouterr().out == "no findings (1 file(s) checked)\n"
    # `from feeds import shards`, a folder without __init__.py whose module the run reads: not listed
    assert check_ddp.main([str(UNREAD / "read_folder_module.py")]) == 0
    assert capsys.readouterr().out == "no findings (1 file(s) checked)\n"


def test_the_not_followed_block_stays_short():
    """Five places at most in the text; the rest are counted and left to --format json."""
    places = [{"path": "train.py", "line": n, "what": "`model`: eval(name)()",
               "why": "picked at run time by eval"} for n in range(1, 8)]
    lines = check_ddp.unread_lines(places)
    assert lines[0] == "not followed (check these by hand):" and len(lines) == 7
    assert lines[1] == "  train.py:1: `model`: eval(name)() (picked at run time by eval)"
    assert lines[-1] == "  ... and 2 more (--format json lists them all)"
    assert check_ddp.unread_lines([]) == []


def test_the_modules_past_the_followed_lines_cap_are_named(capsys, monkeypatch):
    """The rules run on at most FOLLOWED_LINES lines of the modules a script reaches; with the
    cap at one line, the call that reaches helpers/loaders.py names it as left unread."""
    entry = str(PROJECT / "train_review6.py")
    monkeypatch.setattr(check_ddp, "FOLLOWED_LINES", 1)
    check_ddp.main([entry])
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  {entry}:30: what this call reaches in helpers/loaders.py "
        "(past the followed-lines cap (1 lines): its rules not run there)")
