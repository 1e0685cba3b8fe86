"""Chapter 13: the port rank 0 listens on, and why it must not be a fixed 29500.

Every job with more than one process starts with a rendezvous: rank 0 listens on a TCP port
(the master port) and every other rank connects to it. Two jobs that a scheduler puts on the
same node, each with rank 0 on the same port, collide: the second one's rank 0 cannot listen,
because the first one holds the port. This job reports where its rank 0 listens and where
that port came from, trains a small DDP model, and checks that all its ranks (on however many
nodes) end with identical parameters.

Run it:
    python scripts/13_multinode_and_hpc/fixed_port.py                      # 1 process: no port
    torchrun --standalone --nproc_per_node=2 scripts/13_multinode_and_hpc/fixed_port.py
    mpiexec -n 2 python scripts/13_multinode_and_hpc/fixed_port.py          # port: rank 0 picks one
    PBS_JOBID=1001.pbs mpiexec -n 2 python scripts/13_multinode_and_hpc/fixed_port.py  # in a job: per launch
    bash scripts/13_multinode_and_hpc/torchrun_node.sh 2 node0 scripts/13_multinode_and_hpc/fixed_port.py
                                                                            # on each of 2 nodes

Two jobs side by side by hand: start the first with --hold-until /tmp/go (it holds its port
and waits, without work, until that file exists), start the second, then `touch /tmp/go`.

The pitfall (--variant bad): the script fixes MASTER_PORT=29500 wherever the launcher did not
set one, as many examples do. Run two such jobs side by side on one node (mpiexec, srun, a
PBS or Slurm job): the second fails with "port 29500 ... is already in use". The fix
(--variant good): leave the port to setup_distributed(), which derives it from the launch
(the scheduler's job id with the launcher's launch id: different for every job and every
launch in it, the same on all its nodes), or lets rank 0 pick a free port and broadcast it
over MPI, or, with neither, derives it from the job id. Under torchrun the port is torchrun's
(--rdzv-endpoint, or a free one with --standalone), so --variant changes nothing there.
"""

import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from utils.checks import check_global_batch
from utils.cli import add_training_args, add_variant_arg, make_parser, output_file, positive_int
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.replicas import verify_replicas

FIXED_PORT = 29500  # torchrun's old default, and the port most examples copy
HOLD_LIMIT_S = 600.0  # --hold-until waits no longer (never a hang)


def parse_args():
    parser = add_training_args(make_parser(__doc__), epochs=3, batch_size=32, lr=0.05)
    parser.add_argument("--num-samples", type=positive_int, default=2048,
                        help="size of the synthetic data set (default: %(default)s)")
    parser.add_argument("--hold-until", type=output_file, metavar="FILE",
                        help="after joining the group, wait until FILE exists (at most "
                             f"{HOLD_LIMIT_S:.0f} s), holding the port: run a second job beside this one")
    add_variant_arg(parser, bad=f"the script fixes MASTER_PORT={FIXED_PORT}",
                    good="the port comes from the job id, or rank 0 picks a free one")
    return parser.parse_args()


def hold_until(path: Path) -> None:
    """Wait until `path` exists, without work: the job keeps its port meanwhile."""
    print0(f"holding the port until {path} exists")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"--hold-until {path}: the file did not appear in {HOLD_LIMIT_S:.0f} s")
        time.sleep(0.1)


def node_address(master_addr: str, master_port: int) -> str:
    """The address this rank's node uses to reach rank 0's (no packet is sent): it names
    the node, also where host names do not tell nodes apart (network namespaces)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master_addr, master_port))
        return probe.getsockname()[0]


def main() -> None:
    args = parse_args()

    # 1. Choose the port (the pitfall is here).
    # --8<-- [start:good_port]
    # good: set nothing. setup_distributed() takes MASTER_PORT if the launcher or the job
    # script set one, else derives one from the job id and the launch id that the launcher
    # gives (a Slurm step, a PALS application, a PMIx namespace), else rank 0 picks a free
    # port and broadcasts it over MPI, else it derives one from the job id alone.
    # --8<-- [end:good_port]
    if args.variant == "bad":
        # --8<-- [start:bad_port]
        # bad: one port for every job. Where the launcher set none (mpiexec, srun, a
        # PBS/Slurm job), two jobs on one node now both want 29500.
        os.environ.setdefault("MASTER_PORT", str(FIXED_PORT))
        # --8<-- [end:bad_port]

    # 2. Join the process group: setup_distributed() says where rank 0 listened, and where
    #    that port came from (a port already in use fails here, with an explanation).
    ctx = setup_distributed(args.backend, args.timeout)
    check_global_batch(ctx, args.num_samples, args.batch_size)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"variant={args.variant}")
    rdzv = ctx.rendezvous
    master_addr, master_port = (rdzv.addr, rdzv.port) if rdzv else ("none", 0)
    origin = rdzv.port_from if rdzv else "none"
    if rdzv is None:
        print0("one process: no rendezvous, so no port")
    else:
        print0(f"rank 0 listens on {master_addr}:{master_port} (port from: {origin})")
    if args.variant == "bad" and origin == "torchrun":
        print0("(torchrun set the port: --variant bad changes nothing under torchrun)")
    if args.hold_until:
        hold_until(args.hold_until)

    # 3. Train a small model for a few epochs: the job holds its port all the while.
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros((), device=ctx.device)
        for inputs, labels in loader:
            inputs, labels = inputs.to(ctx.device), labels.to(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
        dist.all_reduce(loss_sum)
        mean_loss = loss_sum.item() / (len(loader) * ctx.world_size)
        print0(f"epoch {epoch + 1}/{args.epochs}  loss {mean_loss:.4f}")

    # --8<-- [start:report]
    # 4. Which node each rank ran on, and whether every replica ends the same (checksums).
    node = node_address(master_addr, master_port) if ctx.world_size > 1 else "127.0.0.1"
    nodes: list = [None] * ctx.world_size
    dist.all_gather_object(nodes, node)
    ranks_per_node = Counter(nodes)
    for name in ranks_per_node:
        print0(f"node {name}: ranks {[r for r, n in enumerate(nodes) if n == name]}")
    replicas = verify_replicas(model)
    print0(replicas)
    # --8<-- [end:report]
    print0(f"summary: variant={args.variant} launcher={ctx.launcher} world_size={ctx.world_size} "
           f"port={master_port} port_from={origin} nodes={len(ranks_per_node)} "
           f"ranks_per_node={','.join(map(str, ranks_per_node.values()))} "
           f"params_identical={'yes' if replicas.identical else 'no'} "
           f"checksum={replicas.checksums[0]:.10f}")

    # 5. Clean up: release the DDP model first (chapter 01, step 6).
    del model
    cleanup_distributed()
    if not replicas.identical:
        raise SystemExit("the replicas differ after training: see the checksums above")


if __name__ == "__main__":
    main()
