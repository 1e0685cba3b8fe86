#!/bin/bash
#PBS -N ddp_train
#PBS -l select=2:ncpus=16:ngpus=4
#PBS -l place=scatter
#PBS -l walltime=00:30:00
#PBS -j oe
# Your DDP script on PBS Pro: N nodes x G GPUs (select=N:...:ngpus=G above). Copy this file
# into your project: it uses nothing from this repository. (Copy scripts/00_porting/check_ddp.py
# beside your script too, and the job checks its launch before it trains: the preflight below.)
# Edit the lines marked EDIT, add your site's account and queue (#PBS -A ..., #PBS -q ...),
# and submit from the folder the paths below are relative to:
#     qsub pbs_job.sh
# What it does: mpiexec starts one torchrun on each node; the torchruns meet at the first
# node, on a port derived from the job id, and each starts one process per GPU.
# place=scatter: each chunk on a node of its own. PBS's default (free) may put two chunks on
# one node, where one torchrun would use only one chunk's GPUs; the script stops if it did.
# Without PBS (no node file), `bash pbs_job.sh` runs it on this machine alone.
set -euo pipefail

# --8<-- [start:edit]
# ---- EDIT these lines (each can also be set in the environment: qsub -v NAME=value) -------
TRAIN_SCRIPT="${TRAIN_SCRIPT:-scripts/00_porting/train_ddp.py}"  # EDIT: your DDP script
TRAIN_ARGS="${TRAIN_ARGS:-}"                                      # EDIT: its flags, split on spaces
VENV="${VENV:-$HOME/venvs/ddp}"                                   # EDIT: your virtual environment
GPUS_PER_NODE="${GPUS_PER_NODE:-4}"                               # EDIT: ngpus above
CPU_PROCESSES_PER_NODE="${CPU_PROCESSES_PER_NODE:-2}"             # without GPUs (a CPU test)
# EDIT: what starts one process on each node (-n <nodes>, and no CPU binding, are added below).
# Cray PALS and MPICH: mpiexec --ppn 1. Open MPI: mpiexec --map-by ppr:1:node.
NODE_LAUNCHER="${NODE_LAUNCHER:-mpiexec --ppn 1}"
# -----------------------------------------------------------------------------------------
# --8<-- [end:edit]

cd "${PBS_O_WORKDIR:-$PWD}"  # PBS starts the job in $HOME: back to where qsub ran
if [[ ! -f "$VENV/bin/activate" ]]; then
    echo "no virtual environment at VENV=$VENV: set VENV (top of this file)" >&2; exit 1
fi
# shellcheck source=/dev/null
source "$VENV/bin/activate"  # (and `module load ...` here, if your site needs modules)
if [[ ! -f "$TRAIN_SCRIPT" ]]; then
    echo "no script at TRAIN_SCRIPT=$TRAIN_SCRIPT in $PWD: set TRAIN_SCRIPT" >&2; exit 1
fi
read -r -a train_args <<< "$TRAIN_ARGS"
read -r -a node_launcher <<< "$NODE_LAUNCHER"

job_id=${PBS_JOBID:-${SLURM_JOB_ID:-$$}}  # (SLURM_JOB_ID: under Slurm's qsub; $$: run by hand)
# The job's nodes, each once, in order (the node file has a line per chunk, or per MPI process);
# the first one hosts the rendezvous. No node file: this machine alone.
if [[ -n "${PBS_NODEFILE:-}" ]]; then
    mapfile -t nodes < <(awk 'NF && !seen[$1]++ {print $1}' "$PBS_NODEFILE")
    # As many nodes as chunks asked for (select=N), which qstat -f counts as Resource_List.nodect.
    chunks=$(qstat -f "$job_id" 2>/dev/null | awk -F' = ' '$1 ~ /Resource_List\.nodect$/ {print $2}' || true)
    if [[ ! "$chunks" =~ ^[0-9]+$ ]]; then
        echo "node count not checked: qstat -f $job_id gave no Resource_List.nodect"
    elif [[ "$chunks" -ne ${#nodes[@]} ]]; then
        echo "the job asked for $chunks chunks (select=$chunks) but got ${#nodes[@]} node(s) [${nodes[*]}]:" \
             "chunks share a node, where one torchrun would leave GPUs idle. Keep '#PBS -l place=scatter'" \
             "(one chunk per node), or ask for one chunk per node with all of its GPUs" >&2
        exit 1
    fi
else
    nodes=(localhost)
fi
rdzv_host=${nodes[0]}
# A port derived from every digit of the job id (the last 9), never a fixed one: two jobs on one
# node do not collide, nor two subjobs of an array job (123[4].pbs and 123[5].pbs).
digits=${job_id//[!0-9]/}
[[ ${#digits} -le 9 ]] || digits=${digits: -9}
rdzv_port=$((15000 + 10#${digits:-0} % 17000))
# One process per GPU, at most GPUS_PER_NODE; without GPUs, CPU processes (gloo).
if [[ ! "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]]; then
    echo "GPUS_PER_NODE=$GPUS_PER_NODE: expected a whole number above 0 (ngpus above)" >&2; exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ "$gpus" -gt 0 ]]; then
    nproc_per_node=$((gpus < GPUS_PER_NODE ? gpus : GPUS_PER_NODE))
    if [[ "$gpus" -lt "$GPUS_PER_NODE" ]]; then
        echo "GPUS_PER_NODE=$GPUS_PER_NODE, but nvidia-smi lists $gpus GPU(s) here: $gpus process(es) per node"
    fi
else
    nproc_per_node=$CPU_PROCESSES_PER_NODE
fi
echo "job $job_id: ${#nodes[@]} node(s) [${nodes[*]}] x $nproc_per_node process(es);" \
     "rendezvous $rdzv_host:$rdzv_port"

# What runs on each node: torchrun, told whether it hosts the rendezvous (on the node this
# script runs on, the first one). torchrun would guess it from host names, and guesses wrong
# where the node file's names are not what `hostname` says (HPE/Cray: x1000c0s0b0n0.hsn...
# for x1000c0s0b0n0). Arguments: this node's host name, torchrun's path, then torchrun's.
# shellcheck disable=SC2016  # expanded on each node, not here
{
    on_each_node='first=$1 torchrun=$2; shift 2'
    on_each_node+='; is_host=false; [[ $(hostname) == "$first" ]] && is_host=true'
    on_each_node+='; exec "$torchrun" --rdzv-conf=is_host=$is_host "$@"'
}
cmd=(bash -c "$on_each_node" on_each_node "$(hostname)" "$(command -v torchrun)"
     --nnodes="${#nodes[@]}" --nproc_per_node="$nproc_per_node" --rdzv-backend=c10d
     --rdzv-endpoint="$rdzv_host:$rdzv_port" --rdzv-id="$job_id"
     "$TRAIN_SCRIPT" "${train_args[@]}")
# torchrun needs all of the node's cores: it starts one process per GPU, each with its loader's
# workers. Open MPI binds each process it starts by default: with ppr:1:node, Open MPI 5 (its
# PRRTE) to a core for 2 processes or fewer and to a NUMA domain above that, Open MPI 4 to a core
# or a socket. Cray PALS binds as the site set it up. Tell them not to bind (MPICH's Hydra binds
# nothing unless asked). A NODE_LAUNCHER that says how to bind (--bind-to, --cpu-bind) is kept.
if [[ ${#nodes[@]} -gt 1 ]]; then  # one node: no launcher needed
    launcher_version=$("${node_launcher[0]}" --version 2>&1 || true)
    if [[ " $NODE_LAUNCHER " == *bind* ]]; then
        :
    elif [[ "$launcher_version" == *"Open MPI"* ]]; then
        node_launcher+=(--bind-to none)
    elif [[ "${launcher_version,,}" == *pals* || $(command -v "${node_launcher[0]}") == */pals/* ]]; then
        node_launcher+=(--cpu-bind none)
    fi
    cmd=("${node_launcher[@]}" -n "${#nodes[@]}" "${cmd[@]}")
fi
# Preflight: where check_ddp.py lies beside TRAIN_SCRIPT, the same launch runs it first
# (--preflight): it checks every rank in seconds and stops the job with what to fix.
preflight="$(dirname "$TRAIN_SCRIPT")/check_ddp.py"
if [[ -f "$preflight" ]]; then
    # after --, the training command: the preflight warns when its flags keep a GPU job on CPUs
    "${cmd[@]:0:${#cmd[@]}-${#train_args[@]}-1}" "$preflight" --preflight -- "$TRAIN_SCRIPT" "${train_args[@]}"
else
    echo "preflight skipped: no check_ddp.py beside $TRAIN_SCRIPT (copy it there to check the launch first)"
fi
echo "+ ${cmd[*]}"
"${cmd[@]}"
