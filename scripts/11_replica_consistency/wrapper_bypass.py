"""Chapter 11: call the DDP wrapper, not model.module, or the replicas drift apart.

DDP synchronizes in its own forward(): that is where it prepares the backward hooks that
all-reduce the gradients. model.module(x) runs the plain model inside the wrapper and skips
all of it: backward() fills each rank's .grad with its own gradient only, every optimizer
steps on a different gradient, and the replicas drift apart. Nothing fails; the loss still
falls. After every optimizer step the script compares a checksum of every rank's
parameters (utils/replicas.py's verify_replicas) and prints them as a table.

Run it:
    python scripts/11_replica_consistency/wrapper_bypass.py                # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/11_replica_consistency/wrapper_bypass.py --variant bad
    mpiexec -n 4 python scripts/11_replica_consistency/wrapper_bypass.py --variant bad
    qsub scripts/11_replica_consistency/torchrun_replica_consistency.sh    # PBS cluster

The pitfall (--variant bad): the training step calls model.module(inputs). The checksums
differ from the first step on, and at the end every rank holds a different model.
The fix (--variant good): call model(inputs); the checksums stay equal, digit for digit.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.replicas import ReplicaReport, max_parameter_difference, verify_replicas


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=2, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=256,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--check-every", type=positive_int, default=1, metavar="N",
                        help="compare the replicas every N optimizer steps (default: %(default)s)")
    add_variant_arg(parser, bad="the step calls model.module(inputs)", good="the step calls model(inputs)")
    args = parser.parse_args()
    if args.check_every < 1:
        parser.error("--check-every must be at least 1")
    return args


# --8<-- [start:bad_step]
def forward_backward_bad(model: DDP, loss_fn, inputs, labels) -> torch.Tensor:
    """bad: the plain model inside the wrapper. DDP's forward() never runs, so backward()
    leaves each rank with its own gradient: no all-reduce."""
    loss = loss_fn(model.module(inputs), labels)
    loss.backward()  # this rank's gradient only
    return loss
# --8<-- [end:bad_step]


# --8<-- [start:good_step]
def forward_backward_good(model: DDP, loss_fn, inputs, labels) -> torch.Tensor:
    """good: through the wrapper. backward() all-reduces the gradients, so every rank's
    optimizer takes the same step."""
    loss = loss_fn(model(inputs), labels)
    loss.backward()  # DDP averages the gradients over the ranks here
    return loss
# --8<-- [end:good_step]


def table_row(step: int, report: ReplicaReport, difference: float) -> str:
    """One line of the table: each rank's checksum, the largest difference from rank 0's
    parameters, and the verdict."""
    checksums = "".join(f"{checksum:>17.10f}" for checksum in report.checksums)
    verdict = "identical" if report.identical else f"DIFFER ({len(report.differing_tensors)} tensors)"
    return f"{step:>4}{checksums}  {difference:>15.10f}  {verdict}"


def main() -> None:
    args = parse_args()

    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    if ctx.world_size == 1:
        print0("note: one process has one replica, with nothing to drift from. "
               "Run it with 2 or more processes to see the drift.")

    # 2. Data: each rank its shard (chapter 03), the same model on every rank (DDP's
    #    constructor would make them equal anyway: seeds_and_broadcast.py shows it).
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    forward_backward = forward_backward_good if args.variant == "good" else forward_backward_bad

    # --8<-- [start:train]
    # 3. Train, and compare the replicas every --check-every steps: each rank's checksum,
    #    whether every tensor matches rank 0's, and the largest difference of a parameter
    #    from rank 0's (max |w - w0|).
    print0("step" + "".join(f"{f'rank {r} checksum':>17}" for r in range(ctx.world_size))
           + f"  {'max |w - w0|':>15}  replicas")
    reports = [(0, verify_replicas(model))]  # step 0: right after DDP(...)
    difference = max_parameter_difference(model)  # exact, but a broadcast of the model
    print0(table_row(*reports[-1], difference))
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            forward_backward(model, loss_fn, inputs, labels)
            optimizer.step()
            step += 1
            if step % args.check_every == 0:
                reports.append((step, verify_replicas(model)))  # a collective: every rank
                difference = max_parameter_difference(model)
                print0(table_row(*reports[-1], difference))
    # --8<-- [end:train]

    # 4. What each rank now holds: every replica's loss on the whole data set (the same
    #    samples on every rank). model.module is fine here: no backward, nothing to sync.
    all_inputs, all_labels = (t.to(ctx.device) for t in dataset.tensors)
    with torch.no_grad():
        my_loss = loss_fn(model.module(all_inputs), all_labels).reshape(1)
    replica_losses = [torch.empty_like(my_loss) for _ in range(ctx.world_size)]
    dist.all_gather(replica_losses, my_loss)
    replica_losses = [loss.item() for loss in replica_losses]
    print0(f"loss of each replica on all {len(dataset)} samples: "
           + ", ".join(f"rank {r} {loss:.4f}" for r, loss in enumerate(replica_losses)))

    # 5. Report: how many checks found identical replicas, and where the drift began.
    final = reports[-1][1]
    identical_checks = sum(report.identical for _, report in reports)
    first_divergence = next((s for s, report in reports if not report.identical), None)
    losses_equal = len(set(replica_losses)) == 1
    if first_divergence is not None:
        print0(f"WARNING: the replicas differ from step {first_divergence} on: "
               f"{len(final.differing_tensors)} of "
               f"{final.tensor_counts[0]} tensors at the end. model.module(inputs) bypassed DDP's "
               "forward(), so no gradient was all-reduced and each rank stepped on its own. "
               "Call model(inputs).")
    print0(f"summary: variant={args.variant} world_size={ctx.world_size} backend={ctx.backend} "
           f"launcher={ctx.launcher} steps={step} identical_checks={identical_checks}/{len(reports)} "
           f"first_divergence_step={first_divergence if first_divergence is not None else 'none'} "
           f"differing_tensors={len(final.differing_tensors)}/{final.tensor_counts[0]} "
           f"max_param_diff={difference:.10f} "
           f"replica_losses={','.join(f'{loss:.4f}' for loss in replica_losses)} "
           f"replica_losses_equal={'yes' if losses_equal else 'no'}")

    # 6. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    if args.variant == "good" and first_divergence is not None:
        raise SystemExit(f"the replicas diverged at step {first_divergence} although every "
                         "step called the wrapper")


if __name__ == "__main__":
    main()
