"""Check a DDP training script for the pitfalls of this tutorial's chapters, and a job's launch.

Plain Python: the checker reads your script with the standard library (ast) and runs none of
it, so it needs no GPU, no torch and no launcher. Copy this file into your project if you like.

Check scripts (one line per finding, as linters print them; exit 0: none, 1: findings,
2: a file could not be read):
    python scripts/00_porting/check_ddp.py train.py [more.py ...]
    python scripts/00_porting/check_ddp.py --format json train.py
    python scripts/00_porting/check_ddp.py --explain DDP030      # what a rule means, the fix
    python scripts/00_porting/check_ddp.py --list                # every rule
Silence a finding you mean on its line: `# noqa: DDP030` (or a bare `# noqa`).

Check a job before it trains (needs torch): run it under the job's own launcher line.
Every rank checks the launcher's variables, its GPU, the rendezvous address, and an
all_reduce of known values (right answer, bandwidth); rank 0 prints one table and a verdict.
    python scripts/00_porting/check_ddp.py --preflight
    torchrun --standalone --nproc_per_node=4 scripts/00_porting/check_ddp.py --preflight
    mpiexec -n 8 python scripts/00_porting/check_ddp.py --preflight
    srun --ntasks=8 python scripts/00_porting/check_ddp.py --preflight
The job templates (slurm_job.sh, pbs_job.sh) run it before training: one line to delete.
"""

import argparse
import ast
import json
import os
import re
import sys
import time
import zlib
from pathlib import Path

PAGE = "docs/check.md"  # the page that explains every rule (--explain prints its section)


# ---------------------------------------------------------------------------- the rules
class Rule:
    def __init__(self, code, chapter, page, title, fix):
        self.code, self.chapter, self.page, self.title, self.fix = code, chapter, page, title, fix


# --8<-- [start:rules]
RULES = {rule.code: rule for rule in [
    Rule("DDP010", "01", "chapters/01_data_parallel_ddp.md",
         "a shuffling DataLoader with no DistributedSampler: every rank trains on the whole data set",
         "DataLoader(dataset, sampler=DistributedSampler(dataset), ...), or give each rank its own shard"),
    Rule("DDP020", "02", "chapters/02_collectives.md",
         "a collective inside a branch on the rank: the ranks that skip it leave the others waiting",
         "call every collective on every rank, in the same order (add 0 where a rank has nothing)"),
    Rule("DDP030", "03", "chapters/03_distributed_sampler.md",
         "a shuffling DistributedSampler whose set_epoch() is never called: the same order every epoch",
         "call sampler.set_epoch(epoch) at the start of every epoch"),
    Rule("DDP031", "03", "chapters/03_distributed_sampler.md",
         "an evaluation through a DistributedSampler: it pads the shards with repeated samples",
         "give rank r the samples range(r, len(dataset), world_size), or evaluate on rank 0 alone"),
    Rule("DDP032", "03", "chapters/03_distributed_sampler.md",
         "the whole evaluation set read on every rank, then all-reduced: each sample counted world_size "
         "times",
         "give rank r the samples range(r, len(dataset), world_size) before the all_reduce, or evaluate "
         "on rank 0 alone without it"),
    Rule("DDP040", "04", "chapters/04_logging_and_checkpoints.md",
         "torch.save of a state_dict on every rank: N writers of one file",
         "save on rank 0 alone (if rank == 0:), then dist.barrier() before anyone reads it"),
    Rule("DDP041", "04", "chapters/04_logging_and_checkpoints.md",
         "the DDP wrapper's state_dict() saved: every key starts with 'module.', a plain model cannot "
         "load it",
         "save model.module.state_dict(), the plain model inside the wrapper"),
    Rule("DDP042", "04", "chapters/04_logging_and_checkpoints.md",
         "torch.load without map_location: on GPUs every rank loads onto the GPU that saved the file",
         "torch.load(path, map_location=device), this rank's device"),
    Rule("DDP050", "05", "chapters/05_gradient_accumulation.md",
         "gradient accumulation without no_sync(): every micro-batch's backward() all-reduces",
         "with model.no_sync(): on all micro-batches but the last (forward and backward inside it)"),
    Rule("DDP060", "06", "chapters/06_mixed_precision.md",
         "fp16 autocast without a GradScaler: small gradients underflow to zero",
         "scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); scaler.step(optimizer); "
         "scaler.update(); or autocast with dtype=torch.bfloat16"),
    Rule("DDP070", "07", "chapters/07_batchnorm_and_buffers.md",
         "warning: BatchNorm in a DDP model without SyncBatchNorm: each rank normalizes with its own batch's "
         "statistics",
         "model = nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP(model) (if per-rank statistics "
         "are not what you mean)"),
    Rule("DDP110", "11", "chapters/11_replica_consistency.md",
         "model.module(...) called for training: DDP's forward is bypassed, gradients are not averaged",
         "call the wrapper, model(inputs); use model.module only to save or to evaluate"),
    Rule("DDP130", "13", "chapters/13_multinode_and_hpc.md",
         "a fixed rendezvous port: two jobs on one node collide",
         "leave MASTER_PORT to the launcher, or derive it from the job id"),
    Rule("DDP131", "13", "chapters/13_multinode_and_hpc.md",
         "init_process_group with nccl and no torch.cuda.set_device: every rank's current GPU is GPU 0",
         "torch.cuda.set_device(local_rank) before init_process_group (device_id= alone leaves it at GPU 0)"),
    Rule("DDP150", "15", "chapters/15_torch_compile_ddp.md",
         "the compiled model's state_dict() saved: every key starts with '_orig_mod.'",
         "save the model inside the wrappers: model._orig_mod (and its .module under DDP), "
         "or compile with model.compile()"),
    Rule("DDP160", "16", "chapters/16_fsdp.md",
         "torch.save of a sharded (FSDP) model's state_dict: each file holds one rank's shards",
         "torch.distributed.checkpoint (dcp.save) on every rank, or get_model_state_dict(..., "
         "full_state_dict=True) saved by rank 0"),
    Rule("DDP170", "17", "chapters/17_zero_and_beyond.md",
         "a ZeroRedundancyOptimizer's state_dict() without consolidate_state_dict(): an error, or one "
         "rank's shard",
         "optimizer.consolidate_state_dict(to=0) on every rank, then rank 0 saves optimizer.state_dict()"),
    Rule("DDP180", "18", "chapters/18_transformer.md",
         "warning: a token loss averaged over this rank's own tokens (padding masked out): DDP then "
         "averages the ranks' gradients, so a token weighs more on a rank with fewer tokens",
         "loss = token_sum / global_tokens * world_size, global_tokens being the token count "
         "all-reduced over the ranks"),
]}
# --8<-- [end:rules]

COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
               "broadcast_object_list", "barrier", "monitored_barrier", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list",
               "all_to_all", "all_to_all_single", "new_group"}
RANK_NAMES = {"rank", "global_rank", "world_rank", "is_main", "is_main_process", "is_master",
              "master_process", "is_rank_zero", "is_rank0", "main_process", "is_leader"}
RANK_CALLS = {"get_rank", "is_main_process", "get_global_rank"}
# A save under these runs once per node (a local rank or GPU id): taken as guarded too.
GUARD_NAMES = RANK_NAMES | {"local_rank", "node_rank", "gpu_id", "gpu"}
NO_GRAD = {"no_grad", "inference_mode"}
BUILTINS = {"len", "enumerate", "iter", "next", "zip", "list", "tuple", "print", "isinstance", "sorted"}
FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef)
NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


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


def keyword(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def is_false(node):
    return isinstance(node, ast.Constant) and node.value in (False, None, 0)


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


# ------------------------------------------------------------------------- the checker
class Checker:
    """The facts of one view of one script, and the rules over them."""

    def __init__(self, tree):
        self.tree = tree
        self.findings = []
        self.parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.functions = {n.name: n for n in tree.body if isinstance(n, FUNCTION)}
        self.reachable = self._reachable()
        self.nodes = [n for n in self._walk(tree)]
        self.calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.attrs = {n.attr for n in self.nodes if isinstance(n, ast.Attribute)}
        self.names = {n.id for n in self.nodes if isinstance(n, ast.Name)} | {
            a.asname or a.name.split(".")[-1] for n in self.nodes
            if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        self.modules = {a.name for n in self.nodes if isinstance(n, ast.Import) for a in n.names} | {
            n.module or "" for n in self.nodes if isinstance(n, ast.ImportFrom)}
        self.distributed = self._is_distributed()
        self.bindings = self._bindings()
        self._guarded_functions, self._early_exits, self._tainted = {}, {}, {}
        self.methods = {n.name for n in self.nodes if isinstance(n, FUNCTION)
                        and isinstance(self.parents.get(n), ast.ClassDef)}

    # -- which code runs
    def _reachable(self):
        """Module-level functions reachable from the module's own code; all of them in a
        module that calls none (a library)."""
        top = [n for n in self.tree.body if n.__class__.__name__ not in ("FunctionDef", "AsyncFunctionDef")]
        seen, todo = set(), [n for stmt in top for n in ast.walk(stmt)]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Name) and node.id in self.functions and node.id not in seen:
                seen.add(node.id)
                todo.extend(ast.walk(self.functions[node.id]))
        # helpers for another file, which may hold the fix; a file with no function at all is a
        # script whose training loop is at module level, not a library
        self.library = bool(self.functions) and not seen
        return seen if seen else set(self.functions)

    def _walk(self, node):
        for child in ast.iter_child_nodes(node):
            if (self.parents.get(child) is self.tree and isinstance(child, FUNCTION)
                    and child.name not in self.reachable):
                continue
            yield child
            yield from self._walk(child)

    def ancestors(self, node):
        while node in self.parents:
            node = self.parents[node]
            yield node

    def function_of(self, node):
        return next((a for a in self.ancestors(node) if isinstance(a, FUNCTION)),
                    self.tree)

    def _is_distributed(self):
        imports = [n for n in self.nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names} | {
            n.module or "" for n in imports if isinstance(n, ast.ImportFrom)}
        names = {a.name for n in imports if isinstance(n, ast.ImportFrom) for a in n.names}
        return (any(m.startswith("torch.distributed") for m in modules)
                or bool(names & {"DistributedDataParallel", "distributed"})
                or any(last(c) == "init_process_group" for c in self.calls))

    def _bindings(self):
        """name -> [(kind, line, scope)]: what a name was bound to ('ddp', 'compile', 'fsdp',
        'zero', 'sampler', 'loader', 'state_dict'), where."""
        kinds = {"DistributedDataParallel": "ddp", "DDP": "ddp", "compile": "compile",
                 "FullyShardedDataParallel": "fsdp", "FSDP": "fsdp", "fully_shard": "fsdp",
                 "ZeroRedundancyOptimizer": "zero", "DistributedSampler": "sampler"}
        bound = {}

        def kind_of(call):
            kind = kinds.get(last(call))
            if kind == "compile" and dotted(call.func) not in ("torch.compile", "compile"):
                kind = None
            return kind

        for node in self.nodes:
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            call = node.value
            # a, b = build(...): what a function of this file returns, element by element
            function = self.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
            if function is not None and isinstance(node.targets[0], ast.Tuple):
                for ret in ast.walk(function):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                        for target, value in zip(node.targets[0].elts, ret.value.elts, strict=False):
                            kind = kind_of(value) if isinstance(value, ast.Call) else None
                            if kind is None and isinstance(value, ast.Name):
                                kind = next((k for k, *_ in bound.get(value.id, [])), None)
                            if kind and isinstance(target, ast.Name):
                                where = (kind, node.lineno, self.function_of(node))
                                bound.setdefault(target.id, []).append(where)
                continue
            kind = kinds.get(last(call))
            if kind == "compile" and dotted(call.func) not in ("torch.compile", "compile"):
                kind = None
            if kind is None and any(last(c) == "state_dict" for c in ast.walk(call)
                                    if isinstance(c, ast.Call)):
                kind = "state_dict"
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and kind:
                        bound.setdefault(name.id, []).append((kind, node.lineno, self.function_of(node)))
        return bound

    def kinds_of(self, node, at=None):
        """What the name `node` was bound to, in its scope, at or before line `at`."""
        if not isinstance(node, ast.Name):
            return set()
        scope, line = self.function_of(node), at or node.lineno
        return {kind for kind, bound_at, where in self.bindings.get(node.id, [])
                if bound_at <= line and where in (scope, self.tree)}

    # -- the rank
    def is_rank_test(self, test, names=RANK_NAMES, tainted=()):
        for node in ast.walk(test):
            if isinstance(node, (ast.Name, ast.Attribute)) and last(node) in names:
                return True
            if isinstance(node, ast.Name) and node.id in tainted:
                return True
            if isinstance(node, ast.Call) and last(node) in RANK_CALLS:
                return True
            if isinstance(node, ast.Constant) and node.value == "RANK":
                return True
        return False

    def rank_tainted(self, scope):
        """Names in `scope` whose value depends on the rank (assigned from an expression that
        mentions it), to a fixed point."""
        if id(scope) in self._tainted:
            return self._tainted[id(scope)]
        tainted, changed = set(), True
        assigns = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                   and n.value is not None]
        while changed:
            changed = False
            for node in assigns:
                if self.is_rank_test(node.value, tainted=tainted):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        for name in ast.walk(target):
                            if isinstance(name, ast.Name) and name.id not in tainted:
                                tainted.add(name.id)
                                changed = True
        self._tainted[id(scope)] = tainted
        return tainted

    def guarded(self, node, names=GUARD_NAMES):
        """Inside a branch on the rank, or after an early return/exit on it, or in a function
        that is only called so."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (ast.If, ast.IfExp, ast.While)) \
                    and self.is_rank_test(ancestor.test, names):
                return True
        scope = self.function_of(node)
        if any(line < node.lineno for line in self.early_exits(scope, names)):
            return True
        method = isinstance(self.parents.get(scope), ast.ClassDef)
        if scope is self.tree or not (method or scope.name in self.functions):
            return False
        key = (id(scope), names is GUARD_NAMES)
        if key not in self._guarded_functions:
            self._guarded_functions[key] = False  # a recursive call: not guarded by itself
            sites = [c for c in self.calls if (isinstance(c.func, ast.Attribute) if method
                                                else isinstance(c.func, ast.Name)) and last(c) == scope.name]
            self._guarded_functions[key] = bool(sites) and all(self.guarded(site, names) for site in sites)
        return self._guarded_functions[key]

    def early_exits(self, scope, names):
        """Lines of `if <rank test>: return/raise/continue` in `scope` (not in functions inside it)."""
        key = (id(scope), names is GUARD_NAMES)
        if key not in self._early_exits:
            self._early_exits[key] = [
                stmt.lineno for stmt in self.nodes if isinstance(stmt, ast.If) and stmt.body
                and isinstance(stmt.body[-1], (ast.Return, ast.Raise, ast.Continue))
                and self.function_of(stmt) is scope and self.is_rank_test(stmt.test, names)]
        return self._early_exits[key]

    def in_no_grad(self, node):
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, ast.With) and any(last(item.context_expr) in NO_GRAD
                                                      for item in ancestor.items):
                return True
            if isinstance(ancestor, FUNCTION):
                if any(last(d) in NO_GRAD for d in ancestor.decorator_list):
                    return True
                if any(isinstance(c, ast.Call) and last(c) == "eval" and not c.args
                       for c in ast.walk(ancestor)):
                    return True
        return False

    # -- findings
    def add(self, code, node, message):
        self.findings.append((node.lineno, node.col_offset + 1, code, message, node))

    def check(self):
        if self.distributed:
            for rule in (self.rule_loader, self.rule_collective_branch, self.rule_set_epoch,
                         self.rule_padded_eval, self.rule_full_eval, self.rule_saves, self.rule_load,
                         self.rule_no_sync, self.rule_fp16, self.rule_batchnorm, self.rule_module_call,
                         self.rule_port, self.rule_nccl_device, self.rule_zero, self.rule_token_mean):
                rule()
        return self.findings

    def rule_loader(self):
        for call in self.calls:
            name = last(call)
            if not (name == "DataLoader" or name.endswith("_loader")):
                continue
            shuffle = keyword(call, "shuffle")
            if shuffle is None or is_false(shuffle) or keyword(call, "sampler") \
                    or keyword(call, "batch_sampler"):
                continue
            if keyword(call, "generator") is not None:
                continue  # an order of its own, chosen on purpose (a reference run every rank repeats)
            dataset = call.args[0] if call.args else keyword(call, "dataset")
            scope = self.function_of(call)
            if dataset is not None and self.is_rank_test(dataset, tainted=self.rank_tainted(scope)):
                continue  # this rank's own shard: a split of its own
            self.add("DDP010", call, f"{name}(shuffle=...) without a sampler: every rank iterates over the "
                     "whole data set; pass sampler=DistributedSampler(dataset)")

    def rule_collective_branch(self):
        p2p = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}
        for call in self.calls:
            name = last(call)
            if name not in COLLECTIVES or name in p2p or not isinstance(call.func, (ast.Attribute, ast.Name)):
                continue
            if isinstance(call.func, ast.Attribute) and not re.search(r"(^|\.)(dist|distributed)$",
                                                                       dotted(call.func.value)):
                continue
            tainted = self.rank_tainted(self.function_of(call))
            child = call
            for ancestor in self.ancestors(call):
                if isinstance(ancestor, ast.If) and self.is_rank_test(ancestor.test, tainted=tainted):
                    other = ancestor.orelse if child in ancestor.body else ancestor.body
                    if not any(isinstance(n, ast.Call) and last(n) == name
                               for s in other for n in ast.walk(s)):
                        self.add("DDP020", call, f"{name}() runs only on the ranks where "
                                 f"`{ast.unparse(ancestor.test)}` holds: the other ranks never call it, "
                                 "and the ranks that do wait for them")
                    break
                if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    break
                child = ancestor

    def samplers(self):
        return [c for c in self.calls if last(c) == "DistributedSampler"]

    def rule_set_epoch(self):
        epoch_loop = any(isinstance(n, ast.For) and (  # for epoch in ...: or for ep in range(args.epochs):
            any(isinstance(t, ast.Name) and "epoch" in t.id.lower() for t in ast.walk(n.target))
            or any(isinstance(t, (ast.Name, ast.Attribute)) and "epoch" in last(t).lower()
                   for t in ast.walk(n.iter))) for n in self.nodes)
        if "set_epoch" in self.attrs or not epoch_loop or self.library:
            return  # set_epoch called, or no epoch loop: one pass, nothing to reshuffle
        for call in self.samplers():
            shuffle = keyword(call, "shuffle")
            if len(call.args) >= 4:
                shuffle = call.args[3]
            if shuffle is not None and is_false(shuffle):
                continue  # no shuffle: the epoch changes nothing
            if self.handed_elsewhere(call):
                continue  # given to a function of another file, which may call set_epoch
            self.add("DDP030", call, "DistributedSampler shuffles, but set_epoch() is never called: every "
                     "epoch draws the same order; call sampler.set_epoch(epoch) at the start of each epoch")

    def handed_elsewhere(self, sampler_call):
        """The sampler, or a loader built on it, is passed to a function this file does not define."""
        holder = self.parents.get(sampler_call)
        if not (isinstance(holder, ast.Assign) and isinstance(holder.targets[0], ast.Name)):
            return False
        names = {holder.targets[0].id}
        for node in self.nodes:  # loaders built on it, and dicts of a loader's arguments
            if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
                continue
            value = node.value
            if isinstance(value, ast.Dict) and any(isinstance(v, ast.Name) and v.id in names
                                                   for v in value.values):
                names.add(node.targets[0].id)
            if isinstance(value, ast.Call) and any(isinstance(k.value, ast.Name) and k.value.id in names
                                                   and k.arg in ("sampler", None) for k in value.keywords):
                names.add(node.targets[0].id)
        for call in self.calls:
            callee = last(call)
            if callee in self.functions or callee == "DataLoader" or callee.endswith(("_loader", "Loader")):
                continue
            if isinstance(call.func, ast.Name) and callee in BUILTINS:
                continue  # len(loader), enumerate(loader): no set_epoch in them
            if isinstance(call.func, ast.Attribute) and call.func.attr in self.methods:
                continue
            values = list(call.args) + [k.value for k in call.keywords]
            if any(isinstance(v, ast.Name) and v.id in names for v in values):
                return True
        return False

    def rule_padded_eval(self):
        for call in self.samplers():
            shuffle = keyword(call, "shuffle")
            if len(call.args) >= 4:
                shuffle = call.args[3]
            drop_last = keyword(call, "drop_last")
            if shuffle is None or not is_false(shuffle) \
                    or (drop_last is not None and not is_false(drop_last)):
                continue
            assign = self.parents.get(call)
            if isinstance(assign, ast.Assign) and isinstance(assign.targets[0], ast.Name):
                sampler = assign.targets[0].id
                loaders = [c for c in self.calls if last(c) == "DataLoader" and isinstance(
                    keyword(c, "sampler"), ast.Name) and keyword(c, "sampler").id == sampler]
            elif isinstance(assign, ast.keyword) and assign.arg == "sampler":  # DataLoader(sampler=DS(...))
                loaders = [c for c in self.calls if last(c) == "DataLoader" and keyword(c, "sampler") is call]
            else:
                continue
            for loader_call in loaders:
                holder = self.parents.get(loader_call)
                if isinstance(holder, (ast.For, ast.comprehension)) and holder.iter is loader_call:
                    evaluated = self.in_no_grad(loader_call)  # for x in DataLoader(...):
                elif isinstance(holder, ast.Assign) and isinstance(holder.targets[0], ast.Name):
                    evaluated = self.evaluated(holder.targets[0].id)
                else:
                    continue
                if evaluated:
                    self.add("DDP031", call, "an evaluation loader's DistributedSampler pads the shards with "
                             "repeated samples: they are counted twice; give rank r the samples "
                             "range(r, N, world_size), or evaluate on rank 0 alone")
                    break

    def rule_full_eval(self):
        """An unsharded loader read under no_grad on every rank, with a sum of the loop all-reduced
        after it in the same function: every rank adds the same samples."""
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
            tainted = self.rank_tainted(scope)
            if any(keyword(c, "sampler") is not None or keyword(c, "batch_sampler") is not None
                   or (c.args and self.is_rank_test(c.args[0], tainted=tainted)) for c in calls):
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

    def evaluated(self, loader):
        """The loader is iterated under no_grad/eval, here or in a function it is passed to."""
        for node in self.nodes:
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name) \
                    and node.iter.id == loader and self.in_no_grad(node.iter):
                return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in self.functions \
                    and any(isinstance(a, ast.Name) and a.id == loader for a in node.args):
                function = self.functions[node.func.id]
                if any(last(d) in NO_GRAD for d in function.decorator_list):
                    return True
        return False

    def saved_state_dicts(self, save):
        """The `X.state_dict()` calls whose result `save` writes: in its arguments, or in a
        variable assigned in the same function and passed to it."""
        found = [c for c in ast.walk(save) if isinstance(c, ast.Call) and last(c) == "state_dict"]
        scope = self.function_of(save)
        names = {n.id for arg in save.args[:1] for n in ast.walk(arg) if isinstance(n, ast.Name)}
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and node.lineno < save.lineno and any(
                    isinstance(t, ast.Name) and t.id in names for t in node.targets):
                found += [c for c in ast.walk(node.value)
                          if isinstance(c, ast.Call) and last(c) == "state_dict"]
        return found

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

    def rule_saves(self):
        shard_names = {"fully_shard", "FullyShardedDataParallel", "FSDP", "FSDPModule", "DTensor"}
        sharded = bool(shard_names & self.names) \
            or any("fsdp" in module for module in self.modules)
        for call in self.calls:
            name = dotted(call.func)
            if "save" not in last(call).lower() or name.startswith(("dcp.", "torch.distributed.checkpoint")):
                continue
            states = self.saved_state_dicts(call)
            for state in states:
                owner = state.func.value if isinstance(state.func, ast.Attribute) else None
                kinds = self.kinds_of(owner, call.lineno)
                if "compile" in kinds:
                    self.add("DDP150", state, f"{ast.unparse(owner)} is the compiled model: its "
                             "state_dict()'s keys start with '_orig_mod.'; save the model inside it")
                elif "ddp" in kinds:
                    self.add("DDP041", state, f"{ast.unparse(owner)} is the DDP wrapper: its "
                             "state_dict()'s keys start with 'module.'; save "
                             f"{ast.unparse(owner)}.module.state_dict()")
            if name not in ("torch.save", "save") or not states:
                continue
            if sharded and not all(self.full_state(state) or self.of_ddp(state, call.lineno)
                                   for state in states):
                self.add("DDP160", call, "torch.save of a sharded model's state_dict: each rank writes "
                         "its own shards; use torch.distributed.checkpoint (dcp.save)")
            elif not self.guarded(call):
                self.add("DDP040", call, "torch.save runs on every rank: N processes write the same file; "
                         "save on rank 0 alone (if rank == 0:), then dist.barrier()")

    def rule_load(self):
        for call in self.calls:
            if dotted(call.func) == "torch.load" and len(call.args) < 2 \
                    and keyword(call, "map_location") is None and not self.guarded(call):
                self.add("DDP042", call, "torch.load without map_location: tensors go back to the device "
                         "that saved them (on GPUs, one GPU for every rank); pass map_location=device")

    def rule_no_sync(self):
        if "no_sync" in self.attrs or "require_backward_grad_sync" in self.attrs or "ddp" not in {
                k for v in self.bindings.values() for k, *_ in v}:
            return
        for loop in self.nodes:
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            body = [n for s in loop.body for n in ast.walk(s)]
            backwards = [c for c in body if isinstance(c, ast.Call) and last(c) == "backward"
                         and not any(isinstance(a, ast.If) for a in self.between(c, loop))]
            steps = [c for c in body if isinstance(c, ast.Call) and last(c) == "step"]
            if not backwards:
                continue
            if not steps or all(any(isinstance(a, ast.If) and self.counts_steps(a.test)
                                    for a in self.between(s, loop)) for s in steps):
                self.add("DDP050", backwards[0], "backward() on every micro-batch, the optimizer step after "
                         "several: each backward() all-reduces; wrap all but the last in model.no_sync()")

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

    def resolves_to_fp16(self, node, depth=0):
        if node is None or depth > 3:
            return False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in ("float16", "half"):
                return True
            if isinstance(sub, ast.Constant) and sub.value in ("float16", "fp16", "half"):
                return True
            if isinstance(sub, ast.Name):
                for assign in self.tree.body:
                    if isinstance(assign, ast.Assign) and any(isinstance(t, ast.Name) and t.id == sub.id
                                                              for t in assign.targets):
                        if self.resolves_to_fp16(assign.value, depth + 1):
                            return True
        return False

    def rule_fp16(self):
        if "GradScaler" in self.attrs | self.names and "scale" in self.attrs:
            return
        for call in self.calls:
            name = dotted(call.func)
            if last(call) != "autocast" or is_false(keyword(call, "enabled")):
                continue
            dtype = keyword(call, "dtype")
            device = call.args[0] if call.args else keyword(call, "device_type")
            cuda_default = dtype is None and (name.endswith("cuda.amp.autocast")
                                              or (isinstance(device, ast.Constant)
                                                  and device.value == "cuda"))
            if cuda_default or self.resolves_to_fp16(dtype):
                self.add("DDP060", call, "autocast in float16 and no GradScaler: gradients below 6e-8 "
                         "become 0; scale the loss with torch.amp.GradScaler, or use dtype=torch.bfloat16")

    def rule_batchnorm(self):
        wrapped = any(last(c) in ("DistributedDataParallel", "DDP") for c in self.calls)
        fixed = {"SyncBatchNorm", "convert_sync_batchnorm"} & (self.attrs | self.names)
        if not wrapped or fixed:
            return
        for call in self.calls:
            if re.fullmatch(r"BatchNorm[123]d", last(call)):
                self.add("DDP070", call, f"warning: {last(call)} in a DDP model without SyncBatchNorm: "
                         "each rank normalizes with its own batch's statistics; "
                         "nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP, if that is not what "
                         "you mean")

    def rule_module_call(self):
        for call in self.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "forward":
                func = func.value
            if isinstance(func, ast.Attribute) and func.attr == "module" and not self.in_no_grad(call):
                self.add("DDP110", call, f"{ast.unparse(call.func)}(...) bypasses DDP's forward: backward() "
                         "averages no gradient and the replicas drift apart; call the wrapper itself")

    def constant_port(self, node):
        if isinstance(node, ast.Call) and last(node) in ("str", "int") and node.args:
            node = node.args[0]
        if isinstance(node, ast.Name):
            values = [a.value for a in self.tree.body if isinstance(a, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
            node = values[0] if len(values) == 1 else node
        return isinstance(node, ast.Constant) and str(node.value).isdigit()

    def rule_port(self):
        for node in self.nodes:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                    and t.slice.value == "MASTER_PORT" for t in node.targets) \
                    and self.constant_port(node.value):
                self.add("DDP130", node, "MASTER_PORT set to a fixed number: a second job on this node "
                         "fails with 'address already in use'; leave it to the launcher or derive it from "
                         "the job id")
            if isinstance(node, ast.Call) and last(node) == "setdefault" and len(node.args) == 2 \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "MASTER_PORT" \
                    and self.constant_port(node.args[1]):
                self.add("DDP130", node, "MASTER_PORT defaults to a fixed number: a second job on this node "
                         "fails with 'address already in use'; derive it from the job id")
            if isinstance(node, ast.Call) and last(node) == "init_process_group":
                method = keyword(node, "init_method")
                if isinstance(method, ast.Constant) and re.search(r"^tcp://.*:\d+$", str(method.value)):
                    self.add("DDP130", node, "init_method with a fixed port: a second job on this node "
                             "collides; let the launcher set MASTER_ADDR and MASTER_PORT")

    def rule_nccl_device(self):
        if any(last(c) == "set_device" for c in self.calls) or self.library:
            return  # set before the first collective, or after init_process_group: either works
        for call in self.calls:
            if last(call) != "init_process_group":  # device_id= binds the group, not the current GPU
                continue
            backend = call.args[0] if call.args else keyword(call, "backend")
            if backend is None or not any(isinstance(n, ast.Constant) and "nccl" in str(n.value)
                                          for n in ast.walk(backend)):
                continue
            self.add("DDP131", call, "init_process_group with nccl and no torch.cuda.set_device: every "
                     "rank's current GPU is GPU 0, where the *_object collectives put their tensors; call "
                     "torch.cuda.set_device(local_rank) before init_process_group")

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
    def assigned(self, name, scope):
        """The values assigned to `name` in `scope` (and at module level)."""
        if not hasattr(self, "_assignments"):
            self._assignments = {}  # name -> [(value, scope)], made once
            for n in self.nodes:
                if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                    where = self.function_of(n)
                    for target in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name):
                                self._assignments.setdefault(t.id, []).append((n.value, where))
        return [value for value, where in self._assignments.get(name, []) if where in (scope, self.tree)]

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
            if call.func.attr == "sum" and any(
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

    def rule_token_mean(self):
        wrappers = {"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "fully_shard"}
        if not any(last(c) in wrappers for c in self.calls):
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
            self.add("DDP180", div, f"warning: `{ast.unparse(div)}` divides the loss by this rank's own "
                     "token count: DDP then averages the ranks' gradients, so a token weighs more on a rank "
                     "with fewer; divide by the all-reduced global count times the world size")
        for call in self.calls:
            if last(call) not in ("cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss") \
                    or keyword(call, "ignore_index") is None or self.in_no_grad(call):
                continue
            reduction = keyword(call, "reduction")
            if reduction is None or (isinstance(reduction, ast.Constant) and reduction.value == "mean"):
                self.add("DDP180", call, f"warning: {last(call)}(ignore_index=...) averages over this rank's "
                         "own real tokens: DDP then averages the ranks' gradients, so a token weighs more "
                         "on a rank with fewer; use reduction=\"sum\" and divide by the all-reduced global "
                         "count times the world size")


# ------------------------------------------------------------------------ reading files
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
        text = data.decode("utf-8")
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


def check_source(text, tree, path="<string>"):
    """Findings as dicts: path, line, col, code, message, chapter, page, variant."""
    views = ["good", "bad"] if has_variants(tree) else [None]
    seen, out, lines = set(), [], text.splitlines()
    for view in views:
        viewed = VariantView(view).visit(ast.parse(text)) if view else tree
        ast.fix_missing_locations(viewed)
        for line, col, code, message, node in sorted(Checker(viewed).check(), key=lambda f: f[:3]):
            if (line, col, code) in seen or silenced(lines, node, code):
                continue
            seen.add((line, col, code))
            rule = RULES[code]
            out.append({"path": path, "line": line, "col": col, "code": code, "message": message,
                        "chapter": rule.chapter, "page": rule.page,
                        "variant": "bad" if view == "bad" else None})
    return sorted(out, key=lambda f: (f["line"], f["col"], f["code"]))


def format_finding(f):
    where = " (with --variant bad)" if f["variant"] else ""
    return (f"{f['path']}:{f['line']}:{f['col']}: {f['code']} {f['message']}{where} "
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
    return f"{rule.code}: {rule.title}\nfix: {rule.fix}\nchapter {rule.chapter}: {rule.page}"


def main_check(args):
    results, unreadable, plain = [], [], []
    for path in args.paths:
        try:
            text, tree = read_source(path)
        except Unreadable as error:
            unreadable.append(str(error))
            continue
        results += check_source(text, tree, path)
        if not Checker(tree).distributed:
            plain.append(path)  # a one-device script: the rules do not apply to it
    if args.format == "json":
        print(json.dumps({"findings": results, "errors": unreadable, "not_distributed": plain}, indent=2))
    else:
        for error in unreadable:
            print(f"check_ddp: {error}", file=sys.stderr)
        for finding in results:
            print(format_finding(finding))
        files = len({f["path"] for f in results})
        checked = len(args.paths) - len(unreadable)
        summary = (f"{len(results)} finding{'s' * (len(results) != 1)} in {files} file{'s' * (files != 1)}"
                   if results else "no findings")
        if plain:
            them = "it" if len(plain) == 1 else "them"
            note = (f"{', '.join(map(str, plain))}: no torch.distributed in {them}: the DDP rules do not "
                    "apply (check the DDP version of your script)")
            summary = note if not results and len(plain) == checked else f"{summary}; {note}"
        print(summary, f"({checked} file(s) checked"
              + (f", {len(unreadable)} unreadable)" if unreadable else ")"))
    return 2 if unreadable else 1 if results else 0


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
        print(f"preflight: {'OK' if not problems else 'FAIL'} in {time.monotonic() - started:.1f} s" +
              (": " + "; ".join(problems) if problems else f": {world} rank(s) ready to train"), flush=True)
    elif problems:
        print(f"preflight: rank {rank} stops: {problems[0]}", file=sys.stderr, flush=True)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001,S110 - leaving a broken group: the verdict is out already
        pass
    return 1 if problems else 0


# ------------------------------------------------------------------------------ main
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", metavar="SCRIPT", help="the training scripts to check")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="text: one line per finding (default); json: for tools")
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
    if args.list:
        for rule in RULES.values():
            print(f"{rule.code}  chapter {rule.chapter}  {rule.title}")
        return 0
    if args.explain:
        text = explain(args.explain)
        if text is None:
            print(f"check_ddp: no rule {args.explain!r}; the rules: {', '.join(RULES)}", file=sys.stderr)
            return 2
        print(text)
        return 0
    if args.preflight:
        return preflight(args)
    return main_check(args)


if __name__ == "__main__":
    sys.exit(main())
