"""Chapter 08: DDP needs a gradient for every parameter, every step.

DDP's reducer packs the gradients into buckets and all-reduces a bucket once every
parameter in it has its gradient. A parameter that took no part in the loss gets no
gradient, so its bucket is never complete: that all-reduce never starts, and the next
forward() fails with PyTorch's "Expected to have finished reduction in the prior
iteration before starting a new one".

The model here has an auxiliary head: an extra classifier on the first hidden layer whose
loss is added to the main one only on every --aux-every-th step (deep supervision, or an
auxiliary task that is cheap to skip). On the other steps the head takes no part.

Run it:
    python scripts/08_unused_parameters/unused_parameters.py                # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/08_unused_parameters/unused_parameters.py --variant bad
    TORCH_DISTRIBUTED_DEBUG=INFO torchrun --standalone --nproc_per_node=2 \\
        scripts/08_unused_parameters/unused_parameters.py --variant bad    # PyTorch names them
    mpiexec -n 4 python scripts/08_unused_parameters/unused_parameters.py
    qsub scripts/08_unused_parameters/torchrun_unused_parameters.sh        # PBS cluster

The pitfall (--variant bad): a plain DDP(model). Step 1 adds no auxiliary loss, and step
2's forward() raises. The script prints PyTorch's message, names the parameters, shows
that the replicas already differ, and exits 1.
The fix (--variant good): DDP(model, find_unused_parameters=True). which_fix_works.py
tries the alternatives (static_graph=True, restructuring); time_find_unused.py measures
what the flag costs.

--timeout (how long DDP's all-reduces may wait) defaults to 10 s with --variant bad.
"""

import datetime
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, non_negative_int, positive_int
from utils.data import make_loader, synthetic_classification
from utils.distributed import DEFAULT_TIMEOUT_S, cleanup_distributed, print0, setup_distributed

BAD_VARIANT_TIMEOUT_S = 10.0
AUX_LOSS_WEIGHT = 0.3
REPLICA_TOLERANCE = 1e-6  # the replicas of a correct run are bit-identical; a real difference is far larger
DDP_ERROR = "Expected to have finished reduction in the prior iteration"


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=1024,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--aux-every", type=non_negative_int, default=2, metavar="N",
                        help="add the auxiliary head's loss on every N-th step only; 1 = every "
                        "step, 0 = never (default: %(default)s)")
    add_variant_arg(parser, bad="a plain DDP(model)", good="DDP(model, find_unused_parameters=True)",
                    bad_timeout_s=BAD_VARIANT_TIMEOUT_S)
    args = parser.parse_args()
    if args.aux_every < 0:
        parser.error("--aux-every must be 0 (never) or more")
    return args


# --8<-- [start:model]
class AuxHeadNet(nn.Module):
    """A classifier with an auxiliary head on its first hidden layer. forward() runs the
    auxiliary head only when asked: on the other steps its parameters get no gradient."""

    def __init__(self, num_features: int = 32, hidden: int = 64, num_classes: int = 4) -> None:
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)
        self.aux_head = nn.Linear(hidden, num_classes)

    def forward(self, inputs: torch.Tensor, with_aux: bool = True):
        hidden = self.layer1(inputs)
        logits = self.head(self.layer2(hidden))
        aux_logits = self.aux_head(hidden) if with_aux else None  # the branch
        return logits, aux_logits


def uses_aux(step: int, aux_every: int) -> bool:
    """Steps count from 1: with aux_every=2 the auxiliary loss is added on steps 2, 4, ..."""
    return aux_every > 0 and step % aux_every == 0
# --8<-- [end:model]


# --8<-- [start:train_step]
def train_step(model, optimizer, loss_fn, inputs, labels, with_aux: bool) -> torch.Tensor:
    """One optimizer step; returns the main head's loss."""
    optimizer.zero_grad(set_to_none=True)
    logits, aux_logits = model(inputs, with_aux=with_aux)
    loss = main_loss = loss_fn(logits, labels)
    if aux_logits is not None:
        loss = main_loss + AUX_LOSS_WEIGHT * loss_fn(aux_logits, labels)
    loss.backward()  # DDP all-reduces each bucket as soon as all of its gradients are ready
    optimizer.step()
    return main_loss.detach()
# --8<-- [end:train_step]


def replica_difference(model: nn.Module, group) -> float:
    """Largest difference of any parameter between any two ranks (0.0: identical replicas)."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(low, op=dist.ReduceOp.MIN, group=group)
    return (high - low).max().item()


def main() -> None:
    args = parse_args()

    # --8<-- [start:setup]
    # 1. Join the process group. Start-up can take long on a busy machine, so joining gets
    #    at least the usual timeout; DDP runs in a group of its own (the same ranks) whose
    #    all-reduces give up after --timeout (chapter 02): a rank left waiting fails, never hangs.
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    ddp_group = dist.new_group(timeout=datetime.timedelta(seconds=args.timeout))
    # --8<-- [end:setup]
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant} aux_every={args.aux_every}")

    # 2. Data: each rank its shard (chapter 01).
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = make_loader(dataset, args.batch_size, ctx.device, sampler=sampler, drop_last=True)

    # 3. The model, wrapped: the two variants differ in one keyword.
    torch.manual_seed(args.seed)
    module = AuxHeadNet().to(ctx.device)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    if args.variant == "bad":
        # --8<-- [start:bad]
        # bad: DDP expects a gradient for every parameter in every backward().
        model = DDP(module, device_ids=device_ids, process_group=ddp_group)
        # --8<-- [end:bad]
    else:
        # --8<-- [start:good]
        # good: after each forward(), DDP walks the autograd graph from the outputs and
        # marks every parameter it cannot reach as ready, so no bucket waits for it.
        model = DDP(module, device_ids=device_ids, process_group=ddp_group,
                    find_unused_parameters=True)
        # --8<-- [end:good]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # --8<-- [start:train]
    # 4. Train. The auxiliary loss only on every --aux-every-th step.
    step, aux_steps, epoch_losses = 0, 0, []
    try:
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            loss_sum = torch.zeros((), device=ctx.device)
            for inputs, labels in loader:
                step += 1
                with_aux = uses_aux(step, args.aux_every)
                loss_sum += train_step(model, optimizer, loss_fn, inputs.to(ctx.device, non_blocking=True),
                                       labels.to(ctx.device, non_blocking=True), with_aux)
                aux_steps += with_aux
            dist.all_reduce(loss_sum, group=ddp_group)
            epoch_losses.append(loss_sum.item() / (len(loader) * ctx.world_size))
            print0(f"epoch {epoch + 1}/{args.epochs}  {step} steps ({aux_steps} with the auxiliary "
                   f"loss)  loss {epoch_losses[-1]:.4f}")
    except RuntimeError as error:
        if DDP_ERROR not in str(error):
            raise
        explain(ctx, args, model, ddp_group, step, error)
        epoch_losses = []  # marks the failure
    # --8<-- [end:train]
    if not epoch_losses:  # the bad variant failed as shown: leave cleanly, exit 1
        del model
        cleanup_distributed()
        raise SystemExit(1)

    # 5. Report: the replicas must still be identical (chapter 11 explains why they should).
    difference = replica_difference(model.module, ddp_group)
    equal = difference <= REPLICA_TOLERANCE
    print0(f"replicas: largest parameter difference between ranks {difference:.6f}: "
           f"{'identical' if equal else 'DIFFERENT'}")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} aux_every={args.aux_every} outcome=completed steps={step} "
           f"aux_steps={aux_steps} first_loss={epoch_losses[0]:.4f} final_loss={epoch_losses[-1]:.4f} "
           f"replica_diff={difference:.6f} replicas_equal={'yes' if equal else 'no'}")

    # 6. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    if not equal:
        raise SystemExit(f"the replicas differ by {difference:.3g}")


# --8<-- [start:explain]
def explain(ctx, args, model, group, step: int, error: RuntimeError) -> None:
    """DDP refused step `step`: show PyTorch's words, say which parameters and what it
    cost. The process group still works: the error came before any collective."""
    lines = str(error).splitlines()
    print0(f"step {step}: forward() raised {type(error).__name__}. PyTorch says (rank 0):")
    for line in lines[:2] + [line for line in lines if line.startswith("Parameter")]:
        print0(f"    {line.strip()}")
    # PyTorch numbers the parameters in the order of model.parameters() (those that
    # require a gradient); with TORCH_DISTRIBUTED_DEBUG=INFO it names them itself.
    names = [name for name, p in model.module.named_parameters() if p.requires_grad]
    found = re.search(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)", str(error))
    unused = [names[int(i)] for i in found.group(1).split()] if found else ["(not listed)"]
    print0(f"cause: step {step - 1} computed no auxiliary loss, so {', '.join(unused)} got no "
           "gradient. DDP all-reduces a bucket only when every gradient in it is ready, so "
           f"step {step - 1}'s all-reduce never started, and step {step} found it unfinished.")
    difference = replica_difference(model.module, group)
    if ctx.world_size > 1:
        print0(f"damage: step {step - 1}'s optimizer.step() used each rank's own gradients, not "
               f"their average: the replicas already differ by up to {difference:.6f}.")
    print0("fix: DDP(model, find_unused_parameters=True) (--variant good); which_fix_works.py "
           "shows the alternatives.")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} aux_every={args.aux_every} outcome=error failed_step={step} "
           f"unused={','.join(unused)} replica_diff={difference:.6f} "
           f"replicas_equal={'yes' if difference <= REPLICA_TOLERANCE else 'no'}")
# --8<-- [end:explain]


if __name__ == "__main__":
    main()
