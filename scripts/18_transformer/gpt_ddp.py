"""Chapter 18: a small GPT under DDP, trained as a GPT trains, and the loss over masked tokens.

A character-level GPT (utils/gpt.py) trained with DDP on packed windows of a text: every
position a real token, every rank the same count (--batching packed, the default). One process
trains the model itself: DDP would have no rank to average with, only its cost. The loss
pitfall needs ranks that hold different numbers of trained tokens: right-padded documents of
different lengths (--batching padded), or prompts that are not trained on (--loss-on answers).
--variant bad: each rank's loss is the mean over its own trained tokens; DDP then averages the
ranks' gradients, so a rank with few tokens weighs as much as one with many. --variant good:
the sum over the tokens divided by the global token count (one all-reduce of the count), times
the world size that DDP's average divides by. Before training, the script computes the
gradient of the first global batch in one process and prints the difference.
--accumulation-steps K: each rank's share in K micro-batches (no_sync on all but the last).

The recipe: AdamW (fused on CUDA) with weight decay on 2-D weights only, warm-up then cosine
decay, gradient clipping, --dropout; --checkpoint-dir saves at each evaluation and --resume
continues from such a file (the step, the optimizer, the scheduler, the data position).
The step reads nothing back from the device: losses and token counts add up there and are read
at --log-every and at evaluations. It reports the held-out loss (the last tenth of the text,
in windows), the step and time at which it first reaches --target-loss, real tokens per
second, its ceiling (the step alone, measured apart: no DDP, a batch on the device), and the
model FLOPs utilisation (MFU) on real tokens where the peak is known (a GPU, --peak-tflops).

Run it:
    python scripts/18_transformer/gpt_ddp.py                                    # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --batching padded --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --loss-on answers --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/18_transformer/gpt_ddp.py --accumulation-steps 4
    mpiexec -n 2 python scripts/18_transformer/gpt_ddp.py
On GPUs (tiny-shakespeare, nanoGPT's shakespeare-char shape and recipe, bf16, compiled):
    torchrun --standalone --nproc_per_node=1 scripts/18_transformer/gpt_ddp.py --preset gpu \\
        --text-file input.txt --steps 1500 --eval-every 250 --bf16 --compile --target-loss 1.5
"""

import contextlib
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from utils.checkpoint import load_checkpoint, save_checkpoint
from utils.checks import check_divisible
from utils.cli import (
    add_variant_arg,
    existing_file,
    make_parser,
    output_dir,
    positive_float,
    positive_int,
    usage_error,
)
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.gpt import (
    IGNORE,
    Batches,
    add_gpt_args,
    build_model,
    ceiling_tokens_per_s,
    count_parameters,
    flops_per_token,
    held_out_windows,
    load_corpus,
    make_optimizer,
    make_scheduler,
    mean_token_loss,
    peak_tflops,
    resolve_gpt_args,
    token_loss_sum,
)
from utils.timing import synchronized_clock


def parse_args():
    parser = add_gpt_args(make_parser(__doc__), steps=100)
    add_variant_arg(parser, bad="each rank's loss is the mean over its own trained tokens",
                    good="the sum over tokens divided by the global token count, times the world size")
    parser.add_argument("--accumulation-steps", type=positive_int, default=1,
                        help="micro-batches per optimizer step on each rank (default: %(default)s)")
    parser.add_argument("--log-every", type=positive_int, default=25,
                        help="steps between two reads of the loss from the device (default: %(default)s)")
    parser.add_argument("--eval-every", type=positive_int, default=25,
                        help="steps between two held-out losses (default: %(default)s)")
    parser.add_argument("--target-loss", type=positive_float, default=1.8,
                        help="the held-out loss whose first step and time are reported "
                        "(default: %(default)s)")
    parser.add_argument("--ceiling-steps", type=positive_int, default=10,
                        help="timed steps of the ceiling loop after training (default: %(default)s)")
    parser.add_argument("--bf16", action="store_true", help="autocast the forward to bf16")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the DDP model (chapter 15's order: DDP, then compile)")
    parser.add_argument("--peak-tflops", type=positive_float, default=None,
                        help="the device's bf16 peak for MFU (default: a table of known GPUs)")
    parser.add_argument("--checkpoint-dir", type=output_dir, default=None,
                        help="save a checkpoint here after each evaluation, step_N.pt, the last two "
                        "kept (default: none)")
    parser.add_argument("--resume", type=existing_file, metavar="FILE", default=None,
                        help="continue from a checkpoint of --checkpoint-dir, run with the same flags")
    parser.add_argument("--sync-debug", choices=["off", "warn", "error"], default="off",
                        help="on CUDA, torch.cuda.set_sync_debug_mode for the steps between log "
                        "points after the first: report a host sync there (default: %(default)s)")
    args = parser.parse_args()
    resolve_gpt_args(args, parser)
    return args, parser


def evaluate(model, held_out, ctx, autocast, batch_size=64):
    """The held-out loss over the ranks: each rank a strided share of the held-out windows;
    token sums and counts add up on the device, all-reduced, read once."""
    inputs, targets = (t[ctx.rank::ctx.world_size] for t in held_out)
    total = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    model.eval()
    with torch.no_grad(), autocast:
        for x, y in zip(inputs.split(batch_size), targets.split(batch_size), strict=True):
            x, y = x.to(ctx.device), y.to(ctx.device)  # no copy where they live on the device
            total[0] += token_loss_sum(model, x, y).double()
            total[1] += (y != IGNORE).sum()
    model.train()
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def relative_difference(model, reference):
    """max |g - g_ref| / max |g_ref| over every parameter's gradient."""
    pairs = zip(model.parameters(), reference.parameters(), strict=True)
    diff = max((p.grad - r.grad).abs().max().item() for p, r in pairs)
    return diff / max(r.grad.abs().max().item() for r in reference.parameters())


def forward_backward(train_model, ddp, micro_batches, variant, ctx, autocast):
    """Loss and backward over this rank's micro-batches (no_sync on all but the last); returns
    this rank's loss sum and its trained tokens, on the device."""
    here = sum((targets != IGNORE).sum() for _, targets in micro_batches)
    # --8<-- [start:good]
    # good: every token weighs the same, wherever it is: divide by the global count.
    global_tokens = here.clone()
    dist.all_reduce(global_tokens)  # one small all-reduce per optimizer step
    # --8<-- [end:good]
    totals = []
    for k, (inputs, targets) in enumerate(micro_batches):
        last = k == len(micro_batches) - 1
        with ddp.no_sync() if not last and isinstance(ddp, DDP) else contextlib.nullcontext():
            with autocast:  # the forward and the loss only: backward runs outside autocast
                total = token_loss_sum(train_model, inputs, targets)
                if variant == "bad":
                    # --8<-- [start:bad]
                    # bad: the mean over this rank's trained tokens (of this micro-batch); DDP
                    # then averages the ranks' gradients as if every rank had as many tokens.
                    loss = total / (targets != IGNORE).sum() / len(micro_batches)
                    # --8<-- [end:bad]
                else:
                    # --8<-- [start:good_loss]
                    # DDP averages the ranks' gradients (divides by the world size): multiply it back.
                    loss = total / global_tokens * ctx.world_size
                    # --8<-- [end:good_loss]
            loss.backward()
        totals.append(total.detach())
    return sum(totals), here


def check_against_one_process(model, ddp, batches, args, ctx):
    """The DDP gradient of the next global batch against one process's on the same sequences:
    in fp32 with dropout off, so that only the loss's normalisation can differ."""
    samples = batches.peek()
    micro_batches = batches.micro_batches(samples, ctx.rank, ctx.world_size, args.accumulation_steps)
    reference = copy.deepcopy(model)
    model.eval()
    forward_backward(ddp, ddp, micro_batches, args.variant, ctx, contextlib.nullcontext())
    # --8<-- [start:reference]
    reference.eval()  # one process, the whole global batch, every token weighing the same
    initial = mean_token_loss(reference, *batches.sequences(samples))
    initial.backward()
    grad_diff = relative_difference(model, reference)
    # --8<-- [end:reference]
    model.train()
    model.zero_grad(set_to_none=True)
    mine = torch.stack([(targets != IGNORE).sum() for _, targets in micro_batches])
    per_rank = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(per_rank, mine)  # each rank's trained tokens (per micro-batch)
    step = batches.position + 1
    print0(f"step {step}: trained tokens per rank "
           + " | ".join(" ".join(map(str, c.tolist())) for c in per_rank)
           + f" (global {sum(c.sum().item() for c in per_rank)})")
    print0(f"step {step}: gradient against one process on the same {len(samples)} sequences "
           f"(fp32, no dropout): max relative difference {grad_diff:.1e}; its loss {initial.item():.4f}")
    return grad_diff, initial.item()


# --8<-- [start:step]
def train_step(train_model, ddp, optimizer, scheduler, batches, args, ctx, autocast):
    """One optimizer step, all on the device: nothing read back, no copy from the host (but
    the pinned copy of the sample order at the start of each epoch).
    Returns this rank's loss sum, trained tokens and real (not pad) input tokens."""
    micro_batches = batches.micro_batches(batches.next(), ctx.rank, ctx.world_size,
                                          args.accumulation_steps)
    loss_sum, trained = forward_backward(train_model, ddp, micro_batches, args.variant, ctx, autocast)
    torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    real = sum((inputs != batches.pad).sum() for inputs, _ in micro_batches)
    return loss_sum, trained, real
# --8<-- [end:step]


def save(directory, step, model, optimizer, scheduler, batches, saved):
    """step_N.pt after step N (utils/checkpoint: rank 0 writes, atomically). This run's saves
    are listed in `saved`; all but the last two are removed."""
    path = directory / f"step_{step}.pt"
    save_checkpoint(path, model, optimizer, step, scheduler=scheduler, extra={"data": batches.state_dict()})
    saved.append(path)
    if dist.get_rank() == 0 and len(saved) > 2:
        saved.pop(0).unlink()


def main() -> None:
    args, parser = parse_args()
    # 1. Join the process group (chapter 01). Every rank takes an equal slice of each global
    #    batch, in equal micro-batches. The text and the batches live on the device.
    ctx = setup_distributed(args.backend, args.timeout)
    check_divisible(ctx, "--global-batch-size", args.global_batch_size)
    if (args.global_batch_size // ctx.world_size) % args.accumulation_steps:
        usage_error(f"--accumulation-steps {args.accumulation_steps} does not divide the "
                    f"{args.global_batch_size // ctx.world_size} sequences per rank: pick a divisor", parser)
    corpus, about = load_corpus(args, parser)
    batches = Batches(corpus, args.batching, args.block_size, args.global_batch_size, args.seed, ctx.device)
    if batches.per_epoch < 1:
        usage_error(f"--batching {args.batching} makes {batches.samples} sequences, fewer than one "
                    f"--global-batch-size ({args.global_batch_size}): give a longer text or a smaller "
                    "--global-batch-size", parser)
    held_out = held_out_windows(corpus, args.block_size, ctx.device)
    print0(about)
    # 2. The model, the same on every rank; the recipe; where a checkpoint left off.
    model = build_model(corpus, args, ctx.device)
    torch.manual_seed(args.seed + 1 + ctx.rank)  # dropout: each rank draws its own masks
    optimizer = make_optimizer(model, args, ctx.device)
    scheduler = make_scheduler(optimizer, args)
    start = 0
    if args.resume is not None:
        try:
            state = load_checkpoint(args.resume, model, optimizer, device=ctx.device, scheduler=scheduler)
        except Exception as error:  # whatever torch.load or load_state_dict make of the file
            usage_error(f"argument --resume: {args.resume} is not a checkpoint of this model "
                        f"({str(error).splitlines()[0]}): give a step_N.pt written with the same flags",
                        parser)
        start = state["epoch"]  # the optimizer steps done
        batches.load_state_dict(state["extra"]["data"])
        print0(f"resumed from {args.resume}: step {start}, learning rate {scheduler.get_last_lr()[0]:.2e}, "
               f"data at {batches.where()}")
    # DDP where there are ranks to average: one process has none, and DDP cost a third of the
    # GPU preset's step on one H100 (see the page). gradient_as_bucket_view: each .grad is a view
    # into its bucket after the all-reduce, no copy out of it (chapter 10).
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
              gradient_as_bucket_view=True) if ctx.world_size > 1 else model
    train_model = torch.compile(ddp) if args.compile else ddp  # chapter 15: DDP first, then compile
    params = count_parameters(model)
    print0(f"model: {args.layers} blocks, dim {args.dim}, {args.heads} heads, block {args.block_size}, "
           f"{params} parameters; launcher={ctx.launcher} world_size={ctx.world_size} "
           f"wrapper={'DDP' if isinstance(ddp, DDP) else 'none'} "
           f"device={ctx.device.type} batching={args.batching} loss_on={args.loss_on} "
           f"variant={args.variant} accumulation_steps={args.accumulation_steps}")
    autocast = torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=args.bf16)

    # 3. The first step's gradient against one process's on the same global batch.
    grad_diff, initial_loss = check_against_one_process(model, ddp, batches, args, ctx)

    # 4. Train. Between two log points nothing is read from the device: the sums stay there.
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss sum, trained, real tokens
    final_loss = held_out_loss = reached = None
    timed_seconds, timed_tokens, timed_steps, logged, saved = 0.0, 0, 0, start, []
    started = mark = synchronized_clock(ctx.device)
    for step in range(start + 1, args.steps + 1):
        debug = args.sync_debug != "off" and ctx.device.type == "cuda" and logged > start
        if debug:  # after the first log point: DDP has built its buckets, compilation is done
            torch.cuda.set_sync_debug_mode(args.sync_debug)
        loss_sum, trained, real = train_step(train_model, ddp, optimizer, scheduler, batches, args, ctx,
                                             autocast)
        sums[0] += loss_sum  # in place, on the device: nothing is read back here
        sums[1] += trained
        sums[2] += real
        if debug:
            torch.cuda.set_sync_debug_mode("default")
        if step % args.log_every and step % args.eval_every and step != args.steps:
            continue
        # A log point: read what the steps since the last one added up, over the ranks.
        dist.all_reduce(sums)
        final_loss, real_tokens = (sums[0] / sums[1]).item(), int(sums[2].item())
        if logged > start:  # the first interval warms up (and compiles): not timed
            timed_seconds += synchronized_clock(ctx.device) - mark
            timed_tokens += real_tokens
            timed_steps += step - logged
        logged = step
        line = f"step {step:>4}: train loss {final_loss:.4f}"
        if step % args.eval_every == 0 or step == args.steps:
            held_out_loss = evaluate(model, held_out, ctx, autocast)
            elapsed = synchronized_clock(ctx.device) - started
            if reached is None and held_out_loss <= args.target_loss:
                reached = (step, elapsed)
            line += f" held-out loss {held_out_loss:.4f} time={elapsed:.1f}s"
            if args.checkpoint_dir is not None:
                save(args.checkpoint_dir, step, model, optimizer, scheduler, batches, saved)
        print0(line)
        sums.zero_()
        mark = synchronized_clock(ctx.device)  # evaluating and saving are not timed
    positions = args.global_batch_size * args.block_size * timed_steps  # computed, pads included

    # 5. The ceiling: the same step alone, in a loop written apart (utils/gpt.py): no DDP, a
    #    batch of random tokens already on the device, every position real.
    per_rank = args.global_batch_size // ctx.world_size // args.accumulation_steps
    ceiling = torch.tensor(ceiling_tokens_per_s(model, args, per_rank, ctx.device, autocast,
                                                args.ceiling_steps, args.compile), device=ctx.device)
    dist.all_reduce(ceiling)  # each rank's own rate: together, the job's
    ceiling = ceiling.item()

    # 6. Real tokens per second, and MFU on them (PaLM's definition: the FLOPs the model needs,
    #    pads not counted) where a peak is known.
    rate = timed_tokens / timed_seconds if timed_steps else None
    peak = peak_tflops(ctx.device, args.peak_tflops)
    if rate is None:
        mfu = "n/a"
        print0("no timed step: the steps up to the first log point (--log-every) warm up and are "
               "not timed: run more --steps")
    elif peak is None:
        mfu = "n/a"
        print0("MFU: no peak known for a CPU: pass --peak-tflops" if ctx.device.type != "cuda" else
               f"MFU: unknown GPU {torch.cuda.get_device_name(ctx.device)!r}: pass --peak-tflops")
    else:
        per_device = flops_per_token(model, args.block_size) * rate / ctx.world_size
        mfu = f"{100 * per_device / (peak * 1e12):.2f}%"

    # 7. Summary (rank 0).
    speed = (f"throughput={rate:.0f} tokens/s per_rank={rate / ctx.world_size:.0f} tokens/s "
             f"computed={positions / timed_seconds:.0f} tokens/s "
             f"pads={100 * (1 - timed_tokens / positions):.1f}% "
             f"ceiling={ceiling:.0f} tokens/s ceiling_share={100 * rate / ceiling:.1f}%" if rate else
             f"throughput=n/a ceiling={ceiling:.0f} tokens/s ceiling_share=n/a")
    time_to_target = f"reached_at_step={reached[0]} time_to_target={reached[1]:.1f}s" if reached \
        else "reached_at_step=none"
    extra = (f" max_memory_allocated={torch.cuda.max_memory_allocated(ctx.device) / 2**20:.0f}MiB"
             if ctx.device.type == "cuda" else "")
    print0(f"summary: launcher={ctx.launcher} world_size={ctx.world_size} batching={args.batching} "
           f"loss_on={args.loss_on} variant={args.variant} accumulation_steps={args.accumulation_steps} "
           f"params={params} steps={args.steps} initial_loss={initial_loss:.4f} final_loss={final_loss:.4f} "
           f"held_out_loss={held_out_loss:.4f} uniform_loss={corpus.uniform_loss:.4f} "
           f"grad_diff={grad_diff:.1e} target_loss={args.target_loss:g} {time_to_target} "
           f"{speed} mfu={mfu}{extra}")

    # 8. Leave the process group (DDP holds it: release the model first).
    del train_model, ddp, model
    cleanup_distributed()


if __name__ == "__main__":
    main()
