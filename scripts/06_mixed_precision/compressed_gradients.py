"""Chapter 06: compress DDP's gradient all-reduce to fp16 or bf16, and measure the bytes.

DDP all-reduces the gradients in the parameters' dtype, fp32, even under autocast. A
communication hook can cast each bucket to fp16 or bf16 before the all-reduce and back
after it: half the bytes on the network, for a little precision. This script trains the
same model once per hook and counts, per step, the bytes of the tensors handed to
all_reduce, and (on Linux, with gloo) the bytes each process really wrote to its sockets.

Run it (the same file, unchanged, on CPU/gloo and GPU/nccl):
    python scripts/06_mixed_precision/compressed_gradients.py                 # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/06_mixed_precision/compressed_gradients.py
    python scripts/06_mixed_precision/compressed_gradients.py --hooks none bf16 --width 2048
    mpiexec -n 4 python scripts/06_mixed_precision/compressed_gradients.py
    qsub scripts/06_mixed_precision/mixed_precision.sh                        # PBS cluster

fp16 compression has fp16's range: with gradients below 6e-08 (try --loss-weight 1e-6,
as in amp_grad_scaler.py) the fp16 hook turns them into zeros; bf16 keeps them.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, make_parser, positive_float, positive_int
from utils.comm import AllReduceCounter, bytes_written_by_this_process, counting_allreduce_hook
from utils.data import make_loader, synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.timing import synchronized_clock


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=1, batch_size=32, lr=0.02)
    parser.add_argument("--num-samples", type=positive_int, default=1024,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--width", type=positive_int, default=512,
                        help="hidden width of the model: more width, more gradient bytes "
                        "(default: %(default)s)")
    parser.add_argument("--hooks", nargs="+", choices=["none", "fp16", "bf16"],
                        default=["none", "fp16", "bf16"],
                        help="the communication hooks to train with, one run each; ratios are to the "
                        "first (default: all)")
    parser.add_argument("--loss-weight", type=positive_float, default=1.0,
                        help="the loss is multiplied by this and the learning rate divided by it: "
                        "the same training, smaller gradients (default: %(default)s)")
    return parser.parse_args()


# --8<-- [start:hooks]
# fp16_compress_hook is exactly fp16_compress_wrapper(allreduce_hook) (PyTorch's docs say
# so); wrapping the counting hook instead lets us see the tensor that is all-reduced.
HOOKS = {
    "none": counting_allreduce_hook,  # what DDP does without a hook: fp32 all-reduce
    "fp16": default_hooks.fp16_compress_wrapper(counting_allreduce_hook),
    "bf16": default_hooks.bf16_compress_wrapper(counting_allreduce_hook),
}
# --8<-- [end:hooks]


def train_with_hook(hook_name: str, ctx, args, dataset) -> dict:
    """Steps 2-4 (main() holds 1, 5, 6): train a fresh model with one hook; return what was measured."""
    # 2. The same model, data and seed for every hook, so only the hook differs.
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(32, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU(), nn.Linear(args.width, 4)).to(ctx.device)
    num_params = sum(p.numel() for p in model.parameters())
    model = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    # --8<-- [start:register]
    # 3. Register the hook once, after wrapping and before the first backward().
    counter = AllReduceCounter()
    model.register_comm_hook(counter, HOOKS[hook_name])  # the state is the hook's 1st argument
    # --8<-- [end:register]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr / args.loss_weight, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # 4. Train, measuring from here: the hook counts, /proc/self/io, the clock.
    steps, zero_elements, all_elements, loss_sum, samples = 0, 0, 0, 0.0, 0
    measure_wire = ctx.backend == "gloo"  # NCCL moves GPU memory without write() calls
    dist.barrier()
    written_before = bytes_written_by_this_process() if measure_wire else None
    start = synchronized_clock(ctx.device)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs = inputs.to(ctx.device, non_blocking=True)  # asynchronous from pinned memory
            labels = labels.to(ctx.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            (loss * args.loss_weight).backward()  # the hook all-reduces each bucket here
            grads = [p.grad for p in model.parameters()]  # averaged over the ranks by now
            zero_elements += sum(int((g == 0).sum()) for g in grads)
            all_elements += sum(g.numel() for g in grads)
            optimizer.step()
            steps, samples = steps + 1, samples + len(labels)
            loss_sum += loss.item() * len(labels)
    seconds = synchronized_clock(ctx.device) - start
    written_after = bytes_written_by_this_process() if measure_wire else None

    totals = torch.tensor([loss_sum, float(samples)], device=ctx.device)
    dist.all_reduce(totals)  # the mean loss over the whole run and all ranks
    del model  # DDP holds the process group (chapter 01, step 6)
    wire = None
    if written_before is not None and written_after is not None:
        wire = (written_after - written_before) / steps
    return {"hook": hook_name, "params": num_params, "bytes": counter.bytes / steps,
            "all_reduces": counter.calls / steps, "wire": wire,
            "step_s": seconds / steps, "zero": 100 * zero_elements / all_elements,
            "loss": (totals[0] / totals[1]).item()}


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} loss_weight={args.loss_weight:g}")
    dataset = synthetic_classification(args.num_samples, seed=args.seed)

    # 5. One training run per hook; rank 0 prints one row each. "written" is what this
    #    rank wrote to its sockets (gloo on Linux; n/a elsewhere, 0 in a world of one).
    results = []
    print0(f"{'hook':<5} {'all-reduced/step':>16} {'ratio':>5} {'calls/step':>10} "
           f"{'written/step':>12} {'ratio':>5} {'zero grads':>10} {'mean loss':>9}  time/step")
    for hook_name in args.hooks:
        result = train_with_hook(hook_name, ctx, args, dataset)
        results.append(result)
        result["ratio"] = result["bytes"] / results[0]["bytes"]
        result["wire_ratio"] = (f"{result['wire'] / results[0]['wire']:.2f}"
                                if result["wire"] and results[0]["wire"] else "n/a")
        wire = "n/a" if result["wire"] is None else f"{result['wire'] / 1e6:.2f} MB"
        print0(f"{hook_name:<5} {result['bytes'] / 1e6:>13.2f} MB {result['ratio']:>5.2f} "
               f"{result['all_reduces']:>10.0f} {wire:>12} {result['wire_ratio']:>5} "
               f"{result['zero']:>9.1f}% {result['loss']:>9.4f}  {result['step_s']:.4f} s")

    # 6. Summary: bytes per step, and their ratio to the first hook's.
    params = results[0]["params"]
    print0(f"gradient elements: {params} ({4 * params} bytes in fp32, {2 * params} in fp16/bf16)")
    # wire_per_byte: bytes written to the sockets per byte all-reduced (gloo's ring sends
    # 2(N-1)/N); wire_ratio: written, against the first hook's run (so not for the first).
    fields = []
    for r in results:
        name = r["hook"]
        fields += [f"{name}_bytes={r['bytes']:.0f}", f"{name}_ratio={r['ratio']:.2f}"]
        if r["wire"] is not None:
            fields.append(f"{name}_wire_per_byte={r['wire'] / r['bytes']:.2f}")
        if r is not results[0]:
            fields.append(f"{name}_wire_ratio={r['wire_ratio']}")
        fields += [f"{name}_zero_grads={r['zero']:.1f}%", f"{name}_loss={r['loss']:.4f}"]
    pairs = " ".join(fields)
    print0(f"summary: world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           f"params={params} {pairs}")
    cleanup_distributed()


if __name__ == "__main__":
    main()
