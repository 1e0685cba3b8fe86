"""Chapter 17: ZeroRedundancyOptimizer next to plain DDP: optimizer memory per rank, same step.

Two copies of one model, with the same initial weights, train side by side on the same
batches: one under DDP with a plain Adam (every rank holds Adam's state for every
parameter), one under DDP with ZeroRedundancyOptimizer wrapping Adam (each rank holds the
state of its share of the parameters). The script measures the bytes of Adam state each
rank holds under both, prints them next to the arithmetic, and compares the two models'
parameters after the last step.

Run it:
    python scripts/17_zero_and_beyond/zero_optimizer.py                     # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/17_zero_and_beyond/zero_optimizer.py
    torchrun --standalone --nproc_per_node=4 scripts/17_zero_and_beyond/zero_optimizer.py
    mpiexec -n 2 python scripts/17_zero_and_beyond/zero_optimizer.py
Bigger (on GPUs): --width 4096 --blocks 8 --steps 50
"""

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from utils.cli import add_training_args, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=16, lr=1e-3)
    parser.add_argument("--steps", type=positive_int,
                        default=10, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--width", type=positive_int, default=128,
                        help="width of the hidden layers (default: %(default)s)")
    parser.add_argument("--blocks", type=positive_int, default=4,
                        help="hidden Linear(width, width) layers (default: %(default)s)")
    return parser.parse_args()


def build_model(width: int, blocks: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(32, width), nn.ReLU()]
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


# --8<-- [start:state_bytes]
def state_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(parameters with state, their elements, bytes of state) that `optimizer` holds in
    this process. Adam: exp_avg and exp_avg_sq (each the parameter's shape and dtype) and
    a 0-dim `step` tensor per parameter."""
    tensors = [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    elements = sum(state["exp_avg"].numel() for state in optimizer.state.values())
    return len(optimizer.state), elements, sum(t.numel() * t.element_size() for t in tensors)
# --8<-- [end:state_bytes]


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None

    # 2. One model, two copies with the same weights, each wrapped in its own DDP.
    torch.manual_seed(args.seed)
    model = build_model(args.width, args.blocks).to(ctx.device)
    ddp_plain = DDP(model, device_ids=device_ids)
    ddp_zero = DDP(copy.deepcopy(model), device_ids=device_ids)
    total_params = sum(p.numel() for p in model.parameters())
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} model: {len(list(model.parameters()))} parameter tensors, "
           f"{total_params} elements")

    # --8<-- [start:optimizers]
    # 3. The optimizers. Plain DDP: every rank builds Adam over every parameter.
    plain = torch.optim.Adam(ddp_plain.parameters(), lr=args.lr)
    # ZeRO stage 1: every rank passes every parameter; each builds an Adam over its share
    # only (zero.optim) and, after its step, broadcasts its updated parameters to the others.
    zero = ZeroRedundancyOptimizer(ddp_zero.parameters(), optimizer_class=torch.optim.Adam,
                                   lr=args.lr)
    # --8<-- [end:optimizers]

    # 4. Train both on the same batches: the same forward, backward (DDP all-reduces the
    #    gradients of both), and step.
    dataset = synthetic_classification(args.batch_size * ctx.world_size * args.steps, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size,
                        sampler=DistributedSampler(dataset, ctx.world_size, ctx.rank, shuffle=False))
    loss_fn = nn.CrossEntropyLoss()
    cuda_state = {}
    for step, (inputs, labels) in enumerate(loader):
        inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
        for name, ddp_model, optimizer in (("plain", ddp_plain, plain), ("zero", ddp_zero, zero)):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp_model(inputs), labels)
            loss.backward()
            before = torch.cuda.memory_allocated(ctx.device) if ctx.device.type == "cuda" else 0
            optimizer.step()
            if step == 0 and ctx.device.type == "cuda":  # Adam allocates its state on step 1
                cuda_state[name] = torch.cuda.memory_allocated(ctx.device) - before
        if step == 0 or step + 1 == args.steps:
            print0(f"step {step + 1}/{args.steps}  loss (rank 0's batch) {loss.item():.6f}")

    # --8<-- [start:measure]
    # 5. Memory: the Adam state each rank holds, gathered to rank 0.
    mine = {"plain": state_bytes(plain), "zero": state_bytes(zero.optim), "cuda": cuda_state}
    per_rank: list = [None] * ctx.world_size
    dist.all_gather_object(per_rank, mine)
    # --8<-- [end:measure]
    print0("Adam state per rank (bytes); arithmetic: 8 bytes per element (exp_avg, exp_avg_sq "
           "in fp32) + 4 per parameter tensor (step)")
    print0(f"{'rank':>4} {'DDP+Adam':>10} {'ZeRO tensors':>12} {'ZeRO elements':>13} "
           f"{'ZeRO+Adam':>10} {'arithmetic':>10} {'ZeRO/DDP':>8}")
    for rank, row in enumerate(per_rank):
        tensors, elements, nbytes = row["zero"]
        print0(f"{rank:>4} {row['plain'][2]:>10} {tensors:>12} {elements:>13} {nbytes:>10} "
               f"{8 * elements + 4 * tensors:>10} {nbytes / row['plain'][2]:>8.3f}")
    if ctx.device.type == "cuda":
        print0("GPU memory allocated by the first step (the state, in the caching allocator's "
               f"blocks): DDP+Adam {[r['cuda']['plain'] for r in per_rank]}, "
               f"ZeRO+Adam {[r['cuda']['zero'] for r in per_rank]}")

    # --8<-- [start:compare]
    # 6. The step: both models' parameters after the last step, element by element.
    max_diff = max((a - b).abs().max().item()
                   for a, b in zip(ddp_plain.module.parameters(), ddp_zero.module.parameters(), strict=True))
    diffs: list = [None] * ctx.world_size
    dist.all_gather_object(diffs, max_diff)
    # --8<-- [end:compare]
    print0(f"after {args.steps} steps: largest |DDP+Adam - ZeRO+Adam| over all parameters, "
           f"per rank: {', '.join(f'{d:.1e}' for d in diffs)}")

    # 7. Summary (rank 0).
    print0(f"summary: world_size={ctx.world_size} launcher={ctx.launcher} params={total_params} "
           f"ddp_state_bytes={','.join(str(r['plain'][2]) for r in per_rank)} "
           f"zero_state_bytes={','.join(str(r['zero'][2]) for r in per_rank)} "
           f"zero_tensors={','.join(str(r['zero'][0]) for r in per_rank)} "
           f"zero_elements={','.join(str(r['zero'][1]) for r in per_rank)} "
           f"max_param_diff={max(diffs):.1e} identical={'yes' if max(diffs) == 0 else 'no'}")

    # 8. Release the DDP models, then leave the process group.
    del ddp_plain, ddp_zero, ddp_model, model
    cleanup_distributed()


if __name__ == "__main__":
    main()
