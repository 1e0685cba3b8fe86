# shellcheck shell=bash
# Shared setup for the Slurm job scripts (#SBATCH). Source it, don't run it:
#     source "$REPO_DIR/scripts/slurm_common.sh"
#
# Parameters: edit the defaults here once for your site, or set them in the environment
# (sbatch exports the submitting shell's: NPROC_PER_NODE=2 sbatch ...). Account, partition,
# GPUs and time belong on the sbatch line (sbatch -A ... -p ... --gpus-per-node=4 ...).
#   VENV            virtual environment to activate      (default: $REPO_DIR/.venv, if present)
#   MODULES         modules to load first, space-separated, e.g. "cuda/12.4 gcc" (default: none)
#   NPROC_PER_NODE  processes each torchrun starts  (default: the GPUs this job may use on the
#                   node: CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS; else 2)
#   CPU_BIND        auto (default): srun steps get the job's --cpus-per-task (passed on the
#                   srun line: every Slurm version honours it); none: srun's own default
#
# It then sets (and exports):
#   REPO_DIR, JOB_ID, NODES (array), NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT
# and defines:
#   launch_torchrun SCRIPT [ARGS...]   srun starts one torchrun per node, NPROC_PER_NODE each
#   launch_srun SCRIPT [ARGS...]       srun alone starts every rank: the job's tasks
#                                      (--ntasks-per-node), one per GPU
#
# The setup itself (repository, software, nodes, MASTER_PORT derived from the job id) is
# scripts/job_common.sh's, shared with scripts/pbs_common.sh.

VENV="${VENV:-}"
MODULES="${MODULES:-}"
NPROC_PER_NODE="${NPROC_PER_NODE:-}"

if [[ -z "${SLURM_JOB_ID:-}" ]]; then
    echo "slurm_common.sh: not inside a Slurm job (no SLURM_JOB_ID): submit with sbatch" >&2
    exit 1
fi
# shellcheck source=scripts/job_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/job_common.sh"
setup_job slurm_common.sh

echo "job ${JOB_ID}: ${NNODES} node(s) [${NODES[*]}], tasks per node ${SLURM_TASKS_PER_NODE:-?}; master ${MASTER_ADDR}:${MASTER_PORT}"
backend_note
# Slurm 22.05 to 23.02 did not pass the job's --cpus-per-task on to its steps (they read
# SRUN_CPUS_PER_TASK; 23.11 reads SLURM_CPUS_PER_TASK again: its CHANGELOG, src/srun/opt.c).
# Without it, every task of a step, a torchrun with its ranks and their loader workers
# included, may get a single core. --cpus-per-task on the srun line works on every version.
# CPU_BIND=none leaves srun's own default.
SRUN_CPUS=()
if [[ "${CPU_BIND:-auto}" == auto && -n "${SLURM_CPUS_PER_TASK:-}" ]]; then
    SRUN_CPUS=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
fi

# --8<-- [start:launch_torchrun]
# launch_torchrun SCRIPT [ARGS...]: srun starts one torchrun on each node (one task per
# node), and the torchruns meet at the first node (c10d rendezvous) and start the ranks.
launch_torchrun() {
    local -a cmd=(srun --kill-on-bad-exit=1 "${SRUN_CPUS[@]}" --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1
                  torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE"
                  --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$JOB_ID" "$@")
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
}
# --8<-- [end:launch_torchrun]

# --8<-- [start:launch_srun]
# launch_srun SCRIPT [ARGS...]: srun alone; each of the job's tasks is a rank, and
# setup_distributed() reads SLURM_PROCID, SLURM_LOCALID and the step's task count.
# --kill-on-bad-exit: a rank that fails ends the others now, not at their timeout.
launch_srun() {
    local -a cmd=(srun --kill-on-bad-exit=1 "${SRUN_CPUS[@]}" python "$@")
    echo "+ ${cmd[*]}"
    without_job_port "${cmd[@]}"  # setup_distributed() derives a port per step
}
# --8<-- [end:launch_srun]
