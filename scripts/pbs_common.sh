# shellcheck shell=bash
# Shared setup for every PBS job script in scripts/NN_topic/. Source it, don't run it:
#     source "$REPO_DIR/scripts/pbs_common.sh"
#
# Parameters: edit the defaults here once for your site, or set them in the environment
# (qsub -v NPROC_PER_NODE=2 ...). Nothing site-specific is hard-coded below them.
#   VENV            virtual environment to activate      (default: $REPO_DIR/.venv, if present)
#   MODULES         modules to load first, space-separated, e.g. "cuda/12.4 gcc" (default: none)
#   NPROC_PER_NODE  processes per node     (default: the GPUs this job may use on the node:
#                   CUDA_VISIBLE_DEVICES, else nvidia-smi; without GPUs, 2)
#   NODE_LAUNCHER   starts one command on every node of a multi-node job
#                   (default: "mpiexec -n NNODES --ppn 1", as PBS Pro's Cray PALS and MPICH
#                   take it; "mpiexec -n NNODES --map-by ppr:1:node" with Open MPI)
#   RANK_LAUNCHER   starts every rank, NPROC_PER_NODE on each node, for launch_mpiexec
#                   (default: "mpiexec -n NNODES*NPROC_PER_NODE --ppn NPROC_PER_NODE", as
#                   Cray PALS and MPICH take it; "--map-by ppr:<per node>:node" with Open MPI)
#   CPU_BIND        auto (default): binding options added to the launcher lines, so that
#                   each process gets its share of the node's cores (NCPUS): a per-node
#                   torchrun all of them (Open MPI --bind-to none, MPICH -bind-to none,
#                   PALS --depth=NCPUS --cpu-bind depth), a rank NCPUS/NPROC_PER_NODE (Open
#                   MPI --map-by ppr:N:node:PE=C --bind-to core, MPICH -bind-to core:C,
#                   PALS --depth=C --cpu-bind depth). none: the MPI's own defaults. A
#                   launcher line that already binds (--bind-to, --map-by, --cpu-bind,
#                   --depth) is left as it is.
#   CPUS_PER_RANK   cores per rank for CPU_BIND=auto        (default: NCPUS / NPROC_PER_NODE)
#   MPI_FLAVOR      openmpi, mpich or pals: which mpiexec this is (default: from its --version)
#
# It then sets (and exports):
#   REPO_DIR, JOB_ID, NODES (array), NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT
# and defines:
#   launch_torchrun SCRIPT [ARGS...]   NPROC_PER_NODE processes on each of the NNODES nodes
#                                      (several nodes: torchrun_node.sh on each, meeting at
#                                      the first node on a port free there, one per launch)
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
CPU_BIND="${CPU_BIND:-auto}"
CPUS_PER_RANK="${CPUS_PER_RANK:-}"
MPI_FLAVOR="${MPI_FLAVOR:-}"

# shellcheck source=scripts/job_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/job_common.sh"
setup_job pbs_common.sh

echo "job ${JOB_ID}: ${NNODES} node(s) [${NODES[*]}] x ${NPROC_PER_NODE} process(es); master ${MASTER_ADDR}:${MASTER_PORT}"
backend_note

# --8<-- [start:launch_torchrun]
# launch_torchrun SCRIPT [ARGS...]: one torchrun per node; each starts NPROC_PER_NODE ranks.
launch_torchrun() {
    local -a cmd
    if [[ "$NNODES" -eq 1 ]]; then
        # One node: --standalone runs its own rendezvous on a free local port.
        cmd=(torchrun --standalone --nproc_per_node="$NPROC_PER_NODE" "$@")
    else
        # On each node, torchrun_node.sh starts torchrun (c10d rendezvous at the first node,
        # rendezvous id: the job id), and tells the first node's torchrun to host the
        # rendezvous: torchrun alone would not know it, where the node file's names are not
        # what `hostname` says (HPE/Cray: x3004c0s1b0n0.hsn.cm.<site> for x3004c0s1b0n0).
        # The port: MASTER_PORT if it was set before the job, else one free on this node (the
        # job script runs on the first node, which hosts the rendezvous) chosen per launch, so
        # that launches side by side in one job (a sweep) never meet at one rendezvous.
        local port=$MASTER_PORT
        [[ -n "${MASTER_PORT_GIVEN:-}" ]] || port=$(free_port)
        export RDZV_ID="${RDZV_ID:-$JOB_ID}"
        local -a node_launcher
        read -r -a node_launcher <<< "$(node_launcher_line)"
        cmd=("${node_launcher[@]}" bash "$REPO_DIR/scripts/13_multinode_and_hpc/torchrun_node.sh"
             "$NNODES" "$MASTER_ADDR:$port" "$@")
    fi
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
}
# --8<-- [end:launch_torchrun]

# --8<-- [start:launch_mpiexec]
# launch_mpiexec SCRIPT [ARGS...]: mpiexec alone starts every rank (one per GPU), no torchrun.
launch_mpiexec() {
    local -a rank_launcher
    read -r -a rank_launcher <<< "$(rank_launcher_line)"
    local -a cmd=("${rank_launcher[@]}" python "$@")
    echo "+ ${cmd[*]}"
    without_job_port "${cmd[@]}"  # setup_distributed() chooses a port per launch
}
# --8<-- [end:launch_mpiexec]
