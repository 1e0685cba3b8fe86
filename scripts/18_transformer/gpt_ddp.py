"""Chapter 18: a small GPT under DDP, and the loss of sequences of different lengths.

A character-level GPT (utils/gpt.py) trained with DDP on documents of different lengths,
right-padded. --variant bad: each rank's loss is the mean over its own tokens; DDP then
averages the ranks' gradients, so a rank with few tokens weighs as much as one with many.
--variant good: the sum over the tokens divided by the global token count (one all-reduce of
the count), times the world size that DDP's average divides by. At the first step the script
computes the gradient of the same global batch in one process and prints the difference.
--accumulation-steps K: each rank's share in K micro-batches of different lengths (no_sync on
all but the last), the same two normalisations.

It reports the held-out loss as it trains, the step and time at which it first reaches
--target-loss, tokens per second, the share of its own ceiling (steps on one batch already on
the device), and on a GPU the model FLOPs utilisation (MFU).

Run it:
    python scripts/18_transformer/gpt_ddp.py                                    # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --variant good
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --accumulation-steps 4
    mpiexec -n 2 python scripts/18_transformer/gpt_ddp.py
On GPUs (tiny-shakespeare, a model worth a GPU, bf16, compiled):
    torchrun --standalone --nproc_per_node=4 scripts/18_transformer/gpt_ddp.py --preset gpu \\
        --text-file input.txt --steps 2000 --bf16 --compile --target-loss 1.5
"""

import contextlib
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from utils.checks import check_divisible
from utils.cli import (
    add_variant_arg,
    make_parser,
    positive_float,
    positive_int,
    usage_error,
)
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.gpt import (
    add_gpt_args,
    build_model,
    count_parameters,
    flops_per_token,
    global_batch,
    load_corpus,
    peak_tflops,
    rank_micro_batches,
    resolve_gpt_args,
    token_loss_sum,
)
from utils.timing import synchronized_clock


def parse_args():
    parser = add_gpt_args(make_parser(__doc__), steps=150)
    add_variant_arg(parser, bad="each rank's loss is the mean over its own tokens",
                    good="the sum over tokens divided by the global token count, times the world size")
    parser.add_argument("--accumulation-steps", type=positive_int, default=1,
                        help="micro-batches per optimizer step on each rank (default: %(default)s)")
    parser.add_argument("--eval-every", type=positive_int, default=25,
                        help="steps between two held-out losses (default: %(default)s)")
    parser.add_argument("--target-loss", type=positive_float, default=1.8,
                        help="the held-out loss whose first step and time are reported "
                        "(default: %(default)s)")
    parser.add_argument("--ceiling-steps", type=positive_int, default=10,
                        help="steps on one batch already on the device, after training: the "
                        "ceiling (default: %(default)s)")
    parser.add_argument("--bf16", action="store_true", help="autocast the forward to bf16")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the DDP model (chapter 15's order: DDP, then compile)")
    parser.add_argument("--peak-tflops", type=positive_float, default=None,
                        help="the GPU's bf16 peak for MFU (default: a table of known GPUs)")
    args = parser.parse_args()
    resolve_gpt_args(args, parser)
    return args, parser


def evaluate(model, corpus, ctx, batch_size=64, limit=256):
    """The held-out loss over the ranks: each rank a strided share of the held-out documents,
    token sums and counts all-reduced (chapter 03's distributed evaluation)."""
    rows = torch.arange(corpus.num_train, min(len(corpus.inputs), corpus.num_train + limit))
    mine = rows[ctx.rank::ctx.world_size]
    total = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    model.eval()
    with torch.no_grad():
        for chunk in mine.split(batch_size):
            targets = corpus.targets[chunk].to(ctx.device)
            total[0] += token_loss_sum(model, corpus.inputs[chunk].to(ctx.device), targets).double()
            total[1] += (targets != -100).sum()
    model.train()
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def relative_difference(model, reference):
    """max |g - g_ref| / max |g_ref| over every parameter's gradient."""
    pairs = zip(model.parameters(), reference.parameters(), strict=True)
    diff = max((p.grad - r.grad).abs().max().item() for p, r in pairs)
    return diff / max(r.grad.abs().max().item() for r in reference.parameters())


def forward_backward(train_model, ddp, corpus, micro_batches, variant, ctx, autocast):
    """Loss and backward over this rank's micro-batches (no_sync on all but the last);
    returns this rank's (loss sum, tokens)."""
    counts = [(corpus.targets[rows] != -100).sum() for rows in micro_batches]
    here = sum(counts).to(ctx.device)
    # --8<-- [start:good]
    # good: every token weighs the same, wherever it is: divide by the global count.
    global_tokens = here.clone()
    dist.all_reduce(global_tokens)  # one small all-reduce per optimizer step
    # --8<-- [end:good]
    loss_sum = torch.zeros((), device=ctx.device)
    for k, rows in enumerate(micro_batches):
        inputs, targets = corpus.inputs[rows].to(ctx.device), corpus.targets[rows].to(ctx.device)
        last = k == len(micro_batches) - 1
        with ddp.no_sync() if not last else contextlib.nullcontext():
            with autocast:  # the forward and the loss only: backward runs outside autocast
                total = token_loss_sum(train_model, inputs, targets)
                if variant == "bad":
                    # --8<-- [start:bad]
                    # bad: the mean over this rank's tokens (of this micro-batch); DDP then
                    # averages the ranks' gradients as if every rank had as many tokens.
                    loss = total / counts[k] / len(micro_batches)
                    # --8<-- [end:bad]
                else:
                    # --8<-- [start:good_loss]
                    # DDP averages the ranks' gradients (divides by the world size): multiply it back.
                    loss = total / global_tokens * ctx.world_size
                    # --8<-- [end:good_loss]
            loss.backward()
        loss_sum += total.detach()
    return loss_sum, here


def main() -> None:
    args, parser = parse_args()
    # 1. Join the process group (chapter 01). Every rank takes an equal slice of each global
    #    batch, in equal micro-batches.
    ctx = setup_distributed(args.backend, args.timeout)
    check_divisible(ctx, "--global-batch-size", args.global_batch_size)
    if (args.global_batch_size // ctx.world_size) % args.accumulation_steps:
        usage_error(f"--accumulation-steps {args.accumulation_steps} does not divide the "
                    f"{args.global_batch_size // ctx.world_size} sequences per rank: pick a divisor", parser)
    corpus, about = load_corpus(args, parser)
    print0(about)
    # 2. The model, the same on every rank; a plain copy computes the one-process gradient.
    model = build_model(corpus, args, ctx.device)
    reference = copy.deepcopy(model)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    train_model = torch.compile(ddp) if args.compile else ddp  # chapter 15: DDP first, then compile
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    params = count_parameters(model)
    print0(f"model: {args.layers} blocks, dim {args.dim}, {args.heads} heads, block {args.block_size}, "
           f"{params} parameters; launcher={ctx.launcher} world_size={ctx.world_size} "
           f"device={ctx.device.type} variant={args.variant} accumulation_steps={args.accumulation_steps}")
    autocast = torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=args.bf16)

    # 3. Train. Step 1 is also compared with one process's gradient of the same global batch.
    losses, held_out, reached, grad_diff = [], [], None, None
    timed_seconds, timed_tokens, timed_steps = 0.0, 0, 0
    started = synchronized_clock(ctx.device)
    for step in range(1, args.steps + 1):
        rows = global_batch(corpus, step, args.global_batch_size, args.seed)
        micro_batches = rank_micro_batches(rows, ctx.rank, ctx.world_size, args.accumulation_steps)
        before = synchronized_clock(ctx.device)
        loss_sum, here = forward_backward(train_model, ddp, corpus, micro_batches, args.variant, ctx,
                                          autocast)
        if step == 1:
            # --8<-- [start:reference]
            with autocast:  # one process, the whole global batch, every token weighing the same
                total = token_loss_sum(reference, corpus.inputs[rows].to(ctx.device),
                                       corpus.targets[rows].to(ctx.device))
            (total / (corpus.targets[rows] != -100).sum()).backward()
            grad_diff = relative_difference(model, reference)
            # --8<-- [end:reference]
            mine = torch.stack([(corpus.targets[r] != -100).sum() for r in micro_batches]).to(ctx.device)
            per_rank = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
            dist.all_gather(per_rank, mine)  # each rank's token count (per micro-batch)
            print0("step 1: tokens per rank " + " | ".join(" ".join(map(str, c.tolist())) for c in per_rank)
                   + f" (global {sum(c.sum().item() for c in per_rank)})")
            print0(f"step 1: gradient against one process on the same {len(rows)} sequences: "
                   f"max relative difference {grad_diff:.1e}")
            del reference
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        stats = torch.stack([loss_sum.double(), here.double()])
        dist.all_reduce(stats)  # the loss of the whole global batch, per token
        losses.append((stats[0] / stats[1]).item())
        if step > 1:  # step 1 compiles (--compile) and computes the reference: not timed
            timed_seconds += synchronized_clock(ctx.device) - before
            timed_tokens += int(stats[1].item())
            timed_steps += 1
        if step % args.eval_every == 0 or step == args.steps:
            held_out.append(evaluate(model, corpus, ctx))
            elapsed = synchronized_clock(ctx.device) - started
            if reached is None and held_out[-1] <= args.target_loss:
                reached = (step, elapsed)
            print0(f"step {step:>4}: train loss {losses[-1]:.4f} held-out loss {held_out[-1]:.4f} "
                   f"time={elapsed:.1f}s")

    # 4. The ceiling: the same step on one batch already on the device (chapter 12).
    rate = timed_tokens / timed_seconds if timed_seconds else 0.0
    rows = rank_micro_batches(global_batch(corpus, 1, args.global_batch_size, args.seed),
                              ctx.rank, ctx.world_size, 1)[0]
    inputs, targets = corpus.inputs[rows].to(ctx.device), corpus.targets[rows].to(ctx.device)
    for step in range(args.ceiling_steps + 1):  # step 0: a warm-up, not timed
        if step == 1:
            start = synchronized_clock(ctx.device)
        with autocast:
            loss = token_loss_sum(train_model, inputs, targets) / (targets != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = (synchronized_clock(ctx.device) - start) / args.ceiling_steps
    tokens = torch.tensor(float((targets != -100).sum()), device=ctx.device)
    dist.all_reduce(tokens)
    ceiling = tokens.item() / seconds

    # 5. MFU on a GPU: model FLOPs per second over the card's bf16 peak.
    peak = peak_tflops(ctx.device, args.peak_tflops)
    if ctx.device.type != "cuda":
        mfu = "n/a"
        print0("MFU: not computed on a CPU (no peak to compare with)")
    elif peak is None:
        mfu = "n/a"
        print0(f"MFU: unknown GPU {torch.cuda.get_device_name(ctx.device)!r}: pass --peak-tflops")
    elif not timed_steps:
        mfu = "n/a"
        print0("MFU: no timed step (step 1 is never timed): run at least 2 --steps")
    else:
        # Every position is computed, pads too: the FLOPs count the padded sequences.
        positions_per_s = timed_steps * args.global_batch_size * args.block_size / timed_seconds
        per_gpu = flops_per_token(model, args.block_size) * positions_per_s / ctx.world_size
        mfu = f"{100 * per_gpu / (peak * 1e12):.1f}%"

    # 6. Summary (rank 0).
    time_to_target = f"reached_at_step={reached[0]} time_to_target={reached[1]:.1f}s" if reached \
        else "reached_at_step=none"
    extra = (f" max_memory_allocated={torch.cuda.max_memory_allocated(ctx.device) / 2**20:.0f}MiB"
             if ctx.device.type == "cuda" else "")
    print0(f"summary: launcher={ctx.launcher} world_size={ctx.world_size} variant={args.variant} "
           f"accumulation_steps={args.accumulation_steps} params={params} "
           f"first_loss={losses[0]:.4f} final_loss={losses[-1]:.4f} held_out_loss={held_out[-1]:.4f} "
           f"uniform_loss={corpus.uniform_loss:.4f} grad_diff={grad_diff:.1e} "
           f"target_loss={args.target_loss:g} {time_to_target} "
           f"throughput={rate:.0f} tokens/s per_rank={rate / ctx.world_size:.0f} tokens/s "
           f"ceiling={ceiling:.0f} tokens/s ceiling_share={100 * rate / ceiling:.1f}% mfu={mfu}{extra}")

    # 7. Leave the process group (DDP holds it: release the model first).
    del train_model, ddp, model
    cleanup_distributed()


if __name__ == "__main__":
    main()
