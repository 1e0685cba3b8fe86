"""Chapter 15: torch.compile with DDP: the order, the graphs, the cost, the checkpoint.

Wraps a small model in DDP, then compiles the wrapper (the order of PyTorch's DDP notes;
--order runs the other two), trains a few epochs and prints what the
compiler did: dynamo's graphs, the subgraphs DDPOptimizer cut at its estimate of DDP's buckets,
the graph breaks, the recompilations, the compile time against the steady-state step
time, and whether the checkpoint it saved loads into a plain, uncompiled model.

Run it (the first run compiles C++ kernels and is slow on a CPU; later runs reuse
inductor's cache, torchinductor_$USER under $TMPDIR (or /tmp) unless TORCHINDUCTOR_CACHE_DIR
says otherwise):
    python scripts/15_torch_compile_ddp/compile_ddp.py                              # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/15_torch_compile_ddp/compile_ddp.py
    torchrun --standalone --nproc_per_node=2 scripts/15_torch_compile_ddp/compile_ddp.py --variant bad
    mpiexec -n 2 python scripts/15_torch_compile_ddp/compile_ddp.py
    qsub scripts/15_torch_compile_ddp/torchrun_compile_ddp.sh                     # PBS cluster
One graph, no DDPOptimizer (no overlap of all-reduces with backward):
    torchrun --standalone --nproc_per_node=2 scripts/15_torch_compile_ddp/compile_ddp.py --optimize-ddp off
The smaller last batch of each epoch, without a recompilation:
    torchrun --standalone --nproc_per_node=2 scripts/15_torch_compile_ddp/compile_ddp.py --last-batch drop
    torchrun --standalone --nproc_per_node=2 scripts/15_torch_compile_ddp/compile_ddp.py --last-batch dynamic

The pitfall (--variant bad): the checkpoint is the compiled wrapper's state_dict, whose keys
start with "_orig_mod.module." (torch.compile's wrapper, then DDP's): a plain model cannot
load it. The fix saves the state of the model inside both wrappers.
"""

import logging
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch._dynamo.utils import compilation_time_metrics, counters
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checkpoint import save_checkpoint, strip_prefixes, unwrap_model
from utils.checks import check_global_batch
from utils.cli import (
    add_training_args,
    add_variant_arg,
    make_parser,
    output_dir,
    positive_float,
    positive_int,
)
from utils.comm import AllReduceCounter, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.timing import synchronized_clock

WARM_UP_STEPS = 2  # left out of the steady-state step time: compilation, DDP's bucket rebuild


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=200,
                        help="size of the synthetic data set; 100 per rank with 2 ranks: three "
                        "batches of 32 and a last one of 4 (default: %(default)s)")
    parser.add_argument("--width", type=positive_int, default=512,
                        help="hidden width of the model; 512 gives 4 MiB of parameters, "
                        "several 1 MiB buckets (default: %(default)s)")
    parser.add_argument("--bucket-cap-mb", type=positive_float, default=1.0, metavar="MIB",
                        help="DDP's bucket cap, which DDPOptimizer splits the graph by; at least "
                        "1, DDPOptimizer's first bucket (default: %(default)s)")
    parser.add_argument("--optimize-ddp", choices=["on", "off"], default="on",
                        help="torch._dynamo.config.optimize_ddp: on splits the graph at DDP's "
                        "buckets (DDPOptimizer), off compiles one graph (default: %(default)s)")
    parser.add_argument("--last-batch", choices=["ragged", "drop", "dynamic"], default="ragged",
                        help="the smaller last batch of an epoch: ragged keeps it (a new shape, a "
                        "recompilation), drop drops it (drop_last=True), dynamic marks the batch "
                        "dimension dynamic (mark_dynamic) (default: %(default)s)")
    parser.add_argument("--order", choices=["ddp-then-compile", "compile-then-ddp", "compile-inner"],
                        default="ddp-then-compile",
                        help="torch.compile(DDP(model)) (PyTorch's DDP notes), "
                        "DDP(torch.compile(model)), or model.compile() then DDP(model) (PyTorch's "
                        "'Where to apply torch.compile?' page) (default: %(default)s)")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints"),
                        help="where the checkpoint goes (default: %(default)s)")
    add_variant_arg(parser, bad="saves the compiled wrapper's state_dict (_orig_mod.module. keys)",
                    good="saves the plain model's state_dict (clean keys)")
    args = parser.parse_args()
    first_bucket_mb = dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20
    if args.optimize_ddp == "on" and args.bucket_cap_mb < first_bucket_mb:
        # DDPOptimizer's first bucket is always 1 MiB; it asserts that it is not larger than the others.
        parser.error(f"--bucket-cap-mb {args.bucket_cap_mb:g} is below DDPOptimizer's first bucket "
                     f"({first_bucket_mb:g} MiB), which DDPOptimizer does not accept: set "
                     f"--bucket-cap-mb {first_bucket_mb:g} or more, or --optimize-ddp off")
    return args


class MLP(nn.Module):
    """A model class of the script's own: dynamo compiles the forward() of user code (a bare
    nn.Sequential's forward lives in torch/, which dynamo does not start a graph in)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, width), nn.ReLU(),
                                    *[m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())],
                                    nn.Linear(width, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class RecompileLog(logging.Handler):
    """Keeps dynamo's "Recompiling function ..." messages (the log TORCH_LOGS=recompiles shows)."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.reasons.append(message.splitlines()[-1].strip(" -"))  # the guard that failed


def watch_recompiles() -> RecompileLog:
    torch._logging.set_logs(recompiles=True)
    handler = RecompileLog()
    logger = logging.getLogger("torch._dynamo.guards.__recompiles")
    logger.handlers = [handler]  # ours only: no copy on stderr from every rank
    logger.propagate = False
    # Two warnings a CPU run prints from every rank, with a timestamp: not what this page is about.
    for name in ("torch._dynamo.variables.ctx_manager", "torch.utils.cpp_extension"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return handler


def compile_time() -> float:
    """Seconds this process spent compiling: dynamo's frames (forward graphs included) and the
    backward graphs, which AOTAutograd compiles at the first backward()."""
    return sum(sum(compilation_time_metrics.get(phase, [])) for phase in
               ("_compile.compile_inner", "backward._backward_impl"))


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant} order={args.order}")
    print0(f"optimize_ddp={args.optimize_ddp} bucket_cap_mb={args.bucket_cap_mb:g} "
           f"last_batch={args.last_batch}")
    torch._dynamo.config.optimize_ddp = args.optimize_ddp == "on"
    recompiles = watch_recompiles()

    # 2. Data: 100 samples per rank in batches of 32: the last batch of an epoch has 4.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler,
                         drop_last=args.last_batch == "drop")

    # 3. The order: DDP first, then compile the DDP wrapper (--order: the two other ways).
    torch.manual_seed(args.seed)
    model = MLP(args.width).to(ctx.device)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    if args.order == "ddp-then-compile":
        # --8<-- [start:order]
        ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=args.bucket_cap_mb)
        compiled = torch.compile(ddp)  # compiles at the first call; DDPOptimizer sees DDP's buckets
        # --8<-- [end:order]
    elif args.order == "compile-then-ddp":
        # --8<-- [start:other_order]
        # The other order: DDP's forward() runs eagerly and calls the compiled model.
        compiled = ddp = DDP(torch.compile(model), device_ids=device_ids, bucket_cap_mb=args.bucket_cap_mb)
        # --8<-- [end:other_order]
    else:
        # --8<-- [start:compile_inner]
        # nn.Module.compile(): the model compiles its own forward in place; no wrapper, no prefix.
        model.compile()
        compiled = ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=args.bucket_cap_mb)
        # --8<-- [end:compile_inner]
    all_reduces = AllReduceCounter()
    ddp.register_comm_hook(all_reduces, counting_allreduce_hook)  # counts DDP's buckets
    optimizer = torch.optim.SGD(compiled.parameters(), lr=args.lr, momentum=0.9)
    inner = compiled._orig_mod if args.order == "ddp-then-compile" else compiled.module
    wrappers = [compiled, inner, unwrap_model(compiled)]
    print0("wrappers: " + " > ".join(type(m).__name__ for i, m in enumerate(wrappers)
                                     if i == 0 or m is not wrappers[i - 1]))

    # 4. Train; time every step (step 1 compiles) and note each recompilation.
    step_seconds, steps_recompiled, step = [], [], 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
            if args.last_batch == "dynamic":
                torch._dynamo.mark_dynamic(inputs, 0)  # any batch size, one graph
            step += 1
            seen = len(recompiles.reasons)
            if step == 1:  # the ranks start step 1 together: each one's compiling lies within it
                dist.barrier()
            start = synchronized_clock(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(compiled(inputs), labels)
            loss.backward()
            optimizer.step()
            step_seconds.append(synchronized_clock(ctx.device) - start)
            if len(recompiles.reasons) > seen:
                steps_recompiled.append(step)
                for reason in recompiles.reasons[seen:]:
                    print0(f"step {step} (batch of {len(inputs)}) recompiled: {reason}")
            if step == 1:  # what compiling cost (later recompilations are not counted here)
                subgraphs_at_first_step = counters["aot_autograd"]["total"]
                graphs_at_first_step = counters["stats"]["unique_graphs"]  # dynamo's, before splitting
                compile_seconds_step_1 = compile_time()

    # 5. What the compiler did (rank 0's counters; every rank compiles the same graphs).
    graph_breaks = counters["graph_break"]
    print0(f"DDP buckets: {len(all_reduces.buckets)} ("
           f"{sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20:.1f} MiB of parameters)")
    print0(f"dynamo graphs in step 1: {graphs_at_first_step} traced, compiled as "
           f"{subgraphs_at_first_step} subgraph(s)")
    print0(f"graph breaks: {sum(graph_breaks.values())}")
    for reason in sorted(graph_breaks):
        where = re.search(r"(function|method) `([^`]+)`( of class `[^`]+`)?", reason)
        print0(f"  {graph_breaks[reason]} x {reason.splitlines()[0].strip()}: "
               f"{where.group(0) if where else '?'}")

    # 6. Compile time against the steady-state step time (warm-up steps left out).
    steady = [s for i, s in enumerate(step_seconds, 1) if i > WARM_UP_STEPS and i not in steps_recompiled]
    steady_step = statistics.median(steady)
    compile_seconds = [None] * ctx.world_size
    dist.all_gather_object(compile_seconds, compile_seconds_step_1)
    print0(f"step 1 (compiles): {step_seconds[0]:.2f} s; steady-state step: {steady_step:.4f} s "
           f"(median of {len(steady)} steps, warm-up and recompiling steps left out), "
           f"{args.batch_size * ctx.world_size / steady_step:.0f} samples/s")
    print0(f"compile time per rank in step 1 (dynamo's own timers): "
           f"{', '.join(f'{s:.2f} s' for s in compile_seconds)}")
    # explain() traces the plain model once more, without compiling; it resets dynamo's timers.
    explained = torch._dynamo.explain(MLP(args.width).to(ctx.device))(inputs)
    print0(f"the plain model alone (torch._dynamo.explain): {explained.graph_count} graph, "
           f"{explained.graph_break_count} graph breaks")

    # 7. The checkpoint, and a plain (uncompiled, unwrapped) model that loads it.
    path = args.checkpoint_dir / f"compiled_{args.variant}.pt"
    if args.variant == "bad":
        # --8<-- [start:bad_save]
        # bad: the state_dict of what the training loop calls: the compiled DDP wrapper.
        if ctx.rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": compiled.state_dict(), "epoch": args.epochs}, path)
        dist.barrier()
        # --8<-- [end:bad_save]
    else:
        # --8<-- [start:good_save]
        # good: save_checkpoint() saves unwrap_model(compiled).state_dict(), the model
        # inside torch.compile's and DDP's wrappers: keys as a plain model has them.
        save_checkpoint(path, compiled, optimizer, args.epochs)
        # --8<-- [end:good_save]
    plain_load, equal = "failed", "no"
    if ctx.rank == 0:
        # --8<-- [start:load]
        state = torch.load(path, map_location="cpu", weights_only=True)["model"]  # gpu-checked: CPU model
        print0(f"saved {path.name}: first key {next(iter(state))!r}")
        plain = MLP(args.width)  # an inference script: no DDP, no compile
        try:
            plain.load_state_dict(state)
            plain_load = "ok"
        except RuntimeError as error:
            print0(f"plain model: load_state_dict() failed: RuntimeError: {error}")
            plain.load_state_dict(strip_prefixes(state))  # repairing the file: utils/checkpoint.py
            print0("plain model: loads after strip_prefixes() removed the wrappers' prefixes")
        # --8<-- [end:load]
        trained = unwrap_model(compiled).state_dict()
        equal = "yes" if all(torch.equal(plain.state_dict()[k], v.cpu())  # gpu-checked: to compare
                             for k, v in trained.items()) else "no"
        print0(f"plain model: {len(trained)} tensors equal to the trained model's: {equal}")

    print0(f"summary: variant={args.variant} world_size={ctx.world_size} launcher={ctx.launcher} "
           f"order={args.order} optimize_ddp={args.optimize_ddp} last_batch={args.last_batch} "
           f"buckets={len(all_reduces.buckets)} subgraphs={subgraphs_at_first_step} "
           f"graph_breaks={sum(graph_breaks.values())} model_graph_breaks={explained.graph_break_count} "
           f"steps={step} recompiles={len(recompiles.reasons)} "
           f"graphs={graphs_at_first_step} step1_s={step_seconds[0]:.2f}s step_s={steady_step:.4f}s "
           f"plain_load={plain_load} tensors_equal={equal}")
    del compiled, ddp, inner, wrappers, optimizer
    torch._dynamo.reset()  # dynamo's caches hold the DDP wrapper, which holds the process group
    cleanup_distributed()


if __name__ == "__main__":
    main()
