#!/bin/bash
#SBATCH --job-name=ddp_train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=00:30:00
# Your DDP script on Slurm: N nodes x G GPUs (--nodes, --gpus-per-node above; no GPUs:
# remove that line). Copy this file into your project: it uses nothing from this repository.
# (Copy scripts/00_porting/check_ddp.py beside your script too, and the job checks its launch
# before it trains: the preflight below.) Edit the lines marked EDIT, add your site's account
# and partition (#SBATCH -A ..., #SBATCH -p ...), and submit from the folder the paths below
# are relative to:
#     sbatch slurm_job.sh
# What it does: srun starts one torchrun on each node (one task per node); the torchruns meet
# at the first node, on a port derived from the job id, and each starts one process per GPU.
set -euo pipefail

# --8<-- [start:edit]
# ---- EDIT these lines (each can also be set in the environment: sbatch exports it) --------
TRAIN_SCRIPT="${TRAIN_SCRIPT:-scripts/00_porting/train_ddp.py}"  # EDIT: your DDP script
TRAIN_ARGS="${TRAIN_ARGS:-}"                                      # EDIT: its flags, split on spaces
VENV="${VENV:-$HOME/venvs/ddp}"                                   # EDIT: your virtual environment
CPU_PROCESSES_PER_NODE="${CPU_PROCESSES_PER_NODE:-2}"             # without GPUs (a CPU test)
# -----------------------------------------------------------------------------------------
# --8<-- [end:edit]

[[ -n "${SLURM_JOB_ID:-}" ]] || { echo "not inside a Slurm job: submit it with sbatch" >&2; exit 1; }
if [[ ! -f "$VENV/bin/activate" ]]; then
    echo "no virtual environment at VENV=$VENV: set VENV (top of this file)" >&2; exit 1
fi
# shellcheck source=/dev/null
source "$VENV/bin/activate"  # (and `module load ...` here, if your site needs modules)
if [[ ! -f "$TRAIN_SCRIPT" ]]; then
    echo "no script at TRAIN_SCRIPT=$TRAIN_SCRIPT in $PWD: set TRAIN_SCRIPT" >&2; exit 1
fi
read -r -a train_args <<< "$TRAIN_ARGS"

# The job's nodes, each once, in order; the first one hosts the rendezvous.
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
rdzv_host=${nodes[0]}
# A port derived from the job id, never a fixed one: two jobs on one node do not collide.
rdzv_port=$((15000 + SLURM_JOB_ID % 17000))
# One process per GPU; without GPUs, CPU processes (gloo).
nproc_per_node=${SLURM_GPUS_ON_NODE:-0}
if [[ ! "$nproc_per_node" =~ ^[1-9][0-9]*$ ]]; then
    nproc_per_node=$CPU_PROCESSES_PER_NODE
fi
echo "job $SLURM_JOB_ID: ${#nodes[@]} node(s) [${nodes[*]}] x $nproc_per_node process(es);" \
     "rendezvous $rdzv_host:$rdzv_port"

# Each torchrun needs the node's cores, not one. Slurm 22.05 to 23.02 do not pass the job's
# --cpus-per-task on to srun (only SRUN_CPUS_PER_TASK; 23.11 reads SLURM_CPUS_PER_TASK again):
# its task asks for one CPU, and where the site binds tasks to cores, a torchrun gets one core.
# Say it on the srun line, which every version honours.
srun_cpus=()
[[ -z "${SLURM_CPUS_PER_TASK:-}" ]] || srun_cpus=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
# What runs on each node: torchrun, told whether it hosts the rendezvous (on the node this
# script runs on, the first one). torchrun would guess it from host names, and guesses wrong
# where the node list's names are not what `hostname` says. Arguments: this node's host
# name, torchrun's path, then torchrun's arguments.
# shellcheck disable=SC2016  # expanded on each node, not here
{
    on_each_node='first=$1 torchrun=$2; shift 2'
    on_each_node+='; is_host=false; [[ $(hostname) == "$first" ]] && is_host=true'
    on_each_node+='; exec "$torchrun" --rdzv-conf=is_host=$is_host "$@"'
}
cmd=(srun --kill-on-bad-exit=1 --nodes="${#nodes[@]}" --ntasks-per-node=1 "${srun_cpus[@]}"
     bash -c "$on_each_node" on_each_node "$(hostname)" "$(command -v torchrun)"
     --nnodes="${#nodes[@]}" --nproc_per_node="$nproc_per_node" --rdzv-backend=c10d
     --rdzv-endpoint="$rdzv_host:$rdzv_port" --rdzv-id="$SLURM_JOB_ID"
     "$TRAIN_SCRIPT" "${train_args[@]}")
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
