"""Chapter 08: which way out of the unused-parameter error works, in the torch you have.

Two ways to use unused_parameters.py's auxiliary head: on every 2nd step (the set of
parameters that get a gradient changes from step to step), and never (a head kept in the
model but not trained: the set is the same on every step). For each, a few training steps
with each DDP option and with restructured code: every trial starts from the same model,
and one that finishes must leave the replicas identical.

Run it:
    python scripts/08_unused_parameters/which_fix_works.py                 # 1 process
    torchrun --standalone --nproc_per_node=2 scripts/08_unused_parameters/which_fix_works.py
    mpiexec -n 2 python scripts/08_unused_parameters/which_fix_works.py
"""

import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from unused_parameters import (
    AUX_LOSS_WEIGHT,
    DDP_ERROR,
    REPLICA_TOLERANCE,
    AuxHeadNet,
    replica_difference,
    train_step,
    uses_aux,
)

from utils.cli import add_training_args, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import DEFAULT_TIMEOUT_S, cleanup_distributed, print0, setup_distributed

TRIALS = ("default", "find_unused", "static_graph", "restructured")
USAGES = {"every_2nd": 2, "never": 0}  # --aux-every of unused_parameters.py


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=None, batch_size=32, lr=0.05)
    parser.add_argument("--steps", type=positive_int, default=6,
                        help="training steps per trial (default: %(default)s)")
    return parser.parse_args()


# --8<-- [start:restructured]
def restructured_step(model, optimizer, loss_fn, inputs, labels, with_aux: bool) -> torch.Tensor:
    """The head runs on every step, so every parameter gets a gradient every step; on the
    steps without the auxiliary loss it is weighted 0 (its gradient is then all zeros)."""
    optimizer.zero_grad(set_to_none=True)
    logits, aux_logits = model(inputs, with_aux=True)
    main_loss = loss_fn(logits, labels)
    aux_weight = AUX_LOSS_WEIGHT if with_aux else 0.0
    (main_loss + aux_weight * loss_fn(aux_logits, labels)).backward()
    optimizer.step()
    return main_loss.detach()
# --8<-- [end:restructured]


# --8<-- [start:wrap]
def wrap(module: nn.Module, trial: str, aux_every: int, device_ids, group) -> DDP:
    """The DDP wrapper of each trial."""
    if trial == "find_unused":
        return DDP(module, device_ids=device_ids, process_group=group, find_unused_parameters=True)
    if trial == "static_graph":  # DDP records the used parameters in the first step, then trusts it
        return DDP(module, device_ids=device_ids, process_group=group, static_graph=True)
    if trial == "restructured" and aux_every == 0:  # a head never used: freeze it (or remove it)
        module.aux_head.requires_grad_(False)  # DDP leaves out what needs no gradient
    return DDP(module, device_ids=device_ids, process_group=group)  # default (and restructured)
# --8<-- [end:wrap]


def pytorch_reason(error: RuntimeError) -> str:
    """The sentence of DDP's message that says what it thinks happened."""
    text = str(error).replace("\n", " ").removeprefix(DDP_ERROR + " before starting a new one. ")
    return text.split(". ")[0].removeprefix("This error indicates that ")


def run_trial(ctx, trial: str, aux_every: int, batches, group, seed: int, lr: float) -> tuple[str, str]:
    """(outcome, detail): "ok" with the replica check, or "error" with PyTorch's reason."""
    torch.manual_seed(seed)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    model = wrap(AuxHeadNet().to(ctx.device), trial, aux_every, device_ids, group)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=0.9)
    step_fn = restructured_step if trial == "restructured" and aux_every > 0 else train_step
    loss_fn = nn.CrossEntropyLoss()
    outcome, detail = "ok", ""
    for step, (inputs, labels) in enumerate(batches, start=1):
        try:
            step_fn(model, optimizer, loss_fn, inputs, labels, uses_aux(step, aux_every))
        except RuntimeError as error:
            if DDP_ERROR not in str(error) and "static_graph" not in str(error):
                raise  # not DDP's complaint about the graph: a real bug, show it whole
            outcome, detail = "error", f"RuntimeError at step {step}: {pytorch_reason(error)}"
            break
    if outcome == "ok":
        difference = replica_difference(model.module, group)
        if difference > REPLICA_TOLERANCE:
            outcome = "wrong"
        detail = f"{len(batches)} steps, replicas {'identical' if outcome == 'ok' else 'DIFFERENT'}"
    del model  # the DDP wrapper, before the next trial builds its own
    return outcome, detail


def main() -> None:
    args = parse_args()

    # 1. Join; the trials' DDP all-reduces run in a group that gives up after --timeout.
    ctx = setup_distributed(args.backend, max(args.timeout, DEFAULT_TIMEOUT_S))
    group = dist.new_group(timeout=datetime.timedelta(seconds=args.timeout))
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} torch={torch.__version__} steps_per_trial={args.steps}")

    # 2. The same batches for every trial: this rank's slice of one synthetic data set.
    dataset = synthetic_classification(args.steps * args.batch_size * ctx.world_size, seed=args.seed)
    inputs, labels = (t[ctx.rank::ctx.world_size].to(ctx.device) for t in dataset.tensors)
    batches = list(zip(inputs.split(args.batch_size), labels.split(args.batch_size), strict=True))

    # 3. Every trial, both usages of the auxiliary head.
    results = {}
    print0(f"{'auxiliary loss':<15} {'fix':<13} result")
    for usage, aux_every in USAGES.items():
        for trial in TRIALS:
            outcome, detail = run_trial(ctx, trial, aux_every, batches, group, args.seed, args.lr)
            results[f"{usage}_{trial}"] = outcome
            print0(f"{usage.replace('_', ' ') + ' step' * (aux_every > 0):<15} {trial:<13} "
                   f"{outcome}: {detail}")
    print0("summary: " + f"world_size={ctx.world_size} backend={ctx.backend} launcher={ctx.launcher} "
           + " ".join(f"{key}={value}" for key, value in results.items()))

    # 4. Clean up (every trial released its DDP model).
    cleanup_distributed()


if __name__ == "__main__":
    main()
