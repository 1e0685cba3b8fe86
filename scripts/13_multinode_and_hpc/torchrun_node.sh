#!/bin/bash
# torchrun across nodes, by hand: run this once on every node of the job, with the same
# arguments on every node. The torchruns meet at the c10d rendezvous on RDZV_HOST (any one of
# the nodes; its torchrun hosts the rendezvous store), agree on who is who, and each starts
# NPROC_PER_NODE ranks of SCRIPT: NNODES x NPROC_PER_NODE ranks in all.
#
#     bash scripts/13_multinode_and_hpc/torchrun_node.sh NNODES RDZV_HOST[:PORT] [SCRIPT [ARGS...]]
#
# e.g. on node0 and on node1 (ssh, two terminals, or one task per node from mpiexec or srun):
#     bash scripts/13_multinode_and_hpc/torchrun_node.sh 2 node0:29400
#     bash scripts/13_multinode_and_hpc/torchrun_node.sh 2 node0:29400 \
#         scripts/13_multinode_and_hpc/fixed_port.py
#
# No node rank: c10d numbers the nodes itself (torchrun ignores --node_rank with c10d), in the
# order of their host names (of LOCAL_ADDR where set): rank 0 is on the node that sorts
# first, which need not be RDZV_HOST.
#
# Arguments:
#   NNODES     how many nodes take part; the job starts when all of them have joined
#   RDZV_HOST  host name or address of one node, reachable from all of them (any of its
#              names: the node whose addresses it resolves to hosts the rendezvous); the
#              PORT is free on that node and the same everywhere. Left out, it is derived
#              from the job id (PBS_JOBID, SLURM_JOB_ID) as the job scripts do: never a
#              fixed one, so two jobs on one node do not collide.
#   SCRIPT     default: scripts/13_multinode_and_hpc/where_am_i.py (who runs where)
# Parameters (environment):
#   NPROC_PER_NODE  processes on this node (default: its GPUs, else 2)
#   RDZV_ID         the job's name at the rendezvous, the same on every node (default: the
#                   job id, else "ddp-by-hand")
#   LOCAL_ADDR      this node's address as the other nodes reach it (default: its host name)
#   GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME  the network interface the ranks talk over,
#                   e.g. hsn0, ib0 (see the chapter's table): passed on to every rank
set -euo pipefail

usage="usage: bash $0 NNODES RDZV_HOST[:PORT] [SCRIPT [ARGS...]]"
[[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }
nnodes=$1
rdzv_host=$2
shift 2
if [[ ! "$nnodes" =~ ^[1-9][0-9]*$ ]]; then
    echo "NNODES must be a positive number, not '$nnodes'. $usage" >&2
    exit 2
fi

# job_port (the port derived from a job id, as the job scripts derive it) and
# processes_per_node: scripts/job_common.sh.
# shellcheck source=scripts/job_common.sh
source "$(dirname "$0")/../job_common.sh"

# --- the rendezvous port: given, else derived from the job id.
job_id="${PBS_JOBID:-${SLURM_JOB_ID:-}}"
if [[ "$rdzv_host" == *:* ]]; then
    rdzv_port=${rdzv_host##*:}
    rdzv_host=${rdzv_host%:*}
elif [[ -n "$job_id" ]]; then
    rdzv_port=$(job_port "$job_id")
else
    echo "no port in '$rdzv_host' and no job id (PBS_JOBID, SLURM_JOB_ID) to derive one from:" \
         "give RDZV_HOST:PORT, a free port, the same on every node." >&2
    exit 2
fi

# is_this_node HOST: true when HOST is this node's host name, or an address of this node, or
# a name that resolves to one (through /etc/hosts or DNS: getent).
is_this_node() {
    local host=$1 address
    [[ "$host" == "$(hostname)" || "$host" == "$(hostname -f 2>/dev/null)" ]] && return 0
    local -a mine resolved
    read -r -a mine <<< "$(hostname -I 2>/dev/null) 127.0.0.1 ::1"
    mapfile -t resolved < <({ echo "$host"; getent ahosts "$host" 2>/dev/null | awk '{print $1}'; } | sort -u)
    for address in "${resolved[@]}"; do
        [[ " ${mine[*]} " == *" $address "* || "$address" == 127.* ]] && return 0
    done
    return 1
}

# --- processes on this node: one per GPU; without GPUs, 2 CPU processes.
nproc=$(processes_per_node)

[[ $# -gt 0 ]] || set -- scripts/13_multinode_and_hpc/where_am_i.py
# --8<-- [start:torchrun]
cmd=(torchrun --nnodes="$nnodes" --nproc_per_node="$nproc" --rdzv-backend=c10d
     --rdzv-endpoint="$rdzv_host:$rdzv_port" --rdzv-id="${RDZV_ID:-${job_id:-ddp-by-hand}}")
# --8<-- [end:torchrun]
[[ -z "${LOCAL_ADDR:-}" ]] || cmd+=(--local-addr="$LOCAL_ADDR")
# torchrun knows itself as the rendezvous host only by its host name and that name's
# addresses. RDZV_HOST given as another name of this node (PBS on HPE/Cray lists
# x3004c0s1b0n0.hsn.cm.<site>, the high-speed network's name, where `hostname` says
# x3004c0s1b0n0) or as its address on another network (hsn0, ib0) must be declared, or every
# node waits for a store that none of them starts. This node hosts it when RDZV_HOST is, or
# resolves to, one of its own addresses.
if is_this_node "$rdzv_host"; then
    cmd+=(--rdzv-conf=is_host=true)
fi
echo "+ ${cmd[*]} $*"
exec "${cmd[@]}" "$@"
