# shellcheck shell=bash
# What every job needs, whichever scheduler started it. Sourced by scripts/pbs_common.sh and
# scripts/slurm_common.sh (which hold the parameters: VENV, MODULES, NPROC_PER_NODE), and by
# scripts/13_multinode_and_hpc/torchrun_node.sh for job_port and processes_per_node.

# job_port JOB_ID: a port derived from the job id (its last 9 digits), in 15000-31999, so
# two jobs on one node never share one. utils/distributed.py's job_port() is the same. (Two
# launches side by side in one job would: where the launcher names its launches, the ranks
# of mpiexec and srun derive a port per launch in Python, utils/distributed.py's launch_port.)
job_port() {
    local digits
    digits=$(printf '%s' "$1" | tr -cd '0-9' | tail -c 9)
    echo $((15000 + 10#${digits:-0} % 17000))
}

# processes_per_node: NPROC_PER_NODE if set, else one per GPU (Slurm's count, else
# nvidia-smi's), else 2 CPU processes.
processes_per_node() {
    local count="${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}"
    [[ -n "$count" ]] || count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [[ "$count" -gt 0 ]] || count=2
    echo "$count"
}

# setup_job NAME: go to the repository, load the software, find the job's nodes, and set
# (and export) REPO_DIR, JOB_ID, NODES (array), NNODES, NPROC_PER_NODE, MASTER_ADDR and
# MASTER_PORT. NAME is the sourcing file's, for its error messages.
setup_job() {
    local name=$1
    # Where we are: PBS starts jobs in $HOME, so go back to where qsub was run; sbatch
    # starts them where sbatch was run.
    REPO_DIR="${REPO_DIR:-${PBS_O_WORKDIR:-${SLURM_SUBMIT_DIR:-$(pwd)}}}"
    cd "$REPO_DIR" || { echo "$name: cannot cd to REPO_DIR=$REPO_DIR" >&2; exit 1; }

    # Software: modules first, then the virtual environment.
    if [[ -n "${MODULES:-}" ]]; then
        local -a module_names
        read -r -a module_names <<< "$MODULES"
        module load "${module_names[@]}"
    fi
    VENV="${VENV:-$REPO_DIR/.venv}"
    if [[ -f "$VENV/bin/activate" ]]; then
        # shellcheck source=/dev/null
        source "$VENV/bin/activate"
    fi

    # The job's nodes, in order, each once: PBS's node file, else Slurm's compressed list
    # ("gpu[03-05]") expanded, else this host alone.
    if [[ -n "${PBS_NODEFILE:-}" && -f "${PBS_NODEFILE}" ]]; then
        mapfile -t NODES < <(awk 'NF && !seen[$1]++ {print $1}' "$PBS_NODEFILE")
    elif [[ -n "${SLURM_JOB_NODELIST:-}" ]]; then
        mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    else
        NODES=("$(hostname)")
    fi
    NNODES=${#NODES[@]}
    JOB_ID="${PBS_JOBID:-${SLURM_JOB_ID:-local-$$}}"
    NPROC_PER_NODE=$(processes_per_node)

    # Where rank 0 listens: the first node, on the job's port (torchrun's rendezvous). A
    # MASTER_PORT set before the job is kept, and reaches every launch; the job's own port
    # does not reach the ranks of mpiexec or srun (without_job_port): setup_distributed()
    # chooses one per launch there, so launches side by side in one job never share one.
    MASTER_PORT_GIVEN="${MASTER_PORT:+yes}"
    MASTER_ADDR="${MASTER_ADDR:-${NODES[0]}}"
    MASTER_PORT="${MASTER_PORT:-$(job_port "$JOB_ID")}"
    export REPO_DIR JOB_ID NNODES NPROC_PER_NODE MASTER_ADDR MASTER_PORT
}

# free_port: a TCP port that is free on this node now (the kernel's choice).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# without_job_port COMMAND [ARGS...]: run COMMAND without the MASTER_PORT that setup_job
# derived from the job id (one that was set before the job is kept).
without_job_port() {
    if [[ -n "${MASTER_PORT_GIVEN:-}" ]]; then
        "$@"
    else
        env -u MASTER_PORT "$@"
    fi
}
