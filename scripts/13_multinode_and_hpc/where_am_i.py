"""Chapter 13: where am I? The first thing to run on a new cluster, or with a new launcher.

Every rank reports what the launcher told it (rank, world size, local rank), where it runs
(host name, device) and where rank 0 listens for the others (master address and port);
then what it was given: CUDA_VISIBLE_DEVICES, its GPU (name, UUID, PCI bus id), the CPUs it
may run on, the network interface NCCL would use, and the NCCL/gloo/libfabric variables set.
Rank 0 gathers the reports and prints them in rank order, then a summary: how many nodes,
how many ranks on each. If these lines are wrong (world size 1 under srun, every rank on one
node, two ranks on one GPU, every rank bound to one core, NCCL on lo or docker0), fix the
launch before training anything. It is the output to attach to a request for help.

Run it (the same file, unchanged, everywhere):
    python scripts/13_multinode_and_hpc/where_am_i.py                     # 1 process
    torchrun --standalone --nproc_per_node=4 scripts/13_multinode_and_hpc/where_am_i.py
    torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 \\
        --rdzv-id=job42 scripts/13_multinode_and_hpc/where_am_i.py          # on each of 2 nodes
    mpiexec -n 4 python scripts/13_multinode_and_hpc/where_am_i.py
    mpiexec -n 8 --ppn 4 python scripts/13_multinode_and_hpc/where_am_i.py  # MPICH, PALS
    srun --ntasks=4 python scripts/13_multinode_and_hpc/where_am_i.py       # Slurm
    sbatch scripts/13_multinode_and_hpc/slurm_srun.sh                      # Slurm job
    qsub scripts/13_multinode_and_hpc/pbs_torchrun.sh                      # PBS job
"""

import os
import socket
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch.distributed as dist

from utils.cli import make_parser
from utils.diagnostics import cpu_affinity, gpu_description, nccl_interface_summary, network_variables
from utils.distributed import cleanup_distributed, print0, setup_distributed


def main() -> None:
    args = make_parser(__doc__).parse_args()

    # --8<-- [start:ask]
    # 1. What the launcher told this process (rank, world size, local rank: detect_launcher()
    #    in utils/distributed.py reads torchrun's, MPI's or Slurm's variables), then join the
    #    process group: every rank must reach rank 0. Where rank 0 listened, and where its
    #    port came from (MASTER_PORT, the job and launch ids, a port broadcast over MPI,
    #    torchrun), is what setup_distributed() used: ctx.rendezvous.
    ctx = setup_distributed(args.backend, args.timeout)
    rdzv = ctx.rendezvous
    master = f"{rdzv.addr}:{rdzv.port}" if rdzv else "none (one process)"
    print0(f"rank 0 listened on {master}, port from {rdzv.port_from if rdzv else 'none'}")
    # --8<-- [end:ask]

    # --8<-- [start:gather]
    # 2. Every rank's lines, gathered to every rank (one collective, under --timeout), and
    #    printed by rank 0 in rank order: no interleaving, no lines lost. The indented lines
    #    are what the rank was given: GPUs, CPUs, network (utils/diagnostics.py).
    host = socket.gethostname()
    line = (f"rank {ctx.rank}/{ctx.world_size}  local_rank {ctx.local_rank}  host {host}  "
            f"launcher {ctx.launcher}  device {ctx.device}  master {master}\n"
            f"    CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}  "
            f"gpu {gpu_description(ctx.device)}\n"
            f"    cpus {cpu_affinity()}  nccl_interface {nccl_interface_summary()}\n"
            f"    variables {' '.join(network_variables()) or '(no NCCL_/TORCH_NCCL_/GLOO_/FI_ set)'}")
    lines: list = [None] * ctx.world_size
    hosts: list = [None] * ctx.world_size
    dist.all_gather_object(lines, line)
    dist.all_gather_object(hosts, host)
    for rank_line in lines:
        print0(rank_line)
    # --8<-- [end:gather]

    # 3. The summary: nodes = distinct host names; ranks per node in order of first rank.
    ranks_per_host = Counter(hosts)
    counts = sorted(set(ranks_per_host.values()))
    ranks_per_node = str(counts[0]) if len(counts) == 1 else ",".join(map(str, ranks_per_host.values()))
    print0(f"summary: launcher={ctx.launcher} world_size={ctx.world_size} nodes={len(ranks_per_host)} "
           f"ranks_per_node={ranks_per_node} master={master.split()[0]}")

    # 4. Clean up (no DDP model here to release first).
    cleanup_distributed()


if __name__ == "__main__":
    main()
