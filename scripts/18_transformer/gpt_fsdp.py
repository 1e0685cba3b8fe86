"""Chapter 18: the same GPT under DDP and under FSDP2, a DCP checkpoint that resumes exactly,
and what activation checkpointing saves.

Trains the GPT of gpt_ddp.py (utils/gpt.py) from the same initial weights on the same global
batches, with gpt_ddp.py's recipe (AdamW with weight decay on 2-D weights only, warm-up and
cosine decay, gradient clipping: on DTensors under FSDP2) and the loss normalised over the
global token count: once with DDP, once sharded with FSDP2 (fully_shard per transformer
block, then the root). Before training, the FSDP2 gradient of the first global batch is
compared with one process's. The FSDP2 run saves a DCP checkpoint at --save-at (model,
optimizer, scheduler, step, data position); a fresh model and optimizer then load it and
train the remaining steps, which must give the uninterrupted run's losses and weights.
--precision bf16: bf16 compute, and bf16 copies of the parameters while FSDP2 has them
gathered (the shards and the optimizer stay fp32); fp32 gradient reduction
(MixedPrecisionPolicy). --activation-checkpointing: the FSDP2 model recomputes each block's
activations in backward. The bytes autograd keeps for backward in one forward are measured
with and without it.

Run it:
    python scripts/18_transformer/gpt_fsdp.py                                   # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_fsdp.py
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_fsdp.py \\
        --precision bf16 --activation-checkpointing
    mpiexec -n 2 python scripts/18_transformer/gpt_fsdp.py
"""

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from utils.checks import check_divisible
from utils.cli import make_parser, output_dir, positive_int, usage_error
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.gpt import (
    IGNORE,
    Batches,
    add_gpt_args,
    build_model,
    count_parameters,
    load_corpus,
    make_optimizer,
    make_scheduler,
    mean_token_loss,
    resolve_gpt_args,
    saved_activation_bytes,
    token_loss_sum,
)
from utils.shared_mode import gather_through_cpu, shares_gpu

# --8<-- [start:tolerance]
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2}  # largest |FSDP2 loss - DDP loss| accepted
# --8<-- [end:tolerance]


def parse_args():
    parser = add_gpt_args(make_parser(__doc__), steps=12)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="FSDP2's MixedPrecisionPolicy: fp32, or bf16 compute (and bf16 copies "
                        "of the gathered parameters) with fp32 gradient reduction (default: %(default)s)")
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="FSDP2's model recomputes each block's activations in backward")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints/ch18"),
                        help="where the DCP checkpoint goes; on a cluster, a directory every node "
                        "sees (default: %(default)s)")
    parser.add_argument("--save-at", type=positive_int, default=None,
                        help="the step after which the checkpoint is saved (default: half of --steps)")
    args = parser.parse_args()
    resolve_gpt_args(args, parser)
    args.save_at = args.save_at or max(1, args.steps // 2)
    if args.save_at >= args.steps:
        usage_error(f"--save-at {args.save_at} must be before the last step (--steps {args.steps}): "
                    "pick a smaller one", parser)
    return args, parser


# --8<-- [start:shard]
def shard(model, mesh, precision):
    """FSDP2: one unit per transformer block, then the root (embeddings, final norm, the tied
    head). bf16: compute and all-gather in bf16, reduce-scatter the gradients in fp32."""
    policy = MixedPrecisionPolicy()
    if precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
# --8<-- [end:shard]


def forward_backward(model, samples, batches, ctx):
    """This rank's slice of a global batch: the loss sum over the global token count, times the
    world size that DDP and FSDP2 both divide by; returns the loss sum and the tokens."""
    inputs, targets = batches.micro_batches(samples, ctx.rank, ctx.world_size, 1)[0]
    tokens = (targets != IGNORE).sum()
    global_tokens = tokens.clone()
    dist.all_reduce(global_tokens)
    total = token_loss_sum(model, inputs, targets)
    (total / global_tokens * ctx.world_size).backward()  # DDP and FSDP2 both average
    return total.detach(), tokens


def full_grads(model, ctx):
    """Every parameter's whole gradient: a DTensor's shards gathered (a collective). In the
    shared mode (--backend gloo-cuda) gloo cannot all-gather CUDA tensors (the process dies of
    SIGSEGV): the shards go through the CPU there (utils/shared_mode.py)."""
    if shares_gpu(ctx.backend, ctx.device):
        grads = gather_through_cpu({str(i): p.grad for i, p in enumerate(model.parameters())}, to_all=True)
        return [grad.to(ctx.device) for grad in grads.values()]
    return [p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for p in model.parameters()]


def check_against_one_process(model, corpus, batches, args, ctx):
    """The FSDP2 gradient of the first global batch against one process's on the same
    sequences (dropout off): the largest difference, relative to the largest gradient."""
    samples = batches.peek()
    model.eval()
    forward_backward(model, samples, batches, ctx)
    grads = full_grads(model, ctx)
    model.train()
    model.zero_grad(set_to_none=True)
    reference = build_model(corpus, args, ctx.device).eval()  # the same initial weights
    mean_token_loss(reference, *batches.sequences(samples)).backward()
    pairs = zip(grads, reference.parameters(), strict=True)
    diff = max((g - r.grad).abs().max().item() for g, r in pairs)
    grad_diff = diff / max(r.grad.abs().max().item() for r in reference.parameters())
    print0(f"step 1: FSDP2 gradient against one process on the same {len(samples)} sequences: "
           f"max relative difference {grad_diff:.1e}")
    return grad_diff


def save(model, optimizer, scheduler, batches, step, checkpoint_dir):
    """A DCP checkpoint: every rank writes its own shards, and the step, the scheduler and the
    data position (the same on every rank)."""
    # --8<-- [start:save]
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state, "scheduler": scheduler.state_dict(),
              "data": batches.state_dict(), "step": step}, checkpoint_id=checkpoint_dir)
    # --8<-- [end:save]


def train(model, optimizer, scheduler, batches, args, ctx, steps, save_to=None):
    """gpt_ddp.py's recipe on the global batches of `steps`; a checkpoint into `save_to` after
    step --save-at. The losses stay on the device until the end: one read for all steps."""
    sums = torch.zeros(len(steps), 2, dtype=torch.float64, device=ctx.device)
    for i, step in enumerate(steps):
        # Dropout's masks: drawn from the seed, the step and the rank alone, so that DDP and
        # FSDP2 draw the same ones, and a resumed run those of the run it continues.
        torch.manual_seed(args.seed * 1_000_003 + step * 1_009 + ctx.rank)
        total, tokens = forward_backward(model, batches.next(), batches, ctx)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)  # FSDP2: on DTensors
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        sums[i] = torch.stack([total.double(), tokens.double()])
        if save_to is not None and step == args.save_at:
            save(model, optimizer, scheduler, batches, step, save_to)
    dist.all_reduce(sums)
    return (sums[:, 0] / sums[:, 1]).tolist()


def checksum(model):
    """The float64 sum of every parameter, over all shards (the same for DDP and FSDP2)."""
    local = sum(float((p.to_local() if isinstance(p, DTensor) else p).detach().double().sum())
                for p in model.parameters())
    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return local
    total = torch.tensor(local, dtype=torch.float64, device=next(model.parameters()).device)
    dist.all_reduce(total)
    return total.item()


def main() -> None:
    args, parser = parse_args()
    # 1. Join the process group; one dimension of ranks for FSDP2 to shard over.
    ctx = setup_distributed(args.backend, args.timeout)
    check_divisible(ctx, "--global-batch-size", args.global_batch_size)
    corpus, about = load_corpus(args, parser)

    def fresh_batches():  # every run from the first global batch: the same batches for all
        return Batches(corpus, args.batching, args.block_size, args.global_batch_size, args.seed, ctx.device)
    if fresh_batches().per_epoch < 1:
        usage_error(f"--global-batch-size {args.global_batch_size} is more sequences than the text "
                    "makes: give a longer text or a smaller --global-batch-size", parser)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    print0(about)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} device={ctx.device.type} "
           f"precision={args.precision} batching={args.batching} "
           f"activation_checkpointing={'yes' if args.activation_checkpointing else 'no'}")
    steps = range(1, args.steps + 1)

    # 2. DDP: every rank the whole model.
    model = build_model(corpus, args, ctx.device)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    params = count_parameters(model)
    optimizer = make_optimizer(model, args, ctx.device)
    ddp_losses = train(ddp, optimizer, make_scheduler(optimizer, args), fresh_batches(), args, ctx, steps)
    ddp_checksum = checksum(model)
    del ddp, model, optimizer

    # 3. FSDP2 from the same weights; the optimizer on the sharded parameters. Its first
    #    gradient against one process's; then it trains, and saves a DCP checkpoint after step
    #    --save-at.
    # --8<-- [start:fsdp]
    model = build_model(corpus, args, ctx.device)
    model.activation_checkpointing = args.activation_checkpointing  # before sharding: per block
    model = shard(model, mesh, args.precision)
    optimizer = make_optimizer(model, args, ctx.device)  # on the shards: DTensors
    scheduler = make_scheduler(optimizer, args)
    # --8<-- [end:fsdp]
    batches = fresh_batches()
    grad_diff = check_against_one_process(model, corpus, batches, args, ctx)
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    checkpoint_dir = args.checkpoint_dir / f"step_{args.save_at}"
    if ctx.rank == 0 and checkpoint_dir.exists():
        shutil.rmtree(checkpoint_dir)  # an earlier run's: DCP would warn, then write over it
    dist.barrier()
    fsdp_losses = train(model, optimizer, scheduler, batches, args, ctx, steps, save_to=checkpoint_dir)
    fsdp_checksum = checksum(model)
    peak = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
    del model, optimizer, scheduler

    # 4. Resume: a fresh model (other initial weights), optimizer, scheduler and batches load
    #    the checkpoint, then train the steps after the one it holds.
    resumed = build_model(corpus, args, ctx.device, seed=args.seed + 1)  # other weights
    resumed.activation_checkpointing = args.activation_checkpointing
    resumed = shard(resumed, mesh, args.precision)
    resumed_optimizer = make_optimizer(resumed, args, ctx.device)
    resumed_scheduler, resumed_batches = make_scheduler(resumed_optimizer, args), fresh_batches()
    # --8<-- [start:resume]
    model_state, optimizer_state = get_state_dict(resumed, resumed_optimizer)
    state = {"model": model_state, "optimizer": optimizer_state, "scheduler": resumed_scheduler.state_dict(),
             "data": resumed_batches.state_dict(), "step": 0}
    dcp.load(state, checkpoint_id=checkpoint_dir)  # in place: this rank's shards, and the rest
    set_state_dict(resumed, resumed_optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
    resumed_scheduler.load_state_dict(state["scheduler"])
    resumed_batches.load_state_dict(state["data"])
    # --8<-- [end:resume]
    rest = range(state["step"] + 1, args.steps + 1)
    print0(f"resumed at step {state['step']}: learning rate {resumed_scheduler.get_last_lr()[0]:.2e}, "
           f"data at {resumed_batches.where()}")
    resumed_losses = train(resumed, resumed_optimizer, resumed_scheduler, resumed_batches, args, ctx, rest)
    resumed_checksum = checksum(resumed)
    del resumed, resumed_optimizer

    # 5. What activation checkpointing saves: bytes kept for backward in one forward of this
    #    rank's first batch (a plain copy of the model, so only the activations differ).
    plain = build_model(corpus, args, ctx.device)
    batches = fresh_batches()
    inputs, targets = batches.micro_batches(batches.next(), ctx.rank, ctx.world_size, 1)[0]
    kept = {}
    for flag in (False, True):
        plain.activation_checkpointing = flag
        kept[flag] = saved_activation_bytes(plain, inputs, targets)

    # 6. Report.
    print0("step  ddp_loss   fsdp2_loss  |difference|  resumed_loss")
    resumed_by_step = dict(zip(rest, resumed_losses, strict=True))
    for step, a, b in zip(steps, ddp_losses, fsdp_losses, strict=True):
        again = f"{resumed_by_step[step]:.6f}" if step in resumed_by_step else ""
        again = "(saved here)" if step == args.save_at else again
        print0(f"{step:>4}  {a:.6f}   {b:.6f}    {abs(a - b):.1e}       {again}".rstrip())
    max_diff = max(abs(a - b) for a, b in zip(ddp_losses, fsdp_losses, strict=True))
    tolerance = TOLERANCE[args.precision]
    resume_equal = resumed_losses == fsdp_losses[args.save_at:] and resumed_checksum == fsdp_checksum
    print0(f"checksums: ddp {ddp_checksum:.10f} fsdp2 {fsdp_checksum:.10f} "
           f"resumed from step {args.save_at} {resumed_checksum:.10f}")
    print0(f"saved for backward, one forward of {len(inputs)} sequences on rank 0: "
           f"{kept[False][0]} bytes in {kept[False][1]} tensors without activation checkpointing, "
           f"{kept[True][0]} bytes in {kept[True][1]} tensors with it")
    if peak is not None:
        print0(f"torch.cuda.max_memory_allocated (fsdp2, rank 0): {peak} bytes")
    print0(f"summary: launcher={ctx.launcher} world_size={ctx.world_size} precision={args.precision} "
           f"activation_checkpointing={'yes' if args.activation_checkpointing else 'no'} params={params} "
           f"grad_diff={grad_diff:.1e} first_loss={fsdp_losses[0]:.4f} final_loss={fsdp_losses[-1]:.4f} "
           f"max_loss_diff={max_diff:.1e} tolerance={tolerance:g} "
           f"losses_match={'yes' if max_diff <= tolerance else 'no'} "
           f"resume_equal={'yes' if resume_equal else 'no'} saved_bytes_plain={kept[False][0]} "
           f"saved_bytes_checkpointed={kept[True][0]}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
