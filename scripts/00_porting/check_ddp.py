"""Check a DDP training script for the pitfalls of this tutorial's chapters, and a job's launch.

Plain Python: the checker reads your script with the standard library (ast) and runs none of
it, so it needs no GPU, no torch and no launcher. Copy this file into your project if you like.

Check scripts (one line per finding, as linters print them: file:line:col: CODE severity:
message; exit 0: no error or warning, 1: errors or warnings, 2: a file could not be read):
    python scripts/00_porting/check_ddp.py train.py [more.py ...]
    python scripts/00_porting/check_ddp.py --ignore DDP04,DDP070 train.py   # codes or prefixes
    python scripts/00_porting/check_ddp.py --select DDP020 --severity warning train.py
    python scripts/00_porting/check_ddp.py --format json train.py
    python scripts/00_porting/check_ddp.py --explain DDP030      # what a rule means, the fix
    python scripts/00_porting/check_ddp.py --list                # every rule
Silence a finding you mean on its line: `# noqa: DDP030` (or a bare `# noqa`).
Severities: error (the code shows the pitfall), warning (it does, but it is sometimes meant),
note (it may: what the checker cannot see decides; notes alone exit 0).

Check a job before it trains (needs torch): run it under the job's own launcher line.
Every rank checks the launcher's variables, its GPU, the rendezvous address, and an
all_reduce of known values (right answer, bandwidth); rank 0 prints one table and a verdict.
Give the training command after `--`, and it also says when GPUs are visible but the
training would run on the CPUs.
    python scripts/00_porting/check_ddp.py --preflight
    torchrun --standalone --nproc_per_node=4 scripts/00_porting/check_ddp.py --preflight -- train.py --lr 0.1
    mpiexec -n 8 python scripts/00_porting/check_ddp.py --preflight
    srun --ntasks=8 python scripts/00_porting/check_ddp.py --preflight
The job templates (slurm_job.sh, pbs_job.sh) run it before training: one line to delete.
"""

import argparse
import ast
import importlib.util
import json
import os
import re
import sys
import time
import zlib
from pathlib import Path

PAGE = "docs/check.md"  # the page that explains every rule (--explain prints its section)
SEVERITIES = ("note", "warning", "error")


# ---------------------------------------------------------------------------- the rules

def is_main_test(test) -> bool:
    """`__name__ == "__main__"`."""
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__" \
        and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant) \
        and test.comparators[0].value == "__main__"

class Rule:
    def __init__(self, code, chapter, page, severity, title, fix):
        self.code, self.chapter, self.page, self.title, self.fix = code, chapter, page, title, fix
        self.severity = severity


# --8<-- [start:rules]
RULES = {rule.code: rule for rule in [
    Rule("DDP010", "01", "chapters/01_data_parallel_ddp.md", "error",
         "a shuffling DataLoader with no DistributedSampler: every rank trains on the whole data set",
         "DataLoader(dataset, sampler=DistributedSampler(dataset), ...), or give each rank its own shard"),
    Rule("DDP020", "02", "chapters/02_collectives.md", "error",
         "a collective inside a branch on the rank: the ranks that skip it leave the others waiting",
         "call every collective on every rank, in the same order (add 0 where a rank has nothing)"),
    Rule("DDP030", "03", "chapters/03_distributed_sampler.md", "warning",
         "a shuffling DistributedSampler whose set_epoch() is never called: the same order every epoch",
         "call sampler.set_epoch(epoch) at the start of every epoch"),
    Rule("DDP031", "03", "chapters/03_distributed_sampler.md", "warning",
         "an evaluation through a DistributedSampler: it pads the shards with repeated samples",
         "give rank r the samples range(r, len(dataset), world_size), or evaluate on rank 0 alone"),
    Rule("DDP032", "03", "chapters/03_distributed_sampler.md", "warning",
         "the whole evaluation set read on every rank, then all-reduced: each sample counted world_size "
         "times",
         "give rank r the samples range(r, len(dataset), world_size) before the all_reduce, or evaluate "
         "on rank 0 alone without it"),
    Rule("DDP040", "04", "chapters/04_logging_and_checkpoints.md", "error",
         "torch.save on every rank: N writers of one file",
         "save on rank 0 alone (if rank == 0:), then dist.barrier() before anyone reads it"),
    Rule("DDP041", "04", "chapters/04_logging_and_checkpoints.md", "error",
         "the DDP wrapper's state_dict() saved: every key starts with 'module.', a plain model cannot "
         "load it",
         "save model.module.state_dict(), the plain model inside the wrapper"),
    Rule("DDP042", "04", "chapters/04_logging_and_checkpoints.md", "warning",
         "torch.load without map_location: on GPUs every rank loads onto the GPU that saved the file",
         "torch.load(path, map_location=device), this rank's device"),
    Rule("DDP050", "05", "chapters/05_gradient_accumulation.md", "warning",
         "gradient accumulation without no_sync(): every micro-batch's backward() all-reduces",
         "with model.no_sync(): on all micro-batches but the last (forward and backward inside it)"),
    Rule("DDP060", "06", "chapters/06_mixed_precision.md", "error",
         "fp16 autocast without a GradScaler: small gradients underflow to zero",
         "scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); scaler.step(optimizer); "
         "scaler.update(); or autocast with dtype=torch.bfloat16"),
    Rule("DDP070", "07", "chapters/07_batchnorm_and_buffers.md", "warning",
         "BatchNorm in a DDP model without SyncBatchNorm: each rank normalizes with its own batch's "
         "statistics",
         "model = nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP(model) (if per-rank statistics "
         "are not what you mean)"),
    Rule("DDP110", "11", "chapters/11_replica_consistency.md", "error",
         "model.module(...) called for training: DDP's forward is bypassed, gradients are not averaged",
         "call the wrapper, model(inputs); use model.module only to save or to evaluate"),
    Rule("DDP130", "13", "chapters/13_multinode_and_hpc.md", "warning",
         "a fixed rendezvous port: two jobs on one node collide",
         "leave MASTER_PORT to the launcher, or derive it from the job id"),
    Rule("DDP131", "13", "chapters/13_multinode_and_hpc.md", "error",
         "init_process_group with nccl and no torch.cuda.set_device: every rank's current GPU is GPU 0",
         "torch.cuda.set_device(local_rank) before init_process_group (device_id= alone leaves it at GPU 0)"),
    Rule("DDP150", "15", "chapters/15_torch_compile_ddp.md", "error",
         "the compiled model's state_dict() saved: every key starts with '_orig_mod.'",
         "save the model inside the wrappers: model._orig_mod (and its .module under DDP), "
         "or compile with model.compile()"),
    Rule("DDP160", "16", "chapters/16_fsdp.md", "error",
         "torch.save of a sharded (FSDP) model's state_dict: each file holds one rank's shards",
         "torch.distributed.checkpoint (dcp.save) on every rank, or get_model_state_dict(..., "
         "full_state_dict=True) saved by rank 0"),
    Rule("DDP170", "17", "chapters/17_zero_and_beyond.md", "error",
         "a ZeroRedundancyOptimizer's state_dict() without consolidate_state_dict(): an error, or one "
         "rank's shard",
         "optimizer.consolidate_state_dict(to=0) on every rank, then rank 0 saves optimizer.state_dict()"),
    Rule("DDP180", "18", "chapters/18_transformer.md", "warning",
         "a token loss averaged over this rank's own tokens (padding masked out): DDP then averages the "
         "ranks' gradients, so a token weighs more on a rank with fewer tokens",
         "loss = token_sum / global_tokens * world_size, global_tokens being the token count "
         "all-reduced over the ranks"),
    Rule("DDP190", "19", "chapters/19_metrics_and_decisions.md", "warning",
         "a metric that is not a sum (F1, precision, recall, AUROC) averaged over the ranks: the mean of "
         "the ranks' scores is not the score of the whole set",
         "all-reduce the counts the metric is made of (true and false positives, ...) and compute it "
         "once, or gather the predictions"),
    Rule("DDP191", "19", "chapters/19_metrics_and_decisions.md", "warning",
         "a loop left on a rank-local value (a local validation loss against the best one): ranks that "
         "stay wait in the next collective for ranks that left",
         "decide on one rank and broadcast the decision, or all-reduce the value first, so that every "
         "rank leaves together"),
]}
# --8<-- [end:rules]

COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
               "broadcast_object_list", "barrier", "monitored_barrier", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list",
               "all_to_all", "all_to_all_single", "new_group"}
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}
# Launcher variables that hold a rank: os.environ["RANK"] is the rank.
RANK_ENV = {"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID"}
# A save under these runs once per node (a local rank or GPU id): taken as guarded too.
GUARD_EXTRA = {"gpu", "gpu_id", "gpu_rank", "device_id"}
# Decorators that run a function on rank 0 alone.
RANK_ZERO_DECORATORS = re.compile(r"(?i)rank_?zero|master_only|main_process_only|on_main_process|main_only")
NO_GRAD = {"no_grad", "inference_mode"}
# a test's word that may mean "this process writes" (a guard the checker cannot read)
GUARD_WORD = re.compile(r"(?i)save|master|main|primary|leader|chief|writer|write|log|rank|zero|first|"
                        r"enabled|^on$|^is_|^should_|^do_|^can_")
# Variables of launchers that set no MASTER_PORT (srun, mpiexec): a fallback port always applies.
PORTLESS_LAUNCHERS = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "PALS_")
# Calls whose result carries the rank of their arguments (arithmetic, conversions): int(rank),
# min(rank, 1), torch.tensor(rank == 0). Any other call given the rank returns its own value.
CARRY_RANK = {"int", "float", "bool", "abs", "min", "max", "round", "sum", "tensor", "as_tensor", "item",
              "tolist", "list", "tuple", "eq", "ne", "lt", "le", "gt", "ge"}
BUILTINS = {"len", "enumerate", "iter", "next", "zip", "list", "tuple", "print", "isinstance", "sorted"}
FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef)


def walk_own(function):
    """The nodes of `function`, not those of the functions defined inside it."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, FUNCTION):
            todo.extend(ast.iter_child_nodes(node))
SCOPE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
# Calls that start the process group, here or in a helper of the script's project.
GROUP_HELPER = re.compile(
    r"(?i)(init|setup|start)_?(dist|ddp|distributed)|(dist|ddp|distributed)_?(init|setup)"
)
# Metrics that are ratios of counts (or rankings): the mean of the ranks' values is not the value.
NOT_A_SUM = re.compile(
    r"(?i)(^|_)(f1|fbeta|f_beta|precision|recall|auroc|roc_auc|auc|average_precision|"
    r"matthews|mcc|kappa|iou|miou|jaccard|dice|balanced_accuracy|accuracy_score)(_score)?$"
)
# Calls that compute a loss or a metric from this rank's data (DDP191: a value of its own),
# and the model's output; calls that make a value the same on every rank (synchronize, reduce).
LOCAL_CALL = re.compile(r"(?i)(^|_)(loss(es)?|criterion|accuracy|acc|acc1|top1|topk|perplexity|ppl)($|_)|"
                        r"cross_entropy|nll_loss|mse_loss|l1_loss|kl_div|ctc_loss|"
                        r"(^|_)(f1|precision|recall|auroc|roc_auc|auc|iou|miou|dice|bleu)(_score)?$")
MODEL_NAME = re.compile(r"(?i)(^|_)(model|net|network|encoder|classifier|generator|discriminator)$")
# A function that evaluates, by its name: evaluate(), validation_epoch(), test().
EVAL_NAME = re.compile(r"(?i)(^|_)(eval|evaluate|evaluation|validate|validation|valid|test)(_|$)")
# An optimizer class given a module's parameters(), and the methods of a module that compute no output.
OPTIMIZER_CLASS = re.compile(r"(?i)optim|^(sgd|adam\w*|rmsprop|adagrad|adadelta|adafactor|lamb|lars|lion)$")
MODULE_METHODS = {"parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
                  "children", "state_dict", "load_state_dict", "train", "eval", "to",
                  "cuda", "cpu", "half",  # gpu-checked: method names read from the code, no device
                  "float", "zero_grad", "apply", "requires_grad_", "register_buffer", "register_forward_hook",
                  "register_full_backward_hook", "share_memory"}
SYNC_CALL = re.compile(r"(?i)sync|all_?reduce|all_?gather|broadcast|reduce_(dict|tensor|value|mean|sum|loss)|"
                       r"^(reduce|gather)_|reduce$")


def dotted(node):
    """'torch.nn.BatchNorm2d' for a Name/Attribute chain; '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def last(node):
    """The last name of a call's function or an attribute: 'all_reduce' for dist.all_reduce."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def option_dest(call):
    """The attribute an `add_argument` call fills, as argparse names it: `dest=`, else the first
    long option (`--dist-url`: dist_url), else the first short one (`-init`: init); None if none."""
    dest = keyword(call, "dest")
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
        return dest.value
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
             and a.value.startswith("-")]
    chosen = next((n for n in names if n.startswith("--")), names[0] if names else None)
    return chosen.lstrip("-").replace("-", "_") if chosen else None


def keyword(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def init_method(call):
    """The init_method of an init_process_group call: its keyword, or its second positional
    argument (`init_process_group("nccl", "tcp://...")`, after the backend)."""
    given = keyword(call, "init_method")
    return given if given is not None or len(call.args) < 2 else call.args[1]


def is_false(node):
    return isinstance(node, ast.Constant) and node.value in (False, None, 0)


def is_true(node):
    return (
        node is not None and not is_false(node) and not (isinstance(node, ast.Constant) and node.value == "")
    )


def is_path(node):
    """A value that looks like a file name: a string built here, or a name that says so."""
    if isinstance(node, (ast.JoinedStr, ast.BinOp)) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    if isinstance(node, ast.Call) and last(node) in ("join", "format", "Path", "str"):
        return True
    return isinstance(node, (ast.Name, ast.Attribute)) and bool(
        re.search(r"(?i)path|file|dir|name|ckpt|checkpoint|out", last(node)))


def launcher_present(test):
    """For a test of a launcher's variable: True if its true branch is where the variable is
    set (`"RANK" in os.environ`, `os.environ.get("SLURM_PROCID")`, and of such), False if
    where it is absent (`not in`, `is None`, `not ...`); None for any other test."""
    launcher = RANK_ENV | {"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

    def names_one(node):
        return isinstance(node, ast.Constant) and node.value in launcher

    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        sides = [launcher_present(v) for v in test.values]
        return True if sides and all(sides) else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = launcher_present(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if isinstance(op, (ast.In, ast.NotIn)) and names_one(test.left):
            return isinstance(op, ast.In)
        if isinstance(op, (ast.Is, ast.IsNot)) and is_false(test.comparators[0]):
            inner = launcher_present(test.left)
            return None if inner is None else inner == isinstance(op, ast.IsNot)
    if isinstance(test, ast.Call) and last(test) in ("get", "getenv") and test.args \
            and names_one(test.args[0]):
        return True
    return None


def is_minus_one(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
        return isinstance(node, ast.Constant) and node.value == 1
    return isinstance(node, ast.Constant) and node.value == -1


def is_rank_word(name):
    """A name that holds the rank or says 'this is rank 0': rank, local_rank, RANK, ddp_rank,
    get_rank, is_main_process, master_process, is_master, is_global_zero,
    is_world_process_zero, ..."""
    n = name.lower()
    return bool(
        re.search(r"(^|_)rank(_?id)?$", n)
        or re.fullmatch(
            r"(is_)?(local_|global_)?(main|master|leader|primary)_(process|proc|rank|node|worker)", n
        )
        or re.fullmatch(r"is_(local_|global_)?(main|master|leader|primary|zero|first|rank_?0|rank_?zero)", n)
        or re.fullmatch(r"(is_)?rank_?(0|zero)", n)
        or re.fullmatch(r"(is_)?(world_|local_|global_)?process_?(0|zero)", n)  # Hugging Face's Trainer
        or re.fullmatch(r"(is_)?(rank_?(0|zero)|master|main(_process)?|leader)_only", n)  # rank0_only()
    )


def is_flag_test(node):
    """`RANK != -1`, `args.local_rank == -1`, `args.local_rank >= 0`, `args.gpu is None`,
    `"RANK" in os.environ`: whether the job is distributed, the same answer on every rank. A
    rank compared with -1 (the value of no launcher), or on the line between -1 and 0 (`>= 0`,
    `< 0`): every launched rank is on the same side of it."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if is_minus_one(left) or is_minus_one(right):
        return True
    zero = isinstance(right, ast.Constant) and right.value == 0 and not isinstance(right.value, bool)
    if zero and isinstance(op, (ast.GtE, ast.Lt)):  # rank >= 0, rank < 0 (not rank > 0: the others)
        return True
    if isinstance(left, ast.Constant) and left.value == 0 and not isinstance(left.value, bool) \
            and isinstance(op, (ast.LtE, ast.Gt)):  # 0 <= rank, 0 > rank
        return True
    if isinstance(op, (ast.Is, ast.IsNot)) and (is_false(left) or is_false(right)):
        return True
    if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) and names_a_device(right):
        return True  # rank not in ("cpu", "cuda"): a device where the job is not distributed  # gpu-checked
    return (
        isinstance(op, (ast.In, ast.NotIn)) and isinstance(left, ast.Constant) and isinstance(left.value, str)
    )


def one_process_call(call, function):
    """`train("cpu", world_size)`: the call gives a rank parameter of `function` a device word,
    so the function runs as one process (its group start and saves are not this call's)."""
    if not isinstance(function, FUNCTION):
        return False
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    given = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords if k.arg)]
    return any(is_rank_word(param) and names_a_device(value) for param, value in given)


def one_process_function(function):
    """A function that sets its own rank to a device word (`rank = "cpu"`, then `rank =
    "cuda"`: a Ray Tune trial): it runs as one process."""
    if not isinstance(function, FUNCTION):
        return False
    values = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and is_rank_word(t.id) for t in n.targets)]
    return bool(values) and all(names_a_device(v) for v in values)


def names_a_device(node):
    """A word that no rank is (a rank is a number, or a string of digits): "cpu", or a tuple
    of such words."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return bool(values) and all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                and v.value and not v.value.strip().lstrip("-").isdigit() for v in values)


DISTRIBUTED_FLAG = re.compile(r"(?i)^(is_|use_|using_|enable_|with_|run_)?(dist|distributed|ddp|multi_?gpu)$")


def is_distributed_flag(test):
    """A test of whether the job is distributed at all, by a flag's name: `args.distributed`,
    `opt["dist"]`, `use_ddp`, `dist.is_initialized()`."""
    if isinstance(test, ast.Call):
        return last(test) == "is_initialized"
    if isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant) \
            and isinstance(test.slice.value, str):
        return bool(DISTRIBUTED_FLAG.match(test.slice.value))
    word = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
    return bool(DISTRIBUTED_FLAG.match(word))


def rank_zero_side(test):
    """(the value tested, True) for `x == 0`, `x in {-1, 0}`, `x < 1`; (..., False) for
    `x != 0`, `x > 0`, `x >= 1`, `x not in (-1, 0)`: rank 0 or the others. None otherwise."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, right = test.ops[0], test.comparators[0]
    values = ([e.value for e in right.elts if isinstance(e, ast.Constant)]
              if isinstance(right, (ast.Set, ast.Tuple, ast.List)) else
              [right.value] if isinstance(right, ast.Constant) else [])
    if not values or not all(isinstance(v, int) for v in values):
        return None
    left = ast.dump(test.left)
    if isinstance(op, (ast.In, ast.NotIn)) and 0 in values:
        return left, isinstance(op, ast.In)
    value = values[0]
    sides = {(ast.Eq, 0): True, (ast.NotEq, 0): False, (ast.Gt, 0): False, (ast.GtE, 1): False,
             (ast.Lt, 1): True, (ast.LtE, 0): True}
    side = sides.get((type(op), value))
    return None if side is None else (left, side)


def negates(a, b):
    """`T` and `not T`, `x == y` and `x != y` (also <, >=; >, <=; in, not in), or rank 0 and the
    others (`rank == 0` and `rank > 0`)."""
    za, zb = rank_zero_side(a), rank_zero_side(b)
    if za and zb and za[0] == zb[0] and za[1] != zb[1]:
        return True
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.Not):
        return ast.dump(a.operand) == ast.dump(b)
    if isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.Not):
        return ast.dump(b.operand) == ast.dump(a)
    pairs = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
             ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In}
    return (isinstance(a, ast.Compare) and isinstance(b, ast.Compare) and len(a.ops) == len(b.ops) == 1
            and pairs.get(type(a.ops[0])) is type(b.ops[0]) and ast.dump(a.left) == ast.dump(b.left)
            and ast.dump(a.comparators[0]) == ast.dump(b.comparators[0]))


def shared_removed(a, b):
    """Two `and` tests without the parts they share: `rank not in (-1, 0) and not evaluate` and
    `rank == 0 and not evaluate` give the two rank tests (either both run, or neither)."""
    if isinstance(a, ast.BoolOp) and isinstance(b, ast.BoolOp) and isinstance(a.op, ast.And) \
            and isinstance(b.op, ast.And):
        da, db = [ast.dump(v) for v in a.values], [ast.dump(v) for v in b.values]
        rest_a = [v for v, d in zip(a.values, da, strict=True) if d not in db]
        rest_b = [v for v, d in zip(b.values, db, strict=True) if d not in da]
        if len(rest_a) == len(rest_b) == 1:
            return rest_a[0], rest_b[0]
    return a, b


def unwrap_iter(node):
    """The data a loop reads: `loader` in enumerate(loader), tqdm(loader), iter(loader),
    metric_logger.log_every(loader, ...)."""
    while isinstance(node, ast.Call) and node.args and (
            last(node) in ("enumerate", "iter", "tqdm", "log_every", "zip", "islice", "Prefetcher")
            or last(node).endswith(("Prefetcher", "prefetcher"))):
        node = node.args[0]
    return node


# ------------------------------------------------------------------- variant scripts
def variant_value(test, view):
    """For `args.variant == "bad"` (or != ...): the test's value in `view` ("bad" or "good");
    None where the test is not about the variant, or undecided in that view."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and last(test.left) == "variant"
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, str)):
        return None
    value = test.comparators[0].value
    if view == "bad":
        equal = value == "bad"
    elif value in ("bad", "good"):
        equal = value == "good"
    else:
        return None  # another variant's branch: kept in the good view
    return equal if isinstance(test.ops[0], ast.Eq) else not equal


class VariantView(ast.NodeTransformer):
    """The script as `--variant VIEW` runs it: each `if args.variant == ...` replaced by its
    branch for that variant (and `a if args.variant == ... else b` by a or b)."""

    def __init__(self, view):
        self.view = view

    def visit_If(self, node):
        value = variant_value(node.test, self.view)
        if value is None:
            return self.generic_visit(node)
        kept = [self.visit(stmt) for stmt in (node.body if value else node.orelse)]
        return [s for item in kept for s in (item if isinstance(item, list) else [item])] or [ast.Pass()]

    def visit_IfExp(self, node):
        value = variant_value(node.test, self.view)
        if value is None:
            return self.generic_visit(node)
        return self.visit(node.body if value else node.orelse)


def has_variants(tree):
    return any(variant_value(n.test, "bad") is not None for n in ast.walk(tree)
               if isinstance(n, (ast.If, ast.IfExp)))


# ------------------------------------------------------------------ the reader's project
MAX_MODULES = 50  # project modules read for one checked file, at most
MAX_DEPTH = 2  # the script's imports (1), and theirs (2)
# what wraps a loader to read it, and never calls its sampler's set_epoch: progress bars, itertools
# training frameworks that call set_epoch on the loaders they are given
FRAMEWORKS = {"accelerate", "lightning", "pytorch_lightning", "deepspeed", "ignite", "composer", "mmengine",
              "mmcv", "detectron2", "transformers", "fairseq", "speechbrain", "catalyst", "torchtnt", "timm"}
ITERATORS = {"tqdm", "trange", "track", "islice", "cycle", "chain", "tee"}
INSTALLED = {"site-packages", "dist-packages"}  # folders of installed packages: never followed
_PARSED = {}  # path -> (mtime, size, tree or None): each module parsed once per process
_MODULE_CHECKERS = {}  # (path, mtime, depth, roots) -> the Checker of a project module


def project_roots(script):
    """Where the script's own imports are looked up: its folder and the folders above it, up
    to the one that holds `.git` (a folder or a file), at most 4 levels up."""
    roots = [script.parent]
    while not (roots[-1] / ".git").exists() and len(roots) < 5 and roots[-1].parent != roots[-1]:
        roots.append(roots[-1].parent)
    return roots


def parse_module(path):
    """The tree of a project module, or None (unreadable, not UTF-8, a syntax error: skipped)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    cached = _PARSED.get(path)
    if cached is None or cached[:2] != (stat.st_mtime_ns, stat.st_size):
        try:
            tree = ast.parse(path.read_bytes().decode("utf-8-sig"), filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        cached = _PARSED[path] = (stat.st_mtime_ns, stat.st_size, tree)
    return cached[2]


def sys_path_entries(tree, path):
    """The folders a module's own top-level code adds to sys.path: `sys.path.insert(0, X)`,
    `sys.path.append(X)`, or a function of it that does so with its parameter; X built from
    `__file__` with os.path (dirname, join, abspath) or pathlib (parent, /), or a string
    (from the module's folder). Resolved paths; what it cannot work out is left out."""
    names = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            names[stmt.targets[0].id] = stmt.value

    def value(node, depth=0):
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return path.parent / node.value
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return path
            return value(names[node.id], depth + 1) if node.id in names else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = value(node.left, depth + 1), node.right
            return left / right.value if left is not None and isinstance(right, ast.Constant) \
                and isinstance(right.value, str) else None
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = value(node.value, depth + 1)
            return inner.parent if inner is not None else None
        if not isinstance(node, ast.Call):
            return None
        name = last(node)
        if name in ("resolve", "absolute") and isinstance(node.func, ast.Attribute):
            return value(node.func.value, depth + 1)
        args = [value(a, depth + 1) if not isinstance(a, ast.Constant) else a.value for a in node.args]
        if name in ("abspath", "realpath", "normpath", "str", "Path", "expanduser") and len(args) == 1:
            return args[0] if not isinstance(args[0], str) else path.parent / args[0]
        if name == "dirname" and len(args) == 1 and args[0] is not None and not isinstance(args[0], str):
            return args[0].parent
        if name == "join" and args and args[0] is not None and not isinstance(args[0], str) \
                and all(isinstance(a, str) for a in args[1:]):
            return args[0].joinpath(*args[1:])
        return None

    inserting = {}  # a function of the module that puts its parameter on sys.path
    for function in (n for n in tree.body if isinstance(n, FUNCTION)):
        params = [a.arg for a in function.args.args]
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if dotted(call.func) in ("sys.path.insert", "sys.path.append") and call.args \
                    and isinstance(call.args[-1], ast.Name) and call.args[-1].id in params:
                inserting[function.name] = params.index(call.args[-1].id)
    found = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if call is None:
            continue
        if dotted(call.func) in ("sys.path.insert", "sys.path.append") and call.args:
            target = call.args[-1]
        elif isinstance(call.func, ast.Name) and call.func.id in inserting \
                and len(call.args) > inserting[call.func.id]:
            target = call.args[inserting[call.func.id]]
        else:
            continue
        folder = value(target)
        if folder is not None:
            found.append(Path(os.path.normpath(folder.resolve() if folder.is_absolute() else folder)))
    return found


class Project:
    """The modules of the reader's own project that a checked script imports: `from utils
    import save_checkpoint`, `import engine`, `from .data import build_loader`, resolved as
    Python would from the script's folder and the folders above it (see project_roots); not
    installed packages, not imports made at run time (importlib, __import__). Read on demand,
    at most MAX_MODULES files, MAX_DEPTH imports deep; a module that does not parse is skipped."""

    def __init__(self, script, root=None):
        self.script = Path(script).resolve()
        self.roots = project_roots(self.script)
        if root is not None:  # the project's top folder, given: the folders from the script's up to it
            top = Path(root).resolve()
            above = [p for p in self.script.parents if top in p.parents or p == top]
            self.roots = [self.script.parent] + above
            if self.roots[-1] != top:
                self.roots.append(top)
        self.top = self.roots[-1]
        self.read, self.skipped, self.found = set(), [], {}
        self.reach = Reach(self)

    def find(self, module, level, folder):
        """The file of module `module` (dotted; '' for the package itself), imported with
        `level` leading dots from a file in `folder`; None if it is not in the project."""
        parts = module.split(".") if module else []
        if level:
            base = folder
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            bases = self.roots
        for base in bases:
            target = base.joinpath(*parts)
            candidates = ([target.parent / (target.name + ".py")] if parts else []) + [target / "__init__.py"]
            for candidate in candidates:
                if candidate.is_file() and candidate.resolve() != self.script and (
                        self.top == candidate.resolve() or self.top in candidate.resolve().parents) \
                        and not INSTALLED.intersection(candidate.parts):  # not an installed package
                    return candidate.resolve()
        return None

    def load(self, path, depth):
        """The Checker of the project module at `path`, read at import depth `depth`."""
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        if path not in self.read and len(self.read) >= MAX_MODULES:
            return None
        self.read.add(path)
        key = (path, mtime, depth, self.top)  # one Checker per module, whichever script imports it
        if key in _MODULE_CHECKERS:
            if _MODULE_CHECKERS[key] is None and path not in self.skipped:
                self.skipped.append(path)
            return _MODULE_CHECKERS[key]
        tree = parse_module(path)
        checker = None
        if tree is None:
            self.skipped.append(path)
        else:
            try:
                checker = Checker(tree, project=self, path=path, depth=depth, module=True)
            except (RecursionError, ValueError):  # code too deep to walk: out of sight
                self.skipped.append(path)
        _MODULE_CHECKERS[key] = checker
        return checker

    def function(self, module, level, folder, name, depth, hops=0):
        """(Checker, function) of the function `name` of module `module`; through a package's
        re-export (`from .misc import save`, `from .misc import *`) too."""
        key = (module, level, folder, name, depth)
        if key not in self.found:
            self.found[key] = None  # a re-export that comes back: nothing
            self.found[key] = self._function(module, level, folder, name, depth, hops)
        return self.found[key]

    def _function(self, module, level, folder, name, depth, hops):
        path = self.find(module, level, folder)
        checker = self.load(path, depth) if path is not None else None
        if checker is None:
            return None
        found = checker.functions.get(name)
        if found is not None:
            return checker, found
        if hops >= 3:
            return None
        entry = checker.imports.get(name)
        if entry is not None and entry[0] == "from":
            return self.function(entry[1], entry[3], checker.folder, entry[2], depth, hops + 1)
        for star_module, star_level in checker.star_imports:
            found = self.function(star_module, star_level, checker.folder, name, depth, hops + 1)
            if found is not None:
                return found
        return None

    def klass(self, module, level, folder, name, depth, hops=0):
        """(Checker, class) of the class `name` of module `module` of the project, through a
        package's re-exports (`from .convnet import ConvNet` in its __init__); None elsewhere."""
        path = self.find(module, level, folder)
        checker = self.load(path, depth) if path is not None and depth <= MAX_DEPTH + 2 else None
        if checker is None:
            return None
        found = next((n for n in checker.tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if found is not None:
            return checker, found
        entry = checker.imports.get(name)
        if hops < 3 and entry is not None and entry[0] == "from":
            return self.klass(entry[1], entry[3], checker.folder, entry[2], depth, hops + 1)
        for star_module, star_level in checker.star_imports if hops < 3 and entry is None else []:
            found = self.klass(star_module, star_level, checker.folder, name, depth, hops + 1)
            if found is not None:  # a package's `from .common import *`
                return found
        return None

    def package_classes(self, module, level, folder, depth):
        """[(Checker, class)]: the classes a package of the project exports from its __init__
        (`from .cgcnn import CGCNN`, ...): what `getattr(models, name)(...)` can build."""
        path = self.find(module, level, folder)
        checker = self.load(path, depth) if path is not None else None
        if checker is None:
            return []
        out = [(checker, n) for n in checker.tree.body if isinstance(n, ast.ClassDef)]
        for local, entry in checker.imports.items():
            if entry[0] == "from" and entry[2] == local and local[:1].isupper():
                found = self.klass(entry[1], entry[3], checker.folder, entry[2], depth)
                if found is not None:
                    out.append(found)
        return out

    def add_paths(self, checker):
        """Folders of the project that the script adds to sys.path before its imports, itself
        or through a module it imports (`import _init_paths`, whose `add_path(lib_path)` does
        `sys.path.insert(0, path)`): looked up after the script's own folders."""
        added = sys_path_entries(checker.tree, self.script)
        for name, entry in checker.imports.items():
            if entry[0] != "import" or entry[1] != name:
                continue
            path = self.find(name, 0, self.script.parent)
            tree = parse_module(path) if path is not None else None
            if tree is not None:
                added += sys_path_entries(tree, path)
        for folder in added:
            if folder.is_dir() and (folder == self.top or self.top in folder.parents) \
                    and folder not in self.roots:
                self.roots.append(folder)

    def where(self, path):
        """A module's path as the reader knows it: from the script's folder."""
        return os.path.relpath(path, self.script.parent)


FOLLOWED_FILES = 8  # modules checked by rule_followed for one script, at most
FOLLOWED_LINES = 6000  # and their lines, at most
FOLLOWED_CALLS = {"torch.save", "torch.load", "backward", "DataLoader", "autocast", "init_process_group",
                  "DistributedSampler", "all_reduce", "all_gather"}  # a module worth its time holds one
# what rule_followed may say of a module of the project: not what hangs on where the module's
# objects come from (an FSDP or ZeRO model, a converted BatchNorm, set_device or a sampler given
# by the script), which the module alone cannot tell
FOLLOWED_CODES = set(RULES) - {"DDP070", "DDP110", "DDP131", "DDP160", "DDP170", "DDP191"}
# rules whose own following weighs the call's arguments or the script's objects (a launcher named
# by a constant, a sampler turned off, set_epoch on the script's loader, a resume into the wrapper)
FOLLOWED_BY_RULES = {"DDP030", "DDP031", "DDP032", "DDP041", "DDP130", "DDP131"}
DEEP_HOPS = 8  # how far the project's code is followed past what a Checker reads
DEEP_UNITS = 300  # functions visited for one checked file, at most
DEEP_MODULES = 30  # and the modules they are in
RUNTIME_CANDIDATES = 12  # classes that a name picked at run time may build, read at most
PICKERS = {"getattr", "eval", "get"}  # getattr(models, name)(), eval(cfg["NAME"])(), MODELS.get(name)()


def registers(decorator, registry):
    """`@registry.register_module()`, `@registry.register("name")`: the class joins `registry`."""
    name = dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
    return name.split(".")[-2:-1] == [registry] and name.split(".")[-1].startswith("register")


_PYTHON_FILES = {}


def python_files(project, limit=600):
    """The project's .py files, the script's folder first, then the project's top; never
    version control or installed packages; at most `limit`."""
    key = (project.script.parent, project.top)
    if key not in _PYTHON_FILES:
        out, seen = [], set()
        for top in dict.fromkeys([project.script.parent, project.top]):
            for folder, dirs, files in os.walk(top):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in INSTALLED
                                 and d not in ("node_modules", "__pycache__"))
                out += [p for p in (Path(folder) / f for f in sorted(files) if f.endswith(".py"))
                        if p not in seen and not seen.add(p)]
                if len(out) >= limit:
                    break
        _PYTHON_FILES[key] = out[:limit]
    return _PYTHON_FILES[key]


_REGISTRIES = {}
REGISTERS = re.compile(r"^[ \t]*@[ \t]*(?:\w+\.)*(\w+)\.register", re.MULTILINE)


def registry_files(project, registry):
    """The project's .py files where a class registers with `@registry.register...`; each
    file read once per project."""
    key = (project.script.parent, project.top)
    if key not in _REGISTRIES:
        index = {}
        for path in python_files(project):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for name in set(REGISTERS.findall(text)):
                index.setdefault(name, []).append(path.resolve())
        _REGISTRIES[key] = index
    return _REGISTRIES[key].get(registry, [])


def syncs_ddp(function):
    """The `no_sync` or `require_backward_grad_sync` attributes in `function` that a DDP model
    can run: not those under `if isinstance(model, FSDP)`, which only a sharded model runs."""
    sharded = set()
    for node in ast.walk(function):
        if isinstance(node, ast.If) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance"
                and len(n.args) == 2 and re.search(r"FSDP|FullyShard", ast.unparse(n.args[1]))
                and not re.search(r"DistributedDataParallel|DDP\b", ast.unparse(n.args[1]))
                for n in ast.walk(node.test)):
            sharded |= {id(n) for s in node.body for n in ast.walk(s)}
    return [n for n in ast.walk(function) if isinstance(n, ast.Attribute)
            and n.attr in ("no_sync", "require_backward_grad_sync") and id(n) not in sharded]


class Reach:
    """The project's functions that a script reaches, followed further than a Checker follows
    them: functions named in the code reached (called, or passed as `mp.spawn(fn)`), kept in a
    dict (`BACKENDS[name](args)`), picked by `getattr(module, "init_dist_%s" % launcher)` (every
    function whose name starts so), a class's `__init__` where it is made, and a method called
    on an object that a class or a factory of the project made (`model = define_model(opt)`,
    then `model.init_train()`: that method of each class the factory names, or of its bases),
    and through `self.method()`. A branch on the rank (`if rank == 0:`) is not followed: only
    some ranks run it."""

    def __init__(self, project):
        self.project = project
        self.index, self.names, self.refs_of, self.owner = {}, {}, {}, {}
        self.stars = {}  # path -> the modules it star-imports (module, level)
        self.chosen = {}  # path -> {name: the names assigned to it}: `Exp = ExpForecast` in a branch

    def parsed(self, path):
        if path not in self.index:
            if sum(v is not None for v in self.index.values()) >= DEEP_MODULES:
                return None  # the time a check takes: the nearest modules only
            tree = parse_module(path) if path is not None else None
            if tree is None:
                self.index[path] = None
                return None
            defs = {n.name: n for n in tree.body if isinstance(n, (*FUNCTION, ast.ClassDef))}
            dicts = {}
            for stmt in tree.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Dict, ast.List, ast.Tuple)):
                    dicts.update((t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name))
            imports, chosen = {}, {}
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) \
                        else [node.value]  # Exp = ExpForecast, or ExpForecast if ... else ExpOther
                    chosen.setdefault(node.targets[0].id, []).extend(
                        v for v in values if isinstance(v, (ast.Name, ast.Attribute)))
                if isinstance(node, ast.Import):
                    for a in node.names:
                        local = a.asname or a.name.split(".")[0]
                        imports.setdefault(local, ("import", a.name if a.asname else local, None, 0))
                elif isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if a.name != "*":
                            imports.setdefault(a.asname or a.name,
                                               ("from", node.module or "", a.name, node.level))
                        else:  # a package's __init__.py: from .training import *
                            self.stars.setdefault(path, []).append((node.module or "", node.level))
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, FUNCTION):
                            self.owner[id(item)] = (path, node)
            self.index[path] = (tree, defs, dicts, imports)
            self.chosen[path] = chosen
        return self.index[path]

    def name(self, path, name, hops=0):
        """[(path, def or class)], or [('module', path)], that `name` is in module `path`."""
        key = (path, name)
        if key in self.names:
            return self.names[key]
        self.names[key] = []
        found, out = self.parsed(path), []
        if found is not None and hops <= 4:
            _, defs, dicts, imports = found
            entry = imports.get(name)
            if name in defs:
                out = [(path, defs[name])]
            elif name in dicts:  # {"nccl": ddp.Backend, None: Single}[name]: each value
                values = dicts[name].values if isinstance(dicts[name], ast.Dict) else dicts[name].elts
                out = [t for v in values if isinstance(v, ast.Name) for t in self.name(path, v.id, hops + 1)]
                out += [t for v in values if isinstance(v, ast.Attribute) for t in self.attribute(path, v)]
            elif entry is not None and entry[0] == "import":
                target = self.project.find(entry[1], 0, path.parent)
                out = [("module", target)] if target is not None else []
            elif entry is not None:
                _, module, imported, level = entry
                sub = self.project.find(".".join(p for p in (module, imported) if p), level, path.parent)
                target = self.project.find(module, level, path.parent) if sub is None else None
                out = [("module", sub)] if sub is not None else \
                    self.name(target, imported, hops + 1) if target is not None else []
            elif name in self.chosen.get(path, {}):  # Exp = ExpForecast / elif ...: Exp = ExpOther
                values = self.chosen[path][name]
                found = [self.name(path, v.id, hops + 1) if isinstance(v, ast.Name)
                         else self.attribute(path, v) for v in values]
                out = [t for targets in found for t in targets if isinstance(t[1], ast.ClassDef)]
            for module, level in self.stars.get(path, []) if not out and entry is None else []:
                target = self.project.find(module, level, path.parent)  # from .training import *
                out = self.name(target, name, hops + 1) if target is not None else []
                if out:
                    break
        self.names[key] = out
        return out

    def attribute(self, path, node):
        """What `m.f` or `m.sub.f` names, where `m` is a module of the project."""
        text = dotted(node)
        if "." not in text or text.startswith("self."):
            return []
        key = (path, text)
        if key not in self.names:
            self.names[key] = self._attribute(path, text.split("."))
        return self.names[key]

    def _attribute(self, path, chain):
        targets = self.name(path, chain[0])
        for part in chain[1:]:
            modules = [t[1] for t in targets if t[0] == "module"]
            if not modules:
                return []
            sub = self.project.find(part, 1, modules[0].parent) if modules[0].name == "__init__.py" else None
            targets = [("module", sub)] if sub is not None else self.name(modules[0], part)
        return [t for t in targets if t[0] != "module"]

    def picked(self, path, call):
        """`getattr(module, "init_dist_%s" % launcher)`, `getattr(import_module("pkg.trainer"),
        name + "Trainer")`: each function or class of the module whose name starts (or ends)
        as the pattern does, or the one it names."""
        if not (isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2):
            return []
        owner, pattern = call.args[:2]
        if isinstance(owner, ast.Name):
            modules = [m for kind, m in self.name(path, owner.id) if kind == "module"]
        elif isinstance(owner, ast.Call) and last(owner) == "import_module" and owner.args \
                and isinstance(owner.args[0], ast.Constant) and isinstance(owner.args[0].value, str):
            found = self.project.find(owner.args[0].value, 0, path.parent)
            modules = [found] if found is not None else []
        else:
            return []

        def text(node):
            return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""

        parts = [pattern.left, pattern.right] if isinstance(pattern, ast.BinOp) else \
            [pattern.values[0], pattern.values[-1]] if isinstance(pattern, ast.JoinedStr) and pattern.values \
            else [pattern, None]
        exact = text(pattern)
        prefix = text(parts[0]).split("%")[0] if not exact else ""
        suffix = text(parts[1]) if isinstance(pattern, (ast.BinOp, ast.JoinedStr)) and not isinstance(
            pattern.op if isinstance(pattern, ast.BinOp) else None, ast.Mod) else ""
        if not (exact or prefix or suffix):
            return []
        out = []
        for module in modules:
            found = self.parsed(module)
            if found is None:
                continue
            names = dict(found[1])
            for name, entry in found[3].items():  # a package's re-exports: from .trainer import Trainer
                if name not in names and entry[0] == "from":
                    names[name] = None
            for name in names:
                if (name == exact) if exact else (name.startswith(prefix) and name.endswith(suffix)):
                    out += [t for t in self.name(module, name) if t[0] != "module"]
        return out

    def targets(self, path, node):
        """The defs and classes of the project that the expression `node` names."""
        if isinstance(node, ast.Name):
            return [t for t in self.name(path, node.id) if t[0] != "module"]
        if isinstance(node, ast.Attribute):
            return self.attribute(path, node)
        if isinstance(node, ast.Subscript):  # BACKENDS[name]
            return self.targets(path, node.value)
        if isinstance(node, ast.Call):
            return self.picked(path, node)
        return []

    def method(self, path, cls, name, hops=0):
        """(path, method) of `cls` or of its bases in the project, or None."""
        found = next((n for n in cls.body if isinstance(n, FUNCTION) and n.name == name), None)
        if found is not None or hops > 4:
            return (path, found) if found is not None else None
        for base in cls.bases:
            for where, parent in self.targets(path, base):
                if isinstance(parent, ast.ClassDef):
                    inner = self.method(where, parent, name, hops + 1)
                    if inner is not None:
                        return inner
        return None

    def made(self, path, value):
        """The classes of the project an expression makes: a class called, or the classes a
        function it calls names (a factory)."""
        if not isinstance(value, ast.Call):
            return []
        if ("class", id(value)) not in self.names:
            self.names[("class", id(value))] = []
            self.names[("class", id(value))] = self._made(path, value)
        return self.names[("class", id(value))]

    def _made(self, path, value):
        if isinstance(value.func, ast.Call) and not self.picked(path, value.func):  # get_trainer(k)(config)
            return self.made(path, value.func)
        head = value.func
        if isinstance(head, ast.Attribute) and head.attr in ("build", "get") \
                and isinstance(head.value, ast.Name):
            registered = self.registered(head.value.id) if self.projects(path, head.value.id) else []
            if registered:
                self.names[("registry", id(value))] = True
                return registered
        out = []
        for where, target in self.targets(path, value.func):
            if isinstance(target, ast.ClassDef):
                out.append((where, target))
            else:
                out += [(w, c) for n in ast.walk(target) if isinstance(n, (ast.Name, ast.Attribute, ast.Call))
                        for w, c in self.targets(where, n) if isinstance(c, ast.ClassDef)]
        return out

    def functions(self, path, scope, node):
        """The functions a node of `scope` (a function of module `path`, or the module) runs or
        names: a function, a class's __init__, a method of self, of an object made in sight."""
        out = []
        owner, methods = self.dispatched(node)
        if owner is not None:  # getattr(runner, args.mode)(), eval(f"runner.{args.mode}")()
            node = ast.Attribute(value=ast.Name(id=owner, ctx=ast.Load()), attr="", ctx=ast.Load())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # stopper(loss): its __call__
            makers = self.made_in(scope).get(node.func.id, [])
            out += [found for where, cls in (c for m in makers for c in self.made(path, m))
                    if (found := self.method(where, cls, "__call__")) is not None]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "self" and id(scope) in self.owner:
                found = self.method(*self.owner[id(scope)], node.attr)
                return [found] if found is not None else []
            makers = self.made_in(scope).get(node.value.id, [])
            for maker in makers:
                made = [(where, cls, name) for where, cls in self.made(path, maker)
                        for name in (methods(cls) if owner is not None else [node.attr])]
                found = [self.method(where, cls, name) for where, cls, name in made]
                if self.names.get(("registry", id(self.maker_of(maker))), False) and (
                        None in found or len({id(f[1]) for f in found}) != 1):
                    continue  # a registry's classes that differ in this method: which runs is out of sight
                out += [f for f in found if f is not None]
            if owner is not None:
                return out
        for where, target in self.targets(path, node):
            if isinstance(target, ast.ClassDef):
                found = self.method(where, target, "__init__")
                out += [found] if found is not None else []
            else:
                out.append((where, target))
        return out

    def projects(self, path, name):
        """`name` in module `path` is the project's own: assigned there, or imported from a
        module of the project (a registry: `from .registry import TRAINERS`)."""
        found = self.parsed(path)
        if found is None:
            return False
        entry = found[3].get(name)
        if entry is None:
            return name in self.chosen.get(path, {})
        return self.project.find(entry[1], entry[3], path.parent) is not None

    @staticmethod
    def maker_of(value):
        """The call a registry's class comes from: `REG.get(name)` in `REG.get(name)(cfg)`."""
        return value.func if isinstance(value, ast.Call) and isinstance(value.func, ast.Call) else value

    def registered(self, registry):
        """[(path, class)] of the project's classes that register with `@registry.register...`,
        at most RUNTIME_CANDIDATES; [] where there are none or more."""
        key = ("registered", registry)
        if key not in self.names:
            out = []
            for path in registry_files(self.project, registry):
                found = self.parsed(path)
                if found is None:
                    out = []  # a module past the limits: which classes register is not known
                    break
                out += [(path, c) for c in found[0].body if isinstance(c, ast.ClassDef)
                        and any(registers(d, registry) for d in c.decorator_list)]
            self.names[key] = out if len(out) <= RUNTIME_CANDIDATES else []
        return self.names[key]

    def made_in(self, scope):
        """{name: the calls assigned to it} in `scope`: `trainer = Trainer(...)`, and
        `with Trainer(...) as trainer:`."""
        if ("made", id(scope)) not in self.names:
            self.names[("made", id(scope))] = made = {}
            for v in ast.walk(scope):
                if isinstance(v, ast.Assign) and isinstance(v.value, ast.Call):
                    for t in v.targets:
                        if isinstance(t, ast.Name):
                            made.setdefault(t.id, []).append(v.value)
                if isinstance(v, ast.withitem) and isinstance(v.context_expr, ast.Call) \
                        and isinstance(v.optional_vars, ast.Name):  # with Trainer(...) as trainer:
                    made.setdefault(v.optional_vars.id, []).append(v.context_expr)
        return self.names[("made", id(scope))]

    @staticmethod
    def dispatched(node):
        """(the object's name, its methods that a name chosen at run time can pick) for
        `getattr(runner, mode)` or `eval(f"runner.{mode}")`: the public methods of its class
        whose names begin and end as the pattern's constant parts do; (None, None) otherwise."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            return None, None
        if node.func.id == "getattr" and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                and not isinstance(node.args[1], ast.Constant):
            owner, prefix, suffix = node.args[0].id, "", ""
            pattern = node.args[1]
            if isinstance(pattern, ast.JoinedStr) and pattern.values:
                ends = [v.value if isinstance(v, ast.Constant) else "" for v in (pattern.values[0],
                                                                               pattern.values[-1])]
                prefix, suffix = ends[0], ends[1] if len(pattern.values) > 1 else ""
        elif node.func.id == "eval" and isinstance(node.args[0], ast.JoinedStr) and node.args[0].values \
                and isinstance(node.args[0].values[0], ast.Constant):
            head = str(node.args[0].values[0].value)
            match = re.fullmatch(r"([A-Za-z_]\w*)\.(\w*)", head)
            if match is None or len(node.args[0].values) > 2:
                return None, None
            owner, prefix, suffix = match[1], match[2], ""
        else:
            return None, None

        def methods(cls):
            return [n.name for n in cls.body if isinstance(n, FUNCTION) and not n.name.startswith("_")
                    and n.name.startswith(prefix) and n.name.endswith(suffix)]
        return owner, methods

    def refs(self, path, function):
        key = id(function)
        if key not in self.refs_of:
            out, todo = [], list(ast.iter_child_nodes(function))
            while todo:
                node = todo.pop()
                if isinstance(node, ast.If) and not is_flag_test(node.test) and any(
                        is_rank_word(n.id if isinstance(n, ast.Name) else n.attr)
                        for n in ast.walk(node.test) if isinstance(n, (ast.Name, ast.Attribute))):
                    todo += [node.test, *node.orelse]  # the rank's own branch: not followed
                    continue
                todo += ast.iter_child_nodes(node)
                if isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
                    out += [t for t in self.functions(path, function, node) if t[1] is not function]
            self.refs_of[key] = out
        return self.refs_of[key]

    def closure(self, start):
        """[(path, function, site)] reached from `start`, [(path, function, site)]: each with
        the site it was first reached from, nearest first."""
        seen, order, todo = set(), [], [(p, f, s, 0) for p, f, s in start]
        while todo and len(order) < DEEP_UNITS:
            path, function, site, hops = todo.pop(0)
            if id(function) in seen:
                continue
            seen.add(id(function))
            order.append((path, function, site))
            if hops < DEEP_HOPS:
                todo += [(p, f, site, hops + 1) for p, f in self.refs(path, function) if id(f) not in seen]
        return order

    @staticmethod
    def starts_group(function):
        """The first `init_process_group(...)` in `function`, or None. Not a DDP wrap: a library
        of the project may hold one that a script never runs (a model-parallel class told
        `init_data_parallel=False`), but a group started is a distributed job."""
        return next((n for n in ast.walk(function) if isinstance(n, ast.Call)
                     and last(n) == "init_process_group"), None)


# ------------------------------------------------------------------------- the checker
class Checker:
    """The facts of one view of one script, and the rules over them."""

    def __init__(self, tree, project=None, path=None, depth=0, module=False, followed=False):
        self.tree = tree
        self.project, self.depth, self.module = project, depth, module
        self.followed = followed  # a module of the project checked for rule_followed
        self.path = Path(path) if path else None
        self.folder = self.path.parent if self.path else None
        self.findings = []
        self.layer_file = {}  # id of a BatchNorm call -> the Checker of its module
        self.parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.functions = {n.name: n for n in tree.body if isinstance(n, FUNCTION)}
        self.classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.aliases = self._aliases()
        self.imports, self.star_imports = self._imports()
        if project is not None and not module and self.path is not None:
            project.add_paths(self)  # sys.path.insert(0, ...lib): where the script's imports are found
        self._tainted, self._memo = {}, {}
        self.reachable = self._reachable()
        self.nodes = list(self._walk(tree))
        self.calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.attrs = {n.attr for n in self.nodes if isinstance(n, ast.Attribute)}
        self.names = {n.id for n in self.nodes if isinstance(n, ast.Name)} | set(self.aliases)
        self.modules = {a.name for n in self.nodes if isinstance(n, ast.Import) for a in n.names} | {
            n.module or "" for n in self.nodes if isinstance(n, ast.ImportFrom)}
        self.methods = {n.name for n in self.nodes if isinstance(n, FUNCTION)
                        and isinstance(self.parents.get(n), ast.ClassDef)}
        self._scope = {}
        self.by_scope = {}  # scope -> its own nodes (not those of functions inside it)
        for node in self.nodes:
            self.by_scope.setdefault(self.function_of(node), []).append(node)
        self.defs = {}  # scope -> {name: function defined directly in it}
        for node in self.nodes:
            if isinstance(node, FUNCTION):
                self.defs.setdefault(self.function_of(node), {})[node.name] = node
        self.sites = {}  # function -> the calls of it in this file
        for call in self.calls:
            target = self.callee(call)
            if target is not None:
                self.sites.setdefault(target, []).append(call)
        self.ddp_calls = [c for c in self.calls if self.is_ddp_call(c)]
        self.distributed = not module and self._is_distributed()
        # calls torch.distributed (after `import torch`) but shows none of the above: a trainer
        # made out of sight (from a config); said so, never "no torch.distributed in it"
        self.names_distributed = any(self.origin(c.func).startswith("torch.distributed.") for c in self.calls)
        self.bindings = self._bindings()

    # -- which code runs
    def _aliases(self):
        """local name -> what it imports: {'DDP': 'torch.nn.parallel.DistributedDataParallel',
        'dist': 'torch.distributed', 'autocast': 'torch.cuda.amp.autocast'}."""
        out = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    out[a.asname or a.name] = f"{node.module or ''}.{a.name}"
        return out

    def _imports(self):
        """local name -> ('import', module, None, 0) or ('from', module, name, level), and the
        modules of `from M import *`: where a call of another file goes (Project.function)."""
        table, stars = {}, []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    table[a.asname or a.name.split(".")[0]] = ("import", a.name if a.asname else
                                                               a.name.split(".")[0], None, 0)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":
                        stars.append((node.module or "", node.level))
                    else:
                        table[a.asname or a.name] = ("from", node.module or "", a.name, node.level)
        return table, stars

    def external(self, call):
        """(Checker, function) of a function of the reader's project that `call` runs: one
        imported from a module of the project (`from utils import save`, `utils.save(...)`,
        `from .engine import evaluate`); None for anything else (installed packages, methods
        of objects, a name bound at run time)."""
        if self.project is None or self.depth >= MAX_DEPTH:
            return None
        key = ("external", call)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        name = dotted(call.func)
        head, *rest = name.split(".") if name else [""]
        entry = self.imports.get(head)
        found = None
        if entry is not None and self.function_of(call) is not None and not self.shadowed(head, call):
            kind, module, imported, level = entry
            if kind == "import" and rest:
                parts = module.split(".")
                if module != head:  # import a.b as m: m.f
                    parts = module.split(".")
                else:  # import a.b.c: a.b.c.f
                    parts = [head]
                full = parts + rest
                found = self.project.function(".".join(full[:-1]), 0, self.folder, full[-1], self.depth + 1)
            elif kind == "from" and not rest:
                found = self.project.function(module, level, self.folder, imported, self.depth + 1)
            elif kind == "from" and len(rest) >= 1:  # from pkg import mod: mod.f, mod.sub.f
                sub = ".".join(p for p in [module, imported, *rest[:-1]] if p)
                found = self.project.function(sub, level, self.folder, rest[-1], self.depth + 1)
        elif entry is None and name and not rest and name not in self.functions and name not in self.classes \
                and self.function_of(call) is not None and not self.shadowed(head, call):
            for module, level in self.star_imports:  # from pkg.utils import *: make_data_sampler(...)
                found = self.project.function(module, level, self.folder, name, self.depth + 1)
                if found is not None:
                    break
        self._memo[key] = found
        return found

    def shadowed(self, name, node):
        """`name` is bound in the function around `node` (a parameter or an assignment), so
        it is not the imported module or function."""
        scope = self.function_of(node)
        if scope is self.tree or isinstance(scope, ast.Lambda):
            return False
        return name in self.params(scope) or bool(self.assigned(name, scope)) and any(
            w is scope for _, w, _ in self._memo["assignments"].get(name, []))

    def resolve(self, call):
        """(Checker, function) that `call` runs: a function of this file, or of a module of
        the reader's project; None where the checker cannot see it."""
        target = self.callee(call)
        if target is not None:
            return self, target
        return self.external(call)

    def helper_name(self, call, checker, function):
        """`save_model()` for a function of this file; `save_model() (utils/misc.py)` for one
        of another module of the project."""
        if checker is self or self.project is None:
            return f"{function.name}()"
        return f"{function.name}() ({self.project.where(checker.path)})"

    def at(self, checker, node):
        """Where `node` is, for a message: 'line 12' here, 'utils/misc.py:12' in a module."""
        if checker is self or self.project is None or checker.path is None:
            return f"line {node.lineno}"
        return f"{self.project.where(checker.path)}:{node.lineno}"

    def origin(self, node):
        """The dotted name of `node` with its first part resolved through the imports."""
        name = dotted(node)
        head, _, rest = name.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return name

    def _reachable(self):
        """Module-level functions reachable from the module's own code; all of them in a
        module that calls none (a library)."""
        top = [n for n in self.tree.body if not isinstance(n, FUNCTION)]
        seen, todo = set(), [n for stmt in top for n in ast.walk(stmt)]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Name) and node.id in self.functions and node.id not in seen:
                seen.add(node.id)
                todo.extend(ast.walk(self.functions[node.id]))
        # helpers for another file, which may hold the fix; a file with no function at all is a
        # script whose training loop is at module level, not a library; nor is a file whose
        # functions a console script or a command-line runner calls (fire.Fire(train))
        self.library = bool(self.functions) and not seen and (self.module or not self.entry_functions())
        if self.module:
            return set(self.functions)  # a module of the project: any of its functions may be called
        return seen if seen else set(self.functions)

    def entry_functions(self):
        """The functions a file with nothing at module level that calls them is run through
        (every function of it is read, as before; this says it is a script, not a library):
        a command-line runner's (`fire.Fire(train)`, `typer.run(train)`, a click or typer
        command), or a `main` that nothing in the file calls (a console script's entry)."""
        found = [dotted(c.args[0]) for c in ast.walk(self.tree) if isinstance(c, ast.Call) and c.args
                 and last(c) in ("Fire", "run") and dotted(c.func).split(".")[0] in ("fire", "Fire", "typer")]
        found += [name for name, function in self.functions.items() if any(
            re.search(r"(^|\.)(command|group)$", dotted(d.func if isinstance(d, ast.Call) else d))
            for d in function.decorator_list)]
        if "main" in self.functions and not any(isinstance(n, ast.Name) and n.id == "main"
                                                and isinstance(n.ctx, ast.Load) for n in ast.walk(self.tree)):
            found.append("main")
        return [name for name in found if name in self.functions]

    def _walk(self, node):
        for child in ast.iter_child_nodes(node):
            if (self.parents.get(child) is self.tree and isinstance(child, FUNCTION)
                    and child.name not in self.reachable):
                continue
            if isinstance(node, ast.If) and child in (
                node.body
                if self.constant(node.test) is False
                else node.orelse
                if self.constant(node.test) is True
                else ()
            ):
                continue  # `use_compile = False` ... `if use_compile:`: code that never runs
            yield child
            yield from self._walk(child)

    def constant(self, test):
        """True or False for a test that is a constant, or a module-level name assigned one
        constant once (`use_compile = False`); None otherwise."""
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.Name):
            value = self.module_value(test.id)
            return None if value is None or not isinstance(value.value, bool) else bool(value.value)
        return None

    def module_value(self, name):
        """The ast.Constant a name is bound to where the file binds it once, at module level
        (`BACKEND = "nccl"`, `save_path = None`); None for any other name."""
        if "module_constants" not in self._memo:
            bound = {}
            for stmt in ast.walk(self.tree):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                    stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension, ast.NamedExpr)) \
                    else [stmt.optional_vars] if isinstance(stmt, ast.withitem) and stmt.optional_vars else []
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            bound.setdefault(n.id, []).append(stmt)
                if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.arg, ast.Global, ast.ClassDef)
                              + FUNCTION):
                    names = [stmt.arg] if isinstance(stmt, ast.arg) else list(stmt.names) if isinstance(
                        stmt, ast.Global) else [a.asname or a.name.split(".")[0] for a in stmt.names] \
                        if isinstance(stmt, (ast.Import, ast.ImportFrom)) else [stmt.name]
                    for n in names:
                        if n:
                            bound.setdefault(n, []).append(None)
            self._memo["module_constants"] = {
                name: stmts[0].value for name, stmts in bound.items()
                if len(stmts) == 1 and isinstance(stmts[0], ast.Assign) and stmts[0] in self.tree.body
                and isinstance(stmts[0].value, ast.Constant)}
        return self._memo["module_constants"].get(name)

    def ancestors(self, node):
        while node in self.parents:
            node = self.parents[node]
            yield node

    def function_of(self, node):
        """The innermost function around `node` (a lambda counts), or the module."""
        if node not in self._scope:
            self._scope[node] = next((a for a in self.ancestors(node) if isinstance(a, SCOPE)), self.tree)
        return self._scope[node]

    def enclosing(self, scope):
        """`scope` and the scopes around it, innermost first, the module last."""
        out = [scope]
        while scope is not self.tree:
            scope = self.function_of(scope)
            out.append(scope)
        return out

    def class_of(self, scope):
        parent = self.parents.get(scope)
        return parent if isinstance(parent, ast.ClassDef) else None

    def callee(self, call):
        """The function of this file that `call` runs: a function by its name (nested ones
        first), a method through self/cls, or through an instance of a class of this file."""
        func = call.func
        if isinstance(func, ast.Name):
            for scope in self.enclosing(self.function_of(call)):
                found = self.defs.get(scope, {}).get(func.id)
                if found is not None:
                    return found
            return self.functions.get(func.id)
        if not isinstance(func, ast.Attribute):
            return None
        owner, cls = func.value, None
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            cls = next((a for a in self.ancestors(call) if isinstance(a, ast.ClassDef)), None)
        elif isinstance(owner, ast.Call) and last(owner) in self.classes:
            cls = self.classes[last(owner)]
        elif isinstance(owner, ast.Name):
            made = {
                last(v) for v in self.assigned(owner.id, self.function_of(call)) if isinstance(v, ast.Call)
            }
            cls = next((self.classes[m] for m in made if m in self.classes), None)
        if cls is None:
            return None
        return next((n for n in cls.body if isinstance(n, FUNCTION) and n.name == func.attr), None)

    def own_nodes(self, function):
        return self.by_scope.get(function, [])

    def params(self, function):
        args = function.args
        return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]

    def arguments_for(self, function, name):
        """The values passed for parameter `name` at the calls of `function` in this file."""
        params = self.params(function)
        if name not in params:
            return []
        index = params.index(name)
        out = []
        for site in self.sites.get(function, []):
            shift = 1 if params[:1] in (["self"], ["cls"]) and isinstance(site.func, ast.Attribute) else 0
            if 0 <= index - shift < len(site.args) and not isinstance(site.args[index - shift], ast.Starred):
                out.append((site.args[index - shift], site))
            value = keyword(site, name)
            if value is not None:
                out.append((value, site))
        return out

    def is_ddp_call(self, call):
        """DistributedDataParallel(...) in any spelling: DDP(...), nn.parallel.DistributedDataParallel,
        an alias, or a helper that says it wraps in DDP (smart_DDP, wrap_ddp)."""
        if isinstance(call.func, ast.IfExp):  # (DDP if distributed else SingleProcess)(model)
            return any(self.is_ddp_call(ast.Call(func=f, args=[], keywords=[]))
                       for f in (call.func.body, call.func.orelse))
        name = last(call)
        if name == "DistributedDataParallel" or self.origin(call.func).endswith("DistributedDataParallel"):
            return True
        if bool(re.search(r"(?i)ddp", name)) and not re.search(
                r"(?i)setup|init|cleanup|destroy|^is_|get_|args|kwargs|config|rank|world|sync|hook|state",
                name):
            return True
        if self.module or not isinstance(self.parents.get(call), (ast.Assign, ast.AnnAssign)):
            return False  # a module of the project: its own wraps only; a wrap helper's model is kept
        external = self.external(call)  # a helper of the project that returns the model wrapped in DDP
        return external is not None and "ddp" in external[0].returns_kinds(external[1])

    def returns_kinds(self, function):
        """What the function returns, as value_kinds tells it: {'ddp'} for a wrap helper."""
        key = ("returns_kinds", function)
        if key not in self._memo:
            self._memo[key] = set()  # a recursive call: nothing
            self._memo[key] = {k for node in self.own_nodes(function) if isinstance(node, ast.Return)
                               and node.value is not None
                               for k in self.value_kinds(node.value, node.lineno, function)}
        return self._memo[key]

    def _is_distributed(self):
        imports = [n for n in self.nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names} | {
            n.module or "" for n in imports if isinstance(n, ast.ImportFrom)}
        names = {a.name for n in imports if isinstance(n, ast.ImportFrom) for a in n.names}
        return (any(m.startswith("torch.distributed") for m in modules)
                or bool(names & {"DistributedDataParallel", "distributed", "DistributedSampler"})
                or bool(self.ddp_calls)
                or "DistributedDataParallel" in self.attrs or "DistributedSampler" in self.attrs
                or any(last(c) == "init_process_group" or GROUP_HELPER.search(last(c)) for c in self.calls)
                or any(self.external(c) and (self.reaches(c, "is_group_start") or self.factory(c))
                       for c in self.calls)
                or self.deep_setup() is not None)

    def picked(self, call):
        """[(Checker, function)] that `call` may run in the project: the one `external` finds,
        or each one a `getattr(module, "init_dist_%s" % launcher)` picks (Reach.picked)."""
        external = self.external(call)
        if external is not None:
            return [external]
        if self.project is None or self.path is None or self.depth >= MAX_DEPTH \
                or not isinstance(call.func, ast.Call):
            return []
        out = []
        for path, function in self.project.reach.picked(self.path.resolve(), call.func):
            checker = self.project.load(path, self.depth + 1) if isinstance(function, FUNCTION) else None
            if checker is not None and checker.functions.get(function.name) is function:
                out.append((checker, function))
        return out

    def deep_reach(self):
        """[(path, function, call)]: the functions of the project this script reaches, as
        Reach follows them (further than `external`), each with the call of this file that
        reaches it first; the calls on a subset of the ranks are not followed."""
        if "deep" in self._memo:
            return self._memo["deep"]
        self._memo["deep"] = []
        if self.project is None or self.module or self.followed or self.path is None:
            return []
        reach, here, start = self.project.reach, self.path.resolve(), []
        for call in sorted(self.calls, key=lambda c: (c.lineno, c.col_offset)):
            if self.guarded(call):
                continue
            scope = self.function_of(call)
            handed = [a for a in list(call.args) + [k.value for k in call.keywords]
                      if isinstance(a, (ast.Name, ast.Attribute))]  # mp.spawn(fn), Process(target=fn)
            for node in [call.func, *handed]:
                start += [(p, f, call) for p, f in reach.functions(here, scope, node) if p != here
                          and not (node is call.func and one_process_call(call, f))]
        self._memo["deep"] = reach.closure(start)
        return self._memo["deep"]

    def deep_wraps(self):
        """A function of the project that this script reaches wraps a model in DDP (a worker
        spawned from another module: `mp.spawn(loader.load_worker)`, which wraps)."""
        if "deep_wraps" not in self._memo:
            self._memo["deep_wraps"] = False
            for path, function, _ in self.deep_reach():
                found = self.project.reach.parsed(path)
                imports = found[3] if found is not None else {}
                if any(isinstance(n, ast.Call) and "DistributedDataParallel" in (
                        last(n), imports.get(last(n), ("", "", ""))[2]) for n in ast.walk(function)):
                    self._memo["deep_wraps"] = True
                    break
        return self._memo["deep_wraps"]

    def deep_setup(self):
        """(path, the group start, the call of this file that reaches it), or None."""
        for path, function, call in self.deep_reach():
            node = Reach.starts_group(function)
            if node is not None:
                return path, node, call
        return None

    # -- what names hold: a DDP wrapper, a compiled model, a sampler ...
    def call_kind(self, call):
        name, origin = last(call), self.origin(call.func)
        if self.is_ddp_call(call):
            return "ddp"
        if origin in ("torch.compile", "compile") and (
            origin == "torch.compile" or "compile" in self.aliases
        ):
            return "compile"
        if name in ("FullyShardedDataParallel", "FSDP", "fully_shard"):
            return "fsdp"
        if name == "ZeroRedundancyOptimizer":
            return "zero"
        if name == "DistributedSampler":
            return "sampler"
        return None

    def _bindings(self):
        """key -> [(kinds, line, scope)], in the order of the source: what a name ('model'),
        an attribute ('self.model') or a wrapper's inside ('model.module') was bound to."""
        bound = {}
        assigns = sorted((n for n in self.nodes if isinstance(n, (ast.Assign, ast.AnnAssign))
                          and n.value is not None), key=lambda n: (n.lineno, n.col_offset))
        self.bindings = bound
        for node in assigns:
            scope = self.function_of(node)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    pairs = list(zip(target.elts, value.elts, strict=False))
                elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call) and (
                        self.callee(value) or (not self.module and self.external(value))):
                    # a, b = build(...): each name what its part of the returned tuple holds, in the
                    # function of this file or of the project (model, optimizer = wrap(...))
                    checker, function = (self, self.callee(value)) if self.callee(value) \
                        else self.external(value)
                    returned = [r.value for r in ast.walk(function)
                                if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)]
                    pairs = [(t, r.elts[i]) for r in returned[:1] for i, t in enumerate(target.elts)
                             if i < len(r.elts)]
                    for t, v in pairs:
                        self._bind(t, checker.value_kinds(v, v.lineno, function), node, scope, v)
                    continue
                else:
                    pairs = [(target, value)]
                for t, v in pairs:
                    self._bind(t, self.value_kinds(v, node.lineno, scope), node, scope, v)
        return bound

    def _bind(self, target, kinds, node, scope, value):
        key = dotted(target)
        if not key:
            return
        inner = None
        for wrapped in [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]:
            while isinstance(wrapped, ast.Call) and isinstance(wrapped.func, ast.Attribute) \
                    and wrapped.func.attr in ("to", "cuda", "half", "float", "train", "requires_grad_"):
                wrapped = wrapped.func.value
            if isinstance(wrapped, ast.Call) and self.is_ddp_call(wrapped) and wrapped.args:
                # what the wrapper holds, as it was before this line's binding: model.module
                inner = (inner or set()) | self.value_kinds(wrapped.args[0], node.lineno - 1, scope)
                inner.discard("ddp")  # no DDP inside DDP: the other branch's wrap (apex's, then torch's)
        if key.startswith(("self.", "cls.")):
            scope = self.class_of(scope) or scope
        self.bindings.setdefault(key, []).append((kinds, node.lineno, scope, node))
        if inner is not None:
            self.bindings.setdefault(key + ".module", []).append((inner, node.lineno, scope, node))

    def value_kinds(self, value, line, scope):
        kinds = set()
        if isinstance(value, ast.Call):
            kind = self.call_kind(value)
            if kind:
                kinds.add(kind)
            elif isinstance(value.func, ast.Attribute) and value.func.attr in (
                    "to", "cuda", "half", "float", "train", "eval", "requires_grad_"):
                kinds |= self.value_kinds(value.func.value, line, scope)
            elif (
                last(value) == "getattr"
                and len(value.args) == 3
                and isinstance(value.args[1], ast.Constant)
                and value.args[1].value == "module"
            ):  # getattr(model, "module", model): the model inside
                kinds |= self.value_kinds(ast.Attribute(value=value.args[0], attr="module"), line, scope)
            elif last(value) == "deepcopy" and value.args:
                kinds |= self.value_kinds(value.args[0], line, scope)
            if any(isinstance(c, ast.Call) and last(c) == "state_dict" for c in ast.walk(value)):
                kinds.add("state_dict")
        elif isinstance(value, ast.IfExp):
            inside = [
                b
                for b, other in ((value.body, value.orelse), (value.orelse, value.body))
                if isinstance(b, ast.Attribute) and b.attr == "module" and dotted(b.value) == dotted(other)
            ]
            if inside and dotted(inside[0].value):  # model.module if ddp else model: the model inside, always
                return self.value_kinds(inside[0], line, scope)
            kinds |= self.value_kinds(value.body, line, scope) | self.value_kinds(value.orelse, line, scope)
        elif isinstance(value, ast.BoolOp):
            for v in value.values:
                kinds |= self.value_kinds(v, line, scope)
        elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            for v in value.elts:
                kinds |= self.value_kinds(v, line, scope)
        elif isinstance(value, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            kinds |= self.value_kinds(value.elt, line, scope)
        elif isinstance(value, ast.Subscript):
            kinds |= self.value_kinds(value.value, line, scope)
        elif isinstance(value, (ast.Name, ast.Attribute)):
            kinds |= self.kinds_of(value, line, scope)
        return kinds

    def kinds_of(self, node, at=None, scope=None):
        """What the name or attribute `node` was bound to where it is used (or at line `at`
        in `scope`): the last binding before it in its own function, else those around it."""
        key = dotted(node)
        if not key:
            return set()
        scope = scope if scope is not None else self.function_of(node)
        line = at or getattr(node, "lineno", 0)
        entries = self.bindings.get(key, [])
        if key.startswith(("self.", "cls.")):
            cls = next((a for a in [scope, *self.ancestors(scope)] if isinstance(a, ast.ClassDef)), None)
            return {k for kinds, _, where, _ in entries if where is cls for k in kinds}
        chain = self.enclosing(scope)
        own = [kinds for kinds, at_line, where, _ in entries if where is scope and at_line <= line]
        if own:
            return {k for kinds in own for k in kinds}  # any branch's binding: it may hold any of them
        if isinstance(scope, FUNCTION) and key in self.params(scope) and hasattr(self, "sites"):
            # a parameter: what the file's calls pass it (once every binding is known)
            memo = ("param_kinds", scope, key)
            if memo not in self._memo:
                self._memo[memo] = set()  # a recursive call: nothing
                self._memo[memo] = {k for value, site in self.arguments_for(scope, key)
                                    for k in self.value_kinds(value, site.lineno, self.function_of(site))}
            return self._memo[memo]
        return {k for kinds, _, where, _ in entries if where in chain[1:] for k in kinds}

    def assigned(self, name, scope):
        """The values assigned to `name` in `scope` and the scopes around it."""
        if "assignments" not in self._memo:
            table = {}
            for n in self.nodes:
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                    where = self.function_of(n)
                    for target in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                        for t in ast.walk(target):
                            key = dotted(t) if isinstance(t, (ast.Name, ast.Attribute)) else ""
                            if key:
                                table.setdefault(key, []).append((n.value, where, n))
            self._memo["assignments"] = table
        chain = self.enclosing(scope)
        return [value for value, where, _ in self._memo["assignments"].get(name, []) if where in chain]

    # -- the rank
    def rank_atom(self, node, extra=()):
        if (isinstance(node, ast.Call) and last(node) in ("get", "getenv") and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in RANK_ENV):
            return True  # os.environ.get("RANK", "0")
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
            name = last(node)
            return bool(name) and (is_rank_word(name) or name in extra)
        if isinstance(node, ast.Constant):
            return node.value in RANK_ENV
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return isinstance(node.slice.value, str) and is_rank_word(node.slice.value)
        return False

    def depends_on_rank(self, expr, tainted=(), extra=(), loose=False, narrow=False):
        """Whether `expr`'s value differs by rank. Strict (for guards): a device or a path
        made from the rank is not a decision on it; loose (for file names): it is. Narrow (for
        a branch that must not leave ranks behind): a call given the rank (`load(path,
        rank=rank)`) returns what it returns, the same on every rank unless it says otherwise;
        only arithmetic and conversions (int, min, torch.tensor, .item()) carry the rank on."""
        todo = [expr]
        while todo:
            node = todo.pop()
            if is_flag_test(node) or isinstance(node, SCOPE):
                continue
            if self.rank_atom(node, extra):
                return True
            if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node) in tainted:
                return True
            if isinstance(node, ast.JoinedStr) and not loose:
                continue
            if isinstance(node, ast.Call):
                if not loose and last(node) in (
                    "device",
                    "cuda",
                    "to",
                    "str",
                    "format",
                    "join",
                    "manual_seed",
                    "seed",
                    "print",
                    "Generator",
                ):
                    continue
                if isinstance(node.func, ast.Attribute):
                    todo.append(node.func.value)  # the receiver of a method: loss in loss.item()
                if narrow and last(node) not in CARRY_RANK:
                    if self.returns_rank(node, tainted):
                        return True  # samples_at(step, rank): a function whose result is made from the rank
                    continue
                todo.extend(node.args)
                todo.extend(k.value for k in node.keywords)
                continue
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Attribute):
                    todo.append(node.value)  # a.b of a.b.c may be a value of its own
                continue  # args.distributed: the attribute is the value, not args
            todo.extend(ast.iter_child_nodes(node))
        return False

    def returns_rank(self, call, tainted):
        """A function of this file or of the project, given the rank by `call`, returns a
        value made from it (narrow taint inside, from the parameters that get the rank)."""
        resolved = self.resolve(call)
        if resolved is None:
            return False
        checker, function = resolved
        seeds = frozenset(param for param in checker.params(function)
                          if (value := checker.passed(function, call, param)) is not None
                          and value in list(call.args) + [k.value for k in call.keywords]
                          and self.depends_on_rank(value, tainted, narrow=True))
        return bool(seeds) and checker.returns_on(function, seeds)

    def returns_on(self, function, seeds):
        key = ("returns_on", function, seeds)
        if key not in self._memo:
            self._memo[key] = False  # a recursive call: no
            tainted = set(seeds) | self.tainted(function, narrow=True)
            assigns = [n for n in self.own_nodes(function)
                       if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None]
            changed = True
            while changed:
                changed = False
                for node in assigns:
                    for t in self.targets_of(node, lambda v: self.depends_on_rank(v, tainted, narrow=True)):
                        if dotted(t) and dotted(t) not in tainted:
                            tainted.add(dotted(t))
                            changed = True
            self._memo[key] = any(isinstance(n, ast.Return) and n.value is not None
                                  and self.depends_on_rank(n.value, tainted, narrow=True)
                                  for n in self.own_nodes(function))
        return self._memo[key]

    def tainted(self, scope, loose=False, narrow=False):
        """Names and attributes in `scope` (and around it) whose value depends on the rank,
        to a fixed point: `args.rank = ...` marks args.rank, not args."""
        key = (id(scope), loose, narrow)
        if key in self._tainted:
            return self._tainted[key]
        outer = set() if scope is self.tree else self.tainted(self.function_of(scope), loose, narrow)
        tainted = set(outer)
        assigns = [
            n
            for n in self.by_scope.get(scope, [])
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None
        ]
        changed = True
        while changed:
            changed = False
            for node in assigns:
                if not self.depends_on_rank(node.value, tainted, loose=loose, narrow=narrow):
                    continue
                for t in self.targets_of(
                    node, lambda value: self.depends_on_rank(value, tainted, loose=loose, narrow=narrow)
                ):
                    name = dotted(t)
                    if name and name not in tainted:
                        tainted.add(name)
                        changed = True
        self._tainted[key] = tainted
        return tainted

    @staticmethod
    def targets_of(node, depends):
        """The targets of an assignment that get a value `depends` picks: in `a, b = x, y`
        each its own; in `a, b = f(x)` both, but a world size, the same on every rank."""
        out = []
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts):
                out += [t for t, v in zip(target.elts, node.value.elts, strict=True) if depends(v)]
            elif depends(node.value):  # world_size, rank = sizes(): the world size is every rank's
                out += [t for t in target.elts if not re.search(r"(?i)world_?size|num_replicas", dotted(t))] \
                    if isinstance(target, ast.Tuple) else [target]
        return out

    def rank_test(self, test, scope, guard=False):
        """A test on the rank. For a guard (does a save run on rank 0 alone?) any value made
        with the rank counts; for a branch that may leave ranks out (DDP020), the narrow
        taint: a helper given the rank (`meta = load(path, rank=rank)`) does not make its
        result a rank."""
        if guard:
            return self.depends_on_rank(test, self.tainted(scope), GUARD_EXTRA)
        return self.depends_on_rank(test, self.tainted(scope, narrow=True), narrow=True)

    def guarded(self, node):
        """Runs on a subset of the ranks: inside a branch on the rank, after an early
        return on it, in a rank-0 function (a decorator), or in a function only called so."""
        scope = self.function_of(node)
        for ancestor in self.ancestors(node):
            if ancestor is scope:
                break
            if isinstance(ancestor, (ast.If, ast.IfExp, ast.While)) and (self.rank_test(
                ancestor.test, scope, True
            ) or self.rank_attribute(ancestor.test, scope) or self.rank_flag_passed(ancestor.test, scope)):
                return True
        if any(line < node.lineno for line in self.early_exits(scope)):
            return True
        if scope is self.tree or isinstance(scope, ast.Lambda):
            return False
        if any(RANK_ZERO_DECORATORS.search(dotted(d.func if isinstance(d, ast.Call) else d))
               for d in scope.decorator_list):
            return True
        key = ("guarded", scope)
        if key not in self._memo:
            self._memo[key] = False  # a recursive call: not guarded by itself
            sites = self.sites.get(scope, [])
            self._memo[key] = bool(sites) and all(self.guarded(site) for site in sites)
        return self._memo[key]

    def rank_flag_passed(self, test, scope):
        """A test on `args.x` (alone or in an `and`), `args` a parameter, where every call of
        the function in this file passes an object whose `.x` the caller set from the rank
        (`args.save_logs = ... and is_master(args)`, then `save_checkpoint(args)`)."""
        if not isinstance(scope, FUNCTION):
            return False
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for part in parts:
            if not (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)):
                continue
            passed = self.arguments_for(scope, part.value.id)
            if passed and len(passed) == len(self.sites.get(scope, [])) and all(
                    dotted(value) and f"{dotted(value)}.{part.attr}" in self.tainted(self.function_of(site))
                    for value, site in passed):
                return True
        return False

    def rank_attribute(self, test, scope):
        """A test on `self.x` (alone or in an `and`), where every method of the class that sets
        self.x sets it from the rank (`self.writes = get_rank() == 0` in another method)."""
        cls = next((a for a in self.ancestors(scope) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return False
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for part in parts:
            if not (isinstance(part, ast.Attribute) and dotted(part.value) == "self"):
                continue
            values = [(value, where) for method in cls.body if isinstance(method, FUNCTION)
                      for value, where in self.values_in(f"self.{part.attr}", method)]
            if values and all(self.depends_on_rank(value, self.tainted(where), GUARD_EXTRA)
                              for value, where in values):
                return True
        return False

    def values_in(self, name, function):
        """(value, scope) of the assignments to `name` in `function` itself."""
        self.assigned(name, function)  # builds the table
        return [(value, where) for value, where, _ in self._memo["assignments"].get(name, [])
                if where is function]

    def early_exits(self, scope):
        """Lines of `if <rank test>: return/raise/continue` in `scope` (not in functions inside it)."""
        key = ("exits", scope)
        if key not in self._memo:
            self._memo[key] = [
                stmt.lineno for stmt in self.by_scope.get(scope, []) if isinstance(stmt, ast.If) and stmt.body
                and isinstance(stmt.body[-1], (ast.Return, ast.Raise, ast.Continue))
                and self.rank_test(stmt.test, scope, True)]
        return self._memo[key]

    def guarded_within(self, node, function):
        """Guarded by code inside `function` itself (a branch, an early exit, a decorator)."""
        for ancestor in self.ancestors(node):
            if ancestor is function:
                break
            if isinstance(ancestor, (ast.If, ast.IfExp)) and self.rank_test(ancestor.test, function, True):
                return True
        return any(line < node.lineno for line in self.early_exits(function)) or any(
            RANK_ZERO_DECORATORS.search(dotted(d.func if isinstance(d, ast.Call) else d))
            for d in getattr(function, "decorator_list", []))

    def in_no_grad(self, node, strict=False):
        """Under `with torch.no_grad()` (or inference_mode), in a function decorated so, or
        (unless strict) in a function that calls .eval()."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, ast.With) and any(last(item.context_expr) in NO_GRAD
                                                      for item in ancestor.items):
                return True
            if isinstance(ancestor, FUNCTION):
                if any(last(d) in NO_GRAD for d in ancestor.decorator_list):
                    return True
                if not strict and self.calls_eval(ancestor):
                    return True
        return False

    def calls_eval(self, function):
        key = ("eval", function)
        if key not in self._memo:
            self._memo[key] = any(isinstance(c, ast.Call) and last(c) == "eval" and not c.args
                                  for c in walk_own(function))  # a def inside: its own .eval()
        return self._memo[key]

    def in_evaluation(self, node, strict):
        """Under no_grad (see in_no_grad); or, strict too, in an evaluate()/validate()/test()
        of the file that calls .eval()."""
        if self.in_no_grad(node, strict):
            return True
        function = next((a for a in self.ancestors(node) if isinstance(a, FUNCTION)), None)
        return function is not None and self.calls_eval(function) and bool(
            EVAL_NAME.search(function.name))

    # -- what functions of this file do, followed into the functions they call
    def _follow(self, function, what):
        """The first call that the method named `what` picks in `function`, or in a function
        of this file or of the project that it calls (outside its own rank branches), as
        (node, the function that holds it, the Checker of its file)."""
        key = (what, function)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # recursion: nothing new
        found = None
        for node in sorted(
            self.own_nodes(function), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))
        ):
            if not isinstance(node, ast.Call) or self.guarded_within(node, function):
                continue
            if getattr(self, what)(node):
                found = (node, function, self)
                break
            resolved = self.resolve(node)
            if resolved is not None and resolved[1] is not function:
                inner = resolved[0]._follow(resolved[1], what)
                if inner is not None:
                    found = inner
                    break
        self._memo[key] = found
        return found

    def reaches(self, call, what):
        """What `_follow` finds in the function that `call` runs (of this file or the project)."""
        resolved = self.resolve(call)
        return resolved[0]._follow(resolved[1], what) if resolved is not None else None

    def reaches_collective(self, call):
        return self.reaches(call, "is_collective") is not None

    @staticmethod
    def is_group_start(call):
        return last(call) == "init_process_group"

    @staticmethod
    def is_set_device(call):
        return last(call) == "set_device"

    @staticmethod
    def is_set_epoch(call):
        return last(call) == "set_epoch"

    def is_collective(self, call):
        name = last(call)
        if name not in COLLECTIVES:
            return False
        if isinstance(call.func, ast.Attribute):
            return bool(re.search(r"(^|\.)(dist|distributed)$", self.origin(call.func.value)))
        return isinstance(call.func, ast.Name) and self.aliases.get(name, "").startswith("torch.distributed")

    def is_backward(self, call):
        return last(call) == "backward" and isinstance(call.func, ast.Attribute)

    def is_optimizer_step(self, call):
        """optimizer.step(), scaler.step(opt), opt_step(): not scheduler.step() or ema.step()."""
        name = last(call)
        if name == "step" and isinstance(call.func, ast.Attribute):
            return not re.search(r"(?i)sched|lr|warm|ema|progress|pbar|prof|meter|timer|stopper",
                                 dotted(call.func.value) or last(call.func.value))
        return bool(re.search(r"(?i)optim\w*step|step_optim|^optimize$|_optimize$", name))

    # -- findings
    def add(self, code, node, message, severity=None):
        self.findings.append((node.lineno, node.col_offset + 1, code, severity or RULES[code].severity,
                              message, node))

    def check(self):
        if self.distributed:
            for rule in (
                self.rule_loader,
                self.rule_collective_branch,
                self.rule_set_epoch,
                self.rule_padded_eval,
                self.rule_full_eval,
                self.rule_stream_eval,
                self.rule_data_not_split,
                self.rule_saves,
                self.rule_load,
                self.rule_no_sync,
                self.rule_fp16,
                self.rule_batchnorm,
                self.rule_module_call,
                self.rule_port,
                self.rule_nccl_device,
                self.rule_zero,
                self.rule_token_mean,
                self.rule_metric_mean,
                self.rule_local_exit,
                self.rule_followed,
            ):
                rule()
        return self.findings

    def rule_followed(self):
        """The rules, run on the modules of the project that this script reaches only through
        Reach (past what each rule follows itself): their findings inside the functions
        reached, said at the call of this file that reaches them, with the module's line."""
        if self.module or self.project is None or self.followed:
            return
        by_file = {}
        for path, function, call in self.deep_reach():
            by_file.setdefault(path, []).append((function, call))
        said = {(f[2], f[0]): None for f in self.findings}  # (rule, line of this file): the module said
        told = set()  # (rule, line, function reached): a worker's two training methods, each said
        def worth(path, function):  # a call a rule looks at, that is not the rules' own ground
            found = self.project.reach.parsed(path)
            owned = path in self.project.read and found is not None \
                and found[1].get(function.name) is function
            wanted = FOLLOWED_CALLS - {"DataLoader", "DistributedSampler", "init_process_group"} if owned \
                else FOLLOWED_CALLS  # loaders, samplers, ports of a function the rules follow: theirs
            return any(isinstance(n, ast.Call) and (
                last(n) in wanted or dotted(n.func) in wanted
                or ("DataLoader" in wanted and last(n).startswith("DataLoader"))) for n in ast.walk(function))

        relevant = [(path, reached) for path, reached in by_file.items()
                    if any(worth(path, function) for function, _ in reached)]
        lines = 0
        self.capped = [(p, r[0][1]) for p, r in relevant[FOLLOWED_FILES:]]  # named in the report
        for index, (path, reached) in enumerate(relevant[:FOLLOWED_FILES]):
            tree = parse_module(path)
            lines += tree.body[-1].end_lineno if tree.body else 0
            if lines > FOLLOWED_LINES:  # the time a check takes: the nearest modules first
                self.capped = [(p, r[0][1]) for p, r in relevant[index:]]
                break
            try:
                checker = Checker(tree, project=Project(path, self.project.top), path=path, depth=1,
                                  followed=True)
            except (RecursionError, ValueError):
                continue
            checker.distributed = True  # it runs in this script's DDP job
            checker.entry_near = self.near_modules()  # the script's modules: its config's properties
            checker.entry_ddp = bool(self.ddp_calls) or self.deep_wraps()  # the model it gets is DDP's
            checker.entry_wraps = checker.entry_ddp and not syncs_ddp(self.tree) and not self.syncs_in_reach()
            where = self.project.where(path)
            for line, _, code, severity, message, _ in sorted(checker.check(), key=lambda f: f[0]):
                rank_exit = code == "DDP191" and "only on the ranks where" in message  # not a value's origin
                if code not in FOLLOWED_CODES and not rank_exit and not (
                        code == "DDP070" and checker.ddp_calls
                        and not self.attrs & self.SYNC_NAMES):  # the module wraps the model
                    continue
                if any(f"{where}:{line}" in f[4] and f[2] == code for f in self.findings):
                    continue
                covering = [(f, c) for f, c in reached if f.lineno <= line <= (f.end_lineno or f.lineno)]
                flags = {}  # DDP070: a layer under a flag, said at a call that builds it
                if code == "DDP040":  # a call that settles the test the save is under (load mode, rank flag)
                    covering = [(f, c) for f, c in covering
                                if not self.deep_save_skipped(c, path, line, (checker, f))]
                elif code == "DDP070":  # BatchNorm built only under a flag the call leaves off
                    flags = {id(c): self.flag_closed(c, checker, f, line) for f, c in covering}
                    covering = [(f, c) for f, c in covering if flags[id(c)] is False] \
                        or [(f, c) for f, c in covering if flags[id(c)] is None]
                function, call = covering[0] if covering else (None, None)
                if call is None or said.get((code, call.lineno), path) != path \
                        or (code, call.lineno, id(function)) in told or one_process_function(function):
                    continue  # said, or a function that sets its rank to a device word: one process
                if code in FOLLOWED_BY_RULES and path in self.project.read \
                        and checker.functions.get(function.name) is function and not self.spawns(call):
                    continue  # a function the rule follows itself, with the arguments
                if code == "DDP042" and not any(last(n) == "load_state_dict" for n in ast.walk(function)):
                    continue  # a file of data, not a checkpoint loaded into a model
                if code == "DDP070" and flags.get(id(call)) is None:
                    severity = "note"  # the flag comes through ** from settings out of sight
                    message = f"built only under a flag that {last(call)}(...) may set through ** (out of " \
                        f"sight); if it does: {message}"
                if code == "DDP010":  # a loader a helper builds: what data it gets, and which ranks
                    severity = "note"  # read it, is out of this file's sight
                earlier = next((i for i, f in enumerate(self.findings) if f[2] == code and f[5] is call),
                               None)
                if earlier is not None:  # the same rule in another function the call reaches: named too
                    f = self.findings[earlier]
                    also = f"(also {where}:{line}, in {function.name}())"
                    self.findings[earlier] = (*f[:4], f"{f[4]} {also}", f[5])
                    told.add((code, call.lineno, id(function)))
                    continue
                said[code, call.lineno] = path
                told.add((code, call.lineno, id(function)))
                self.add(code, call, f"{where}:{line}: {message}", severity)

    def flag_closed(self, call, checker, function, line):
        """The layers at `line` of `function` (a module's, run by `call`) are built only under
        a flag the call leaves off: `if use_bn:` or `if self.use_bn:` (set from the parameter)
        on a parameter whose default is False, None or 0 that the call does not give, or gives
        such a constant (here, or a module-level name bound once to one). True: never built;
        None: a flag the call may give through ** (out of sight); False otherwise."""
        params = checker.params(function)
        shift = 1 if params[:1] in (["self"], ["cls"]) and (
            function.name == "__init__" or isinstance(call.func, ast.Attribute)) else 0
        kept = {n.targets[0].attr: n.value.id for n in ast.walk(function) if isinstance(n, ast.Assign)
                and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute)
                and dotted(n.targets[0].value) == "self" and isinstance(n.value, ast.Name)
                and n.value.id in params}  # self.use_bn = use_bn

        def defaults():
            args = function.args
            positional = [a.arg for a in args.posonlyargs + args.args]
            out = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
            out.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d})
            return out

        def value(param):  # what the call gives the flag: a node, "unseen" (**), or its default
            index = params.index(param) - shift
            starred = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
            if 0 <= index < len(call.args) and not any(i <= index for i in starred):
                return call.args[index]
            if keyword(call, param) is not None:
                return keyword(call, param)
            if starred or any(k.arg is None for k in call.keywords):
                return "unseen"
            return defaults().get(param)

        def closed(test):
            param = test.id if isinstance(test, ast.Name) and test.id in params else kept.get(
                test.attr) if isinstance(test, ast.Attribute) and dotted(test.value) == "self" else None
            if param is None:
                return False
            given = value(param)
            if given == "unseen":
                default = defaults().get(param)
                return None if default is None or is_false(default) else False
            if isinstance(given, ast.Name):
                given = self.module_value(given.id)
            return isinstance(given, ast.Constant) and not given.value

        def walk(node, tests):
            for child in ast.iter_child_nodes(node):
                inner = tests + [node.test] if isinstance(node, ast.If) and child in node.body else tests
                if isinstance(child, ast.Call) and child.lineno == line:
                    yield inner
                yield from walk(child, inner)

        verdicts = []
        for tests in walk(function, []):
            parts = [p for t in tests for p in (t.values if isinstance(t, ast.BoolOp)
                                                and isinstance(t.op, ast.And) else [t])]
            found = [closed(p) for p in parts]
            verdicts.append(True if True in found else None if None in found else False)
        if not verdicts:
            return False
        return True if all(v is True for v in verdicts) else None if all(v is not False for v in verdicts) \
            else False

    def in_launcher(self, call):
        """`call` is in the function that starts the ranks (mp.spawn, Process) and no group: it
        runs once, in the parent process (a `--generate` branch before the spawn)."""
        scope = self.function_of(call)
        own = [n for n in self.own_nodes(scope) if isinstance(n, ast.Call)]
        return any(self.spawns(n) for n in own) and not any(last(n) == "init_process_group" for n in own)

    @staticmethod
    def spawns(call):
        """mp.spawn(fn, ...), Process(target=fn): the function runs in processes of its own,
        which the rules do not follow from the call."""
        return last(call) in ("spawn", "start_processes", "Process")

    def deep_save_skipped(self, call, path, line, reached=None):
        """The function this call runs (a module's) holds a torch.save at `line` that the
        call's arguments keep from running on every rank (see save_skipped). `reached`: the
        (Checker, function) Reach found for the call, where resolve does not (a method)."""
        resolved = self.resolve(call)
        if resolved is None and reached is not None and reached[1].lineno <= line <= reached[1].end_lineno:
            resolved = reached
        if resolved is None or resolved[0].path != path:
            return False
        checker, function = resolved
        saves = [n for n in checker.own_nodes(function) if isinstance(n, ast.Call) and n.lineno == line
                 and checker.origin(n.func) in ("torch.save", "save")]
        return bool(saves) and all(self.save_skipped(call, checker, function, n) for n in saves)

    # -- DDP010 and the data: whose is it?
    def rank_carriers(self):
        """Objects that carry the rank into code elsewhere: `args` where args.rank exists, or
        args handed to init_distributed_mode(args)."""
        if "carriers" not in self._memo:
            out = set()
            for node in self.nodes:
                if isinstance(node, ast.Attribute) and is_rank_word(node.attr) and dotted(node.value):
                    out.add(dotted(node.value))
                if isinstance(node, ast.Subscript) and self.rank_atom(node) and dotted(node.value):
                    out.add(dotted(node.value))
                if isinstance(node, ast.Call) and GROUP_HELPER.search(last(node)):
                    out |= {dotted(a) for a in node.args if dotted(a)}
            self._memo["carriers"] = out
        return self._memo["carriers"]

    def data_origin(self, expr, scope, depth=0):
        """'split' (this rank's own data), 'whole' (the same data on every rank), or 'maybe'
        (made elsewhere: it may be split there)."""
        if expr is None or depth > 4:
            return "maybe"
        if self.depends_on_rank(expr, self.tainted(scope, loose=True), loose=True):
            return "split"
        if isinstance(expr, ast.Name):
            values = self.assigned(expr.id, scope)
            if values:
                found = {self.data_origin(v, self.function_of(v), depth + 1) for v in values}
            elif isinstance(scope, FUNCTION) and expr.id in self.params(scope):
                passed = self.arguments_for(scope, expr.id)
                found = {self.data_origin(v, self.function_of(site), depth + 1) for v, site in passed} or {
                    "maybe"
                }
            else:
                found = {"maybe"}
            return "split" if "split" in found else "maybe" if "maybe" in found else "whole"
        if isinstance(expr, ast.Call):
            carriers = self.rank_carriers()
            if any(isinstance(a, (ast.Name, ast.Attribute)) and dotted(a) in carriers
                   for a in list(expr.args) + [k.value for k in expr.keywords]):
                return "maybe"  # a helper that gets the rank with args may split the data
            target = self.callee(expr) or (
                self.classes.get(last(expr)) if last(expr) in self.classes else None
            )
            if target is not None and any(self.rank_atom(n) for n in ast.walk(target)):
                return "maybe"
            external = self.external(expr)
            if external is not None and any(external[0].rank_atom(n) for n in ast.walk(external[1])):
                return "maybe"  # a helper of the project that reads the rank may split the data
            if (
                last(expr) in ("next", "iter")
                and expr.args
                and not isinstance(expr.args[0], (ast.Name, ast.Call))
            ):
                return "maybe"  # next(self.data): read from an object made elsewhere
            inner = [self.data_origin(a, scope, depth + 1) for a in expr.args[:1]
                     if isinstance(a, (ast.Name, ast.Call))]
            return "split" if "split" in inner else "maybe" if "maybe" in inner and last(expr) in (
                "next", "iter") else "whole"
        return "maybe"

    def rule_loader(self):
        for call in self.calls:
            name = last(call)
            if not (name == "DataLoader" or name.endswith("_loader")
                    or (self.followed and name in self.loader_classes())):  # a helper's: a note
                continue
            shuffle = keyword(call, "shuffle")
            if shuffle is None or is_false(shuffle) or keyword(call, "sampler") \
                    or keyword(call, "batch_sampler"):
                continue
            if keyword(call, "generator") is not None:
                continue  # an order of its own, chosen on purpose (a reference run every rank repeats)
            if self.single_process(call):
                continue  # the else of `if opt["dist"]:`: the run without DDP
            if name != "DataLoader" and self.builds_sampler(call):
                continue  # create_data_loader(ds, shuffle=True): a helper that gives it a sampler
            if name != "DataLoader" and name not in self.loader_classes() and self.resolve(call) is None:
                self.add("DDP010", call, f"{name}(shuffle=...) without a sampler, from a builder out of the "
                         "checker's sight: unless it makes a DistributedSampler there, every rank iterates "
                         "over all of the data; pass sampler=DistributedSampler(dataset)", "note")
                continue
            dataset = call.args[0] if call.args else keyword(call, "dataset")
            origin = self.data_origin(dataset, self.function_of(call))
            if origin == "split":
                continue  # this rank's own shard: a split of its own
            if origin == "whole":
                self.add(
                    "DDP010",
                    call,
                    f"{name}(shuffle=...) without a sampler: every rank iterates over the "
                    "whole data set; pass sampler=DistributedSampler(dataset)",
                )
            else:
                self.add("DDP010", call, f"{name}(shuffle=...) without a sampler, over a data set made "
                         "elsewhere: unless it is split by rank there, every rank iterates over all of it; "
                         "pass sampler=DistributedSampler(dataset)", "note")

    def loader_classes(self):
        """Classes of this file made on DataLoader (`class DataLoaderX(DataLoader)`)."""
        return {name for name, cls in self.classes.items() if any(last(b) == "DataLoader" for b in cls.bases)}

    def single_process(self, node):
        """`node` runs only where the job is not distributed: in the else of a test on a
        distributed flag (`if args.distributed:`, `if opt["dist"]:`, `if use_ddp:`,
        `if dist.is_initialized():`), or in the body of `if not ...` of one."""
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, SCOPE):
                break
            if isinstance(ancestor, (ast.If, ast.IfExp)) and child is not ancestor.test:
                test, side = ancestor.test, True
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    test, side = test.operand, False
                body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
                if is_distributed_flag(test) and (child in body) != side:
                    return True
            child = ancestor
        return False

    def builds_sampler(self, call):
        """A loader helper of the file or the project that makes a sampler that splits the
        data by rank: a DistributedSampler (or a padding one of the project, also through a
        function it calls), or a sampler class given the rank. A RandomSampler is no split."""
        resolved = self.resolve(call)
        if resolved is None:
            return False
        checker, function = resolved
        if checker.sampler_made(function):
            return True
        return any(isinstance(n, ast.Call) and last(n).endswith("Sampler") and (
            "Distributed" in last(n) or any(checker.rank_atom(a) for v in list(n.args) + [
                k.value for k in n.keywords] for a in ast.walk(v)))
            for n in checker.own_nodes(function))

    def data_source(self, loop):
        """What a loop reads, if this file shows it: ('loader', DataLoader call), or
        ('stream', name) for `range(0, data.size(0), step)` over a tensor (windows of a
        stream: with a step; `range(len(inputs))` counts items)."""
        source = unwrap_iter(loop.iter)
        scope = self.function_of(loop)
        if isinstance(source, ast.Call) and last(source) == "DataLoader":
            return "loader", source, scope
        if isinstance(source, ast.Call) and last(source) == "range" and len(source.args) == 3:
            for node in ast.walk(source):
                holder = None
                if (
                    isinstance(node, ast.Call)
                    and last(node) == "size"
                    and isinstance(node.func, ast.Attribute)
                ):
                    holder = node.func.value
                elif isinstance(node, ast.Attribute) and node.attr == "shape":
                    holder = node.value
                elif isinstance(node, ast.Call) and last(node) == "len" and node.args:
                    holder = node.args[0]
                if isinstance(holder, ast.Name):
                    return "stream", holder, scope
            return None
        if isinstance(source, ast.Name):
            values = [v for v in self.assigned(source.id, scope) if isinstance(v, ast.Call)
                      and last(v) == "DataLoader"]
            if values:
                return "loader", values[-1], self.function_of(values[-1])
            if isinstance(scope, FUNCTION) and source.id in self.params(scope):
                for value, site in self.arguments_for(scope, source.id):
                    if isinstance(value, ast.Call) and last(value) == "DataLoader":
                        return "loader", value, self.function_of(site)
                    if isinstance(value, ast.Name):
                        made = [v for v in self.assigned(value.id, self.function_of(site))
                                if isinstance(v, ast.Call) and last(v) == "DataLoader"]
                        if made:
                            return "loader", made[-1], self.function_of(made[-1])
        return None

    def unsplit(self, source):
        """The node to report if the data of `source` are neither a sampler's nor split by rank."""
        kind, node, scope = source
        if kind == "loader":
            if keyword(node, "sampler") is not None or keyword(node, "batch_sampler") is not None \
                    or is_true(keyword(node, "shuffle")):
                return None  # a sampler's, or DDP010's
            dataset = node.args[0] if node.args else keyword(node, "dataset")
            return node if dataset is not None and self.data_origin(dataset, scope) == "whole" else None
        return node if self.data_origin(node, scope) == "whole" else None

    def rule_data_not_split(self):
        """Training data neither a sampler's nor split by rank: a note (it may be split where
        this file cannot see)."""
        if not self.ddp_calls:
            return
        reported = set()
        for loop in self.nodes:
            if not isinstance(loop, ast.For) or self.in_no_grad(loop, strict=True):
                continue
            body = [n for s in loop.body for n in ast.walk(s)]
            if not any(isinstance(c, ast.Call) and self.is_backward(c) for c in body):
                continue
            source = self.data_source(loop)
            node = self.unsplit(source) if source else None
            if node is None or id(node) in reported:
                continue
            reported.add(id(node))
            self.add(
                "DDP010",
                node if source[0] == "loader" else loop,
                f"every rank trains on `{ast.unparse(node)}`: neither a DistributedSampler's nor split by "
                "rank here; unless it is split where this file cannot see, every rank reads the same "
                "batches (a DistributedSampler, or rank r takes every world_size-th part)",
                "note",
            )

    # -- DDP020: a collective on some ranks only
    def performs_collective(self, function):
        return self._follow(function, "is_collective")

    def rule_collective_branch(self):
        for call in self.calls:
            name = last(call)
            reached = None
            if name in P2P:
                continue
            scope = self.function_of(call)
            if not self.is_collective(call):
                if not any(isinstance(a, ast.If) for a in self.between(call, scope)):
                    continue  # under no branch at all: whatever it calls, every rank calls it
                reached = self.reaches(call, "is_collective")
                if reached is None:
                    continue
            child = call
            for ancestor in self.ancestors(call):
                if isinstance(ancestor, SCOPE):
                    break
                if isinstance(ancestor, ast.If) and self.rank_test(ancestor.test, scope):
                    in_body = child in ancestor.body
                    other = ancestor.orelse if in_body else ancestor.body
                    if not self.calls_named(other, name) and not self.complement(
                        ancestor, in_body, name, scope
                    ):
                        test = ast.unparse(ancestor.test)
                        if reached is None:
                            self.add(
                                "DDP020",
                                call,
                                f"{name}() runs only on the ranks where `{test}` holds: the "
                                "other ranks never call it, and the ranks that do wait for them",
                            )
                        else:
                            inner, function, checker = reached
                            helper = self.resolve(call)
                            self.add(
                                "DDP020",
                                call,
                                f"{self.helper_name(call, *helper)} calls {last(inner)}() "
                                f"({self.at(checker, inner)}) only "
                                f"on the ranks where `{test}` holds: the other ranks never call it, and "
                                "the ranks that do wait for them",
                            )
                    break
                child = ancestor

    @staticmethod
    def calls_named(statements, name):
        return any(isinstance(n, ast.Call) and last(n) == name for s in statements for n in ast.walk(s))

    def complement(self, branch, in_body, name, scope):
        """`if rank != 0: barrier()` ... `if rank == 0: barrier()`: every rank calls it once."""
        for other in self.by_scope.get(scope, []):
            if not isinstance(other, ast.If) or other is branch:
                continue
            if negates(*shared_removed(other.test, branch.test)):
                if self.calls_named(other.body if in_body else other.orelse, name):
                    return True
            elif ast.dump(other.test) == ast.dump(branch.test):
                if self.calls_named(other.orelse if in_body else other.body, name):
                    return True
        return False

    # -- DDP030: set_epoch
    def samplers(self):
        """The samplers that pad the shards: DistributedSampler(...) calls, calls of a sampler
        class of the project that pads as it does, and calls of a helper of the project that
        builds one and returns it (or a loader on it): `make_data_sampler(ds, shuffle=False)`,
        `train_loader, val_loader = build_loaders(cfg)` (then the name bound to it)."""
        if "samplers" not in self._memo:
            found = [c for c in self.calls if self.is_sampler(c) or self.factory(c)]
            for node in self.nodes:  # a, b = build(...): each name its own
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                        and isinstance(node.targets[0], ast.Tuple):
                    found += [t for t in node.targets[0].elts if isinstance(t, ast.Name) and self.factory(t)]
            self._memo["samplers"] = sorted(found, key=lambda n: (n.lineno, n.col_offset))
        return self._memo["samplers"]

    def is_sampler(self, call):
        """DistributedSampler(...), or a sampler class of the project that pads the shards as it
        does: a subclass of it, or one that sets `self.total_size` (the padded length)."""
        if last(call) == "DistributedSampler":
            return True
        if not last(call).endswith("Sampler") or self.project is None:
            return False
        found = self.external_class(call)
        return found is not None and found[0].pads(found[1])

    def external_class(self, call):
        """(Checker, class) of a class of the project that `call` makes, or None."""
        name = dotted(call.func)
        head, *rest = name.split(".") if name else [""]
        entry = self.imports.get(head)
        if entry is None or self.depth >= MAX_DEPTH or rest:
            return None
        kind, module, imported, level = entry
        if kind != "from":
            return None
        path = self.project.find(module, level, self.folder)
        checker = self.project.load(path, self.depth + 1) if path is not None else None
        if checker is None:
            return None
        cls = next((n for n in checker.tree.body if isinstance(n, ast.ClassDef) and n.name == imported), None)
        return (checker, cls) if cls is not None else None

    def instance_method(self, call):
        """(Checker, method) that `obj.method(...)` runs where `obj` is made in sight by a
        class of the project (`loaders = LoaderMaker(df)`, then `loaders.build(rank)`)."""
        if self.project is None or not isinstance(call.func, ast.Attribute):
            return None
        owner = call.func.value
        maker = owner if isinstance(owner, ast.Call) else None
        if isinstance(owner, ast.Name):
            maker = next((v for v in self.assigned(owner.id, self.function_of(call))
                          if isinstance(v, ast.Call)), None)
        found = self.external_class(maker) if maker is not None else None
        if found is None:
            return None
        checker, cls = found
        method = next((n for n in cls.body if isinstance(n, FUNCTION) and n.name == call.func.attr), None)
        return (checker, method) if method is not None else None

    def constructs(self, call, what):
        """What `_follow` finds in the `__init__` of a class of this file or of the project
        that `call` makes (`trainer = Trainer(config)`, whose `__init__` sets the device)."""
        found = None
        if isinstance(call.func, ast.Name):
            cls = next((n for n in self.tree.body
                        if isinstance(n, ast.ClassDef) and n.name == call.func.id), None)
            found = (self, cls) if cls is not None else None
        if found is None and self.project is not None and isinstance(call.func, ast.Name):
            found = self.external_class(call)
        if found is None:
            return None
        checker, cls = found
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return checker._follow(init, what) if init is not None else None

    @staticmethod
    def pads(cls):
        return any(last(b) == "DistributedSampler" for b in cls.bases) or any(
            isinstance(n, ast.Attribute) and n.attr == "total_size" and isinstance(n.ctx, ast.Store)
            for n in ast.walk(cls))

    def factory(self, node):
        """For a call of a project function that returns a padding sampler, or a loader on
        one (or for a name bound to such a part of the tuple it returns): (its Checker, the
        function, the sampler call inside, 'sampler' or 'loader', the calls to it); None
        otherwise, or where the call turns the sampler off (`distributed=False`, or
        `is_training=False` for the sampler of the training branch)."""
        key = ("factory", node)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        element, call = None, node
        if isinstance(node, ast.Name):  # a, b = build(...)
            tuple_node = self.parents.get(node)
            assign = self.parents.get(tuple_node)
            if not (isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Call)):
                return None
            element, call = tuple_node.elts.index(node), assign.value
        elif not isinstance(node, ast.Call) or last(node) in ("DistributedSampler", "DataLoader"):
            return None
        external = self.external(call) or self.instance_method(call)
        candidates = external[0].sampler_made(external[1], element=element) if external is not None else []
        for sampler, kind, chain in candidates:
            checker, function = external
            if not self.turned_off(checker, function, sampler, call):
                self._memo[key] = (checker, function, sampler, kind, chain)
                break
        return self._memo[key]

    def turned_off(self, checker, function, sampler, call):
        """The call gives a constant to the parameter that the helper's branch around the
        sampler tests (`if distributed:`, `if split == "train":`, `if split in ("train",):`),
        and takes the other branch."""
        for ancestor in checker.between(sampler, function):
            if not isinstance(ancestor, (ast.If, ast.IfExp)):
                continue
            taken = self.branch_taken(checker, function, call, ancestor.test)
            if taken is None:
                continue
            body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
            in_body = any(sampler is n for b in body for n in ast.walk(b))
            if taken != in_body:
                return True
        return False

    def branch_taken(self, checker, function, call, test):
        """True or False: the value of `test`, a test on a parameter of `function`, for the
        constant that `call` gives it; None if the call gives none or the test is another."""
        name = test.id if isinstance(test, ast.Name) else (
            test.left.id if isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.left, ast.Name) else None)
        if name is None or name not in checker.params(function):
            return None
        passed = checker.passed(function, call, name, caller=self)
        if not isinstance(passed, ast.Constant):
            return None
        if isinstance(test, ast.Name):
            return bool(passed.value)
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
            return (passed.value == right.value) == isinstance(op, ast.Eq)
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.List, ast.Tuple, ast.Set)) \
                and all(isinstance(e, ast.Constant) for e in right.elts):
            return (passed.value in [e.value for e in right.elts]) == isinstance(op, ast.In)
        return None

    def sampler_made(self, function, depth=0, element=None):
        """[(the padding sampler call, 'sampler' or 'loader', the calls that lead to it)] for a
        `function` that returns a sampler, or a loader built on one (`element`: the part of
        the tuple it returns); the sampler may be made by a function it calls (of its module or
        the project), then the last part lists (Checker, function, the call of it) down to the
        one that makes it. A loader (a DataLoader, or a name with `loader` in it) returned by
        a function that makes samplers: each of them, in order."""
        key = ("sampler_made", function, element)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = []
        found = []
        for node in self.own_nodes(function):
            if not (isinstance(node, ast.Return) and node.value is not None):
                continue
            returned = node.value
            if element is not None and isinstance(returned, ast.Call) and depth < 2:
                resolved = self.resolve(returned)  # return _build_loader(config): its tuple
                if resolved is not None and resolved[1] is not function and isinstance(resolved[1], FUNCTION):
                    found += [(sampler, kind, [(*resolved, returned)] + chain) for sampler, kind, chain
                              in resolved[0].sampler_made(resolved[1], depth + 1, element)]
                continue
            if element is not None:
                if not (isinstance(returned, ast.Tuple) and element < len(returned.elts)):
                    continue
                returned = returned.elts[element]
            values = [returned]
            for name in [n.id for n in ast.walk(returned) if isinstance(n, ast.Name)]:
                values += [v for v in self.assigned(name, function)]
            seen_sampler = False
            loader = any(isinstance(v, ast.Call)
                         and (last(v) == "DataLoader" or keyword(v, "sampler") is not None)
                         for v in values) or (  # klass(data, sampler=sampler): a loader class passed in
                isinstance(returned, (ast.Name, ast.Call)) and "loader" in last(returned).lower())
            for value in values:
                for made in ast.walk(value):
                    if not isinstance(made, ast.Call):
                        continue
                    if made is value and depth < 2 and last(made) != "DataLoader" \
                            and (resolved := self.resolve(made)) is not None and resolved[1] is not function \
                            and isinstance(resolved[1], FUNCTION):  # val_loader = self._val_loader(rank)
                        found += [(sampler, "loader", [(*resolved, made)] + chain) for sampler, kind, chain
                                  in resolved[0].sampler_made(resolved[1], depth + 1) if kind == "loader"]
                    if last(made) == "DataLoader":
                        inner = keyword(made, "sampler")
                        if inner is None and keyword(made, "batch_sampler") is None and len(made.args) < 4 \
                                and all(k.arg is not None for k in made.keywords):
                            seen_sampler = True  # a DataLoader in sight with no sampler: none pads it
                        samplers = [inner] + (
                            self.assigned(inner.id, function) if isinstance(inner, ast.Name) else [])
                        calls = [n for s in samplers if s is not None for n in ast.walk(s)
                                 if isinstance(n, ast.Call)]  # DistributedSampler(d) if ddp else None too
                        seen_sampler = seen_sampler or bool(calls)
                        for sampler in calls:
                            made_here = self.sampler_in(sampler, function, depth)
                            if made_here is not None:
                                found.append((made_here[0], "loader", made_here[1]))
                    made_here = self.sampler_in(made, function, depth)
                    if made_here is not None:
                        found.append((made_here[0], "loader" if loader else "sampler", made_here[1]))
            if loader and not found and not seen_sampler:
                # loader = make_loader(**args): the samplers made on the way; not where the
                # returned DataLoader's own sampler is in sight (an exact split, say)
                for made in self.own_nodes(function):
                    if isinstance(made, ast.Call) and (made_here := self.sampler_in(made, function, depth)):
                        found.append((made_here[0], "loader", made_here[1]))
        unique = list({id(sampler): (sampler, kind, chain) for sampler, kind, chain in found}.values())
        self._memo[key] = unique
        return unique

    def sampler_in(self, call, function, depth):
        """(padding sampler call, the chain of calls to it) if `call`, made in `function`, is
        one or returns one (a function of the module or the project, two calls deep)."""
        if self.is_sampler(call) and self.function_of(call) is function:
            return call, []
        resolved = self.resolve(call) if depth < 2 and last(call) != "DataLoader" else None
        if resolved is None or resolved[1] is function or not isinstance(resolved[1], FUNCTION):
            return None
        made = [m for m in resolved[0].sampler_made(resolved[1], depth + 1) if m[1] == "sampler"]
        if not made:
            return None
        return made[0][0], [(*resolved, call)] + made[0][2]

    def passed(self, function, call, name, caller=None):
        """The value a call gives the parameter `name` of `function`: an argument, a keyword
        (in a `**kwargs` dict the caller, a Checker, built in sight too), or the parameter's
        default; None if none."""
        params = self.params(function)
        if name not in params:
            return None
        value = keyword(call, name)
        if value is not None:
            return value
        for spread in (k.value for k in call.keywords if k.arg is None and isinstance(k.value, ast.Name)):
            for made in caller.assigned(spread.id, caller.function_of(call)) if caller is not None else []:
                if isinstance(made, ast.Call) and last(made) == "dict" and keyword(made, name) is not None:
                    return keyword(made, name)  # create_loader(ds, **eval_kwargs), eval_kwargs = dict(...)
                if isinstance(made, ast.Dict):
                    found = next((v for k, v in zip(made.keys, made.values, strict=True)
                                  if isinstance(k, ast.Constant) and k.value == name), None)
                    if found is not None:
                        return found
        index = params.index(name) - (1 if params[:1] in (["self"], ["cls"]) else 0)
        if 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
            return call.args[index]
        args = function.args
        positional = args.posonlyargs + args.args
        if name in [a.arg for a in positional]:
            at = [a.arg for a in positional].index(name) - (len(positional) - len(args.defaults))
            return args.defaults[at] if at >= 0 else None
        at = [a.arg for a in args.kwonlyargs].index(name)
        return args.kw_defaults[at]

    def sampler_option(self, call, name, index):
        """The `shuffle` or `drop_last` a sampler gets: of the call itself, or, for a helper
        that builds it, the value the helper passes (one of its parameters: what this call
        gives it). None: the sampler's default. A sampler class of the project without such a
        parameter neither shuffles nor drops (False)."""
        made = self.factory(call)
        if made is None:
            return self.option_of(self, call, name, index)
        checker, function, sampler, _, chain = made
        value = checker.option_of(chain[-1][0] if chain else checker, sampler, name, index)
        first = self.parents[self.parents[call]].value if isinstance(call, ast.Name) else call
        levels = [(checker, function, first)] + chain
        callers = [self] + [level[0] for level in levels[:-1]]  # who makes each call
        for (level_checker, level_function, site), caller in reversed(list(zip(levels, callers,
                                                                               strict=True))):
            if not (isinstance(value, ast.Name) and value.id in level_checker.params(level_function)):
                break
            value = level_checker.passed(level_function, site, value.id, caller)  # what the caller gives it
        return value

    @staticmethod
    def option_of(checker, sampler, name, index):
        if last(sampler) == "DistributedSampler":
            return sampler.args[index] if len(sampler.args) > index else keyword(sampler, name)
        value = keyword(sampler, name)
        if value is not None:
            return value
        found = checker.external_class(sampler) if checker.project is not None else None
        init = next((n for n in found[1].body if isinstance(n, FUNCTION) and n.name == "__init__"), None) \
            if found is not None else None
        if init is not None and name in checker.params(init) and not any(
                last(b) == "DistributedSampler" for b in found[1].bases):
            return None  # its own parameter: its default
        return None if found is not None and any(last(b) == "DistributedSampler" for b in found[1].bases) \
            else ast.Constant(False)

    def sampler_word(self, call):
        """How a message names the sampler: 'DistributedSampler', or the helper that builds it."""
        made = self.factory(call)
        if made is None:
            return "DistributedSampler"
        checker, function, sampler, kind, _ = made
        helper = self.helper_name(call, checker, function)
        name = last(sampler)  # DistributedSampler, or a sampler class of the project that pads as it does
        return (f"the {name} of the loader that {helper} returns" if kind == "loader"
                else f"the {name} that {helper} returns")

    def epoch_loop(self):
        """A loop over epochs in the file: a loop variable named epoch..., or a range of ...epochs."""
        if "epoch_loop" not in self._memo:
            self._memo["epoch_loop"] = any(isinstance(n, ast.For) and (
                any(isinstance(t, ast.Name) and "epoch" in t.id.lower() for t in ast.walk(n.target))
                or any(isinstance(t, (ast.Name, ast.Attribute)) and "epoch" in last(t).lower()
                       for t in ast.walk(n.iter))) for n in self.nodes)
        return self._memo["epoch_loop"]

    def rule_set_epoch(self):
        if "set_epoch" in self.attrs or self.library:
            return  # set_epoch called: the fix is there
        for call in self.samplers():
            shuffle = self.sampler_option(call, "shuffle", 3)
            if shuffle is not None and is_false(shuffle):
                continue  # no shuffle: the epoch changes nothing
            if self.evaluated(call) == "yes":
                continue  # an evaluation's sampler: its order changes nothing (DDP031 has it)
            if self.handed_elsewhere(call) or not self.epoch_loop() and self.reread(call) is None:
                # given to a function of another file, which may call set_epoch: said only where
                # that is the project's code, whose epoch loop is in sight and calls it nowhere
                deep = self.deep_epoch_loop(call)
                if deep is not None:
                    self.add("DDP030", call, f"{self.sampler_word(call)} shuffles, but set_epoch() is never "
                             f"called: its loader goes to {deep}; every epoch draws the same order; call "
                             "sampler.set_epoch(epoch) at the start of each epoch")
                continue
            if self.epoch_loop():
                self.add("DDP030", call, f"{self.sampler_word(call)} shuffles, but set_epoch() is never "
                         "called: every epoch draws the same order; call sampler.set_epoch(epoch) at the "
                         "start of each epoch")
                continue
            again = self.reread(call)
            if again is not None:
                self.add("DDP030", call, f"{self.sampler_word(call)} shuffles, but set_epoch() is never "
                         f"called, and its loader is read again and again ({again}): every pass draws the "
                         "same order; call sampler.set_epoch(n) before each pass, n the pass's number")

    def deep_epoch_loop(self, sampler_call):
        """Where a loader on this sampler goes, in words, when it goes only to the project's code
        (besides len(), tqdm() and the like), which loops over epochs in a function the script
        reaches, and no module read on the way calls set_epoch, sets a sampler's `epoch`, or
        imports a training framework (which may call set_epoch itself); None otherwise. An
        `epoch` attribute set on a loader or a dataset is named: torch never reads it."""
        if self.module or self.project is None or self.path is None:
            return None
        names = self.holders(sampler_call)
        reach, here, receivers = self.project.reach, self.path.resolve(), []
        for call in self.calls:
            if not any(isinstance(v, ast.Name) and v.id in names
                       for v in list(call.args) + [k.value for k in call.keywords]):
                continue
            if isinstance(call.func, ast.Name) and last(call) in BUILTINS or last(call) in ITERATORS:
                continue
            targets = reach.functions(here, self.function_of(call), call.func)
            if not targets and self.resolve(call) is None:
                return None  # a package's function, or one out of sight: it may call set_epoch
            receivers.append(call)
        deep = self.deep_reach()
        if not receivers or not deep or len(deep) >= DEEP_UNITS \
                or sum(v is not None for v in reach.index.values()) >= DEEP_MODULES:
            return None  # nothing handed to the project, or a reach cut short: out of sight
        paths = {p for p, _, _ in deep} | set(self.project.read)
        for path in paths:
            tree = parse_module(path)
            for n in ast.walk(tree) if tree is not None else []:
                if isinstance(n, (ast.Attribute, ast.Name)) and last(n) == "set_epoch" \
                        or isinstance(n, ast.Attribute) and n.attr == "epoch" \
                        and isinstance(n.ctx, ast.Store) and "sampler" in (dotted(n.value) or "").lower():
                    return None  # set_epoch, or what it does (sampler.epoch = epoch), out of this file
                if isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                        (m or "").split(".")[0] in FRAMEWORKS
                        for m in ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module])):
                    return None
        loops = [(p, n) for p, f, _ in deep for n in ast.walk(f) if isinstance(n, ast.For) and (
            any(isinstance(t, ast.Name) and "epoch" in t.id.lower() for t in ast.walk(n.target))
            or any(isinstance(t, (ast.Name, ast.Attribute)) and "epoch" in last(t).lower()
                   for t in ast.walk(n.iter)))]
        if not loops:
            return None
        loop = next((x for x in loops if isinstance(x[1].iter, ast.Call) and last(x[1].iter) == "range"),
                    loops[0])  # for epoch in range(...): the training's loop, not a log's
        first = receivers[0]
        target = reach.functions(here, self.function_of(first), first.func)
        whose = f" ({self.project.where(target[0][0])})" if target else ""
        said = (f"{last(first)}(){whose}, whose epoch loop ({self.project.where(loop[0])}:{loop[1].lineno}) "
                "reaches no set_epoch()")
        stored = next(((p, n) for p, f, _ in deep for n in ast.walk(f) if isinstance(n, ast.Attribute)
                       and n.attr == "epoch" and isinstance(n.ctx, ast.Store)
                       and isinstance(n.value, ast.Name)
                       and re.search(r"(?i)loader|data", n.value.id)), None)
        if stored is not None:
            said += (f" ({self.project.where(stored[0])}:{stored[1].lineno} sets `{dotted(stored[1])}`, "
                     "which torch never reads)")
        return said

    def reread(self, sampler_call):
        """How a loader on this sampler is read more than once, in words; None if it is not:
        iterated (or iter()'d) inside another loop, or given to a function (of the file or
        the project) that iterates it inside a loop, as an endless generator does
        (`while True: for batch in loader: yield batch`)."""
        loaders = self.loaders_on(sampler_call)
        names = self.holders(sampler_call) | {name for c in loaders for name in self.holders(c)}
        for loader in loaders:  # forever(DataLoader(data, sampler=sampler)): the loader given on
            holder = self.parents.get(loader)
            if isinstance(holder, ast.Call) and loader in holder.args:
                found = self.given_to_reader(holder, holder.args.index(loader))
                if found:
                    return found
        if not names:
            return None
        for node in self.nodes:
            read = None
            if isinstance(node, (ast.For, ast.comprehension)):
                read = unwrap_iter(node.iter)
            elif isinstance(node, ast.Call) and last(node) == "iter" and node.args:
                read = node.args[0]
            elif isinstance(node, ast.YieldFrom):
                read = node.value
            if isinstance(read, ast.Name) and read.id in names:
                around = self.loop_of(node if not isinstance(node, ast.comprehension) else self.parents[node])
                if around is not None and self.function_of(around) is self.function_of(node):
                    line = node.lineno if hasattr(node, "lineno") else around.lineno
                    return f"line {line}, inside the loop of line {around.lineno}"
            if not isinstance(node, ast.Call):
                continue
            for i, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id in names:
                    found = self.given_to_reader(node, i)
                    if found:
                        return found
        return None

    def given_to_reader(self, call, index):
        """In words, if the function `call` runs (of the file or the project) reads its
        argument number `index` in a loop of its own; None if not."""
        resolved = self.resolve(call)
        if resolved is None:
            return None
        checker, function = resolved
        params = checker.params(function)
        shift = 1 if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute) else 0
        if index + shift < len(params) and checker.reads_repeatedly(function, params[index + shift]):
            helper = self.helper_name(call, checker, function)
            return f"{helper}, called at line {call.lineno}, reads it in a loop"
        return None

    def reads_repeatedly(self, function, name):
        """`function` iterates its parameter `name` inside a loop of its own."""
        for node in self.own_nodes(function):
            read = None
            if isinstance(node, ast.For):
                read = unwrap_iter(node.iter)
            elif isinstance(node, ast.Call) and last(node) == "iter" and node.args:
                read = node.args[0]
            elif isinstance(node, ast.YieldFrom):
                read = node.value
            if isinstance(read, ast.Name) and read.id == name:
                around = self.loop_of(node)
                if around is not None and self.function_of(around) is function:
                    return True
        return False

    def holders(self, made):
        """Names that hold `made` (a call) or what is built on it: a loader on a sampler, a
        BatchSampler on it, a dict of a loader's arguments."""
        holder = self.parents.get(made)
        while isinstance(holder, (ast.IfExp, ast.BoolOp)):  # DistributedSampler(d) if distributed else None
            holder = self.parents.get(holder)
        if isinstance(made, ast.Name):  # a, val_loader = build(...): the name itself
            holder = ast.Assign(targets=[made], value=None)
        if not (isinstance(holder, ast.Assign) and isinstance(holder.targets[0], ast.Name)):
            return set()
        if "simple_assigns" not in self._memo:
            self._memo["simple_assigns"] = [n for n in self.nodes if isinstance(n, ast.Assign)
                                            and isinstance(n.targets[0], ast.Name)
                                            and isinstance(n.value, (ast.Dict, ast.Call))]
        names, changed, scope = {holder.targets[0].id}, True, self.function_of(holder)
        while changed:
            changed = False
            for node in self._memo["simple_assigns"]:
                if node.targets[0].id in names or not self.sees(scope, node, names):
                    continue
                value = node.value
                built = isinstance(value, ast.Dict) and any(isinstance(v, ast.Name) and v.id in names
                                                            for v in value.values)
                built |= (
                    isinstance(value, ast.Call)
                    and (
                        last(value) == "DataLoader"
                        or last(value).endswith(("_loader", "Loader", "Sampler", "_sampler"))
                    )
                    and any(
                        isinstance(v, ast.Name) and v.id in names
                        for v in list(value.args) + [k.value for k in value.keywords]
                    )
                )
                built |= isinstance(value, ast.Call) and node.targets[0].id in self.batch_sampler_names() \
                    and any(isinstance(v, ast.Name) and v.id in names for v in value.args)  # batches_of(s, 8)
                if built:
                    names.add(node.targets[0].id)
                    changed = True
        return names

    def batch_sampler_names(self):
        """The names a DataLoader of this file is given as batch_sampler=."""
        if "batch_sampler_names" not in self._memo:
            self._memo["batch_sampler_names"] = {
                k.value.id for c in self.calls if last(c) == "DataLoader" for k in c.keywords
                if k.arg == "batch_sampler" and isinstance(k.value, ast.Name)}
        return self._memo["batch_sampler_names"]

    def sees(self, scope, node, names=()):
        """`node` sees the names bound in `scope`: it is in `scope`, or in a function inside it
        that binds none of `names` itself. A `sampler` of train() is not evaluate()'s."""
        inner = self.function_of(node)
        if inner is scope:
            return True
        if scope not in self.enclosing(inner):
            return False
        return not any(self.values_in(name, inner) for name in names)

    def handed_elsewhere(self, sampler_call):
        """The sampler, or a loader built on it, is passed to a function this file does not define."""
        if "handed" not in self._memo:  # the names passed to functions of other files, once
            handed = set()
            for call in self.calls:
                callee = last(call)
                if callee in self.functions or callee == "DataLoader" \
                        or callee.endswith(("_loader", "Loader", "Sampler")):
                    continue
                if isinstance(call.func, ast.Name) and callee in BUILTINS or callee in ITERATORS:
                    continue  # len(loader), enumerate(loader), tqdm(loader): no set_epoch in them
                if isinstance(call.func, ast.Attribute) and call.func.attr in self.methods:
                    continue
                if self.external(call) is not None and not self.reaches(call, "is_set_epoch"):
                    continue  # a function of the project, in sight: it does not call set_epoch
                handed |= {
                    v.id
                    for v in list(call.args) + [k.value for k in call.keywords]
                    if isinstance(v, ast.Name)
                }
            self._memo["handed"] = handed
        return bool(self.holders(sampler_call) & self._memo["handed"])

    # -- DDP031: an evaluation through a padding sampler
    def loaders_on(self, sampler_call):
        """The DataLoader calls built on a sampler (a name, inline, or through a BatchSampler);
        for a helper that returns a loader on one, the call itself."""
        made = self.factory(sampler_call)
        if made is not None and made[3] == "loader":
            return [sampler_call]
        holder = self.parents.get(sampler_call)
        if isinstance(holder, ast.keyword) and isinstance(self.parents.get(holder), ast.Call):
            outer = self.parents[holder]
            return [outer] if last(outer) == "DataLoader" else self.loaders_on(outer)
        if isinstance(holder, ast.Call) and sampler_call in holder.args \
                and last(holder).endswith(("Sampler", "_sampler")):
            return self.loaders_on(holder)  # BatchSampler(DistributedSampler(d), 8, False)
        names = self.holders(sampler_call)
        if "dataloaders" not in self._memo:
            self._memo["dataloaders"] = [c for c in self.calls if last(c) == "DataLoader"]
        scope = self.function_of(sampler_call)
        return [
            c
            for c in self._memo["dataloaders"]
            if self.sees(scope, c, names) and any(
                isinstance(v, ast.Name) and v.id in names
                or (isinstance(v, ast.Call) and last(v).endswith(("Sampler", "_sampler")) and any(
                    isinstance(a, ast.Name) and a.id in names for a in v.args))  # BatchSampler(sampler, 8)
                for v in list(c.args[1:]) + [k.value for k in c.keywords]
            )
        ]

    def reads_under_no_grad(self, name, scope, strict, depth=0):
        """`name` (a loader) is iterated under no_grad in `scope`, or in a function of this
        file or of the project it is passed to: 'yes' ('id' where that function keeps its
        results by sample id, dropping repeats); passed to an evaluate()/validate() out of
        sight: 'note'."""
        verdict = None
        for node in self.by_scope.get(scope, []) + self.closure_nodes(scope, name):
            if isinstance(node, (ast.For, ast.comprehension)) and any(
                    isinstance(n, ast.Name) and n.id == name for n in ast.walk(unwrap_iter(node.iter))):
                if self.in_evaluation(node.iter, strict):
                    return "yes"
            if isinstance(node, ast.While) and self.in_evaluation(node, strict) and any(
                    isinstance(c, ast.Call) and self.fetches_from(c, name) for c in ast.walk(node)):
                return "yes"  # while batch is not None: ...; batch = next(it) (or it.next())
            holder = self.parents.get(node)
            if isinstance(node, ast.Call) and isinstance(holder, ast.Assign) and holder.value is node \
                    and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name) \
                    and holder.targets[0].id != name and depth < 3 \
                    and any(isinstance(a, ast.Name) and a.id == name for a in node.args) \
                    and not self.fetches_from(node, name) and self.resolve(node) is None:
                # a reader around the loader (prefetcher = data_prefetcher(loader), batches = iter(loader));
                # not a batch taken from it (batch = next(batches))
                if self.reads_under_no_grad(holder.targets[0].id, scope, strict, depth + 1) == "yes":
                    return "yes"
            if not (
                isinstance(node, ast.Call)
                and any(
                    isinstance(a, ast.Name) and a.id == name
                    for a in list(node.args) + [k.value for k in node.keywords]
                )
            ):
                continue
            if self.kept_for_evaluation(node, name, strict):
                return "yes"  # Trainer(train_loader, test_loader): self.test_loader read in test()
            resolved = self.resolve(node)
            if resolved is not None and depth < 3:
                checker, target = resolved
                params = checker.params(target)
                shift = 1 if params[:1] in (["self"], ["cls"]) and isinstance(node.func, ast.Attribute) else 0
                given = [params[i + shift] for i, a in enumerate(node.args)
                         if isinstance(a, ast.Name) and a.id == name and i + shift < len(params)]
                given += [k.arg for k in node.keywords if isinstance(k.value, ast.Name) and k.value.id == name
                          and k.arg in params]
                for param in given:
                    strict_here = strict and not any(last(d) in NO_GRAD for d in target.decorator_list)
                    inner = checker.reads_under_no_grad(param, target, strict_here, depth + 1)
                    if inner == "yes" and checker is not self and checker.keyed_by_id(target):
                        inner = "id"
                    if inner == "yes":
                        return "yes"
                    verdict = inner or verdict
            elif resolved is None and re.search(
                    EVAL_NAME, last(node)):
                verdict = "note"
        return verdict

    def kept_for_evaluation(self, call, name, strict):
        """`call` makes an object of a class of this file, giving `name` to its __init__,
        which keeps it (`self.test_loader = test_loader`); a method of the class iterates that
        field in an evaluation (attribute_read_in_evaluation)."""
        cls = self.classes.get(call.func.id) if isinstance(call.func, ast.Name) else None
        init = next((n for n in cls.body if isinstance(n, FUNCTION) and n.name == "__init__"), None) \
            if cls is not None else None
        if init is None:
            return False
        params = self.params(init)[1:]
        given = {params[i] for i, a in enumerate(call.args)
                 if isinstance(a, ast.Name) and a.id == name and i < len(params)}
        given |= {k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == name}
        return any(
            isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in given
            and len(node.targets) == 1 and dotted(node.targets[0]) == f"self.{node.targets[0].attr}"
            and self.attribute_read_in_evaluation(node.targets[0].attr, node, strict) == "yes"
            for node in self.own_nodes(init) if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Attribute))

    def closure_nodes(self, scope, name):
        """The nodes of the functions defined inside `scope` (a `def validate():` in main())
        that read `name` from it: they neither take nor assign a `name` of their own."""
        if isinstance(scope, ast.Module):
            return []
        out = []
        for inner in self.defs.get(scope, {}).values():
            if name in self.params(inner) or self.values_in(name, inner):
                continue
            out += self.by_scope.get(inner, []) + self.closure_nodes(inner, name)
        return out

    @staticmethod
    def fetches_from(call, name):
        """`call` takes the next batch from `name`: next(name), name.next(), name.__next__()."""
        if isinstance(call.func, ast.Name) and call.func.id == "next":
            return bool(call.args) and isinstance(call.args[0], ast.Name) and call.args[0].id == name
        return isinstance(call.func, ast.Attribute) and call.func.attr in ("next", "__next__") \
            and isinstance(call.func.value, ast.Name) and call.func.value.id == name

    def keyed_by_id(self, function):
        """`function` keeps results by sample id (`{target["image_id"]: output ...}`,
        `results[idx] = ...`): a repeated sample overwrites its first result."""
        for node in self.own_nodes(function):
            keys = []
            if isinstance(node, ast.DictComp):
                keys = [node.key]
            elif isinstance(node, ast.Dict):
                keys = [k for k in node.keys if k is not None and not isinstance(k, ast.Constant)]
            elif isinstance(node, ast.Assign):
                keys = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
            elif isinstance(node, ast.Call) and last(node) in ("format", "append", "write", "writerow"):
                keys = list(node.args)  # a record per sample, its id first: written out, merged later
            elif isinstance(node, ast.JoinedStr):
                keys = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
            for key in keys:
                for n in ast.walk(key):
                    word = last(n) if isinstance(n, (ast.Name, ast.Attribute)) else (
                        n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else "")
                    if re.search(r"(?i)(^|_)(ids?|idx|index|indices|uid)$", word) and not re.search(
                            r"(?i)(input|token|attention|position|label|type)_ids?$", word):
                        return True
        return False

    def evaluated(self, sampler_call):
        """'yes': a loader on this sampler is read under no_grad (here or in a function of this
        file it goes to); 'note': it goes to an evaluate() of another file; None: neither."""
        key = ("evaluated", sampler_call)
        if key in self._memo:
            return self._memo[key]
        shuffle = self.sampler_option(sampler_call, "shuffle", 3)
        strict = not (shuffle is not None and is_false(shuffle))  # a shuffling sampler: no_grad proper
        verdict = None
        for loader_call in self.loaders_on(sampler_call):
            holder = self.parents.get(loader_call)
            while isinstance(holder, ast.Call) and last(holder) in ("enumerate", "tqdm", "iter", "log_every"):
                holder = self.parents.get(holder)
            if isinstance(loader_call, ast.Name):  # a, val_loader = build(...)
                found = self.reads_under_no_grad(loader_call.id, self.function_of(loader_call), strict)
            elif isinstance(holder, (ast.For, ast.comprehension)):
                found = "yes" if self.in_evaluation(holder.iter, strict) else None
            elif isinstance(holder, ast.Assign) and isinstance(holder.targets[0], ast.Name):
                found = self.reads_under_no_grad(holder.targets[0].id, self.function_of(holder), strict)
            elif isinstance(holder, ast.Assign) and isinstance(holder.targets[0], ast.Tuple):
                names = [e.id for e in holder.targets[0].elts if isinstance(e, ast.Name) and "loader" in e.id]
                found = "yes" if len(names) == 1 and self.reads_under_no_grad(  # data, loader = build(...)
                    names[0], self.function_of(holder), strict) == "yes" else None
            elif isinstance(holder, ast.Assign) and dotted(holder.targets[0]).count(".") == 1 \
                    and dotted(holder.targets[0]).startswith("self."):
                found = self.attribute_read_in_evaluation(holder.targets[0].attr, holder, strict)
            else:
                found = None
            verdict = found if found == "yes" else verdict if verdict in ("id", "yes") else found or verdict
        self._memo[key] = verdict
        return verdict

    def attribute_read_in_evaluation(self, attr, assign, strict):
        """'yes' where a method of the class that sets `self.attr = DataLoader(...)` iterates
        `self.attr` under no_grad (`self.val_loader` made in __init__, read in validate())."""
        cls = self.class_of(self.function_of(assign))
        if cls is None:
            return None
        for method in (n for n in cls.body if isinstance(n, FUNCTION)):
            for node in self.by_scope.get(method, []):
                if isinstance(node, (ast.For, ast.comprehension)) and any(
                        dotted(n) == f"self.{attr}" for n in ast.walk(unwrap_iter(node.iter))) \
                        and self.in_evaluation(node.iter, strict):
                    return "yes"
        return None

    def local_factories(self):
        """Calls of a function of this file that returns a padding sampler it makes
        (`test_sampler = get_sampler(test_set)`): for DDP031, whose loader is at the call. (The
        sampler inside is the file's own for DDP030, said once, at its line.)"""
        out = []
        for call in self.calls:
            target = self.callee(call)
            if target is None or last(call) in ("DistributedSampler", "DataLoader") \
                    or not isinstance(self.parents.get(call), ast.Assign):
                continue
            if any(kind == "sampler" for _, kind, _ in self.sampler_made(target)):
                out.append(call)
        return out

    def rule_padded_eval(self):
        local = self.local_factories()
        for call in self.samplers() + local:
            drop_last = self.sampler_option(call, "drop_last", 5)
            if drop_last is not None and not is_false(drop_last):
                continue
            verdict = self.evaluated(call)
            sampler = self.sampler_word(call)
            if call in local:
                sampler = f"the DistributedSampler that {last(call)}() returns"
            if sampler == "DistributedSampler":
                sampler = "an evaluation loader's DistributedSampler"
            if verdict == "yes":
                self.add("DDP031", call, f"{sampler} pads the shards with "
                         "repeated samples: they are counted twice; give rank r the samples "
                         "range(r, N, world_size), or evaluate on rank 0 alone")
            elif verdict == "id":
                self.add("DDP031", call, f"{sampler} pads the shards with repeated samples; the "
                         "evaluation that reads it keeps its results by sample id, which drops the repeats "
                         "if the id is the sample's own: check it does", "note")
            elif verdict == "note":
                self.add("DDP031", call, "this DistributedSampler's loader goes to an evaluation of another "
                         "file: the sampler pads the shards with repeated samples, counted twice unless that "
                         "code drops them (one result per sample id)", "note")
        for call, message in self.deep_padded_evals():
            if not any(f[2] == "DDP031" and f[0] == call.lineno for f in self.findings):
                self.add("DDP031", call, message)

    def deep_padded_evals(self):
        """[(the call of this file, message)] for a DataLoader on a padding DistributedSampler
        that a function of the project builds (several calls deep: each a function that
        returns what the next one built), kept in an object's field (`Evaluator(eval_loader=
        loader)`), and read from that field (`iter(evaluator.eval_loader)`, a for loop) in an
        evaluation the script reaches (under no_grad, or an eval() that calls .eval())."""
        if self.module or self.project is None or self.followed or self.path is None:
            return []
        deep = self.deep_reach()
        by_name = {}
        for path, function, site in deep:
            by_name.setdefault(function.name, []).append((path, function, site))
        out = []
        for path, function, site in deep:
            loaders = [n for n in ast.walk(function) if isinstance(n, ast.Call) and last(n) == "DataLoader"]
            for loader in loaders:
                given = keyword(loader, "sampler")
                made = [given] if isinstance(given, ast.Call) else [
                    n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == given.id for t in n.targets)
                ] if isinstance(given, ast.Name) else []
                sampler = next((m for m in made if isinstance(m, ast.Call)
                                and last(m) == "DistributedSampler"), None)
                if sampler is None:
                    continue
                drop = sampler.args[5] if len(sampler.args) > 5 else keyword(sampler, "drop_last")
                default = "" if drop is None or is_false(drop) else self.false_field(drop)
                if default is None:
                    continue  # drop_last set, or a value out of sight
                field = self.loader_field(function, loader, by_name, 0)
                read = self.field_read_in_evaluation(field, deep) if field is not None else None
                if read is None:
                    continue
                where = f"{self.project.where(path)}:{sampler.lineno}"
                out.append((site, f"the DistributedSampler that {function.name}() builds ({where}{default}) "
                            f"pads the shards with repeated samples; its loader, kept in `.{field}`, is read "
                            f"in {read}, an evaluation: repeated samples are counted twice; give rank r the "
                            "samples range(r, N, world_size), or evaluate on rank 0 alone"))
        return out

    def false_field(self, node):
        """', drop_last False by default, file:line' where `node` is `cfg.drop_last` and every
        class field of that name in the modules near this one defaults to False; None otherwise."""
        if not isinstance(node, ast.Attribute):
            return None
        fields = [(path, n) for path, tree in self.near_modules()
                  for n in self.tree_facts(tree)["fields"].get(node.attr, [])]
        if not fields or not all(n.value is not None and is_false(n.value) for _, n in fields):
            return None
        path, field = fields[0]
        return f", {node.attr} False by default at {self.project.where(path)}:{field.lineno}"

    def loader_field(self, function, node, by_name, hops):
        """The field name of an object that keeps `node` (a loader made in `function`): a
        keyword of a class called with it, in `function` or in the callers it is returned to."""
        parents = {child: parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}
        holder = parents.get(node)
        values = [node]
        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 \
                and isinstance(holder.targets[0], ast.Name):
            name = holder.targets[0].id
            values = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name
                      and isinstance(n.ctx, ast.Load)]
        for value in values:
            holder = parents.get(value)
            if isinstance(holder, ast.keyword) and holder.arg and isinstance(parents.get(holder), ast.Call) \
                    and last(parents[holder])[:1].isupper():
                return holder.arg  # Evaluator(eval_loader=loader)
            if isinstance(holder, ast.Return) and hops < 4 and len(by_name.get(function.name, [])) == 1:
                for _, caller, _ in (t for ts in by_name.values() for t in ts):
                    for call in (n for n in ast.walk(caller) if isinstance(n, ast.Call)
                                 and last(n) == function.name and n is not node):
                        found = self.loader_field(caller, call, by_name, hops + 1)
                        if found is not None:
                            return found
        return None

    def field_read_in_evaluation(self, field, deep):
        """'eval() (file:line)' where a function the script reaches iterates `x.<field>` (a for
        loop, or iter()/enumerate()/islice() of it) in an evaluation; None otherwise."""
        if "loader" not in field.lower():
            return None  # a field named for a loader only
        for path, function, _ in deep:
            reads = [n for n in ast.walk(function) if isinstance(n, ast.Attribute) and n.attr == field
                     and isinstance(n.ctx, ast.Load)]
            if not reads:
                continue
            checker = self.project.load(path, self.depth + 1)
            if checker is None or not checker.parents:
                continue
            for read in reads:
                holder = checker.parents.get(read)
                iterated = isinstance(holder, ast.For) and holder.iter is read \
                    or isinstance(holder, ast.Call) and read in holder.args \
                    and last(holder) in ("iter", "enumerate", "islice", "tqdm")
                if iterated and read in checker.parents and checker.in_evaluation(read, True):
                    return f"{function.name}() ({self.project.where(path)}:{read.lineno})"
        return None

    # -- DDP032: the whole evaluation set on every rank
    def rule_full_eval(self):
        """An unsharded loader read under no_grad on every rank, with a sum of the loop all-reduced
        after it in the same function: every rank adds the same samples. Without the all_reduce:
        every rank evaluates the whole set (a note)."""
        loaders = {}
        for node in self.nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and last(node.value) == "DataLoader" and isinstance(node.targets[0], ast.Name):
                loaders.setdefault(node.targets[0].id, []).append(node.value)
        for loop in self.nodes:
            if not isinstance(loop, ast.For):
                continue
            source = loop.iter
            if isinstance(source, ast.Call) and last(source) == "enumerate" and source.args:
                source = source.args[0]
            calls = loaders.get(source.id, []) if isinstance(source, ast.Name) else (
                [source] if isinstance(source, ast.Call) and last(source) == "DataLoader" else [])
            if not calls or not self.in_no_grad(loop.iter) or self.guarded(loop):
                continue
            scope = self.function_of(loop)
            calls = [c for c in calls if self.function_of(c) is scope] or calls  # its own function's first
            if any(keyword(c, "sampler") is not None or keyword(c, "batch_sampler") is not None
                   or (c.args and self.data_origin(c.args[0], scope) == "split") for c in calls):
                continue  # a sampler, or this rank's own shard of the data set
            sums = {n.target.id for stmt in loop.body for n in ast.walk(stmt)
                    if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
            for node in ast.walk(scope):  # and the values made from them after the loop
                if sums and isinstance(node, ast.Assign) and node.lineno > loop.end_lineno and any(
                        isinstance(n, ast.Name) and n.id in sums for n in ast.walk(node.value)):
                    sums |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            for call in self.calls:
                if last(call) == "all_reduce" and call.args and call.lineno > loop.end_lineno \
                        and self.function_of(call) is scope \
                        and any(isinstance(n, ast.Name) and n.id in sums for n in ast.walk(call.args[0])):
                    self.add("DDP032", call, f"every rank reads the whole of {ast.unparse(loop.iter)} (no "
                             "sampler), then all_reduce adds the ranks' sums: each sample is counted "
                             "world_size times; give rank r the samples range(r, N, world_size), or "
                             "evaluate on rank 0 alone")
                    break
                if last(call) == "compute" and isinstance(call.func, ast.Attribute) \
                        and isinstance(call.func.value, ast.Name) and call.lineno > loop.end_lineno \
                        and self.function_of(call) is scope \
                        and self.syncing_metric(call.func.value.id, scope, loop):
                    self.add("DDP032", call, f"every rank reads the whole of {ast.unparse(loop.iter)} (no "
                             f"sampler), then {call.func.value.id}.compute() syncs the metric's states "
                             "across the ranks (its dist_reduce_fx): each sample is counted world_size "
                             "times; give "
                             "rank r the samples range(r, N, world_size), or evaluate on rank 0 alone")
                    break
            else:
                if self.ddp_calls and self.in_no_grad(loop.iter, strict=True) and all(
                        c.args and self.data_origin(c.args[0], scope) == "whole" for c in calls):
                    self.add(
                        "DDP032",
                        loop,
                        f"every rank evaluates the whole of {ast.unparse(loop.iter)} (no "
                        "sampler): N ranks do the same work; give rank r the samples range(r, N, "
                        "world_size) and reduce the sums, or evaluate on rank 0 alone",
                        "note",
                    )

    def syncing_metric(self, name, scope, loop):
        """`name` holds a metric that syncs its states across ranks when computed: a torchmetrics
        class, or a class of this file or the project that calls `add_state(...,
        dist_reduce_fx=...)`; and the loop updates it (`metric(x, y)`, `metric.update(...)`)."""
        if not any(isinstance(n, ast.Call) and (dotted(n.func) == name or dotted(n.func) == f"{name}.update")
                   for n in ast.walk(loop)):
            return False
        for made in (v for v in self.assigned(name, scope) if isinstance(v, ast.Call)):
            if self.origin(made.func).startswith("torchmetrics"):
                return True
            found = (self, self.classes[last(made)]) if last(made) in self.classes else \
                self.external_class(made) if self.project is not None else None
            if found is not None and any(
                    isinstance(n, ast.Call) and last(n) == "add_state"
                    and keyword(n, "dist_reduce_fx") is not None
                    for n in ast.walk(found[1])):
                return True
        return False

    def rule_stream_eval(self):
        """A token stream (range over data.size(0)) evaluated under no_grad on every rank,
        neither a sampler's nor split by rank: a note."""
        if not self.ddp_calls:
            return
        for loop in self.nodes:
            if (
                not isinstance(loop, ast.For)
                or not self.in_no_grad(loop.iter, strict=True)
                or self.guarded(loop)
            ):
                continue
            source = self.data_source(loop)
            if source and source[0] == "stream" and self.unsplit(source) is not None:
                self.add(
                    "DDP032",
                    loop,
                    f"every rank evaluates the whole of `{ast.unparse(source[1])}` (not split "
                    "by rank): N ranks do the same work; give rank r its share and reduce the sums, or "
                    "evaluate on rank 0 alone",
                    "note",
                )

    # -- DDP040, DDP041, DDP150, DDP160: what is saved, and by whom
    def state_values(self, expr, scope, line, depth=0):
        """The parts of a saved value that are a model's state: `.state_dict()` calls, and
        modules saved whole (a DDP wrapper, model.module)."""
        found = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and last(node) == "state_dict":
                found.append(("state", node))
            elif isinstance(node, (ast.Name, ast.Attribute)) and (
                    (isinstance(node, ast.Attribute) and node.attr == "module")
                    or self.kinds_of(node, line, scope) & {"ddp", "compile", "fsdp"}):
                found.append(("module", node))
            elif isinstance(node, ast.Name) and depth < 2:
                for value in self.assigned(node.id, scope):
                    if getattr(value, "lineno", line) < line:
                        found += self.state_values(value, scope, value.lineno, depth + 1)
        return found

    def from_params(self, value, function, params, state_locals):
        """`value` names a parameter of `function`; with state_locals, also through a name the
        function assigns a parameter's state_dict() (`state = {"net": self.net.state_dict()}`,
        then torch.save(state, ...)): a model's state, not a cache of data."""
        names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        return bool(names & params) or state_locals and any(
            isinstance(n, ast.Call) and last(n) == "state_dict" and isinstance(n.func, ast.Attribute)
            and dotted(n.func.value).split(".")[0] in params
            for name in names for assigned, _ in self.values_in(name, function) for n in ast.walk(assigned))

    def saver(self, function, depth=0, state_locals=False):
        """In a function of this file (or of the project): the torch.save it runs on whoever
        calls it (not under a rank test of its own), if what it saves comes from its
        parameters; or that a function it calls so runs. As (node, its Checker)."""
        key = ("saver", function, state_locals)
        if key not in self._memo:
            self._memo[key] = None
            params = set(self.params(function))
            for node in sorted((n for n in self.own_nodes(function) if isinstance(n, ast.Call)),
                               key=lambda n: (n.lineno, n.col_offset)):
                if self.guarded_within(node, function):
                    continue
                if (
                    self.origin(node.func) in ("torch.save", "save")
                    and node.args
                    and not self.per_rank_path(node)
                    and self.from_params(node.args[0], function, params, state_locals)
                ):
                    self._memo[key] = (node, self)
                    break
                resolved = self.resolve(node) if self.module and depth < 2 else None
                if resolved is not None and resolved[1] is not function and not self.per_rank_path(node):
                    inner = resolved[0].saver(resolved[1], depth + 1)
                    if inner is not None:
                        self._memo[key] = inner
                        break
        return self._memo[key]

    def save_skipped(self, call, checker, function, inner=None):
        """The helper's save (see saver) sits under a test that this call settles: on a
        parameter the call does not give, whose default is None (`if model is not None:`, a
        load mode), or on an attribute of what the call gives that this file sets from the
        rank (`if opts.keep: ...` where `opts.keep = ... rank == 0`)."""
        if inner is None:
            inner, holder = checker.saver(function)
            if holder is not checker:
                return False
        if inner not in checker.own_nodes(function):
            return False
        params = checker.params(function)
        shift = 1 if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute) else 0
        starred = any(isinstance(a, ast.Starred) for a in call.args) \
            or any(k.arg is None for k in call.keywords)
        tainted = self.tainted(self.function_of(call))

        def given(param):
            index = params.index(param) - shift
            return starred or 0 <= index < len(call.args) or keyword(call, param) is not None

        def default_none(param):
            args = function.args
            positional = args.posonlyargs + args.args
            if param in [a.arg for a in positional]:
                index = [a.arg for a in positional].index(param) - (len(positional) - len(args.defaults))
                return index >= 0 and isinstance(args.defaults[index], ast.Constant) \
                    and args.defaults[index].value is None
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if arg.arg == param:
                    return isinstance(default, ast.Constant) and default.value is None
            return False

        def passed(param):
            index = params.index(param) - shift
            if 0 <= index < len(call.args):
                return call.args[index]
            return keyword(call, param)

        child = inner
        for ancestor in checker.ancestors(inner):
            if ancestor is function:
                break
            if isinstance(ancestor, ast.If):
                test, in_body = ancestor.test, child in ancestor.body
                tested = test.left if isinstance(test, ast.Compare) and len(test.ops) == 1 \
                    and is_false(test.comparators[0]) else test
                needs_value = (in_body and (tested is test or isinstance(test.ops[0], ast.IsNot))) or (
                    not in_body and tested is not test and isinstance(test.ops[0], ast.Is))
                if isinstance(tested, ast.Name) and tested.id in params and needs_value \
                        and not given(tested.id) and default_none(tested.id):
                    return True  # snapshot(folder, tag): no model given, the load branch
                value = passed(tested.id) if isinstance(tested, ast.Name) and tested.id in params \
                    and not starred else None
                if isinstance(value, ast.Name):
                    value = self.module_value(value.id)  # save_path = None at module level, bound once
                if needs_value and isinstance(value, ast.Constant) and not value.value:
                    return True  # fit(..., save_path=None): the branch that saves never runs
                if in_body:
                    for part in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) \
                            else [test]:
                        if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) \
                                and part.value.id in params:
                            value = passed(part.value.id)
                            if value is not None and f"{dotted(value)}.{part.attr}" in tainted:
                                return True  # if opts.keep_snapshots: set from the rank here
            child = ancestor
        return False

    def per_rank_path(self, call, index=1, name="f"):
        """The file name depends on the rank: each rank writes or reads its own file; or it is
        no file at all, but a buffer in memory (`io.BytesIO()`)."""
        path = call.args[index] if len(call.args) > index else keyword(call, name)
        scope = self.function_of(call)
        if isinstance(path, ast.Name) and any(isinstance(v, ast.Call) and last(v) in ("BytesIO", "StringIO")
                                              for v in self.assigned(path.id, scope)):
            return True  # torch.save(state, buffer): bytes in this process's memory
        if isinstance(path, ast.Call) and last(path) == "BytesIO":
            return True
        return path is not None and self.depends_on_rank(path, self.tainted(scope, loose=True), loose=True)

    def loaded_plain(self, state):
        """The file loads what `state` (a wrapper's state_dict() call) saves into a model that
        is not the wrapper: `plain.load_state_dict(checkpoint["model"])`, the key it was saved
        under (or a torch.load of it, saved alone). Through a converter or a name on the way to
        the save (`{"w": convert(model.state_dict())}`), both the near holder and the save's
        key must say so: the climb only ever makes an error a note."""
        first = holder, inner = self.parents.get(state), state
        while isinstance(holder, ast.IfExp) or (  # convert(model.state_dict()) if flash else ...
                isinstance(holder, ast.Call) and inner in holder.args and "save" not in last(holder).lower()
                and last(holder) != "dict"):
            holder, inner = self.parents.get(holder), holder
        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 \
                and isinstance(holder.targets[0], ast.Name):  # weights = ...; save({"w": weights})
            name, scope = holder.targets[0].id, self.function_of(holder)
            used = [n for n in self.by_scope.get(scope, []) if isinstance(n, ast.Name) and n.id == name
                    and isinstance(n.ctx, ast.Load) and n.lineno >= holder.lineno]
            if len(used) == 1:
                holder, inner = self.parents.get(used[0]), used[0]
        if (holder, inner) != first and (isinstance(holder, ast.Dict) or (isinstance(holder, ast.Call) and (
                last(holder) == "dict" or "save" in last(holder).lower()))) \
                and not self.loaded_under(inner, holder):
            return False  # the key it is saved under goes back into the wrapper alone
        return self.loaded_under(*reversed(first))

    def loaded_under(self, state, holder):
        """loaded_plain for `state` held by `holder` (a dict's key, dict(), a save of it alone)."""
        key = None
        if isinstance(holder, ast.Dict):
            index = next((i for i, v in enumerate(holder.values) if v is state), None)
            found = holder.keys[index] if index is not None else None
            key = found.value if isinstance(found, ast.Constant) else None
        elif isinstance(holder, ast.Call) and last(holder) == "dict":
            key = next((k.arg for k in holder.keywords if k.value is state), None)
        for call in self.calls:
            if last(call) != "load_state_dict" or not call.args or not isinstance(call.func, ast.Attribute):
                continue
            if "ddp" in self.kinds_of(call.func.value, call.lineno, self.function_of(call)):
                continue
            values = [call.args[0]] + [v for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)
                                       for v in self.assigned(n.id, self.function_of(call))]
            nodes = [n for v in values for n in ast.walk(v)]
            if key is not None and any(isinstance(n, ast.Constant) and n.value == key for n in nodes):
                return True
            if key is None and isinstance(holder, ast.Call) and last(holder) != "dict" and any(
                    isinstance(n, ast.Call) and self.origin(n.func) == "torch.load" for n in nodes):
                return True
        return False

    def wrapper_given_to_a_saver(self, call, checker, function):
        """DDP041 at `call` of a function of another module of the project that saves
        `param.state_dict()` (torch.save in the function itself), where the call gives that
        parameter the DDP wrapper (`save_checkpoint(model=ddp_model)`). A note where this file
        loads a checkpoint back into the wrapper and no plain model here loads that key."""
        saves = [n for n in checker.own_nodes(function) if isinstance(n, ast.Call)
                 and checker.origin(n.func) in ("torch.save", "save") and n.args]
        if not saves or checker.guarded_within(saves[0], function):
            return
        params = checker.params(function)
        shift = 1 if params[:1] in (["self"], ["cls"]) else 0
        given = {params[i + shift]: a for i, a in enumerate(call.args) if i + shift < len(params)}
        given.update({k.arg: k.value for k in call.keywords if k.arg in params})
        scope = self.function_of(call)
        for node in checker.own_nodes(function):
            if not (isinstance(node, ast.Call) and last(node) == "state_dict" and not node.args
                    and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)):
                continue
            value = given.get(node.func.value.id)
            held = isinstance(value, (ast.Name, ast.Attribute))
            live = self.live_kinds(value, call.lineno, scope) if held else None  # the wrapper in every arm
            if not live or not all("ddp" in kinds for kinds in live) \
                    or self.outermost(value, call.lineno, scope) != "ddp" \
                    or checker.not_wrapped_here(node.func.value, node):
                continue  # m.module.state_dict() if hasattr(m, "module") else m.state_dict()
            holder = checker.parents.get(node)
            key = None
            if isinstance(holder, ast.Dict):
                found = holder.keys[holder.values.index(node)] if node in holder.values else None
                key = found.value if isinstance(found, ast.Constant) else None
            where = f"{self.helper_name(call, checker, function)} saves {node.func.value.id}.state_dict() " \
                    f"({self.at(checker, node)})"
            if self.resumed(value) and not (key is not None and self.plain_load_of(key)):
                self.add("DDP041", call, f"{where}, given the DDP wrapper {ast.unparse(value)}: its keys "
                         "start with 'module.'; this file loads them back into the wrapper, but a plain "
                         f"model cannot: pass {ast.unparse(value)}.module", "note")
            else:
                self.add("DDP041", call, f"{where}, given the DDP wrapper {ast.unparse(value)}: its keys "
                         f"start with 'module.'; pass {ast.unparse(value)}.module")
            return

    def plain_load_of(self, key):
        """A model that is not the DDP wrapper loads the checkpoint's `key` in this file
        (`model.load_state_dict(checkpoint["model"])` before the wrap)."""
        for call in self.calls:
            if last(call) != "load_state_dict" or not call.args or not isinstance(call.func, ast.Attribute):
                continue
            if "ddp" in self.kinds_of(call.func.value, call.lineno, self.function_of(call)):
                continue
            if any(isinstance(n, ast.Constant) and n.value == key for n in ast.walk(call.args[0])):
                return True
        return False

    def resumed(self, owner):
        """The file loads a checkpoint back into this wrapper (owner.load_state_dict, or the
        wrapper handed to a load/resume helper): its 'module.' keys come back where they were."""
        if "loaded_into" not in self._memo:  # every name a checkpoint is loaded into, once
            into = set()
            for call in self.calls:
                if last(call) == "load_state_dict" and isinstance(call.func, ast.Attribute):
                    into.add(dotted(call.func.value))
                elif re.search(r"(?i)load|resume|restore|restart", last(call)):
                    into |= {dotted(v) for v in list(call.args) + [k.value for k in call.keywords]}
            self._memo["loaded_into"] = into - {""}
        return dotted(owner) in self._memo["loaded_into"]

    def rule_saves(self):
        sharded = self.sharded_state()
        fsdp1 = bool({"FullyShardedDataParallel", "FSDP"} & self.names)  # its optimizer's state: shards
        for call in self.calls:
            name = self.origin(call.func)
            scope = self.function_of(call)
            external = None if self.callee(call) is not None else self.external(call) or (
                None if self.in_launcher(call) else self.instance_method(call))  # trainer.save()
            found = None if external is None else external[0].saver(
                external[1], state_locals=self.external(call) is None)  # a method: its state in a local too
            if found is not None and not self.guarded(call) and not (
                    found[1] is external[0] and self.save_skipped(call, *external, found[0])) and not any(
                        self.depends_on_rank(a, self.tainted(scope, loose=True), loose=True)
                        for a in list(call.args) + [k.value for k in call.keywords] if is_path(a)):
                inner, checker = found
                unread = self.unread_guard(call)
                self.add("DDP040", call, f"{self.helper_name(call, *external)} runs torch.save "
                         f"({self.at(checker, inner)}) on every rank: N processes write the same file; "
                         "call it on rank 0 alone (if rank == 0:), then dist.barrier()" if unread is None
                         else f"{self.helper_name(call, *external)} runs torch.save "
                         f"({self.at(checker, inner)}) under `if {ast.unparse(unread)}:`, a test the checker "
                         "cannot read: if it is not a test on the rank, every rank writes the same file",
                         None if unread is None else "note")
            if external is not None:
                self.wrapper_given_to_a_saver(call, *external)
            if "save" not in last(call).lower() or name.startswith(("dcp.", "torch.distributed.checkpoint")):
                continue
            saved = [
                v
                for arg in call.args[:1] + [k.value for k in call.keywords if k.arg in ("obj", "state")]
                for v in self.state_values(arg, scope, call.lineno)
            ]
            states = [node for kind, node in saved if kind == "state"]
            owners_said = set()
            for state in states:
                owner = state.func.value if isinstance(state.func, ast.Attribute) else None
                kinds = self.kinds_of(owner, call.lineno, scope) if owner is not None else set()
                outer = self.outermost(owner, call.lineno, scope)
                if self.not_wrapped_here(owner, state) or self.in_fsdp_context(owner, state):
                    continue  # x.module.state_dict() if isinstance(x, DDP) else x.state_dict()
                # DDP(compiled) in one branch, the compiled model in another: the wrapper's keys
                # (DDP041) where it runs distributed, not a word on the one-process branch
                if "compile" in kinds and not self.never_compiled(state) and not (
                        "ddp" in kinds and (outer == "ddp" or self.compiled_alone_in_a_branch(owner))):
                    self.add("DDP150", state, f"{ast.unparse(owner)} is the compiled model: its "
                             "state_dict()'s keys start with '_orig_mod.'; save the model inside it")
                elif "ddp" in kinds and dotted(owner) not in owners_said:
                    owners_said.add(dotted(owner))  # one word a wrapper, however many arms save it
                    inside = f"{ast.unparse(owner)}.module"  # DDP(torch.compile(m)): '_orig_mod.' next
                    held = ast.Attribute(value=owner, attr="module")
                    if "compile" in self.kinds_of(held, call.lineno, scope):
                        inside += "._orig_mod"
                    if self.resumed(owner) and not self.loaded_plain(state):
                        self.add("DDP041", state, f"{ast.unparse(owner)} is the DDP wrapper: its "
                                 "state_dict()'s keys start with 'module.'; this file loads them back into "
                                 f"the wrapper, but a plain model cannot: save {inside}.state_dict()", "note")
                    else:
                        self.add("DDP041", state, f"{ast.unparse(owner)} is the DDP wrapper: its "
                                 f"state_dict()'s keys start with 'module.'; save {inside}.state_dict()")
            target = self.callee(call)
            helper = self.saver(target) if target is not None else None
            if not saved or not ((name in ("torch.save", "save") and target is None) or helper is not None):
                continue
            optimizers = [state for state in states if fsdp1 and isinstance(state.func, ast.Attribute)
                          and re.search(r"(?i)optim", last(state.func.value))
                          and not self.other_arm_gathers(state)]
            shards = sharded and not all(self.full_state(state) or self.of_ddp(state, call.lineno)
                                         or self.other_arm_gathers(state) for state in states)
            if (shards or optimizers) and self.per_rank_path(call) and self.loads_per_rank(call):
                continue  # optimizer.{rank}.pth, loaded back by the same rank: a resume of its own
            if shards:
                self.add("DDP160", call, "torch.save of a sharded model's state_dict: each rank writes "
                         "its own shards; use torch.distributed.checkpoint (dcp.save)")
            elif optimizers:
                self.add("DDP160", call, "torch.save of the optimizer of an FSDP model: its state_dict() "
                         "holds this rank's shards, whatever the model's state_dict type; use "
                         "FSDP.optim_state_dict() or torch.distributed.checkpoint (dcp.save)")
            elif self.guarded(call) or (helper is None and self.per_rank_path(call)):
                continue
            elif (unread := self.unread_guard(call)) is not None:
                self.add("DDP040", call, f"torch.save under `if {ast.unparse(unread)}:`, a test the checker "
                         "cannot read (a call or a flag set out of its sight): if it is not a test on the "
                         "rank, every rank writes the same file; save on rank 0 alone", "note")
            elif helper is not None:
                self.add(
                    "DDP040",
                    call,
                    f"{last(call)}() runs torch.save (line {helper[0].lineno}) on every rank: N "
                    "processes write the same file; call it on rank 0 alone (if rank == 0:), then "
                    "dist.barrier()",
                )
            else:
                whole = " (the whole module)" if all(kind == "module" for kind, _ in saved) else ""
                self.add("DDP040", call, f"torch.save{whole} runs on every rank: N processes write the same "
                         "file; save on rank 0 alone (if rank == 0:), then dist.barrier()")

    def unread_guard(self, node):
        """The test of an `if` around `node` (in its function) that the checker cannot read, so
        that it cannot tell whether it picks rank 0: a call it cannot follow (`if
        should_save(args):`, `if is_primary() and ...:`), or a flag whose value is out of its
        sight (`if saver.enabled:`, `if args.is_master:` that nothing in view sets and no
        option names, `if self.on:` set only from such a value). None where every test is
        readable (`if epoch % 5 == 0:`, an option's flag): there the save runs on every rank."""
        scope = self.function_of(node)
        for ancestor in self.ancestors(node):
            if ancestor is scope:
                break
            if isinstance(ancestor, ast.If) and self.opaque(ancestor.test, scope):
                return ancestor.test
        return None

    def opaque(self, expr, scope, depth=0):
        """`expr` holds a call or a flag whose value the checker cannot read (see
        unread_guard); at depth 0 only one whose name may mean a writer (GUARD_WORD), below it
        (the value a flag was set from) any."""
        if depth > 3:
            return False
        parts, todo = [], [expr]
        while todo:  # the parts that are tested as a truth: not a number compared (epoch % cfg.SAVE_FREQ)
            part = todo.pop()
            if isinstance(part, ast.BoolOp):
                todo += part.values
            elif isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
                todo.append(part.operand)
            else:
                parts.append(part)
        for n in parts:
            if isinstance(n, ast.Call):
                head = dotted(n.func).split(".")[0]
                if last(n) in BUILTINS | CARRY_RANK | {"any", "all", "hasattr", "getattr", "str", "bool"} \
                        or head in ("os", "torch", "math", "np", "numpy", "time", "dist", "sys", "re") \
                        or isinstance(n.func, ast.Attribute) and not isinstance(n.func.value, ast.Name):
                    continue  # a builtin, a library call, a method of a value (path.exists())
                if self.resolve(n) is None and (depth or GUARD_WORD.search(last(n))):
                    return True
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                    and isinstance(n.ctx, ast.Load) and (depth or GUARD_WORD.search(n.attr)):
                if n.value.id == "self":
                    cls = next((a for a in self.ancestors(scope) if isinstance(a, ast.ClassDef)), None)
                    values = [] if cls is None else [
                        (value, where) for method in cls.body if isinstance(method, FUNCTION)
                        for value, where in self.values_in(f"self.{n.attr}", method)]
                    if not values or any(self.opaque(v, w, depth + 1) for v, w in values):
                        return True
                    continue
                self.assigned(dotted(n), scope)  # builds the table
                if not self._memo["assignments"].get(dotted(n)) and not self.is_option(n.attr):
                    return True
        return False

    def is_option(self, attribute):
        """A command-line option of this file or of a module it reaches names `attribute`."""
        calls = [c for c in self.calls if last(c) == "add_argument"]
        if not self.module and not self.followed and self.project is not None:
            for path in dict.fromkeys(p for p, _, _ in self.deep_reach()):
                tree = parse_module(path)
                calls += [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                          and last(n) == "add_argument"] if tree is not None else []
        for call in calls:
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            dest = keyword(call, "dest")
            if attribute in ({dest.value} if isinstance(dest, ast.Constant) else {
                    n.lstrip("-").replace("-", "_") for n in names if n.startswith("-")}):
                return True
        return False

    def sharded_state(self):
        """A model's state_dict() holds shards here: FSDP2 (`fully_shard`, DTensor), or FSDP1
        told to give its sharded or local state (SHARDED_STATE_DICT, LOCAL_STATE_DICT), in the
        file or in an fsdp module of the project it imports. FSDP1's own default is the whole
        model (torch 2.14: `_FSDPState._state_dict_type = StateDictType.FULL_STATE_DICT`,
        torch/distributed/fsdp/_common_utils.py), which its state_dict() gathers."""
        shards = {"fully_shard", "FSDPModule", "DTensor", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"}
        if shards & (self.names | self.attrs):
            return True
        if self.project is None or self.path is None:
            return False
        for node in self.nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                level = getattr(node, "level", 0)
                for module in (m for m in modules if "fsdp" in m.lower()):
                    path = self.project.find(module, level, self.folder)
                    tree = parse_module(path) if path is not None else None
                    if tree is not None and any(
                            (isinstance(n, ast.Name) and n.id in ("fully_shard", "FSDPModule"))
                            or (isinstance(n, ast.Attribute) and n.attr == "set_state_dict_type")
                            for n in ast.walk(tree)):
                        return True
        return False

    def outermost(self, owner, line, scope):
        """'ddp' or 'compile': what the last binding of `owner` before `line` made, where it
        is one of them: `model = DDP(torch.compile(model))` is a wrapper whose keys start with
        'module.', `model = torch.compile(DDP(model))` a compiled model ('_orig_mod.')."""
        live = self.live_kinds(owner, line, scope)
        if live is None:
            return None
        outer = {k for kinds in live for k in kinds} if all(len(k) <= 1 for k in live) else set()
        return next(iter(outer)) if len(outer) == 1 else None

    def live_kinds(self, owner, line, scope):
        """What each binding of `owner` still live at `line` made ({'ddp', 'compile'} or a part
        of it), in the innermost scope that binds it; None where none does."""
        entries = self.bindings.get(dotted(owner), [])
        for where in self.enclosing(scope):
            own = [(kinds, node) for kinds, at, at_scope, node in entries if at_scope is where and at <= line]
            if not own:
                continue
            # the bindings still live here: not followed by one that runs whenever they run
            return [kinds & {"ddp", "compile"} for i, (kinds, node) in enumerate(own)
                    if not any(self.runs_whenever(later, node) for _, later in own[i + 1:])]
        return None

    def compiled_alone_in_a_branch(self, owner):
        """`owner` is bound to a DDP wrapper in one branch and to a compiled model with no DDP
        in it in another (the one-process branch: `self.model = DDP(compiled)` else `self.model
        = compiled`): the keys it saves are the wrapper's where the job is distributed. Not
        `torch.compile(ddp)`, a compiled wrapper."""
        entries = self.bindings.get(dotted(owner), [])
        wrapped = any(  # DDP(compiled) itself, not a name that may hold some wrapper
            isinstance(value, ast.Call) and self.call_kind(value) == "ddp" and value.args
            and "compile" in self.kinds_of(value.args[0], at, self.function_of(node))
            for _kinds, at, _where, node in entries if (value := getattr(node, "value", None)) is not None)
        for kinds, at, _where, node in entries:
            value = getattr(node, "value", None)
            if kinds & {"ddp", "compile"} != {"compile"} or value is None:
                continue
            inside = value.args[0] if isinstance(value, ast.Call) and self.call_kind(value) == "compile" \
                and value.args else value
            if wrapped and "ddp" not in self.kinds_of(inside, at, self.function_of(node)):
                return True
        return False

    def not_wrapped_here(self, owner, node):
        """`node` runs only where `owner` is no wrapper: the else of `isinstance(owner, DDP)`
        (a DataParallel or compiled class among the types) or of `hasattr(owner, "module")`
        (of `not ...`: its body)."""
        name = dotted(owner)
        for test, side in self.conditions(node):
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, side = test.operand, not side
            if side or not (isinstance(test, ast.Call) and len(test.args) >= 2 and name
                            and dotted(test.args[0]) == name):
                continue
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            if last(test) == "isinstance" and any(
                    re.search(r"DataParallel|DDP|OptimizedModule", last(k)) for k in kinds):
                return True
            if last(test) == "hasattr" and isinstance(test.args[1], ast.Constant) \
                    and test.args[1].value in ("module", "_orig_mod"):
                return True
        return self.wrapped_only_elsewhere(owner, node)

    def in_fsdp_context(self, owner, node):
        """`node` runs inside `with FSDP.state_dict_type(owner, ...)`: there `owner` is the
        FSDP model (the branch that chose it), whatever else the name holds elsewhere."""
        name = dotted(owner)
        return bool(name) and any(
            isinstance(a, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and last(item.context_expr) == "state_dict_type"
                and item.context_expr.args and dotted(item.context_expr.args[0]) == name
                for item in a.items)
            for a in self.ancestors(node))

    def wrapped_only_elsewhere(self, owner, node):
        """Every DDP wrap of `owner` runs only where `node` does not: `if cfg["DDP"]: model =
        DDP(model)`, then `model.module.state_dict() if cfg["DDP"] else model.state_dict()`.
        A later binding that only moves the model (`model = model.to(device)`) keeps its kind."""
        name = dotted(owner)
        wraps = []
        for kinds, _at, _where, binding in self.bindings.get(name, []):
            if "ddp" not in kinds:
                continue
            value = getattr(binding, "value", None)
            if value is None:
                return False
            if any(isinstance(n, ast.Call) and self.is_ddp_call(n) for n in ast.walk(value)):
                wraps.append(binding)
                continue
            base = value
            while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
                base = base.func.value
            if dotted(base) != name:
                return False  # model = other: a wrapper it may hold, out of this test
        return bool(wraps) and all(self.exclusive(w, node) for w in wraps)

    def runs_whenever(self, later, earlier):
        """`later` runs in every run where `earlier` runs: each if around it is around `earlier`
        too, on the same side."""
        around = {(id(test), side) for test, side in self.conditions(earlier)}
        return all((id(test), side) in around for test, side in self.conditions(later))

    def conditions(self, node):
        """(test, side) of every if around `node`: side True in its body, False in its else."""
        out, child = [], node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (ast.If, ast.IfExp)) and child is not ancestor.test:
                body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
                out.append((ancestor.test, any(child is b for b in body)))
            child = ancestor
        return out

    def exclusive(self, a, b):
        """`a` and `b` never run in one run: one in `if T:`, the other in its else (or in `if
        not T:`)."""
        return any((ast.dump(ta) == ast.dump(tb) and sa != sb) or (negates(ta, tb) and sa == sb)
                   for ta, sa in self.conditions(a) for tb, sb in self.conditions(b))

    def never_compiled(self, node):
        """Every torch.compile of the file is in a branch that excludes `node`'s: `if not
        args.no_compile: model = torch.compile(model)`, the save in the `else` of that test."""
        compiles = [c for c in self.calls if self.call_kind(c) == "compile"]
        return bool(compiles) and all(self.exclusive(c, node) for c in compiles)

    def other_arm_gathers(self, state):
        """`state` sits in one arm of a choice whose other arm holds FSDP's own state
        (`optim_state if args.fsdp else optimizer.state_dict()`, where `optim_state =
        FSDP.optim_state_dict(model, optimizer)`; or a state_dict() under FULL_STATE_DICT):
        the test picks the FSDP model there, so this arm serves the other one."""
        scope = self.function_of(state)
        child = state
        for ancestor in self.ancestors(state):
            if isinstance(ancestor, SCOPE):
                break
            other = None
            if isinstance(ancestor, ast.IfExp) and child is not ancestor.test:
                other = [ancestor.orelse if child is ancestor.body else ancestor.body]
            elif isinstance(ancestor, ast.If) and child is not ancestor.test and ancestor.orelse:
                other = ancestor.orelse if child in ancestor.body else ancestor.body
            child = ancestor
            if other is None:
                continue
            values = list(other)
            for node in [n for o in other for n in ast.walk(o)]:
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    values += self.assigned(node.id, scope)
            for node in [n for v in values for n in ast.walk(v)]:
                if isinstance(node, ast.Call) and (
                        last(node).endswith("optim_state_dict")
                        or last(node) in ("get_optimizer_state_dict", "get_model_state_dict",
                                          "get_state_dict")
                        or (last(node) == "state_dict" and self.full_state(node))):
                    return True
        return False

    def loads_per_rank(self, save):
        """The file loads back a file named by the rank, as `save` writes it: each rank's own
        shards back on the same rank (`f"optimizer.{rank:05d}.pth"` saved, then loaded). Where
        both paths show words (`optimizer`), they share one."""
        def words(path, scope):
            if path is None:
                return set()
            values = [path] + [v for n in ast.walk(path) if isinstance(n, ast.Name)
                               for v in self.assigned(n.id, scope)]
            return {w for v in values for n in ast.walk(v) if isinstance(n, ast.Constant)
                    and isinstance(n.value, str) for w in re.findall(r"[A-Za-z]{3,}", n.value)}
        saved = words(save.args[1] if len(save.args) > 1 else keyword(save, "f"), self.function_of(save))
        for call in self.calls:
            if self.origin(call.func) != "torch.load" or not self.per_rank_path(call, 0, "f"):
                continue
            loaded = words(call.args[0] if call.args else keyword(call, "f"), self.function_of(call))
            if not saved or not loaded or saved & loaded:
                return True
        return False

    def full_state(self, state_call):
        """Inside `with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, ...)`: the whole
        model, gathered (FSDP1's way to save it)."""
        return any(isinstance(a, ast.With) and any(
            last(n) == "FULL_STATE_DICT" for item in a.items for n in ast.walk(item.context_expr)
            if isinstance(n, (ast.Name, ast.Attribute))) for a in self.ancestors(state_call))

    def of_ddp(self, state_call, line):
        """`model.module.state_dict()` or a DDP wrapper's: a DDP model's state, not FSDP shards."""
        owner = state_call.func.value if isinstance(state_call.func, ast.Attribute) else None
        return (isinstance(owner, ast.Attribute) and owner.attr == "module") \
            or "ddp" in self.kinds_of(owner, line)

    def mapped(self, call):
        return len(call.args) >= 2 or keyword(call, "map_location") is not None

    def other_branch_maps(self, call):
        """`if args.gpu is None: torch.load(p) else: torch.load(p, map_location=loc)`: the
        script chose where each case loads."""
        branch = next((a for a in self.ancestors(call) if isinstance(a, ast.If)), None)
        return branch is not None and any(
            isinstance(n, ast.Call) and self.origin(n.func) == "torch.load" and self.mapped(n)
            for n in ast.walk(branch))

    def rule_load(self):
        for call in self.calls:
            if self.origin(call.func) == "torch.load" and not self.mapped(call) and not self.guarded(call) \
                    and not self.per_rank_path(call, 0, "f") and not self.other_branch_maps(call):
                self.add("DDP042", call, "torch.load without map_location: tensors go back to the device "
                         "that saved them (on GPUs, one GPU for every rank); pass map_location=device")
        for call in self.calls:  # trainer.load(path): a function of the project that loads a checkpoint
            if self.callee(call) is not None or self.guarded(call) or self.in_launcher(call):
                continue
            external = self.external(call) or self.instance_method(call)
            if external is None or not any(last(n) == "load_state_dict" for n in ast.walk(external[1])):
                continue
            checker, function = external
            load = next((n for n in checker.own_nodes(function) if isinstance(n, ast.Call)
                         and checker.origin(n.func) == "torch.load" and not checker.mapped(n)
                         and not checker.guarded_within(n, function)
                         and not checker.per_rank_path(n, 0, "f") and not checker.other_branch_maps(n)), None)
            if load is not None:  # its module's own calls may be rank 0's; this one is every rank's
                self.add("DDP042", call, f"{self.at(checker, load)}: torch.load without map_location: "
                         "tensors go back to the device that saved them (on GPUs, one GPU for every rank); "
                         "pass map_location=device")

    # -- DDP050: accumulation without no_sync
    def rule_no_sync(self):
        if not self.ddp_calls and not getattr(self, "entry_wraps", False):
            return  # entry_wraps: a module of the project that a script wrapping DDP reaches
        ddp_syncs = {id(n) for n in syncs_ddp(self.tree)}  # not a no_sync only a sharded model runs
        for node in self.nodes:  # the fix, where gradients are made (not in a no_grad evaluation)
            if isinstance(node, ast.Attribute) and node.attr in ("no_sync", "require_backward_grad_sync") \
                    and not self.in_no_grad(node, strict=True) and id(node) in ddp_syncs:
                return
            if isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call) \
                    and "sync" in last(node.context_expr).lower() and node.context_expr.args:
                return  # a no_sync helper of the project: with ddp_sync(ddp, last_round):
            if isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call) \
                    and self.handed_the_model(node.context_expr):
                return  # with backend.context_for_microstep(model=model, ...): may set its sync, unseen
        if self.syncs_in_reach():
            return  # no_sync in a module of the project the script reaches: out of this rule's sight
        said = []  # the loops said: an inner micro-batch loop first, never the loop around it too
        loops = [n for n in self.nodes if isinstance(n, (ast.For, ast.While))]
        for loop in sorted(loops, key=lambda n: -len(list(self.ancestors(n)))):
            if any(loop in self.ancestors(inner) for inner in said):
                continue  # cached features, then `for j in range(accum_freq):` backward: said there
            count = len(self.findings)
            self.no_sync_loop(loop)
            if len(self.findings) > count:
                said.append(loop)
        self.no_sync_functions(said)
        self.no_sync_helpers()

    def handed_the_model(self, call):
        """A context out of sight that is given the model (`with backend.get_context(model=model,
        microstep_idx=i):`, `with accelerator.accumulate(model):`): it may hold back the
        all-reduce itself, as no_sync does."""
        if self.resolve(call) is not None or self.origin(call.func).startswith("torch."):
            return False
        given = list(call.args) + [k.value for k in call.keywords]
        return any(isinstance(a, (ast.Name, ast.Attribute)) and re.search(r"(?i)model|ddp", last(a))
                   for a in given)

    def syncs_in_reach(self):
        """A function of the project that the script reaches uses no_sync or
        require_backward_grad_sync (not the rest of its module: code this script never runs)."""
        return any(syncs_ddp(function) for _, function, _ in self.deep_reach())

    def no_sync_functions(self, said):
        """DDP050 on a function called once per micro-batch (a trainer's `step(batch, i)`):
        backward() on every call, the optimizer step only under a counter's test
        (`i % k == 0`, `self.accum_count >= k`), wherever the loop that calls it is."""
        for function in (n for n in self.nodes if isinstance(n, FUNCTION)):
            if any(function in self.ancestors(loop) or loop in self.ancestors(function) for loop in said):
                continue
            calls = [n for n in self.own_nodes(function) if isinstance(n, ast.Call)]
            backwards = [c for c in calls if self.is_backward(c) and self.every_call(c, function)]
            steps = [c for c in calls if self.is_optimizer_step(c)]
            if backwards and not steps:  # self.update_optimizer() after the backward: its step
                helper = next((c for c in calls if c.lineno > backwards[0].lineno
                               and self.every_call(c, function) and self.callee(c) not in (None, function)
                               and self.steps_on_a_counter(self.callee(c))), None)
                if helper is not None:
                    self.add("DDP050", backwards[0], f"{function.name}() runs backward() on every call and "
                             f"{self.callee(helper).name}() steps the optimizer only when a counter says "
                             "so: each call's backward() all-reduces; wrap all but the last micro-batch in "
                             "model.no_sync()")
                continue
            if not backwards or not self.steps_on_a_counter(function, after=backwards[0].lineno):
                continue
            self.add("DDP050", backwards[0], f"{function.name}() runs backward() on every call and "
                     "steps the optimizer only when a counter says so: each call's backward() "
                     "all-reduces; wrap all but the last micro-batch in model.no_sync()")

    def steps_on_a_counter(self, function, after=0):
        """Every optimizer step of `function` (after line `after`) waits on a counter's test
        (`i % k == 0`, `self.count >= k`, `step - self.last_step >= k`); and it has one."""
        own = self.own_nodes(function)
        steps = [n for n in own if isinstance(n, ast.Call) and self.is_optimizer_step(n)]
        counters = {dotted(n.target) for n in own
                    if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)}
        return bool(steps) and all(s.lineno > after and any(
            isinstance(a, ast.If) and self.counter_test(a.test, counters)
            for a in self.between(s, function)) for s in steps)

    def every_call(self, node, function):
        """`node` runs on every call of `function`: in no loop of it, and each `if` around it
        has a backward() on its other side too (`scaler.scale(loss).backward()` else `loss.backward()`)."""
        for a in self.between(node, function):
            if isinstance(a, (ast.For, ast.While, ast.Try) + SCOPE):
                return False
            if isinstance(a, ast.If):
                inside = any(node is n for s in a.body for n in ast.walk(s))
                other = a.orelse if inside else a.body
                if not any(isinstance(n, ast.Call) and self.is_backward(n)
                           for s in other for n in ast.walk(s)):
                    return False
        return True

    def counter_test(self, test, counters):
        """A test of a micro-batch counter: `i % k == 0`, or a comparison of a name that counts
        micro-batches (accum, micro) or that the function adds to (`self.count += 1`)."""
        if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test)):
            return True
        if any(isinstance(n, ast.Compare) and any(  # steps since the last one: step - self.last_step >= k
                isinstance(o, ast.BinOp) and isinstance(o.op, ast.Sub)
                and isinstance(o.right, (ast.Name, ast.Attribute)) and re.search(r"(?i)last", last(o.right))
                for o in [n.left, *n.comparators]) for n in ast.walk(test)):
            return True
        return any(isinstance(n, ast.Compare) and any(
            isinstance(o, (ast.Name, ast.Attribute)) and (
                dotted(o) in counters or re.search(r"accum|micro", last(o).lower()))
            for o in [n.left, *n.comparators]) for n in ast.walk(test))

    def no_sync_loop(self, loop):
        """DDP050 on one loop: backward() on every micro-batch, the step after several."""
        body = [n for s in loop.body for n in ast.walk(s)]
        calls = [c for c in body if isinstance(c, ast.Call)]
        backwards = [c for c in calls if self.is_backward(c)]
        if not backwards:  # backward(loss, scaler): a helper that runs backward() and no step
            backwards = [c for c in calls if isinstance(c.func, ast.Name) and self.reaches(c, "is_backward")
                         and not self.reaches(c, "is_optimizer_step")]
        scaled = [
            c for c in calls if keyword(c, "update_grad") is not None
        ]  # loss_scaler(loss, opt, update_grad=)
        if scaled and all(self.counts_steps(keyword(c, "update_grad")) for c in scaled):
            self.add(
                "DDP050",
                scaled[0],
                f"{last(scaled[0])}(..., update_grad=...) runs backward() on every "
                "micro-batch and steps after several: each backward() all-reduces; wrap all but the "
                "last in model.no_sync()",
            )
            return
        gated = next((c for c in calls if self.steps_when_told(c)), None)
        if gated is not None:  # optimizer_step(loss, ..., is_update=step % k == 0)
            self.add("DDP050", gated, f"{last(gated)}() runs backward() on every micro-batch and steps "
                     "when told, every few: each backward() all-reduces; wrap all but the last in "
                     "model.no_sync()")
            return
        if not backwards:
            return
        steps = [c for c in calls if self.is_optimizer_step(c) or self.reaches(c, "is_optimizer_step")]
        if steps:
            accumulating = all(any(isinstance(a, ast.If) and self.counts_steps(a.test)
                                   for a in self.between(s, loop))
                               or self.skipped_before(s, loop, backwards) for s in steps)
        else:  # no step inside: micro-batches, with the step after the loop
            words = ast.unparse(loop.iter if isinstance(loop, ast.For) else loop.test) + (
                ast.unparse(loop.target) if isinstance(loop, ast.For) else "")
            accumulating = bool(re.search(r"(?i)micro|accum|chunk", words)) or self.step_after(loop)
        if accumulating:
            self.add("DDP050", backwards[0], "backward() on every micro-batch, the optimizer step after "
                     "several: each backward() all-reduces; wrap all but the last in model.no_sync()")

    def no_sync_helpers(self):
        for call in self.calls:  # train_one_epoch(model, ...) of the project: its loss scaler
            external = self.external(call)
            scaled = external[0].scaled_every_few(external[1]) if external is not None else None
            if scaled is not None:
                self.add("DDP050", call, f"{self.helper_name(call, *external)} calls {last(scaled)}(..., "
                         f"update_grad=...) ({self.at(external[0], scaled)}): backward() on every "
                         "micro-batch, the step after several, and each backward() all-reduces; wrap all "
                         "but the last in model.no_sync()")

    def scaled_every_few(self, function):
        """The loss scaler call of a loop of `function` (a module of the project) told to step
        every few micro-batches (`loss_scaler(loss, optimizer, update_grad=(i + 1) % k == 0)`),
        where the module shows no no_sync() or require_backward_grad_sync."""
        if self.attrs & {"no_sync", "require_backward_grad_sync"}:
            return None
        for loop in self.own_nodes(function):
            if isinstance(loop, (ast.For, ast.While)):
                for call in (n for s in loop.body for n in ast.walk(s) if isinstance(n, ast.Call)):
                    told = keyword(call, "update_grad")
                    values = [told] + (self.assigned(told.id, function) if isinstance(told, ast.Name) else [])
                    if told is not None and any(self.counts_steps(v) for v in values):
                        return call  # update_grad=apply_update, apply_update = (i + 1) % k == 0
        return None

    def skipped_before(self, step, loop, backwards):
        """`if step % k != 0: continue` between a backward() and the step: the backward runs
        on every micro-batch, the step every few (not a batch skipped whole, before both)."""
        return any(isinstance(n, ast.If) and self.counts_steps(n.test) and n.body
                   and isinstance(n.body[-1], ast.Continue) and self.loop_of(n.body[-1]) is loop
                   and any(b.lineno < n.lineno for b in backwards)
                   and n.end_lineno < step.lineno for s in loop.body for n in ast.walk(s))

    def steps_when_told(self, call):
        """A function of the file or the project that runs backward() and steps the optimizer
        only under a test of one of its parameters, given a value that counts micro-batches
        there (`is_update=step % k == 0`, or a name assigned one)."""
        resolved = self.resolve(call)
        if resolved is None:
            return False
        checker, function = resolved
        own = checker.own_nodes(function)
        if not any(isinstance(n, ast.Call) and checker.is_backward(n) for n in own):
            return False
        params = checker.params(function)
        gates = set()
        for step in (n for n in own if isinstance(n, ast.Call) and checker.is_optimizer_step(n)):
            tests = [a.test for a in checker.between(step, function) if isinstance(a, ast.If)]
            names = {t.id for t in tests if isinstance(t, ast.Name) and t.id in params}
            if not names:
                return False  # a step on every call
            gates |= names
        scope = self.function_of(call)
        for name in gates:
            value = checker.passed(function, call, name, caller=self)
            values = [value] + (self.assigned(value.id, scope) if isinstance(value, ast.Name) else [])
            if value is not None and not isinstance(value, ast.Constant) and any(
                    self.counts_steps(v) for v in values):
                return True
        return False

    def step_after(self, loop):
        """An optimizer step after the loop, in the loop or function around it."""
        around = next(
            (a for a in self.ancestors(loop) if isinstance(a, (ast.For, ast.While) + SCOPE)), self.tree
        )
        return any(isinstance(n, ast.Call) and self.is_optimizer_step(n) and n.lineno > loop.end_lineno
                   for n in ast.walk(around))

    @staticmethod
    def counts_steps(test):
        """`(step + 1) % k == 0`, `is_last`, `accumulated == k`: a step every few micro-batches
        (not `if torch.isfinite(loss):`, a step skipped now and then)."""
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test)) or any(
            isinstance(n, (ast.Name, ast.Attribute)) and re.search(r"accum|last|sync|micro", last(n).lower())
            for n in ast.walk(test))

    def between(self, node, top):
        out = []
        for ancestor in self.ancestors(node):
            if ancestor is top:
                break
            out.append(ancestor)
        return out

    # -- DDP060: fp16 without a scaler
    def resolves_to_fp16(self, node, scope, depth=0):
        """float16 possible: torch.float16, "fp16", a name bound to one, a dict lookup with
        float16 among its values, either branch of a conditional."""
        if node is None or depth > 4:
            return False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in ("float16", "half"):
                return True
            if isinstance(sub, ast.Constant) and sub.value in ("float16", "fp16", "half", "16-mixed"):
                return True
            if isinstance(sub, ast.Name) and any(
                    self.resolves_to_fp16(v, scope, depth + 1) for v in self.assigned(sub.id, scope)):
                return True
        return False

    def rule_fp16(self):
        scaled = any(
            last(c) in ("scale", "scale_loss")
            or (  # scaler.scale(loss), apex's amp.scale_loss
                re.search(r"(?i)scaler", last(c)) and not last(c)[:1].isupper() and c.args
            )  # loss_scaler(loss, opt)
            for c in self.calls
        )
        if scaled:
            return  # the loss is scaled: by a GradScaler, or by a loss scaler of the project's
        for call in self.calls:
            name = self.origin(call.func)
            if last(call) != "autocast" or is_false(keyword(call, "enabled")):
                continue
            if self.in_no_grad(call, strict=True) or self.autocast_without_backward(call) \
                    or self.evaluation_without_backward(call):
                continue  # an evaluation: no backward, nothing to underflow
            scope = self.function_of(call)
            dtype = keyword(call, "dtype")
            if dtype is None and "cuda" not in name and len(call.args) >= 2:
                dtype = call.args[1]  # torch.autocast(device_type, dtype)
            device = call.args[0] if call.args and "cuda" not in name else keyword(call, "device_type")
            cuda_default = dtype is None and (
                name.endswith("cuda.amp.autocast")
                or (isinstance(device, ast.Constant) and device.value == "cuda")
            )
            if cuda_default or self.resolves_to_fp16(dtype, scope):
                self.add("DDP060", call, "autocast in float16 and no GradScaler: gradients below 6e-8 "
                         "become 0; scale the loss with torch.amp.GradScaler, or use dtype=torch.bfloat16")
                continue
            if dtype is None or isinstance(dtype, ast.Constant) or self.names_a_dtype(dtype, scope) \
                    or not any(isinstance(n, ast.Call) and self.is_backward(n) for n in ast.walk(scope)) \
                    or self.near_scaler():
                continue  # a dtype in sight (not float16), no backward beside it, or a loss scaler near
            values = [(dtype, None)]
            if isinstance(dtype, ast.Name) and isinstance(scope, FUNCTION) and dtype.id in self.params(scope):
                values = self.arguments_for(scope, dtype.id) or values  # warm_up(model, x, cfg.amp_dtype)
            elif isinstance(dtype, ast.Name):  # dtype = cfg.amp_dtype, then autocast(dtype=dtype)
                values = [(v, None) for v in self.assigned(dtype.id, scope)] or values
            unread = False
            for value, site in values:
                at = f" (passed at line {site.lineno})" if site is not None else ""
                if site is not None and self.resolves_to_fp16(value, self.function_of(site)):
                    self.add("DDP060", call, f"autocast in float16 (`{ast.unparse(value)[:40]}`{at}) and no "
                             "GradScaler: gradients below 6e-8 become 0; scale the loss with "
                             "torch.amp.GradScaler, or use dtype=torch.bfloat16")
                    break
                returned = None if self.names_a_dtype(value, self.function_of(site or call)) \
                    else self.dtype_property(value)
                if returned is not None and returned[1]:
                    self.add("DDP060", call, f"autocast's dtype `{ast.unparse(value)[:40]}`{at} can be "
                             f"float16 ({returned[0]}:{returned[1]} {returned[2]} torch.float16) and no "
                             "GradScaler is in reach: gradients below 6e-8 become 0 there; scale the loss "
                             "with torch.amp.GradScaler, or use torch.bfloat16", "warning")
                    break
                unread = unread or returned is None and not self.names_a_dtype(
                    value, self.function_of(site or call))
            else:
                named = self.near_fp16() if unread else None
                if named is not None:  # a property read whole, with no float16 in it: quiet
                    self.add("DDP060", call, f"autocast's dtype `{ast.unparse(dtype)[:40]}` is out of the "
                             f"checker's sight, the project names float16 ({named}), and no GradScaler is in "
                             "reach: if it can be float16, scale the loss with torch.amp.GradScaler", "note")

    def names_a_dtype(self, node, scope):
        """`node` is a dtype in sight that is not float16 (torch.bfloat16, a name bound to one)."""
        values = [node] + (self.assigned(node.id, scope) if isinstance(node, ast.Name) else [])
        return any(isinstance(n, ast.Attribute) and n.attr in ("bfloat16", "float32", "bf16")
                   or isinstance(n, ast.Constant) and n.value in ("bfloat16", "bf16", "float32")
                   for v in values for n in ast.walk(v))

    def near_modules(self):
        """[(path, tree)]: this file and the project's modules it imports (one step), and those
        read for it: where a config property, a float16 or a loss scaler is looked for."""
        if "near" in self._memo:
            return self._memo["near"]
        out = {self.path.resolve(): self.tree} if self.path is not None else {}
        if self.project is not None and self.folder is not None:
            paths = []
            for kind, module, name, level in self.imports.values():
                names = [module, ".".join(p for p in (module, name) if p)] if kind == "from" else [module]
                paths += [self.project.find(n, level, self.folder) for n in names if n or level]
            paths += sorted(self.project.read) + sorted(p for p, v in self.project.reach.index.items() if v)
            for path in paths:
                if path is not None and path not in out and len(out) < 40:
                    tree = parse_module(path)
                    if tree is not None:
                        out[path] = tree
        for path, tree in getattr(self, "entry_near", []):  # a module followed from a script: its too
            out.setdefault(path, tree)
        self._memo["near"] = list(out.items())
        return self._memo["near"]

    @staticmethod
    def tree_facts(tree):
        """What DDP031 and DDP060 look up in a module near the file, read once per tree: its
        functions by name, its classes' annotated fields by name, whether it holds a loss
        scaler (GradScaler, a scale/scale_loss call), and where it first names float16."""
        key = id(tree)
        if key not in _TREE_FACTS or _TREE_FACTS[key][0] is not tree:
            defs, fields, scaler, fp16 = {}, {}, False, None
            for n in ast.walk(tree):
                if isinstance(n, FUNCTION):
                    defs.setdefault(n.name, []).append(n)
                elif isinstance(n, ast.ClassDef):
                    for item in n.body:
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            fields.setdefault(item.target.id, []).append(item)
                elif isinstance(n, (ast.Name, ast.Attribute)) and last(n).endswith("GradScaler") \
                        or isinstance(n, ast.Call) and last(n) in ("scale", "scale_loss"):
                    scaler = True
                if fp16 is None and (isinstance(n, ast.Attribute) and n.attr == "float16" or isinstance(
                        n, ast.Constant) and n.value in ("float16", "fp16", "amp_fp16")):
                    fp16 = n.lineno
            _TREE_FACTS[key] = (tree, {"defs": defs, "fields": fields, "scaler": scaler, "fp16": fp16})
        return _TREE_FACTS[key][1]

    def near_scaler(self):
        """A loss scaler in this file or a module near it: GradScaler, a scale/scale_loss call."""
        return any(self.tree_facts(tree)["scaler"] for _, tree in self.near_modules())

    def near_fp16(self):
        """'file:line' where a module near this one names float16 (torch.float16, "fp16"); None."""
        for path, tree in self.near_modules():
            line = self.tree_facts(tree)["fp16"]
            if line is not None:
                return f"{self.project.where(path) if self.project else path.name}:{line}"
        return None

    def dtype_property(self, node):
        """For `cfg.amp_dtype` or `cfg.amp_dtype()`: the one function (a @property, say) of that
        name in the modules near this one, if it is the only one and each value it returns is
        read; or else the one class field of that name (`amp_dtype: torch.dtype = ...`), its
        default read. ('file', line of a float16 it gives or 0 if none, 'returns' or 'defaults
        to'); None otherwise."""
        target = node.func if isinstance(node, ast.Call) else node
        if not isinstance(target, ast.Attribute):
            return None
        found = [(path, n) for path, tree in self.near_modules()
                 for n in self.tree_facts(tree)["defs"].get(target.attr, [])]
        if not found and not isinstance(node, ast.Call):  # a config's field and its default
            fields = [(path, n) for path, tree in self.near_modules()
                      for n in self.tree_facts(tree)["fields"].get(target.attr, [])]
            if len(fields) != 1 or fields[0][1].value is None:
                return None
            path, returns, verb = fields[0][0], [fields[0][1].value], "defaults to"
        elif len(found) != 1:
            return None  # none, or several: which one runs is out of sight
        else:
            path, function = found[0]
            returns, verb = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)], "returns"
        if not returns or any(r is None for r in returns):
            return None
        where = self.project.where(path) if self.project else path.name
        for value in returns:
            if isinstance(value, ast.Attribute) and value.attr in ("float16", "half"):
                return where, value.lineno, verb
            if not (isinstance(value, ast.Attribute) and value.attr in ("bfloat16", "float32")):
                return None  # a value not read: stay quiet
        return where, 0, verb

    def evaluation_without_backward(self, node):
        """`node` is in an evaluate()/validate()/test() that calls .eval(), runs no backward
        and reaches none: autocast there makes no gradient to underflow."""
        function = self.function_of(node)
        if not isinstance(function, FUNCTION) or not EVAL_NAME.search(function.name) \
                or not self.calls_eval(function):
            return False
        return not any(isinstance(n, ast.Call) and (self.is_backward(n) or self.reaches(n, "is_backward"))
                       for n in ast.walk(function))

    def autocast_without_backward(self, call):
        """`with autocast(): evaluate(...)`: the block only calls functions in sight that run no
        backward, and keeps nothing (no value leaves it for a backward after)."""
        holder = self.parents.get(call)
        block = self.parents.get(holder) if isinstance(holder, ast.withitem) else None
        if not isinstance(block, ast.With) or not all(
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) for stmt in block.body):
            return False
        return all(self.resolve(stmt.value) is not None and not self.is_backward(stmt.value)
                   and self.reaches(stmt.value, "is_backward") is None for stmt in block.body)

    SYNC_NAMES = {"SyncBatchNorm", "convert_sync_batchnorm", "convert_syncbn_model"}  # torch's, apex's

    def rule_batchnorm(self):
        fixed = self.SYNC_NAMES & (self.attrs | self.names)
        if not self.ddp_calls or fixed:
            return
        self.batchnorm_in_classes()
        layers = [call for call in self.calls if self.BATCHNORM.fullmatch(last(call))]
        if layers:  # one finding for the file's layers: one fix (convert the model) covers them all
            more = layers[1:]
            lines = ", ".join(str(c.lineno) for c in more[:4]) + (", ..." if len(more) > 4 else "")
            also = f" (and {len(more)} more: line{'s' if len(more) > 1 else ''} {lines})" if more else ""
            self.add("DDP070", layers[0], f"{last(layers[0])}{also} in a DDP model without SyncBatchNorm: "
                     "each rank normalizes with its own batch's statistics; "
                     "nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP, if that is not what "
                     "you mean")

    BATCHNORM = re.compile(r"BatchNorm[123]d")

    def batchnorm_in_classes(self):
        """DDP070 for a model built from a class of the project (`from model import ConvNet`,
        `getattr(models, name)(...)` over a package of the project): BatchNorm layers its
        __init__ builds, or the project classes it builds do, three levels down. Quiet where
        something in reach converts to SyncBatchNorm or freezes BatchNorm, and where the class is
        out of sight (a registry, an installed package)."""
        if self.project is None or self.depth >= MAX_DEPTH or any(
                self.BATCHNORM.fullmatch(last(c)) for c in self.calls):
            return  # the project is not read; or the layers are this file's own, said at each
        if self.reach_says(re.compile(r"(?i)sync_?batch_?norm|sync_?bn")) or any(
                last(c) == "isinstance" and "BatchNorm" in ast.unparse(c) for c in self.calls):
            return  # converted in reach, or the script tests for BatchNorm itself (to freeze it)
        for call in self.ddp_calls:
            model = call.args[0] if call.args else keyword(call, "module")
            built = self.built_from(model, self.function_of(call))
            if built is None:
                continue
            picked = self.picked_classes(built)
            if picked is not None:
                label, candidates, complete = picked
                found = [(c, k, self.batchnorm_of(c, k)) for c, k in candidates]
                found = [f for f in found if f[2] is not None]
                if candidates and complete and len(found) == len(candidates):
                    first, layer = found[0][1], found[0][2]
                    self.add("DDP070", call, f"the model is one of {label}, and each builds BatchNorm "
                             f"({first.name}: {self.at(self.layer_file[id(layer)], layer)}): without "
                             "SyncBatchNorm each rank normalizes with its own batch's statistics; "
                             "nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP")
                elif found:  # which class runs is a name out of sight: some have BatchNorm
                    names = ", ".join(k.name for _, k, _ in found[:3])
                    total = f"{len(candidates)}" if complete else f"the first {len(candidates)}"
                    self.add("DDP070", call, f"the model is one of {label}, chosen by a name this file "
                             f"does not fix; {len(found)} of {total} build BatchNorm ({names}): if it is "
                             "one of them, each rank normalizes with its own batch's statistics without "
                             "SyncBatchNorm", "note")
                continue
            resolved = self.project_class(built)
            if resolved is None:
                continue
            layer = self.batchnorm_of(*resolved)
            if layer is not None:
                self.add("DDP070", call, f"the model is a {resolved[1].name}, whose {last(layer)} "
                         f"({self.at(self.layer_file[id(layer)], layer)}) runs in the DDP model "
                         "without SyncBatchNorm: "
                         "each rank normalizes with its own batch's statistics; "
                         "nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP, if that is not what "
                         "you mean")

    def picked_classes(self, built, depth=0):
        """(what the class is picked from, [(Checker, class)], complete) for a class picked at
        run time and built: `getattr(models, name)`, `eval(cfg["NAME"])` (the model classes the
        file imports from the project), `MODELS[name]` or `MODELS.get(name)` (a dict of classes),
        `MODELS.build(cfg)` or `MODELS.get(name)` (a registry: the classes of the project that
        register with `@MODELS.register...`), or a function of the project that returns one
        (`build_model(cfg)`). `complete` is False past RUNTIME_CANDIDATES classes; None where
        the class is not picked so, or the project is not read."""
        if self.project is None or not isinstance(built, ast.Call) or depth > 1:
            return None
        head = built.func
        if last(built) == "getattr" and built.args:
            return f"the classes {self.package_name(built)} exports", self.package_of(built.args[0]), True
        if isinstance(head, ast.Name) and head.id == "eval" and built.args \
                and not isinstance(built.args[0], ast.Constant) and not self.shadowed("eval", built):
            return self.evaluable_classes(built.args[0])
        owner = head.value if isinstance(head, (ast.Subscript, ast.Attribute)) else None
        if isinstance(owner, ast.Name) and (isinstance(head, ast.Subscript) or head.attr in ("get", "build")):
            table = self.dict_of_classes(owner.id)
            if table is not None:
                return f"the classes of `{owner.id}`", table, True
            if isinstance(head, ast.Attribute) and self.path is not None \
                    and self.project.reach.projects(self.path.resolve(), owner.id):
                return self.registered_classes(owner.id)
            return None
        resolved = self.resolve(built) if isinstance(head, (ast.Name, ast.Attribute)) else None
        if resolved is None:
            return None
        checker, function = resolved
        picks = [checker.built_from(r.value, function) for r in ast.walk(function)
                 if isinstance(r, ast.Return) and r.value is not None]
        found = [p for p in (checker.picked_classes(b, depth + 1) for b in picks if b is not None) if p]
        if len(found) != 1 or len(picks) != 1:
            return None
        label, candidates, complete = found[0]
        return f"{label}, as {self.helper_name(built, checker, function)} picks", candidates, complete

    def model_classes(self, pairs):
        """The (Checker, class) pairs that are models (nn.Module through their bases), each once,
        at most RUNTIME_CANDIDATES, and whether that is all of them. A class whose bases the
        checker cannot read stays in: it may be a model that has no BatchNorm in sight."""
        out, seen = [], set()
        for checker, cls in pairs:
            if id(cls) not in seen and checker.is_model_class(cls) is not False:
                seen.add(id(cls))
                out.append((checker, cls))
        return out[:RUNTIME_CANDIDATES], len(out) <= RUNTIME_CANDIDATES

    NOT_MODELS = {"object", "Dataset", "IterableDataset", "Sampler", "Exception", "Enum", "ABC", "dict",
                  "NamedTuple", "Function", "Hook", "HookBase", "Callback"}

    def is_model_class(self, cls, depth=0):
        """True where `cls` is an nn.Module through its bases, False where it is not (no base,
        a data set, an exception), None where a base is out of sight."""
        if not cls.bases:
            return False
        verdicts = []
        for base in cls.bases:
            name = last(base)
            if name == "Module" or self.origin(base).startswith("torch.nn."):
                return True
            if name in self.NOT_MODELS:
                verdicts.append(False)
                continue
            if depth >= 4:
                verdicts.append(None)
                continue
            if name in self.classes and self.classes[name] is not cls:
                verdicts.append(self.is_model_class(self.classes[name], depth + 1))
                continue
            resolved = self.project_class(ast.Call(func=base, args=[], keywords=[])) \
                if isinstance(base, (ast.Name, ast.Attribute)) else None
            verdicts.append(resolved[0].is_model_class(resolved[1], depth + 1) if resolved else None)
        return True if True in verdicts else None if None in verdicts else False

    def evaluable_classes(self, expr):
        """The model classes `eval(expr)` can name in this file: those the file imports from
        the project, by name or with `from package import *`."""
        pairs = [(self, c) for c in self.tree.body if isinstance(c, ast.ClassDef)]
        for module, level in self.star_imports:
            pairs += self.project.package_classes(module, level, self.folder, self.depth + 1)
        for local, entry in self.imports.items():
            if entry[0] == "from" and local[:1].isupper():
                found = self.project.klass(entry[1], entry[3], self.folder, entry[2], self.depth + 1)
                pairs += [found] if found is not None else []
        candidates, complete = self.model_classes(pairs)
        return f"the model classes `eval({ast.unparse(expr)})` can name", candidates, complete

    def dict_of_classes(self, name):
        """[(Checker, class)] of a dict literal of classes at the top of this file, or None."""
        table = next((s.value for s in self.tree.body if isinstance(s, ast.Assign)
                      and isinstance(s.value, ast.Dict) and any(
                          isinstance(t, ast.Name) and t.id == name for t in s.targets)), None)
        if table is None or not table.values:
            return None
        pairs = []
        for value in table.values:
            if isinstance(value, ast.Name) and value.id in self.classes:
                pairs.append((self, self.classes[value.id]))
            elif isinstance(value, (ast.Name, ast.Attribute)):
                found = self.project_class(ast.Call(func=value, args=[], keywords=[]))
                if found is None:
                    return None  # a class out of sight: which ones it holds is not known
                pairs.append(found)
            else:
                return None
        return self.model_classes(pairs)[0]

    def registered_classes(self, registry):
        """The model classes of the project that register with `@registry.register...`: what
        `registry.build(cfg)` or `registry.get(name)` can make. None where none do."""
        key = ("registered", registry)
        if key not in self._memo:
            pairs, read = [], True
            for path in registry_files(self.project, registry):
                checker = self.project.load(path, self.depth + 1)
                if checker is None or len(pairs) > RUNTIME_CANDIDATES:
                    read = False  # a module past the limits: its classes are out of sight
                    break
                pairs += [(checker, c) for c in checker.tree.body if isinstance(c, ast.ClassDef)
                          and any(registers(d, registry) for d in c.decorator_list)]
            candidates, complete = self.model_classes(pairs)
            self._memo[key] = (f"the classes registered with `{registry}`", candidates, complete and read) \
                if candidates else None
        return self._memo[key]

    def reach_says(self, pattern):
        """This file, or a module of the project that it reaches or imports, matches `pattern`
        (SyncBatchNorm, apex's convert_syncbn_model, a `sync_bn` option)."""
        paths = {path for path, _, _ in self.deep_reach()} | set(self.project.read if self.project else ())
        for path in paths | ({self.path} if self.path else set()):
            try:
                text = Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if pattern.search(text):
                return True
        return False

    def built_from(self, model, scope, depth=0):
        """The call that builds the model DDP wraps: `ConvNet()`, `getattr(models, name)(...)`,
        through names and `.to(device)`/`.cuda()`; None where there are several or none."""
        moves = ("to", "cuda", "cpu", "float", "double", "half", "train")  # gpu-checked: names read in source
        while isinstance(model, ast.Call) and isinstance(model.func, ast.Attribute) and last(model) in moves:
            model = model.func.value
        if isinstance(model, ast.Call):
            return model.func if isinstance(model.func, ast.Call) and last(model.func) in PICKERS else model
        if isinstance(model, (ast.Name, ast.Attribute)) and depth < 4:
            values = [v for v in self.assigned(dotted(model), scope) if not (isinstance(v, ast.Call) and any(
                dotted(a) == dotted(model) for a in v.args))]  # model = DDP(model): a wrap, not a build
            builds = {ast.dump(b) for b in (self.built_from(v, scope, depth + 1) for v in values)
                      if b is not None}
            if len(builds) == 1:
                return self.built_from(values[-1], scope, depth + 1) if len(values) == 1 else next(
                    b for b in (self.built_from(v, scope, depth + 1) for v in values) if b is not None)
        return None

    def project_class(self, call):
        """(Checker, class) of the class of the project that `call` builds: imported (`from
        model import ConvNet`, `models.ConvNet(...)`); None for this file's classes and the rest."""
        name = dotted(call.func)
        head, *rest = name.split(".") if name else [""]
        entry = self.imports.get(head)
        if entry is None or self.shadowed(head, call):
            return None
        kind, module, imported, level = entry
        if kind == "from" and not rest:
            return self.project.klass(module, level, self.folder, imported, self.depth + 1)
        if kind == "from" and len(rest) == 1:  # from pkg import models: models.ConvNet()
            return self.project.klass(".".join(p for p in (module, imported) if p), level, self.folder,
                                      rest[0], self.depth + 1)
        if kind == "import" and rest:
            full = (module.split(".") if module != head else [head]) + rest
            return self.project.klass(".".join(full[:-1]), 0, self.folder, full[-1], self.depth + 1)
        return None

    def package_of(self, node):
        """The classes a package of the project exports, for `getattr(models, name)`."""
        name = dotted(node)
        entry = self.imports.get(name) if name and "." not in name else None
        if entry is None:
            return []
        kind, module, imported, level = entry
        full = ".".join(p for p in (module, imported) if p) if kind == "from" else module
        return self.project.package_classes(full, level, self.folder, self.depth + 1)

    @staticmethod
    def package_name(getattr_call):
        return f"`{dotted(getattr_call.args[0])}`"

    def batchnorm_of(self, checker, cls, depth=0):
        """The first BatchNorm layer call that class `cls` (of `checker`'s module) builds, itself
        or through the classes of the project it builds; None if none, or if its module freezes
        BatchNorm (an isinstance test on it, `.eval()`) or converts it."""
        text = ast.unparse(cls)
        if re.search(r"SyncBatchNorm|FrozenBatchNorm", text) or re.search(
                r"isinstance\([^)]*BatchNorm", text) and re.search(r"\.eval\(\)|requires_grad", text):
            return None  # converted, or frozen; an isinstance test that only initializes weights is not
        calls = [n for n in ast.walk(cls) if isinstance(n, ast.Call)]
        for call in calls:
            if self.BATCHNORM.fullmatch(last(call)):
                self.layer_file[id(call)] = checker  # the module the layer is in, for the message
                return call
        if depth >= 3:
            return None
        called = {id(c.func) for c in calls}
        held = [ast.Call(func=n, args=[], keywords=[]) for n in ast.walk(cls) if isinstance(n, ast.Name)
                and id(n) not in called and n.id[:1].isupper() and isinstance(n.ctx, ast.Load)]
        for call in calls + held:  # a class built, or held to be built: self._make_layer(BasicBlock, 2)
            inner = last(call)
            if inner in checker.classes and checker.classes[inner] is not cls:
                found = self.batchnorm_of(checker, checker.classes[inner], depth + 1)
            elif inner[:1].isupper() and checker.project is not None:
                resolved = checker.project_class(call)
                found = self.batchnorm_of(*resolved, depth + 1) if resolved is not None else None
            else:
                found = None
            if found is not None:
                return found
        return None

    def rule_module_call(self):
        for call in self.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "forward":
                func = func.value
            if isinstance(func, ast.Attribute) and func.attr == "module" and not self.in_no_grad(call) \
                    and dotted(func.value) not in ("self", "cls") and self.output_trained(call):
                self.add("DDP110", call, f"{ast.unparse(call.func)}(...) bypasses DDP's forward: backward() "
                         "averages no gradient and the replicas drift apart; call the wrapper itself")
            elif isinstance(func, ast.Name) and not self.in_no_grad(call, strict=True) \
                    and (inside := self.module_alias(func.id, call)) is not None \
                    and self.output_trained(call):
                self.add("DDP110", call, f"{func.id} is {inside} (the model inside DDP): {func.id}(...) "
                         "bypasses DDP's forward: backward() averages no gradient and the replicas drift "
                         "apart; call the wrapper itself")

    def module_alias(self, name, call):
        """`name` holds the model inside a wrapper: every value it is given before `call` is
        `model.module`, or takes it in one arm (`model.module if isinstance(model, DDP) else
        model`). The text of that `.module`, else None."""
        statement = next(a for a in (call, *self.ancestors(call)) if isinstance(a, ast.stmt))
        if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
            return None  # a bare call keeps nothing that a backward could reach
        values = [v for v in self.assigned(name, self.function_of(call)) if v.lineno <= call.lineno]
        found = None
        for value in values:
            arms = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            inside = next((a for a in arms if isinstance(a, ast.Attribute) and a.attr == "module"
                           and dotted(a.value) not in ("self", "cls", "")), None)
            if inside is None:
                return None
            tested = [n for n in ast.walk(value.test) if isinstance(n, (ast.Name, ast.Attribute))] \
                if isinstance(value, ast.IfExp) else []  # isinstance(model, DistributedDataParallel)
            wrapped = "ddp" in self.kinds_of(inside.value, value.lineno, self.function_of(call)) or any(
                last(n) == "DDP" or self.origin(n).endswith("DistributedDataParallel") for n in tested)
            if not wrapped:
                return None  # the .module of some other wrapper (a model-parallel one)
            found = ast.unparse(inside)
        return found

    def output_trained(self, call):
        """The output of `call` reaches a backward(): in the same statement, through the names
        it is assigned to (or the list it is appended to) and what is computed from them, up to
        `x.backward()`, a loss scaler given it (`scaler.scale(loss)`, `amp.scale_loss(loss,
        opt)`, `accelerator.backward(loss)`), or a `return` (the caller may train on it). A
        sample made for a log only (`sample = model.module(x[:1])`, then written) is not."""
        scope = self.function_of(call)
        statement = next(a for a in (call, *self.ancestors(call)) if isinstance(a, ast.stmt))
        if isinstance(statement, ast.Return) or any(
                isinstance(n, ast.Call) and self.is_backward(n) for n in ast.walk(statement)):
            return True
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            seeds = {dotted(n) for t in targets for n in ast.walk(t)
                     if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n)}
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
                and isinstance(statement.value.func, ast.Attribute):
            seeds = {dotted(statement.value.func.value)} - {""}  # outputs.append(model.module(x))
        else:
            return True  # out of this rule's reading: say it
        names = self.flowing(seeds, scope)

        def mentions(node):
            return any(isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) in names
                       for n in ast.walk(node))

        for node in self.by_scope.get(scope, []):
            if isinstance(node, ast.Return) and node.value is not None and mentions(node.value):
                return True
            if not isinstance(node, ast.Call):
                continue
            if self.is_backward(node) and mentions(node.func.value):
                return True
            if re.search(r"(?i)backward|scale", last(node)) and any(
                    mentions(a) for a in list(node.args) + [k.value for k in node.keywords]):
                return True
        return False

    # -- DDP130: a fixed port
    def option_default(self, attribute):
        """The default of the command-line option that `args.NAME` holds (add_argument): in
        this file, else in the project's modules this script reaches (an `Options` class's
        parser), where exactly one option of that name has one."""
        found = self.option_default_in(self.calls, attribute)
        if found is not None or self.module or self.followed or self.project is None:
            return found
        if ("options", attribute) not in self._memo:
            defaults = []
            for path in dict.fromkeys(p for p, _, _ in self.deep_reach()):
                tree = parse_module(path)
                if tree is not None:
                    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
                    defaults += [d for d in [self.option_default_in(calls, attribute, every=True)] if d]
            self._memo[("options", attribute)] = defaults[0] if len(defaults) == 1 else None
        return self._memo[("options", attribute)]

    @staticmethod
    def option_default_in(calls, attribute, every=False):
        """The default of the `add_argument` among `calls` whose destination is `attribute`;
        with every, None where two of them name it."""
        out = []
        for call in calls:
            if last(call) != "add_argument":
                continue
            if attribute == option_dest(call):
                out.append(keyword(call, "default"))
                if not every:
                    break
        return out[0] if len(out) == 1 else None

    def constant_value(self, node, scope):
        """The constant behind a value: itself, str()/int() of it, a name assigned one constant,
        or an option's default (args.port)."""
        if isinstance(node, ast.Call) and last(node) in ("str", "int") and node.args:
            node = node.args[0]
        if isinstance(node, ast.Name):
            values = self.assigned(node.id, scope)
            node = values[0] if len(values) == 1 else node
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            default = self.option_default(node.attr)
            node = default if default is not None else node
        return node if isinstance(node, ast.Constant) else None

    def port_settings(self, function=None):
        """Where this file (or `function`, and the functions of its module it calls) sets the
        rendezvous port: (node, the value, 'env' or 'init', falls back to the launcher's, runs
        under srun or mpiexec, which set no port):
        `os.environ["MASTER_PORT"] = ...` ('env'; under an `if "MASTER_PORT" not in os.environ`,
        a fallback), `os.environ.setdefault("MASTER_PORT", ...)` (a fallback), and
        init_process_group(init_method=...)."""
        key = ("ports", function)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = []
        nodes = self.nodes if function is None else self.own_nodes(function)
        found, via = [], self._memo.setdefault(("port_via", function), {})
        for node in nodes:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                    and t.slice.value == "MASTER_PORT" for t in node.targets):
                found.append((node, node.value, "env", self.defers_to_launcher(node),
                              self.under_portless_launcher(node)))
            elif isinstance(node, ast.Call) and last(node) == "setdefault" and len(node.args) == 2 \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "MASTER_PORT":
                found.append((node, node.args[1], "env", True, self.under_portless_launcher(node)))
            elif isinstance(node, ast.Call) and last(node) == "init_process_group" \
                    and init_method(node) is not None:
                found.append((node, init_method(node), "init", self.defers_to_launcher(node),
                              self.under_portless_launcher(node)))
            elif function is not None and isinstance(node, ast.Call) \
                    and not self.guarded_within(node, function):
                target = self.callee(node)  # a function of the same module that the helper calls
                if target is not None and target is not function:
                    inner = self.port_settings(target)
                    via.update({id(where): node for where, *_ in inner})  # reached through this call
                    found += [(where, value, kind, fallback or self.defers_to_launcher(node),
                               portless or self.under_portless_launcher(node))
                              for where, value, kind, fallback, portless in inner]
        self._memo[key] = found
        return found

    def port_via(self, function, node):
        """The node of `function` itself through which it reaches the port setting `node`: the
        setting, or the call of the function of its module that sets it."""
        return self._memo.get(("port_via", function), {}).get(id(node), node)

    def defers_to_launcher(self, node):
        """This code runs only where no launcher set its variables: under a test that reads
        MASTER_PORT (`if "MASTER_PORT" not in os.environ:`), or in the branch taken when a
        launcher's variable is absent (the `else` of `if "RANK" in os.environ:`)."""
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (ast.If, ast.IfExp)):
                if any(isinstance(n, ast.Constant) and n.value == "MASTER_PORT"
                       for n in ast.walk(ancestor.test)):
                    return True
                present = launcher_present(ancestor.test)
                body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
                if present is not None and (child in body) != present:
                    return True  # the branch where the launcher's variable is absent
            child = ancestor
        return False

    def under_portless_launcher(self, node):
        """The code around `node` runs under srun or mpiexec, which set no MASTER_PORT: in the
        branch of a test on their variables (`if "SLURM_PROCID" in os.environ:`), or in a
        function that reads one unconditionally (`int(os.environ["SLURM_PROCID"])`). There a
        fallback port always applies."""
        def theirs(tree):
            return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and n.value.startswith(PORTLESS_LAUNCHERS) for n in ast.walk(tree))
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, ast.If) and child in ancestor.body and theirs(ancestor.test):
                return True
            if isinstance(ancestor, ast.If) and child is not ancestor.test and any(
                    isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and theirs(n.slice)
                    and not any(isinstance(a, (ast.If, ast.IfExp, ast.Try))
                                for a in self.between(n, ancestor))
                    for s in (ancestor.body if child in ancestor.body else ancestor.orelse)
                    for n in ast.walk(s)):
                return True  # elif args.launcher == "mpi": rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
            if isinstance(ancestor, SCOPE):
                break
            child = ancestor
        scope = self.function_of(node)
        return scope is not self.tree and any(
            isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and theirs(n.slice)
            and not any(isinstance(a, (ast.If, ast.IfExp, ast.Try)) for a in self.between(n, scope))
            for n in self.own_nodes(scope))

    def fixed_ports(self, value, kind, scope, passed=None):
        """(text, the node that fixes it, a fallback) for each fixed port `value` may hold: a
        number for MASTER_PORT, a tcp:// URL with a number for init_method. A number given as
        the default of `os.environ.get("MASTER_PORT", ...)` is a fallback."""
        out = []
        for text, where in self.url_values(value, scope, passed=passed):
            fixed = bool(re.fullmatch(r"\d+( \+ .+)?", text)) if kind == "env" \
                else bool(re.search(r"^tcp://.*:\d+/?$", text))
            if fixed:
                out.append((text, where, self.env_default(where)))
        return out

    @staticmethod
    def env_default(node):
        """`node` is marked as the default of an environment read (url_values marks it)."""
        return getattr(node, "_env_default", False)

    def rule_port(self):
        fallback_note = ("where the launcher set none: torchrun always sets one, so under torchrun this "
                         "never runs; under mpiexec, srun or a launch of your own, two jobs on one node "
                         "want the same port: derive it from the job id")
        portless_warning = ("where none is set, in code that runs under srun or mpiexec, which set none: "
                            "there every job on a node wants this port; derive it from the job id")
        reported = set()
        for node, value, kind, defers, portless in self.port_settings():
            scope = self.function_of(node)
            for text, where, env_default in self.fixed_ports(value, kind, scope):
                fallback = (defers or env_default) and not portless
                at = node if kind == "env" or where is value or where not in self.parents else where
                if (id(at), kind) in reported:
                    continue
                reported.add((id(at), kind))
                if kind == "env" and fallback:
                    self.add("DDP130", at, f"MASTER_PORT falls back to {text} {fallback_note}", "note")
                elif kind == "env" and (defers or env_default):
                    self.add("DDP130", at, f"MASTER_PORT falls back to {text} {portless_warning}")
                elif kind == "env":
                    self.add("DDP130", at, "MASTER_PORT set to a fixed number: a second job on this node "
                             "fails with 'address already in use'; leave it to the launcher or derive it "
                             "from the job id")
                else:
                    through = "" if where is value else f" (through {ast.unparse(value)})"
                    if where not in self.parents:  # a constant of another module: a config of the project
                        through = f" (through {ast.unparse(value)}, set in another module of the project)"
                    self.add("DDP130", at, f"init_method {text!r}{through}: a fixed port, so a second job on "
                             "this node collides; let the launcher set MASTER_ADDR and MASTER_PORT "
                             "(init_method='env://')", "note" if fallback else None)
        for call, (checker, function) in [(c, found) for c in self.calls for found in self.picked(c)
                                          if not one_process_call(c, found[1])]:
            # a helper of the project that starts the group: setup_dist(args), or each one that
            # getattr(module, "init_dist_%s" % launcher)(...) may pick
            given = list(call.args) + [k.value for k in call.keywords]
            passed = {param: (self, value, self.function_of(call)) if value in given
                      else (checker, value, function)  # the parameter's default
                      for param in checker.params(function)
                      if (value := checker.passed(function, call, param)) is not None}
            for node, value, kind, defers, portless in checker.port_settings(function):
                if self.turned_off(checker, function, checker.port_via(function, node), call):
                    continue  # init_dist("pytorch"): the branch that sets the port never runs
                for text, where, env_default in checker.fixed_ports(value, kind, function, passed):
                    here = where in self.parents  # the number is in this file: an option's default
                    at = where if here else call
                    if (id(at), kind) in reported:
                        continue
                    reported.add((id(at), kind))
                    what = "MASTER_PORT" if kind == "env" else "init_method"
                    helper = f"{function.name}() ({self.at(checker, node)})"
                    if (defers or env_default) and not portless:
                        self.add("DDP130", at, f"{helper} sets {what} to {text} {fallback_note}", "note")
                    elif defers or env_default:
                        self.add("DDP130", at, f"{helper} sets {what} to {text} {portless_warning}")
                    else:
                        self.add("DDP130", at, f"{helper} sets {what} to {text}"
                                 + (", given here" if here else "") + ": a fixed port, so a second job on "
                                 "this node collides; leave it to the launcher, or derive it from the job id")
        self.rule_config_port({(i, "url") for i, _ in reported})
        self.config_file_port(reported)

    def config_file_port(self, reported):
        """`os.environ["MASTER_PORT"] = hps.train.port`: a key of a config, no option of the
        script. A warning where every value the project's config files (JSON, YAML, TOML) give
        that key is a number; nothing where none does (the config is out of sight)."""
        if self.module or self.followed or self.project is None or self.path is None:
            return
        for node, value, kind, defers, portless in self.port_settings():
            key = value.attr if isinstance(value, ast.Attribute) else value.slice.value \
                if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) else None
            if kind != "env" or (id(node), kind) in reported or not isinstance(key, str) \
                    or "port" not in key.lower() or self.is_option(key):
                continue
            pattern = re.compile(r"(?<![\w.-])[\"']?" + re.escape(key)
                                 + r"[\"']?\s*[:=]\s*[\"']?([^\"'\s,}#]*)")  # "port": "8001", port: 8001
            values, where = set(), []
            for path in self.project_files():
                if path.suffix not in (".json", ".yaml", ".yml", ".toml"):
                    continue
                try:
                    found = set(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
                except OSError:
                    continue
                if found:
                    values |= found
                    where.append(self.project.where(path))
            if not values or not all(v.isdigit() for v in values):
                continue  # no config names it, or one leaves it to the environment
            reported.add((id(node), kind))
            shown = ", ".join(where[:2]) + (f" and {len(where) - 2} more" if len(where) > 2 else "")
            numbers = " or ".join(sorted(values))
            self.add("DDP130", node, f"MASTER_PORT is `{ast.unparse(value)}`, {numbers} in every config "
                     f"file of the project that sets `{key}` ({shown}): a fixed port, so a second job on "
                     "this node collides; leave it to the launcher, or derive it from the job id",
                     "note" if defers and not portless else None)

    def rule_config_port(self, reported):
        """A port option of this script (`--port`, default 5678) whose name is the key or the
        attribute that an init_method URL in the project's code reads (`"tcp://" + cfg["ip"] +
        ":" + str(cfg["port"])`, reached as Reach follows it): the option's value travels there
        through a config of the project, so the default is a fixed port."""
        options = {}
        for call in self.calls:
            flag = call.args[0] if last(call) == "add_argument" and call.args else None
            default = keyword(call, "default")
            if isinstance(flag, ast.Constant) and str(flag.value).startswith("--") and "port" in flag.value \
                    and isinstance(default, ast.Constant) and str(default.value).isdigit():
                options[flag.value.lstrip("-").replace("-", "_")] = default
        if not options:
            return
        for path, function, _ in self.deep_reach():
            starts = [n for n in ast.walk(function)
                      if isinstance(n, ast.Call) and last(n) == "init_process_group"]
            for start in starts:
                url = init_method(start)
                parts = [url] + [a.value for a in ast.walk(function) if isinstance(a, ast.Assign)
                                 and isinstance(url, ast.Name)
                                 and any(isinstance(t, ast.Name) and t.id == url.id for t in a.targets)]
                nodes = [n for part in parts if part is not None for n in ast.walk(part)]
                if not any(isinstance(n, ast.Constant) and str(n.value).startswith("tcp://") for n in nodes):
                    continue
                keys = {n.slice.value for n in nodes if isinstance(n, ast.Subscript)
                        and isinstance(n.slice, ast.Constant)}
                keys |= {n.attr for n in nodes if isinstance(n, ast.Attribute)}
                for key in sorted(keys & set(options)):
                    at = options[key]
                    if (id(at), "url") not in reported:
                        reported.add((id(at), "url"))
                        self.add("DDP130", at, f"--{key} defaults to {at.value}, and the project's config "
                                 f"carries it into init_method at {self.project.where(path)}:"
                                 f"{start.lineno}: a "
                                 "fixed port, so a second job on this node collides; let the launcher set "
                                 "MASTER_ADDR and MASTER_PORT (init_method='env://'), or derive it from the "
                                 "job id")

    def gpu_count(self, node, scope):
        """`node` is the node's GPU count (`torch.cuda.device_count()`, or a name assigned it
        alone): the same on every node of a kind, so a port it offsets is fixed."""
        if isinstance(node, ast.Call):
            return last(node) == "device_count" and not node.args
        if isinstance(node, ast.Name):
            values = self.assigned(node.id, scope)
            return len(values) == 1 and self.gpu_count(values[0], scope)
        return False

    def url_values(self, expr, scope, depth=0, passed=None):
        """The strings `expr` may hold, as (text, the node that gives its end): constants,
        f-strings and + of them, names and attributes assigned them, an option's default,
        the default of an environment read (`os.environ.get("MASTER_PORT", "29500")`, marked
        as such); '{?}' for a part that is not a constant. `passed`: for a function of the
        project, {parameter: (the caller's Checker, the argument, the caller's scope)}, so
        that `args.port` inside it is the caller's option."""
        if expr is None or depth > 8:
            return []
        if isinstance(expr, ast.Constant) and isinstance(expr.value, (str, int)):
            return [(str(expr.value), expr)]
        if isinstance(expr, ast.Call) and last(expr) in ("str", "int") and expr.args:
            return self.url_values(expr.args[0], scope, depth + 1, passed)
        if isinstance(expr, ast.Call) and last(expr) in ("get", "getenv") and expr.args \
                and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
            default = expr.args[1] if len(expr.args) > 1 else keyword(expr, "default")
            found = self.url_values(default, scope, depth + 1, passed)
            for _, where in found:
                where._env_default = True  # used only where the environment has no value
            return found
        if isinstance(expr, (ast.IfExp, ast.BoolOp)):  # either branch may be the one
            branches = [expr.body, expr.orelse] if isinstance(expr, ast.IfExp) else expr.values
            return [found for branch in branches
                    for found in self.url_values(branch, scope, depth + 1, passed)][:8]
        if passed and isinstance(expr, ast.Name) and expr.id in passed:
            caller, value, where = passed[expr.id]
            return caller.url_values(value, where, depth + 1)
        if passed and isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
                and expr.value.id in passed:  # args.port inside setup_dist(args): the caller's args.port
            caller, value, where = passed[expr.value.id]
            moved = ast.Attribute(value=value, attr=expr.attr, ctx=ast.Load())
            return caller.url_values(moved, where, depth + 1) if dotted(moved) else []
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):  # 29500 + num_gpus: fixed per node
            numbers = [side for side in (expr.left, expr.right) if isinstance(side, ast.Constant)
                       and type(side.value) is int and 1024 <= side.value < 65536]
            other = expr.right if numbers and numbers[0] is expr.left else expr.left
            if len(numbers) == 1 and self.gpu_count(other, scope):
                return [(f"{numbers[0].value} + {ast.unparse(other)}", numbers[0])]
        parts = None
        if isinstance(expr, ast.JoinedStr):
            parts = [[(str(v.value), v)] if isinstance(v, ast.Constant) else (
                self.url_values(v.value, scope, depth + 1, passed) or [("{?}", v)]) for v in expr.values]
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            parts = [
                self.url_values(side, scope, depth + 1, passed) or [("{?}", side)]
                for side in (expr.left, expr.right)
            ]
        if parts is not None:
            combined = [("", expr)]
            for options in parts:
                combined = [(text + more, where if more else node) for text, node in combined
                            for more, where in options][:8]
            return combined
        found = []
        if isinstance(expr, ast.Name):
            for value in self.assigned(expr.id, scope):
                found += self.url_values(value, scope, depth + 1, passed)
            for node in self.by_scope.get(scope, []):  # url = "tcp://"; url += host + ":" + port
                if found and isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                        and isinstance(node.target, ast.Name) and node.target.id == expr.id:
                    more = self.url_values(node.value, scope, depth + 1, passed) or [("{?}", node.value)]
                    found = [(text + tail, where) for text, _ in found for tail, where in more][:8]
        if isinstance(expr, ast.Attribute) and dotted(expr):  # args.dist_url = ...: set anywhere, read here
            self.assigned(dotted(expr), scope)  # builds the table
            for value, where, _ in self._memo["assignments"].get(dotted(expr), []):
                found += self.url_values(value, where, depth + 1)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            if not self.option_replaced(dotted(expr)):  # the default, unless the file replaces it first
                found += self.url_values(self.option_default(expr.attr), scope, depth + 1)
            if not found:  # cfg.dist_url: cfg made by SimpleNamespace(dist_url=...), or by a function
                found += self.attribute_values(expr.value.id, expr.attr, scope, depth + 1)
        return found[:8]

    def option_replaced(self, key):
        """`args.dist_url = ...` at the module's top level, under no test but `if __name__ ==
        "__main__":`, from a value that does not read it: the option's default never reaches
        the functions that the module then calls (a free port picked after parse_args())."""
        self.assigned(key, self.tree)  # builds the table
        for value, where, node in self._memo["assignments"].get(key, []):
            if where is not self.tree or not isinstance(node, ast.Assign) \
                    or any(isinstance(n, ast.Attribute) and dotted(n) == key for n in ast.walk(value)):
                continue
            if all(isinstance(a, ast.If) and is_main_test(a.test) and node in a.body
                   or isinstance(a, ast.Module) for a in self.ancestors(node)):
                return True
        return False

    def attribute_values(self, name, attr, scope, depth):
        """The strings `name.attr` may hold where `name` is a configuration object: made by a
        call with the keyword `attr` (`SimpleNamespace(dist_url=...)`, `HParams(...)`), or
        returned by a function of the file or the project that makes one; `name` may be a
        parameter that the file's calls fill."""
        if depth > 8:
            return []
        sources = [(value, scope, self) for value in self.assigned(name, scope)]
        if not sources and isinstance(scope, FUNCTION) and name in self.params(scope):
            sources = [(value, self.function_of(site), self)
                       for value, site in self.arguments_for(scope, name)]
        found = []
        for value, where, checker in sources:
            if isinstance(value, ast.Name):
                found += checker.attribute_values(value.id, attr, where, depth + 1)
            elif isinstance(value, ast.Call):
                given = keyword(value, attr)
                if given is not None:
                    found += checker.url_values(given, where, depth + 1)
                    continue
                resolved = checker.resolve(value)
                if resolved is None or not isinstance(resolved[1], FUNCTION):
                    continue
                callee, function = resolved
                for made in callee.returned(function):
                    if isinstance(made, ast.Call) and keyword(made, attr) is not None:
                        found += callee.url_values(keyword(made, attr), function, depth + 1)
        return found[:8]

    def returned(self, function):
        """The values `function` returns: the expressions of its returns, and for a name
        returned, the values assigned to it."""
        out = []
        for node in self.own_nodes(function):
            if isinstance(node, ast.Return) and node.value is not None:
                out.append(node.value)
                if isinstance(node.value, ast.Name):
                    out += self.assigned(node.value.id, function)
        return out

    def rule_nccl_device(self):
        if any(last(c) == "set_device" for c in self.calls) or (self.library and not self.worker()) or any(
                (self.external(c) and self.reaches(c, "is_set_device")) or self.constructs(c, "is_set_device")
                for c in self.calls):
            return  # set before the first collective, or after init_process_group: either works
        for call in self.calls:
            if last(call) != "init_process_group":  # device_id= binds the group, not the current GPU
                continue
            backend = call.args[0] if call.args else keyword(call, "backend")
            if backend is not None and not any(
                    isinstance(n, ast.Constant) and re.search(r"(?i)nccl|gloo|mpi|ucc", str(n.value))
                    for value in self.parameter_values(backend, call) for n in ast.walk(value)):
                self.configured_backend(call, backend)  # h.dist_config['dist_backend'], args.backend
                continue
            if backend is None or not any(isinstance(n, ast.Constant) and "nccl" in str(n.value)
                                          for value in self.parameter_values(backend, call)
                                          for n in ast.walk(value)):
                continue
            self.add("DDP131", call, "init_process_group with nccl and no torch.cuda.set_device: every "
                     "rank's current GPU is GPU 0, where the *_object collectives put their tensors; call "
                     "torch.cuda.set_device(local_rank) before init_process_group")
        self.deep_nccl_device()

    def deep_nccl_device(self):
        """A group started with nccl in a helper of the project (`dist.init_process_group("nccl")`
        in `create_workdir(cfg)`), and no set_device in sight: not in this file, not in any
        module of the project it reaches, and no CUDA_VISIBLE_DEVICES or device context that
        could stand for it. Said at the call of this file that reaches the helper."""
        if self.module or self.followed or self.project is None or any(
                last(c) in ("init_process_group", "set_device") for c in self.calls):
            return
        setup = self.deep_setup()
        if setup is None:
            return
        path, start, call = setup
        backend = start.args[0] if start.args else keyword(start, "backend")
        if not (isinstance(backend, ast.Constant) and isinstance(backend.value, str)
                and backend.value.lower() == "nccl"):
            return  # a backend chosen elsewhere (a parameter, a config): not in view
        paths = {self.path.resolve(), path} | {p for p, _, _ in self.deep_reach()}
        for module in paths:
            tree = parse_module(module)
            if tree is None or any(
                    (isinstance(n, ast.Attribute) and n.attr == "set_device")
                    or (isinstance(n, ast.Name) and n.id == "set_device")
                    or (isinstance(n, ast.Call) and dotted(n.func).endswith("cuda.device"))
                    or (isinstance(n, ast.Constant) and n.value == "CUDA_VISIBLE_DEVICES")
                    or (isinstance(n, ast.keyword) and n.arg == "device_id")
                    for n in ast.walk(tree)):
                return  # a device set, bound or picked somewhere the checker cannot order
        self.add("DDP131", call, f"{self.project.where(path)}:{start.lineno}: init_process_group with nccl "
                 "and no torch.cuda.set_device anywhere in the project's code this script reaches: every "
                 "rank's current GPU is GPU 0, where the *_object collectives put their tensors; call "
                 "torch.cuda.set_device(local_rank) before init_process_group")

    CONFIG_FILES = (".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".py")

    def configured_backend(self, call, backend):
        """DDP131 where the backend is not a literal: `init_process_group(backend=cfg['dist_backend'])`,
        a model put on cuda, and no set_device in any module of the project the script reaches.
        A warning where every value the project's files give that key (its config files, the
        option's default) is nccl; a note where none is found."""
        if self.module or self.followed or self.project is None:
            return
        uses_cuda = any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and n.value.startswith("cuda") for n in self.nodes) \
            or any(last(c) == "cuda" for c in self.calls)
        paths = {self.path.resolve()} | {p for p, _, _ in self.deep_reach()}
        if not uses_cuda or any(
                (isinstance(n, ast.Attribute) and n.attr == "set_device")
                or (isinstance(n, ast.Call) and dotted(n.func).endswith("cuda.device"))
                or (isinstance(n, ast.Constant) and n.value == "CUDA_VISIBLE_DEVICES")
                or (isinstance(n, ast.keyword) and n.arg == "device_id")
                for path in paths for tree in [parse_module(path)] if tree is not None
                for n in ast.walk(tree)):
            return  # no GPU in this file, or a device set, bound or picked where the checker cannot order it
        passed = [v for v in self.parameter_values(backend, call) if v is not backend]
        if len(passed) == 1 and isinstance(passed[0], (ast.Attribute, ast.Subscript)):
            backend = passed[0]  # def init(backend): ..., called as init(args.backend)
        key = backend.attr if isinstance(backend, ast.Attribute) else None
        if isinstance(backend, ast.Subscript) and isinstance(backend.slice, ast.Constant):
            key = backend.slice.value
        values, where = set(), []
        if isinstance(backend, ast.Attribute) and self.is_option(key):
            default = self.option_default(key)
            if isinstance(default, ast.Constant) and isinstance(default.value, str):
                values.add(default.value.lower())
                where.append("its option's default")
        if isinstance(key, str) and key.isidentifier() and not values:
            pattern = re.compile(r"\b" + re.escape(key) + r"\b[\"']?\s*(?::|=(?!=))(.*)")  # not ==
            for path in self.project_files():
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                found = set()
                for rest in pattern.findall(text):  # every backend the line names: "nccl" if ... else "gloo"
                    bare = re.fullmatch(r"\s*(nccl|gloo|mpi|ucc)\s*(#.*)?", rest, re.I)  # YAML: key: nccl
                    found |= {v.lower() for v in re.findall(r"[\"']([^\"'\n]*)[\"']", rest)
                              if re.search(r"(?i)nccl|gloo|mpi|ucc", v)}
                    found |= {bare.group(1).lower()} if bare else set()
                if found:
                    values |= found
                    where.append(self.project.where(path))
        expr = ast.unparse(backend)
        if values and all("nccl" in v for v in values):
            shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
            source = "by its option's default" if where == ["its option's default"] else \
                f"in every value the project's files give `{key}` ({shown})"
            self.add("DDP131", call, f"the backend is `{expr}`, nccl {source}; no torch.cuda.set_device "
                     "anywhere this script reaches: every rank's current GPU is GPU 0, where the *_object "
                     "collectives put their tensors; call "
                     "torch.cuda.set_device(local_rank) before init_process_group", "warning")
        elif not values:
            self.add("DDP131", call, f"the backend is `{expr}`, which this file does not fix, and the model "
                     "goes to cuda with no torch.cuda.set_device anywhere this script reaches: with nccl, "
                     "every rank's current GPU is GPU 0; call torch.cuda.set_device(local_rank) before "
                     "init_process_group", "note")

    def project_files(self, limit=400, folders=300):
        """The project's text files that may hold its settings (configs, Python): the script's
        folder first, then the project's top; at most `limit` files from `folders` folders, never
        version control or installed packages."""
        if "project_files" not in self._memo:
            out, seen, visited = [], set(), 0
            for top in dict.fromkeys([self.path.resolve().parent, self.project.top]):
                for folder, dirs, files in os.walk(top):
                    visited += 1
                    dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in INSTALLED
                                     and d not in ("node_modules", "__pycache__"))
                    for name in sorted(files):
                        path = Path(folder) / name
                        if name.endswith(self.CONFIG_FILES) and path not in seen and len(out) < limit:
                            seen.add(path)
                            try:
                                if path.stat().st_size < 200_000:
                                    out.append(path)
                            except OSError:
                                continue
                    if len(out) >= limit or visited >= folders:
                        break
            self._memo["project_files"] = out
        return self._memo["project_files"]

    def parameter_values(self, expr, node):
        """`expr`, or where it is a parameter of the function around `node`, what the file's
        calls give it, its default where they give none (`def setup(backend="nccl")`)."""
        scope = self.function_of(node)
        if isinstance(expr, ast.Name) and self.module_value(expr.id) is not None:
            return [expr, self.module_value(expr.id)]  # BACKEND = "nccl" at module level, bound once
        if not (isinstance(expr, ast.Name) and isinstance(scope, FUNCTION) and expr.id in self.params(scope)):
            return [expr]
        sites = self.sites.get(scope, [])
        values = [self.passed(scope, site, expr.id) for site in sites]
        if not sites:
            args = scope.args
            positional = args.posonlyargs + args.args
            defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):],
                                args.defaults, strict=True))
            defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                             if d is not None})
            values = [defaults.get(expr.id)]
        return [expr] + [v for v in values if v is not None]

    def worker(self):
        """A function of this file that starts the group (itself or through a function it
        calls), wraps the model in DDP and trains it: the whole per-rank worker, as
        `mp.spawn(train_fn)` runs it in a fresh process. No caller can set its device first:
        the fix is here (not so for a helper that starts the group and wraps, and returns)."""
        return any(self._follow(function, "is_group_start") is not None
                   and any(self.function_of(call) is function for call in self.ddp_calls)
                   and self._follow(function, "is_backward") is not None  # it trains, too
                   for function in self.functions.values())

    def rule_zero(self):
        if "consolidate_state_dict" in self.attrs:
            return
        for call in self.calls:
            if last(call) != "state_dict" or not isinstance(call.func, ast.Attribute):
                continue
            owner = call.func.value
            if isinstance(owner, ast.Attribute) and owner.attr == "optim":
                owner = owner.value
            if "zero" in self.kinds_of(owner):
                self.add("DDP170", call, "a ZeroRedundancyOptimizer's state_dict() without "
                         "consolidate_state_dict(): PyTorch refuses it, and its .optim holds one rank's "
                         "shard; call "
                         "optimizer.consolidate_state_dict(to=0) on every rank first")

    # -- DDP180: the loss over sequences of different lengths
    def global_names(self):
        """Names all-reduced (their first argument), and the names computed from them."""
        names = {n.id for c in self.calls if last(c) == "all_reduce" and c.args
                 for n in ast.walk(c.args[0]) if isinstance(n, ast.Name)}
        assigns = [n for n in self.nodes if isinstance(n, ast.Assign)]
        changed = True
        while changed:
            changed = False
            for node in assigns:
                if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.value)):
                    for target in node.targets:
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name) and t.id not in names:
                                names.add(t.id)
                                changed = True
        return names

    @staticmethod
    def is_count(node):
        """`(targets != pad).sum()`, `mask.sum()`, `batch["attention_mask"].sum()`,
        `labels.ne(pad).sum()`, `count_nonzero`: a count of the real tokens."""
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            if call.func.attr == "count_nonzero":
                return True
            if call.func.attr == "sum" and not call.args and keyword(call, "dim") is None \
                    and keyword(call, "axis") is None and any(  # mask.sum(dim=1): a count per row
                    isinstance(n, ast.Compare) or (isinstance(n, ast.Call) and last(n) in ("ne", "gt"))
                    or (isinstance(n, (ast.Name, ast.Attribute)) and "mask" in last(n).lower())
                    or (isinstance(n, ast.Constant) and "mask" in str(n.value).lower())
                    for n in ast.walk(call.func.value)):
                return True
        return False

    def backpropagated(self):
        """(expression, scope) of every value whose .backward() is called (through scaler.scale
        too), a name standing for the values assigned to it in its function."""
        out = []
        for call in self.calls:
            if last(call) != "backward" or not isinstance(call.func, ast.Attribute):
                continue
            value, scope = call.func.value, self.function_of(call)
            if isinstance(value, ast.Call) and last(value) == "scale" and value.args:
                value = value.args[0]
            todo, seen = [value], set()
            while todo:
                expr = todo.pop()
                out.append((expr, scope))
                for name in {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - seen:
                    seen.add(name)
                    todo += self.assigned(name, scope)
        return out

    def padded(self):
        """The file shows sequences of different lengths: a pad token or id, an attention
        mask, a tokenizer asked to pad (not a convolution's padding, not a padded vocabulary)."""
        names = re.compile(
            r"(?i)pad|pad_?(id|idx|index|token|token_id|value|len|length)|padding_(value|side|idx)|"
            r"attention_mask|pad_sequence|pad_to_multiple_of|pad_collate"
        )
        for node in self.nodes:
            name = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else (
                    node.arg
                    if isinstance(node, ast.arg)
                    else (
                        node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
                    )
                )
            )
            if name and names.fullmatch(name):
                parent = self.parents.get(node)
                if not (isinstance(parent, ast.Call) and parent.func is node):  # F.pad(x, ...) pads a tensor
                    return True
            if (
                isinstance(node, ast.keyword)
                and node.arg == "padding"
                and isinstance(node.value, ast.Constant)
                and (node.value.value is True or node.value.value in ("max_length", "longest"))
            ):
                return True
        return False

    def rule_token_mean(self):
        wrappers = {"FullyShardedDataParallel", "FSDP", "fully_shard"}
        if not (self.ddp_calls or any(last(c) in wrappers for c in self.calls)):
            return
        glob, local, fixed = self.global_names(), [], False
        for expr, scope in self.backpropagated():
            for div in ast.walk(expr):
                if not (isinstance(div, ast.BinOp) and isinstance(div.op, ast.Div)):
                    continue
                names = {n.id for n in ast.walk(div.right) if isinstance(n, ast.Name)}
                if names & glob:
                    fixed = True  # divided by an all-reduced count somewhere: the fix is in the script
                elif self.is_count(div.right) or any(self.is_count(v) for name in names
                                                     for v in self.assigned(name, scope)):
                    local.append(div)
        if fixed:
            return
        for div in dict.fromkeys(local):
            self.add("DDP180", div, f"`{ast.unparse(div)}` divides the loss by this rank's own "
                     "token count: DDP then averages the ranks' gradients, so a token weighs more on a rank "
                     "with fewer; divide by the all-reduced global count times the world size")
        padded = self.padded()
        for call in self.calls:
            if last(call) not in ("cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss") \
                    or keyword(call, "ignore_index") is None or self.in_no_grad(call):
                continue
            reduction = keyword(call, "reduction")
            if reduction is None or (isinstance(reduction, ast.Constant) and reduction.value == "mean"):
                if padded:
                    self.add(
                        "DDP180",
                        call,
                        f"{last(call)}(ignore_index=...) averages over this rank's own "
                        "real tokens: DDP then averages the ranks' gradients, so a token weighs more on a "
                        'rank with fewer; use reduction="sum" and divide by the all-reduced global '
                        "count times the world size",
                    )
                else:
                    self.add(
                        "DDP180",
                        call,
                        f"{last(call)}(ignore_index=...) averages over this rank's own "
                        "targets: nothing here pads or masks them, but if some are ignored, a token weighs "
                        'more on a rank with fewer; use reduction="sum" and the all-reduced global count',
                        "note",
                    )

    # -- DDP190: a metric that is not a sum, averaged
    def flowing(self, seeds, scope):
        """`seeds` (dotted names) and the names assigned from them in `scope`, to a fixed point."""
        names, changed = set(seeds), True
        assigns = [
            n
            for n in self.by_scope.get(scope, [])
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None
        ]
        while changed:
            changed = False
            for node in assigns:
                for t in self.targets_of(
                    node,
                    lambda value: any(
                        isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) in names
                        for n in ast.walk(value)
                    ),
                ):
                    if dotted(t) and dotted(t) not in names:
                        names.add(dotted(t))
                        changed = True
        return names

    def rule_metric_mean(self):
        for scope, nodes in self.by_scope.items():
            seeds, metric = set(), {}
            for node in nodes:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    made = next((c for c in ast.walk(node.value) if isinstance(c, ast.Call)
                                 and NOT_A_SUM.search(last(c))), None)
                    if made is not None:
                        for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                            for t in ([target] if not isinstance(target, ast.Tuple) else target.elts):
                                if dotted(t):
                                    seeds.add(dotted(t))
                                    metric[dotted(t)] = last(made)
            if not seeds and not any(isinstance(c, ast.Call) and NOT_A_SUM.search(last(c)) for c in nodes):
                continue
            scores = self.flowing(seeds, scope)
            for call in nodes:
                if not (isinstance(call, ast.Call) and self.is_collective(call) and call.args):
                    continue
                inputs = call.args[1:] if last(call) in ("all_gather", "all_gather_object", "gather_object",
                                                          "gather") else call.args[:1]
                used = [dotted(n) for a in inputs for n in ast.walk(a)
                        if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) in scores]
                made_here = [last(n) for a in inputs for n in ast.walk(a)
                             if isinstance(n, ast.Call) and NOT_A_SUM.search(last(n))]
                if not used and not made_here:
                    continue
                made_by = next((metric[s] for s in seeds if s in used), None) or (
                    made_here[0] if made_here else next(iter(metric.values())))
                used = used or [made_by + "(...)"]
                name = last(call)
                averaged = False
                if name == "all_reduce":
                    op = keyword(call, "op") or (call.args[1] if len(call.args) > 1 else None)
                    averaged = op is not None and dotted(op).endswith("AVG")
                    reduced = dotted(call.args[0])
                    if not averaged and (op is None or dotted(op).endswith("SUM")) and reduced:
                        averaged = self.divided_by_world(reduced, scope, call.lineno)
                elif name in ("all_gather", "all_gather_object", "gather_object", "gather") and dotted(
                    call.args[0]
                ):
                    averaged = self.averaged_list(dotted(call.args[0]), scope, call.lineno)
                if averaged:
                    self.add(
                        "DDP190",
                        call,
                        f"{name}() averages `{used[0]}`, made by {made_by}(), which is not a "
                        "sum: the mean of the ranks' scores is not the score of the whole set; all-reduce "
                        "the counts it is made of, or gather the predictions and score them once",
                    )

    def divided_by_world(self, name, scope, line):
        """`x / world_size`, `x /= dist.get_world_size()` after line `line` in `scope`."""
        world = re.compile(r"(?i)world|nprocs|num_replicas|num_gpus|n_gpus|ngpus")
        for node in self.by_scope.get(scope, []):
            if getattr(node, "lineno", 0) < line:
                continue
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) or (
                    isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div)):
                left = node.left if isinstance(node, ast.BinOp) else node.target
                right = node.right if isinstance(node, ast.BinOp) else node.value
                if any(
                    dotted(n) == name for n in ast.walk(left) if isinstance(n, (ast.Name, ast.Attribute))
                ) and any(
                    world.search(last(n))
                    for n in ast.walk(right)
                    if isinstance(n, (ast.Name, ast.Attribute, ast.Call))
                ):
                    return True
        return False

    def averaged_list(self, name, scope, line):
        """A gathered list averaged after line `line`: mean(x), sum(x) / len(x)."""
        for node in self.by_scope.get(scope, []):
            if getattr(node, "lineno", 0) < line or not isinstance(node, ast.Call):
                continue
            if last(node) in ("mean", "average", "fmean") and any(
                    dotted(n) == name for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))):
                return True
            parent = self.parents.get(node)
            if (
                last(node) == "sum"
                and isinstance(parent, ast.BinOp)
                and isinstance(parent.op, ast.Div)
                and any(dotted(n) == name for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)))
            ):
                return True
        return False

    # -- DDP191: a loop left on a rank-local value
    def synced(self, scope):
        """Names a collective made the same on every rank (all_reduce'd, broadcast, gathered;
        the receiver of a `.synchronize_between_processes()`, the result of a `reduce_dict()`),
        and the names computed from them."""
        key = ("synced", scope)
        if key in self._memo:
            return self._memo[key]
        seeds = set()
        for scope_here in self.enclosing(scope):
            for node in self.by_scope.get(scope_here, []):
                if not isinstance(node, ast.Call) or last(node)[:1].isupper():
                    continue  # a class (gym.vector.SyncVectorEnv(...)) makes an object: no value synced
                if re.search(r"(?i)batch_?norm", last(node)):
                    continue  # convert_sync_batchnorm(model): a model whose outputs stay this rank's
                if self.is_collective(node) and node.args and dotted(node.args[0]):
                    seeds.add(dotted(node.args[0]))
                elif SYNC_CALL.search(last(node)) and isinstance(node.func, ast.Attribute) \
                        and dotted(node.func.value) and not self.is_collective(node):
                    seeds.add(dotted(node.func.value))  # metric_logger.synchronize_between_processes()
                holder = self.parents.get(node)
                if SYNC_CALL.search(last(node)) and isinstance(holder, ast.Assign) and holder.value is node:
                    seeds |= {dotted(t) for t in holder.targets if dotted(t)}  # reduced = reduce_dict(d)
        self._memo[key] = self.flowing(seeds, scope)
        return self._memo[key]

    def local_in(self, expr, scope, local, synced, at=None):
        """What in `expr` makes it a value this rank computed alone, or None: a name of
        `local` that holds such a value where `expr` is read (at the statement `at`), a loss
        or metric computed here (criterion(out, y), accuracy(...)), the model's output, or a
        function of the project whose return is such a value. A value that mentions a synced
        name is the same on every rank."""
        names = {dotted(n) for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute))}
        if names & synced:
            return None
        for node in ast.walk(expr):
            if isinstance(node, (ast.Name, ast.Attribute)) and self.holds_local(local, dotted(node), at):
                return dotted(node)
            if isinstance(node, ast.Attribute) and self.holds_local(local, dotted(node.value), at):
                return dotted(node)  # stopper.early_stop, after stopper(val_loss)
            if not isinstance(node, ast.Call) or self.is_collective(node):
                continue
            name = last(node)
            if name and not name[:1].isupper() and LOCAL_CALL.search(name) and not SYNC_CALL.search(name):
                return f"{name}(...)"
            func = node.func.value if isinstance(node.func, ast.Attribute) and node.func.attr == "forward" \
                else node.func
            if isinstance(func, (ast.Name, ast.Attribute)) and (
                    MODEL_NAME.search(last(func))
                    or self.kinds_of(func, node.lineno, scope) & {"ddp", "compile"}
                    or self.trained_output(func)):
                return f"{ast.unparse(func)}(...)"
            resolved = self.resolve(node)
            if resolved is not None and resolved[0].returns_local(resolved[1]):
                return f"{name}(...)"
        return None

    def trained_output(self, func):
        """`func` is a module whose parameters an optimizer of the file holds, or a method of
        one that computes (`agent.get_action_and_value(obs)`, where
        `optim.Adam(agent.parameters())`): its result is this rank's output."""
        if "optimized" not in self._memo:
            self._memo["optimized"] = {
                dotted(a.func.value) for c in self.calls
                if OPTIMIZER_CLASS.search(last(c)) and last(c)[:1].isupper()
                for a in c.args[:1] if isinstance(a, ast.Call) and last(a) == "parameters"
                and isinstance(a.func, ast.Attribute) and dotted(a.func.value)}
        optimized = self._memo["optimized"]
        if dotted(func) in optimized:
            return True
        return isinstance(func, ast.Attribute) and dotted(func.value) in optimized \
            and func.attr not in MODULE_METHODS and not func.attr.startswith("_")

    def rank_local(self, scope):
        """Where names of `scope` get a value this rank computed alone (see local_in), and
        what is computed from them, to a fixed point: also a value set under a test on one
        (`bad_epochs += 1` in the `else` of `if val_loss < best:`), and an object given one
        (`stopper(val_loss)`: then `stopper.early_stop`). Not the names a collective made equal.
        In statement order: {name: (the statements that make it local, its other plain
        assignments)}. A later plain assignment replaces what the name held (see holds_local)."""
        key = ("local", scope)
        if key in self._memo:
            return self._memo[key]
        local = {}
        self._memo[key] = local  # a recursive call: nothing yet
        synced = self.synced(scope)
        own = self.by_scope.get(scope, [])
        assigns = [n for n in own if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                   and n.value is not None]
        statements = [n for n in own if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        plain = {}  # name -> its plain assignments (`x = ...`), which replace what it held
        for node in assigns:
            if isinstance(node, ast.AugAssign):
                continue
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(t, (ast.Name, ast.Attribute)) and dotted(t):
                        plain.setdefault(dotted(t), []).append(node)

        def mark(name, node):
            taints, _ = local.setdefault(name, ([], plain.get(name, [])))
            if node in taints:
                return False
            taints.append(node)
            return True

        changed = True
        while changed:
            changed = False
            for node in assigns:
                tests = [a.test for a in self.between(node, scope) if isinstance(a, (ast.If, ast.While))]
                implicit = any(self.local_in(test, scope, local, synced, node) for test in tests)

                def made_here(value, implicit=implicit, node=node):
                    return implicit or self.local_in(value, scope, local, synced, node)

                for t in self.targets_of(node, made_here):
                    name = dotted(t) or dotted(getattr(t, "value", None))  # best[0] = ...: best
                    if name and name not in synced and mark(name, node):
                        changed = True
            for node in statements:  # stopper(val_loss), stopper.update(val_loss)
                call = node.value
                owner = call.func.value if isinstance(call.func, ast.Attribute) else call.func
                name = dotted(owner)
                if name.split(".")[0] in self.imports:
                    continue  # json.dump(loss, f), logging.info(loss): a module, no state of the run
                if name and name not in synced and any(
                        self.local_in(a, scope, local, synced, node)
                        for a in list(call.args) + [k.value for k in call.keywords]) and mark(name, node):
                    changed = True
        return local

    def holds_local(self, local, name, at):
        """`name` holds a value of this rank's own where the statement `at` reads it: a
        statement that made it so runs before `at`, and no plain assignment on the way to
        `at` replaced it (`checkpoint = torch.load(...)` read, then `checkpoint = {...,
        "best": best}` saved); or it runs after `at` in a loop around both."""
        if name not in local:
            return False
        taints, plain = local[name]
        if at is None:
            return bool(taints)
        here = (at.lineno, at.col_offset)
        for taint in taints:
            start = (taint.lineno, taint.col_offset)
            if start < here:
                if not any(start < (k.lineno, k.col_offset) < here and k not in taints
                           and self.runs_before(k, at) for k in plain):
                    return True
            elif {id(a) for a in self.ancestors(taint) if isinstance(a, (ast.For, ast.While))} & {
                    id(a) for a in self.ancestors(at) if isinstance(a, (ast.For, ast.While))}:
                return True
        return False

    def runs_before(self, statement, at):
        """`statement` runs whenever `at` runs, before it: it sits in a block of statements
        that holds `at` or a statement around it (not in another branch)."""
        holder = self.parents.get(statement)
        for node in (at, *self.ancestors(at)):
            if self.parents.get(node) is holder:
                return any(isinstance(block, list) and statement in block and node in block
                           for _, block in ast.iter_fields(holder))
        return False

    def returns_local(self, function):
        """The function returns a value its rank computed alone (a loss on its own data, not
        all-reduced), as rank_local tells it inside the function."""
        key = ("returns_local", function)
        if key not in self._memo:
            self._memo[key] = False  # a recursive call: no
            local, synced = self.rank_local(function), self.synced(function)
            self._memo[key] = any(
                isinstance(node, ast.Return) and node.value is not None
                and self.local_in(node.value, function, local, synced, node) is not None
                for node in self.own_nodes(function))
        return self._memo[key]

    def rule_local_exit(self):
        for loop in self.nodes:
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            scope = self.function_of(loop)
            inside = [n for s in loop.body for n in ast.walk(s) if self.function_of(n) is scope]
            calls = [c for c in inside if isinstance(c, ast.Call)]
            given = getattr(self, "entry_ddp", False)  # a module given the script's DDP model
            wraps = self.ddp_calls or given
            if not any(self.is_collective(c) or (wraps and (self.is_backward(c) or (
                    given and isinstance(c.func, ast.Name) and self.reaches(c, "is_backward"))))
                       or self.reaches_collective(c) for c in calls):
                continue  # no collective in it: a rank that leaves early strands no one
            exits = [n for n in inside if (isinstance(n, ast.Break) and self.loop_of(n) is loop)
                     or isinstance(n, ast.Return)]
            if not exits:
                continue
            synced = self.synced(scope)
            local = None
            for node in exits:
                tests = [a.test for a in self.between(node, loop) if isinstance(a, (ast.If, ast.While))]
                names = {
                    dotted(n) for t in tests for n in ast.walk(t) if isinstance(n, (ast.Name, ast.Attribute))
                }
                if not tests or (names - {""}) & synced:
                    continue
                on_rank = next((t for t in tests if self.rank_test(t, scope)), None)  # the rank itself
                exit_word = "break" if isinstance(node, ast.Break) else "return"
                if on_rank is not None:
                    self.add("DDP191", node, f"this {exit_word} leaves the loop only on the ranks where "
                             f"`{ast.unparse(on_rank)}` holds: the ranks that stay wait in the loop's next "
                             "collective for the ones that left; decide on every rank alike (broadcast the "
                             "decision)")
                    continue
                local = self.rank_local(scope) if local is None else local
                deciding = next((found for t in tests
                                 if (found := self.local_in(t, scope, local, synced, t))), None)
                if deciding:
                    self.add(
                        "DDP191",
                        node,
                        f"this {exit_word} leaves the loop on `{deciding}`, a value this "
                        "rank computed alone: if another rank decides otherwise, it waits in the loop's "
                        "next collective for the ones that left; all-reduce the value, or broadcast rank "
                        "0's decision",
                    )

    def loop_of(self, node):
        return next((a for a in self.ancestors(node) if isinstance(a, (ast.For, ast.While))), None)


# ------------------------------------------------------------------------ reading files
# ------------------------------------------------------------ where the checker stopped reading
ROLE = re.compile(r"model|net$|^net|network|optim|loader|sampler|dataset|trainer|runner|engine|learner|solver"
                  r"|^exp$|experiment|agent|algorithm|^algo$|hook|callback", re.I)  # what the rules look at
RUN_VERBS = re.compile(r"^(train|fit|run|test|eval|valid|val$|predict|learn|launch|start|execute|main|loop)")
REGISTRY = re.compile(r"regist|^[A-Z][A-Z0-9_]*$")  # MODELS.build(cfg), MODEL_REGISTRY.get(name)
REGISTRY_GET = re.compile(r"regist", re.I)  # .get of a registry, not of any dict
UNREAD_SHOWN = 5  # places the text report lists; --format json lists them all


def picked_at_run_time(call, imported):
    """Why `call` makes something the checker cannot name: the class or function is chosen
    by a value at run time. None where it is named in the code. `imported`: the names the
    file's imports bind (getattr picks from a module, not an attribute of an object)."""
    func, args = call.func, call.args
    literal = bool(args) and isinstance(args[0], ast.Constant)
    name = last(call)
    if isinstance(func, ast.Name) and func.id == "eval" and args and not literal:
        return "picked at run time by eval"
    if isinstance(func, ast.Name) and func.id == "getattr" and len(args) >= 2 \
            and not isinstance(args[1], ast.Constant):
        owner = dotted(args[0]).split(".")[0]
        from_module = owner in imported or isinstance(args[0], ast.Call) and last(args[0]) == "import_module"
        return "picked at run time by getattr" if from_module and owner not in ("torch", "nn", "F", "optim") \
            else None
    if name in ("import_module", "__import__") and args and not literal:
        return "a module imported by a name known at run time"
    if name == "instantiate" and dotted(func) in ("instantiate", "hydra.utils.instantiate",
                                                  "utils.instantiate"):
        return "a class named in a config (hydra's instantiate)"
    if name == "build_from_cfg" or (isinstance(func, ast.Attribute) and name in ("build", "get", "get_class")
                                    and REGISTRY.search(last(func.value) if isinstance(
                                        func.value, (ast.Name, ast.Attribute)) else "")):
        if name == "get" and (args and isinstance(args[0], ast.Constant) or not REGISTRY_GET.search(
                last(func.value) if isinstance(func.value, (ast.Name, ast.Attribute)) else "")):
            return None
        return "a registry builds it from a name known at run time"
    if isinstance(func, ast.Subscript) and not isinstance(func.slice, ast.Constant) \
            and isinstance(func.value, (ast.Name, ast.Attribute)):
        return "a class or function looked up in a dict by a value"
    return None


def what_it_makes(parents, call, scope_nodes):
    """(what the rules need from the object `call` makes: '`model`', '`trainer`, whose methods
    run', ..., the expression that makes it), or None when it makes nothing they look at (an
    activation, a scheduler, a buffer)."""
    node, parent, wrapped = call, parents.get(call), 0
    while isinstance(parent, ast.Call) and parent.func is node:  # getattr(m, name)(cfg)
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Expr):
        return ("a call", node) if node is not call else None  # getattr(runner, mode)(): it runs
    while isinstance(parent, (ast.Call, ast.Attribute)) and wrapped < 4:  # DDP(eval(name)()).to(device)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
                and parent.func.attr in ("append", "extend", "insert") and node in parent.args:
            holder = last(parent.func.value)  # hooks.append(HOOKS.build(cfg)): one of the hooks
            return (f"`{holder}`", node) if ROLE.search(holder) else None
        node, parent, wrapped = parent, parents.get(parent), wrapped + 1
    if not (isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node):
        return None
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    for name in [t.id if isinstance(t, ast.Name) else t.attr for t in targets
                 if isinstance(t, (ast.Name, ast.Attribute))]:
        if ROLE.search(name):
            return f"`{name}`", node
        uses = [n for n in scope_nodes if isinstance(n, ast.Call) and n.lineno > parent.lineno]
        for use in uses:  # model_class = getattr(models, name) ... model = model_class(cfg)
            statement = parents.get(use)
            if isinstance(use.func, ast.Name) and use.func.id == name and (
                    isinstance(statement, ast.Expr) or isinstance(statement, ast.Assign) and any(
                        ROLE.search(last(t)) for t in statement.targets)):
                return f"`{name}`, then called", node
        if any(isinstance(u.func, ast.Attribute) and isinstance(u.func.value, ast.Name)
               and u.func.value.id == name and RUN_VERBS.match(u.func.attr) for u in uses):
            return f"`{name}`, whose methods run", node
    return None


def project_folders(project, limit=600):
    """{name: a folder of the project that holds Python code}: what an import the checker
    could not find may be (a src/ layout, a package on PYTHONPATH). Under the script's folder,
    and under the project's top where it is marked as one (.git, pyproject.toml, setup.py)."""
    if not hasattr(project, "folders"):
        project.folders, visited = {}, 0
        marked = any((project.top / m).exists() for m in (".git", "pyproject.toml", "setup.py", "setup.cfg"))
        for top in dict.fromkeys([project.script.parent] + [project.top] * marked):  # the script's first
            for folder, dirs, files in os.walk(top):
                visited += 1
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d not in INSTALLED
                                 and d not in ("node_modules", "build", "dist"))
                if any(f.endswith(".py") for f in files):
                    project.folders.setdefault(Path(folder).name, Path(folder))
                if visited >= limit:
                    return project.folders
    return project.folders


def installed(name):
    """The Python that runs the checker has a package `name` outside the project (torch)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and any(part in INSTALLED for part in Path(spec.origin or "").parts)


def unread_imports(checker):
    """[(line, what, why)]: the entry file's imports of the project that the checker could not
    find: a relative import, or a name that is a folder of the project (src/NAME), once each."""
    project, out, said, relative = checker.project, [], set(), []
    for node in checker.nodes:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom):
            modules = [(node.module or "", node.level)]
        else:
            modules = [(a.name, 0) for a in node.names]
        for module, level in modules:
            if level:
                if project.find(module, level, checker.folder) is not None or any(
                        project.find(".".join(p for p in (module, a.name) if p), level, checker.folder)
                        for a in node.names) or ("." * level + module) in said:
                    continue
                said.add("." * level + module)
                relative.append((node.lineno, f"{'.' * level}{module}"))
                continue
            head = module.split(".")[0]
            if head in said or head in sys.stdlib_module_names or project.find(head, 0, checker.folder) \
                    or project.find(module, 0, checker.folder) or isinstance(node, ast.ImportFrom) and any(
                        project.find(f"{module}.{a.name}", 0, checker.folder) for a in node.names):
                continue  # found: `from data import loaders` reads data/loaders.py
            folder = project_folders(project).get(head)
            if folder is not None and any(folder in Path(p).parents for p in project.read):
                continue  # the run read a module of that folder: not a place it stopped
            if folder is None or head.startswith("torch") or folder in checker.path.resolve().parents \
                    or (folder.parent / "__init__.py").is_file() \
                    or not (folder / "__init__.py").is_file() \
                    and folder.parent not in project.roots or installed(head):
                continue
            said.add(head)
            where = os.path.relpath(folder, checker.path.resolve().parent)
            why = "a folder without __init__.py: the checker follows packages only" \
                if folder.parent in project.roots else "not beside the script or above it: a src/ layout?"
            out.append((node.lineno, f"`import {head}` ({where})", why))
    if relative:  # one line for them all: the file is run outside the package it belongs to
        more = f" and {len(relative) - 1} more" if len(relative) > 1 else ""
        out.append((relative[0][0], f"`from {relative[0][1]} import ...`{more}",
                    "relative imports of a package the checker did not find"))
    return out


def from_config(checker, value):
    """`value` is read from a config the checker does not read: `h.dist_config['dist_url']`,
    `cfg.DIST.BACKEND`; not a literal, a command-line option (its default is read), the
    environment, or a name of the function."""
    if isinstance(value, (ast.Constant, ast.JoinedStr, ast.Name, ast.Call)) \
            or dotted(value).startswith("self."):  # an attribute of an object: set anywhere
        return False
    text = dotted(value) if isinstance(value, ast.Attribute) else ""
    if "environ" in ast.unparse(value) or (isinstance(value, ast.Attribute) and text.count(".") == 1 and (
            text.split(".")[0] in ("args", "opt", "opts", "flags") or checker.is_option(value.attr))):
        return False  # a command-line option: the checker reads its default
    return isinstance(value, (ast.Subscript, ast.Attribute))


def sets_device(paths):
    """A module of `paths` sets or picks the rank's GPU (set_device, a device context,
    CUDA_VISIBLE_DEVICES, device_id): the backend does not decide DDP131 then."""
    return any(tree is not None and any(
        (isinstance(n, ast.Attribute) and n.attr == "set_device")
        or (isinstance(n, ast.Call) and dotted(n.func).endswith("cuda.device"))
        or (isinstance(n, ast.Constant) and n.value == "CUDA_VISIBLE_DEVICES")
        or (isinstance(n, ast.keyword) and n.arg == "device_id") for n in ast.walk(tree))
        for tree in map(parse_module, paths))


def unread_settings(checker, path, shown):
    """[place]: a rendezvous URL (its port) that init_process_group takes from a config, which
    no rule reads; a backend from a config in a module of the project (the script's own is
    DDP131's to weigh), where no module sets the device. No place where a rule spoke."""
    calls = [(path, checker.path.resolve(), c) for c in checker.calls]
    if checker.distributed or checker.names_distributed:
        calls += [(shown(p), p, n) for p, function, _ in checker.deep_reach() for n in ast.walk(function)
                  if isinstance(n, ast.Call)]
    said = {(f[0], f[2]) for f in checker.findings}
    out, reached = {}, {checker.path.resolve()} | {p for p, _, _ in checker.deep_reach()}
    for where, module, call in calls:
        if last(call) != "init_process_group":
            continue
        for name, code, what in (("backend", "DDP131", "the backend"), ("init_method", "DDP130", "the port")):
            value = keyword(call, name) or (call.args[0] if name == "backend" and call.args else None)
            if name == "backend" and (where == path or sets_device(reached | {module})):
                continue  # the script's own: DDP131 weighs it; a device set: the backend decides nothing
            if value is not None and from_config(checker, value) and (
                    where != path or (call.lineno, code) not in said):
                place = out.setdefault((where, value.lineno), {"path": where, "line": value.lineno,
                                                                "what": [], "why": []})
                place["what"].append(f"`{name}={ast.unparse(value)[:50]}`")
                place["why"].append(what)
    for place in out.values():
        place["what"] = ", ".join(place["what"])
        place["why"] = f"{' and '.join(place['why'])}, from a config the checker did not read"
    return list(out.values())


def unread_places(checker, path):
    """[{path, line, what, why}]: where the checker stopped on the code it follows from the
    entry file: an object picked at run time that the rules would need, a project import not
    found, modules left unread past the followed-lines cap. What a reader checks by hand."""
    if checker.project is None or checker.path is None:
        return []
    here = checker.path.resolve()
    places = []

    def shown(module_path):
        return path if module_path == here else os.path.normpath(
            os.path.join(os.path.dirname(path), checker.project.where(module_path)))

    def picks(module_path, scope_nodes, function, parents):
        reach = checker.project.reach
        found = reach.parsed(module_path) if module_path != here else None
        imported = set(checker.imports) if module_path == here else set(found[3]) if found else set()
        imported |= {t.id for n in scope_nodes if isinstance(n, ast.Call) and last(n) == "import_module"
                     and isinstance(parents.get(n), ast.Assign) for t in parents[n].targets
                     if isinstance(t, ast.Name)}  # module = importlib.import_module(path)
        for call in scope_nodes:
            if not isinstance(call, ast.Call):
                continue
            why = picked_at_run_time(call, imported)
            if why is None:
                continue
            scope = checker.function_of(call) if function is None else function
            if reach.functions(module_path, scope, call) or reach.functions(module_path, scope, call.func) \
                    or reach.picked(module_path, call):  # getattr(launchers, "init_dist_%s" % name)
                continue  # the checker names what it picks: followed
            found = what_it_makes(parents, call, scope_nodes)
            if found is not None and not re.search(r"(?i)model|net", found[0]) \
                    and reach.made(module_path, call):
                continue  # a registry's classes, each read where they run the same method: followed
            if found is not None:
                what, node = found
                text = ast.unparse(node)
                text = text if len(text) <= 60 else text[:57] + "..."
                places.append({"path": shown(module_path), "line": call.lineno,
                               "what": f"{what}: {text}", "why": why})

    picks(here, [n for n in checker.nodes if isinstance(n, ast.Call)], None, checker.parents)
    places += [{"path": path, "line": line, "what": what, "why": why}
               for line, what, why in unread_imports(checker)]
    if checker.distributed or checker.names_distributed:
        for module_path, function, _ in checker.deep_reach():
            nodes = list(ast.walk(function))
            picks(module_path, nodes, function, {c: n for n in nodes for c in ast.iter_child_nodes(n)})
    places += unread_settings(checker, path, shown)
    capped = {}  # the entry file's call -> the modules it reaches that were left unread
    for module_path, call in getattr(checker, "capped", []):
        capped.setdefault(call.lineno, []).append(checker.project.where(module_path))
    for line, modules in capped.items():
        named = ", ".join(modules[:3]) + (f" and {len(modules) - 3} more" if len(modules) > 3 else "")
        places.append({"path": path, "line": line, "what": f"what this call reaches in {named}",
                       "why": f"past the followed-lines cap ({FOLLOWED_LINES:,} lines): "
                              "its rules not run there"})
    seen, out = set(), []
    for place in sorted(places, key=lambda p: (p["path"], p["line"], p["what"])):
        if (place["path"], place["line"]) not in seen:
            seen.add((place["path"], place["line"]))
            out.append(place)
    return out


class Unreadable(Exception):
    pass


def read_source(path):
    if not os.path.exists(path):
        raise Unreadable(f"{path}: no such file")
    if os.path.isdir(path):
        raise Unreadable(f"{path}: is a directory; give the .py files (e.g. {path.rstrip('/')}/*.py)")
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise Unreadable(f"{path}: cannot read it ({error.strerror})") from None
    if b"\0" in data:
        raise Unreadable(f"{path}: a binary file, not a Python script")
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is allowed, as Python allows it
    except UnicodeDecodeError:
        raise Unreadable(f"{path}: not UTF-8 text, not a Python script") from None
    try:
        return text, ast.parse(text, filename=path)
    except SyntaxError as error:
        raise Unreadable(f"{path}:{error.lineno}:{error.offset or 0}: a syntax error ({error.msg}): "
                         "fix it (python -m py_compile shows it) and run the checker again") from None


def silenced(lines, node, code):
    for number in range(node.lineno, (getattr(node, "end_lineno", None) or node.lineno) + 1):
        match = NOQA.search(lines[number - 1]) if number <= len(lines) else None
        if match and (not match["codes"] or code in re.split(r"[\s,]+", match["codes"].upper())):
            return True
    return False


def selected(code, select=None, ignore=None):
    """ruff's way: a code is kept if a --select entry is a prefix of it (all, without
    --select) and no --ignore entry is."""
    return (not select or any(code.startswith(s) for s in select)) and not any(
        code.startswith(s) for s in ignore or ())


def project_of(path, root=None, follow=True):
    """The Project whose modules the script at `path` imports; None for text that is no file
    (or with follow=False: the script alone)."""
    return Project(path, root) if follow and path and os.path.isfile(path) else None


_TREE_FACTS = {}  # id(tree) -> (tree, what Checker.tree_facts found in it)
_VERDICTS = {}  # path -> whether check_source found the script distributed ("named": it calls it)
_UNREAD = {}  # path -> the places check_source could not read past (unread_places)


def check_source(text, tree, path="<string>", select=None, ignore=None, root=None, follow=True):
    """Findings as dicts: path, line, col, code, severity, message, chapter, page, variant.
    With follow (and `path` a file), the functions it imports from its own project are read
    too (see Project); `root`: the project's top folder, if it holds no `.git`."""
    views = ["good", "bad"] if has_variants(tree) else [None]
    seen, out, lines = set(), [], text.splitlines()
    project = project_of(path, root, follow)
    for view in views:
        viewed = VariantView(view).visit(ast.parse(text)) if view else tree
        ast.fix_missing_locations(viewed)
        checker = Checker(viewed, project=project, path=path if project else None)
        _VERDICTS[path] = checker.distributed or ("named" if checker.names_distributed else False)
        if view != "bad":
            running = checker  # the script as it runs: where it stopped reading, said once below
        for line, col, code, severity, message, node in sorted(checker.check(), key=lambda f: f[:3]):
            if (line, col, code) in seen or (line, code, message) in seen or silenced(lines, node, code) \
                    or not selected(code, select, ignore):
                continue  # said: at this column, or in the same words on this line (data, loader = f())
            seen |= {(line, col, code), (line, code, message)}
            rule = RULES[code]
            out.append({"path": path, "line": line, "col": col, "code": code, "severity": severity,
                        "message": message, "chapter": rule.chapter, "page": rule.page,
                        "variant": "bad" if view == "bad" else None})
    _UNREAD[path] = unread_places(running, path)  # after every view's findings: it reads more of the project
    return sorted(out, key=lambda f: (f["line"], f["col"], f["code"]))


def format_finding(f):
    where = " (with --variant bad)" if f["variant"] else ""
    return (f"{f['path']}:{f['line']}:{f['col']}: {f['code']} {f['severity']}: {f['message']}{where} "
            f"(chapter {f['chapter']}: {f['page']})")


def explain(code):
    """The rule's section of docs/check.md if it is next to this file; its summary if not."""
    rule = RULES.get(code.upper())
    if rule is None:
        return None
    page = Path(__file__).resolve().parents[2] / PAGE
    if page.exists():
        section = re.search(rf"^## {rule.code}\b.*?(?=^## |\Z)", page.read_text(), re.M | re.S)
        if section:
            return section.group(0).rstrip()
    return (
        f"{rule.code} ({rule.severity}): {rule.title}\nfix: {rule.fix}\nchapter {rule.chapter}: {rule.page}"
    )


def plural(count, word):
    return f"{count} {word}{'s' * (count != 1)}"


def main_check(args):
    results, unreadable, plain, unfollowed, unread = [], [], [], [], []
    least = SEVERITIES.index(args.severity)
    for path in args.paths:
        try:
            text, tree = read_source(path)
        except Unreadable as error:
            unreadable.append(str(error))
            continue
        results += [f for f in check_source(text, tree, path, args.select, args.ignore)
                    if SEVERITIES.index(f["severity"]) >= least]
        if least == 0:  # a note's worth: hidden with --severity warning or error, as notes are
            unread += [p for p in _UNREAD.get(path, []) if p not in unread]
        verdict = _VERDICTS.get(path, True)
        if verdict == "named":
            unfollowed.append(path)  # it calls torch.distributed, its DDP is out of sight
        elif not verdict:
            plain.append(path)  # a one-device script: the rules do not apply to it
    failing = [f for f in results if f["severity"] != "note"]
    code = 2 if unreadable else 1 if failing else 0
    try:
        report(args, results, unreadable, plain, unfollowed, unread)
    except BrokenPipeError:  # | head read what it wanted: stop quietly, with the same exit code
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def report(args, results, unreadable, plain, unfollowed=(), unread=()):
    if args.format == "json":
        said = {"findings": results, "errors": unreadable, "not_distributed": plain}
        if unfollowed:
            said["not_followed"] = list(unfollowed)  # calls torch.distributed, its DDP out of sight
        if unread:
            said["unread"] = list(unread)  # where the checker stopped reading: check by hand
        print(json.dumps(said, indent=2))
    else:
        for error in unreadable:
            print(f"check_ddp: {error}", file=sys.stderr)
        for finding in results:
            print(format_finding(finding))
        files = len({f["path"] for f in results})
        checked = len(args.paths) - len(unreadable)
        counts = ", ".join(plural(n, s) for s in reversed(SEVERITIES)
                           if (n := sum(f["severity"] == s for f in results)))
        summary = f"{plural(len(results), 'finding')} in {plural(files, 'file')} ({counts})" if results else \
            "no findings"
        if plain:
            them = "it" if len(plain) == 1 else "them"
            note = (f"{', '.join(map(str, plain))}: no torch.distributed in {them}: the DDP rules do not "
                    "apply (check the DDP version of your script)")
            summary = note if not results and len(plain) == checked else f"{summary}; {note}"
        if unfollowed:
            note = (f"note: {', '.join(map(str, unfollowed))} calls torch.distributed, but the checker "
                    "could not follow where the model is wrapped or the group started (a trainer made "
                    "from a config?): check the file that wraps the model")
            summary = f"{summary}; {note}"
        print(summary, f"({checked} file(s) checked"
              + (f", {len(unreadable)} unreadable)" if unreadable else ")"), flush=True)
        print_unread(unread)


def unread_lines(unread):
    """The text report's block of the places where the checker stopped reading: no finding
    (no code, no severity), at most UNREAD_SHOWN of them; [] when there is none."""
    if not unread:
        return []
    places = sorted(unread, key=lambda p: (p["path"], p["line"]))
    lines = ["not followed (check these by hand):"]
    lines += [f"  {p['path']}:{p['line']}: {p['what']} ({p['why']})" for p in places[:UNREAD_SHOWN]]
    if len(places) > UNREAD_SHOWN:
        lines.append(f"  ... and {len(places) - UNREAD_SHOWN} more (--format json lists them all)")
    return lines


def print_unread(unread):
    for line in unread_lines(unread):
        print(line, flush=True)
# ------------------------------------------------------------------------ the preflight
LAUNCHERS = [  # (name, rank, world size, local rank, local world size)
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("mpich/pals", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
]


class PreflightError(Exception):
    pass


def launch_info(env):
    """(launcher, rank, world, local_rank, local_world): from the first launcher whose rank
    variable is set; a message for what is missing or wrong."""
    for name, rank_var, size_var, local_var, local_size_var in LAUNCHERS:
        if name == "slurm" and "SLURM_STEP_ID" not in env:
            continue  # inside an sbatch script, not an srun step: not a launch
        if rank_var not in env and size_var not in env:
            continue
        missing = [v for v in (rank_var, size_var, local_var) if v not in env]
        if name == "torchrun" and int(env.get(size_var, "1") or 1) > 1:
            missing += [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in env]
        if missing:
            raise PreflightError(f"{name} variables incomplete: {', '.join(missing)} not set (start it with "
                                 "the launcher's own line: torchrun, mpiexec, srun)")
        try:
            rank, world, local = int(env[rank_var]), int(env[size_var]), int(env[local_var])
        except ValueError:
            raise PreflightError(f"{name} variables are not whole numbers: {rank_var}={env[rank_var]!r} "
                                 f"{size_var}={env[size_var]!r} {local_var}={env[local_var]!r}") from None
        local_world = env.get(local_size_var, "")
        local_world = int(local_world) if local_world.isdigit() else None
        if not 0 <= rank < world or (local_world and not 0 <= local < local_world):
            raise PreflightError(f"{name} variables disagree: {rank_var}={rank} {size_var}={world} "
                                 f"{local_var}={local}")
        return name, rank, world, local, local_world
    return "none", 0, 1, 0, 1


def first_host(nodelist):
    """The first host of a Slurm node list: 'node[07-09,12],gpu3' -> 'node07'."""
    match = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist)
    return match.group(1) + (match.group(2) or "") if match else nodelist


def rendezvous(env, launcher, world, local_world):
    """Where rank 0 listens: MASTER_ADDR/MASTER_PORT; else this node (all ranks on it) or
    the first node of the Slurm step, on a port derived from the job id."""
    addr = env.get("MASTER_ADDR")
    if addr is None:
        if local_world == world:
            addr = "127.0.0.1"
        elif launcher == "slurm" and env.get("SLURM_STEP_NODELIST"):
            addr = first_host(env["SLURM_STEP_NODELIST"])
        else:
            raise PreflightError(f"MASTER_ADDR is not set and the {world} ranks span several nodes: export "
                                 "MASTER_ADDR=<first node> (mpiexec: -x MASTER_ADDR with Open MPI)")
    port = env.get("MASTER_PORT")
    if port is None:  # a port of this launch: the job id and the launcher's launch id
        names = ("SLURM_JOB_ID", "PBS_JOBID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "PALS_APID")
        key = "|".join(env.get(name, "") for name in names)
        if not key.strip("|") and local_world == world:
            key = f"ppid {os.getppid()}"  # one node: MPICH's proxy is every rank's parent
        if not key.strip("|"):
            raise PreflightError("MASTER_PORT is not set and nothing names this launch: export "
                                 "MASTER_PORT=<a free port> (Open MPI: mpiexec -x MASTER_PORT)")
        port = str(15000 + zlib.crc32(key.encode()) % 17000)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise PreflightError(f"MASTER_PORT={port!r} is not a port number (1-65535)")
    return addr, int(port)


def shared_gpus(reports):
    """One message per physical GPU (host, UUID) that two or more ranks would use."""
    by_gpu = {}
    for report in reports:
        by_gpu.setdefault((report["host"], report["gpu"]), []).append(report)
    return [f"ranks {' and '.join(str(r['rank']) for r in sharing)} on {host} share one GPU ({gpu}) "
            "under nccl: start at most one process per GPU (--nproc_per_node, -n, --ntasks-per-node), "
            "or check "
            "CUDA_VISIBLE_DEVICES" for (host, gpu), sharing in by_gpu.items() if len(sharing) > 1]


def option_given(argv, options):
    """The value given for any of `options` in a command line: True for a bare flag, the
    next word or the part after '='; None if absent."""
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in options:
            if eq:
                return value
            following = argv[i + 1] if i + 1 < len(argv) else ""
            return following if following and not following.startswith("-") else True
    return None


def training_device(path, argv):
    """Why the training command `path argv` would run on the CPUs, as its options show
    (a --cuda flag not given, --cpu given, --device cpu, --backend gloo), or None."""
    try:
        _, tree = read_source(path)
    except Unreadable:
        return None
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and last(call) == "add_argument"):
            continue
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        longs = [o for o in options if o.startswith("--")]
        if not longs:
            continue
        words = {o.lstrip("-").replace("-", "_").lower() for o in longs}
        action, default = keyword(call, "action"), keyword(call, "default")
        action = action.value if isinstance(action, ast.Constant) else None
        default = default.value if isinstance(default, ast.Constant) else None
        given = option_given(argv, options)
        shown = f"{os.path.basename(path)} {longs[0]}"
        if (
            action == "store_true"
            and words & {"cuda", "gpu", "use_cuda", "use_gpu", "gpus"}
            and given is None
        ):
            return f"{shown} is not given: it trains on the CPU"
        cpu_flags = {"cpu", "no_cuda", "no_gpu", "use_cpu"}  # gpu-checked: flag names of the training script
        if action == "store_true" and words & cpu_flags and given is not None:
            return f"{shown} is given: it trains on the CPU"
        value = given if isinstance(given, str) else default
        cpu_value = isinstance(value, str) and value.lower().startswith("cpu")  # gpu-checked: a flag's value
        if words & {"device", "accelerator"} and cpu_value:
            return f"{shown} is {value!r}: it trains on the CPU"
        if words & {"backend", "dist_backend"} and isinstance(value, str) and value.lower() == "gloo":
            return f"{shown} is {value!r}: its ranks meet with gloo, on the CPU"
    return None


def preflight(args):
    import datetime
    import socket

    import torch
    import torch.distributed as dist

    env, started = os.environ, time.monotonic()
    problems = []
    try:
        launcher, rank, world, local, local_world = launch_info(env)
    except PreflightError as error:  # every rank stops on its own: no group to tell
        print(f"preflight: FAIL on {socket.gethostname()}: {error}", file=sys.stderr, flush=True)
        return 1
    host = socket.gethostname()
    addr, port = ("127.0.0.1", 0) if world == 1 else (None, None)
    if world > 1:
        try:
            addr, port = rendezvous(env, launcher, world, local_world)
            socket.getaddrinfo(addr, port)
        except PreflightError as error:
            print(f"preflight: FAIL on rank {rank} ({host}): {error}", file=sys.stderr, flush=True)
            return 1
        except socket.gaierror as error:
            print(f"preflight: FAIL on rank {rank} ({host}): the rendezvous address {addr!r} does not "
                  f"resolve ({error.strerror}): set MASTER_ADDR to a host name or address every node can "
                  "reach", file=sys.stderr, flush=True)
            return 1
    # 1. This rank's device: a GPU of its own under nccl (which GPU: its UUID), else the CPU.
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = args.backend or ("nccl" if gpus else "gloo")
    if backend == "nccl" and not gpus:
        print(f"preflight: FAIL on rank {rank}: --backend nccl but no GPU is visible", file=sys.stderr)
        return 1
    if backend == "nccl":
        device = torch.device("cuda", local % gpus)
        torch.cuda.set_device(device)
        uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", device))
    else:
        device, uuid = torch.device("cpu"), "-"  # gpu-checked: gloo checks the CPU path
    # A CPU job on GPU nodes: the GPUs are visible, but the ranks would not use them.
    warnings = []
    if gpus and backend == "gloo":
        warnings.append(f"{gpus} GPU(s) visible to each rank, but --backend gloo checks the ranks on the "
                        "CPU: if the training should use the GPUs, check it with nccl")
    reason = training_device(args.paths[0], args.paths[1:]) if args.paths else None
    if gpus and reason:
        warnings.append(f"{gpus} GPU(s) visible to each rank, but {reason}: give it its GPU flag, or ignore "
                        "this if the CPUs are meant")
    # 2. Meet: a store at the rendezvous, every wait under --timeout.
    timeout = datetime.timedelta(seconds=args.timeout)
    me = {"rank": rank, "host": host, "launcher": launcher, "world": world, "local_rank": local,
          "device": str(device), "gpu": uuid, "cvd": env.get("CUDA_VISIBLE_DEVICES", "unset"),
          "nccl": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}}
    try:
        if world == 1:
            store = dist.HashStore()
        elif env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent holds the store
            attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
            store = dist.PrefixStore(f"/worker/attempt_{attempt}/preflight",
                                     dist.TCPStore(addr, port, world, is_master=False, timeout=timeout))
        else:
            store = dist.TCPStore(addr, port, world, is_master=rank == 0, timeout=timeout)
        dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank,
                                world_size=world, timeout=timeout)
        everyone = [None] * world
        dist.all_gather_object(everyone, me)  # over gloo: the reports, whatever the backend
    except Exception as error:  # noqa: BLE001 - a store or connection failure, said in one line
        print(f"preflight: FAIL on rank {rank} ({host}): the ranks did not all meet at {addr}:{port} "
              f"within --timeout {args.timeout:g} s ({type(error).__name__}: "
              f"{(str(error).splitlines() or [''])[0]}): is every rank started, and can it reach "
              f"{addr}?", file=sys.stderr, flush=True)
        return 1
    # 3. What the ranks say: one world size, one launcher, every rank once, no GPU twice.
    if len({p["world"] for p in everyone}) > 1 or sorted(p["rank"] for p in everyone) != list(range(world)):
        problems.append("the ranks disagree on the world size or on who is who: one launcher line for the "
                        "whole job")
    if backend == "nccl":
        problems += shared_gpus(everyone)
    # 4. An all_reduce of known values on the training backend: rank r adds r + 1.
    result = "skipped"
    bandwidth = None
    if not problems:
        try:
            if backend == "nccl":
                dist.destroy_process_group()
                dist.init_process_group("nccl", store=dist.PrefixStore("nccl", store), rank=rank,
                                        world_size=world, timeout=timeout, device_id=device)
            probe = torch.full((4,), float(rank + 1), device=device)
            dist.all_reduce(probe)
            expected = world * (world + 1) / 2
            right = torch.tensor([int(bool((probe == expected).all()))], device=device)
            dist.all_reduce(right)
            result = "right on every rank" if int(right.item()) == world else "WRONG"
            if result == "WRONG":
                problems.append(f"all_reduce gave a wrong sum on {world - int(right.item())} rank(s): check "
                                "the network and the NCCL variables below")
            payload = torch.ones(args.megabytes * 2**18, device=device)  # float32: 4 bytes each
            dist.all_reduce(payload)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start, repeats = time.perf_counter(), 3  # gpu-checked: synchronized before and after
            for _ in range(repeats):
                dist.all_reduce(payload)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds = (time.perf_counter() - start) / repeats  # gpu-checked
            # bus bandwidth, as nccl-tests define it: what each rank sends and receives
            bandwidth = payload.numel() * 4 * 2 * (world - 1) / world / seconds / 1e9 if world > 1 else None
        except Exception as error:  # noqa: BLE001 - a timeout or an NCCL error, said in one line
            problems.append(f"all_reduce failed: {type(error).__name__}: {str(error).splitlines()[0]}")
    # 5. Rank 0: one table, one verdict.
    if rank == 0:
        hosts = list(dict.fromkeys(p["host"] for p in sorted(everyone, key=lambda p: p["rank"])))
        where = "localhost (torchrun's store)" if launcher == "torchrun" and addr == "localhost" else (
            f"{addr} (torchrun's store)" if launcher == "torchrun" else f"{addr}:{port}")
        print(f"preflight: launcher={launcher} world_size={world} nodes={len(hosts)} backend={backend} "
              f"rendezvous={where if world > 1 else 'none (one process)'}")
        print(f"{'rank':>4}  {'node':>4}  {'local':>5}  {'device':<8}  {'gpu':<14}  CUDA_VISIBLE_DEVICES")
        for p in sorted(everyone, key=lambda p: p["rank"]):
            print(f"{p['rank']:>4}  {hosts.index(p['host']):>4}  {p['local_rank']:>5}  {p['device']:<8}  "
                  f"{p['gpu'][:14]:<14}  {p['cvd']}")
        if len(hosts) > 1:
            print("nodes: " + "  ".join(f"{i}={host}" for i, host in enumerate(hosts)))
        nccl = sorted({f"{k}={v}" for p in everyone for k, v in p["nccl"].items()})
        print(f"NCCL variables: {' '.join(nccl) if nccl else 'none set'}")
        shown = (f"; {bandwidth:.2f} GB/s bus bandwidth ({args.megabytes} MiB, {backend})" if bandwidth
                 else "")
        print(f"all_reduce of known values: {result}{shown}")
        for warning in warnings:
            print(f"preflight: warning: {warning}")
        noted = f" ({len(warnings)} warning{'s' * (len(warnings) > 1)} above)" if warnings else ""
        print(
            f"preflight: {'OK' if not problems else 'FAIL'} in {time.monotonic() - started:.1f} s"
            + (": " + "; ".join(problems) if problems else f": {world} rank(s) ready to train{noted}"),
            flush=True,
        )
    elif problems:
        print(f"preflight: rank {rank} stops: {problems[0]}", file=sys.stderr, flush=True)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001,S110 - leaving a broken group: the verdict is out already
        pass
    return 1 if problems else 0




# ------------------------------------------------------------------------------ main
def codes(text):
    """'DDP04,DDP070' -> ['DDP04', 'DDP070']: rule codes or their prefixes, as ruff takes them."""
    out = [part.strip().upper() for part in text.split(",") if part.strip()]
    unknown = [c for c in out if not any(code.startswith(c) for code in RULES)]
    if unknown:
        raise argparse.ArgumentTypeError(f"no rule starts with {', '.join(unknown)} (--list shows the codes)")
    return out


EPILOG = ("After the summary, 'not followed' lists where the checker stopped reading (a class picked at "
          "run time, an import not found): no finding, no exit code; shown as notes are, whatever --select.")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="SCRIPT",
        help="the training scripts to check (with --preflight: after --, the training command)",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="text: one line per finding (default); json: for tools")
    parser.add_argument("--select", type=codes, action="extend", metavar="CODES",
                        help="only these rules: codes or prefixes, comma-separated (DDP04 = DDP040-DDP042)")
    parser.add_argument("--ignore", type=codes, action="extend", metavar="CODES",
                        help="not these rules: codes or prefixes, comma-separated (e.g. DDP070,DDP18)")
    parser.add_argument("--severity", choices=SEVERITIES, default="note",
                        help="the least severity shown (default: %(default)s, all)")
    parser.add_argument("--explain", metavar="CODE", type=str.upper, choices=sorted(RULES),
                        help="what a rule means and how to fix it (e.g. DDP030; --list shows the codes)")
    parser.add_argument("--list", action="store_true", help="list every rule")
    parser.add_argument("--preflight", action="store_true",
                        help="check this job's launch (run it under the job's launcher line; needs torch)")
    parser.add_argument("--backend", choices=["nccl", "gloo"], help="preflight: the backend to test "
                        "(default: nccl with GPUs, gloo without)")
    parser.add_argument("--timeout", type=float, default=60.0, help="preflight: seconds any wait may take "
                        "(default: %(default)s)")
    parser.add_argument("--megabytes", type=int, default=16, help="preflight: the all_reduce's size for the "
                        "bandwidth, in MiB (default: %(default)s)")
    args = parser.parse_args(argv)
    if not (args.paths or args.explain or args.list or args.preflight):
        parser.error("give the scripts to check (check_ddp.py train.py), --explain CODE, --list, "
                     "or --preflight")
    if args.timeout <= 0 or args.megabytes <= 0:
        parser.error("--timeout and --megabytes must be above 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        if args.list:
            for rule in RULES.values():
                print(f"{rule.code}  {rule.severity:<7}  chapter {rule.chapter}  {rule.title}")
            return 0
        if args.explain:
            print(explain(args.explain))
            return 0
        if args.preflight:
            return preflight(args)
        return main_check(args)
    except BrokenPipeError:  # | head read what it wanted: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
