# shellcheck shell=bash
# Shared setup for every PBS job script in scripts/NN_topic/. Source it, don't run it:
#     source "$REPO_DIR/scripts/pbs_common.sh"
#
# Parameters: edit the defaults here once for your site, or set them in the environment
# (qsub -v NPROC_PER_NODE=2 ...). Nothing site-specific is hard-coded below them.
#   VENV            virtual environment to activate      (default: $REPO_DIR/.venv, if present)
#   MODULES         modules to load first, space-separated, e.g. "cuda/12.4 gcc" (default: none)
#   NPROC_PER_NODE  processes per node                     (default: GPUs on the node, else 2)
#   NODE_LAUNCHER   starts one command on every node of a multi-node job
#                   (default: "mpiexec -n NNODES --ppn 1", as PBS Pro's Cray PALS and MPICH
#                   take it; with Open MPI use "mpiexec -n NNODES --map-by ppr:1:node")
#   RANK_LAUNCHER   starts every rank, NPROC_PER_NODE on each node, for launch_mpiexec
#                   (default: "mpiexec -n NNODES*NPROC_PER_NODE --ppn NPROC_PER_NODE", as
#                   Cray PALS and MPICH take it; with Open MPI use
#                   "mpiexec -n <total> --map-by ppr:<per node>:node")
#
# It then sets (and exports):
#   REPO_DIR, JOB_ID, NODES (array), NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT
# and defines:
#   launch_torchrun SCRIPT [ARGS...]   NPROC_PER_NODE processes on each of the NNODES nodes
#   launch_mpiexec SCRIPT [ARGS...]    the same ranks started by mpiexec alone (no torchrun):
#                                      setup_distributed() reads the MPI's variables
#
# It works under PBS Pro (PBS_NODEFILE, PBS_JOBID, PBS_O_WORKDIR), under Slurm, whose
# qsub wrapper and sbatch set SLURM_JOB_NODELIST and SLURM_JOB_ID instead, and under
# plain bash on one machine (no scheduler: this host is the only node).

VENV="${VENV:-}"
MODULES="${MODULES:-}"
NPROC_PER_NODE="${NPROC_PER_NODE:-}"
NODE_LAUNCHER="${NODE_LAUNCHER:-}"
RANK_LAUNCHER="${RANK_LAUNCHER:-}"

# shellcheck source=scripts/job_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/job_common.sh"
setup_job pbs_common.sh

echo "job ${JOB_ID}: ${NNODES} node(s) [${NODES[*]}] x ${NPROC_PER_NODE} process(es); master ${MASTER_ADDR}:${MASTER_PORT}"

# --8<-- [start:launch_torchrun]
# launch_torchrun SCRIPT [ARGS...]: one torchrun per node; each starts NPROC_PER_NODE ranks.
launch_torchrun() {
    local -a cmd
    if [[ "$NNODES" -eq 1 ]]; then
        # One node: --standalone runs its own rendezvous on a free local port.
        cmd=(torchrun --standalone --nproc_per_node="$NPROC_PER_NODE" "$@")
    else
        local -a node_launcher
        read -r -a node_launcher <<< "${NODE_LAUNCHER:-mpiexec -n $NNODES --ppn 1}"
        cmd=("${node_launcher[@]}" torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE"
             --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$JOB_ID" "$@")
    fi
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
}
# --8<-- [end:launch_torchrun]

# --8<-- [start:launch_mpiexec]
# launch_mpiexec SCRIPT [ARGS...]: mpiexec alone starts every rank (one per GPU), no torchrun.
launch_mpiexec() {
    local -a rank_launcher
    read -r -a rank_launcher <<< \
        "${RANK_LAUNCHER:-mpiexec -n $((NNODES * NPROC_PER_NODE)) --ppn $NPROC_PER_NODE}"
    local -a cmd=("${rank_launcher[@]}" python "$@")
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
}
# --8<-- [end:launch_mpiexec]
