# shellcheck shell=bash
# What every job needs, whichever scheduler started it. Sourced by scripts/pbs_common.sh and
# scripts/slurm_common.sh (which hold the parameters: VENV, MODULES, NPROC_PER_NODE), and by
# scripts/13_multinode_and_hpc/torchrun_node.sh for job_port and processes_per_node.

# The site's own settings (modules, NCCL and libfabric variables), when it has written them:
# scripts/site_env.sh, or the file SITE_ENV names. scripts/site_env.example.sh shows what
# goes in it.
SITE_ENV="${SITE_ENV:-$(dirname "${BASH_SOURCE[0]}")/site_env.sh}"
if [[ -f "$SITE_ENV" ]]; then
    echo "site settings: $SITE_ENV"
    # shellcheck source=scripts/site_env.example.sh
    source "$SITE_ENV"
fi

# job_port JOB_ID: a port derived from the job id (its last 9 digits modulo 17000), in
# 15000-31999, so two jobs on one node get different ports unless their ids differ by a
# multiple of 17000 (docs/launchers.md, "Where rank 0 listens", says what happens then).
# utils/distributed.py's job_port() is the same. Two launches side by side in one job would
# share it: where the launcher names its launches, the ranks of mpiexec and srun derive a port
# per launch in Python (utils/distributed.py's launch_port).
job_port() {
    local digits
    digits=$(printf '%s' "$1" | tr -cd '0-9' | tail -c 9)
    echo $((15000 + 10#${digits:-0} % 17000))
}

# gpus_for_this_job: how many GPUs this job may use on this node. CUDA_VISIBLE_DEVICES
# first (what the scheduler's cgroup, --gpus-per-node or the user left visible; empty, -1 or
# NoDevFiles: none), else Slurm's count (SLURM_GPUS_ON_NODE) or list (SLURM_JOB_GPUS), else
# nvidia-smi -L, the last resort: it lists every GPU of the node, the job's or not.
gpus_for_this_job() {
    local -a ids
    if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
        case "${CUDA_VISIBLE_DEVICES,,}" in
            "" | -1 | none | nodevfiles | void) echo 0 ;;
            *) IFS=, read -r -a ids <<< "$CUDA_VISIBLE_DEVICES"; echo "${#ids[@]}" ;;
        esac
    elif [[ "${SLURM_GPUS_ON_NODE:-}" =~ ^[0-9]+$ ]]; then
        echo "$SLURM_GPUS_ON_NODE"
    elif [[ -n "${SLURM_JOB_GPUS:-}" ]]; then
        IFS=, read -r -a ids <<< "$SLURM_JOB_GPUS"; echo "${#ids[@]}"
    else
        nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    fi
}

# processes_per_node: NPROC_PER_NODE if set, else one per GPU this job may use, else 2
# CPU processes.
processes_per_node() {
    local count="${NPROC_PER_NODE:-$(gpus_for_this_job)}"
    [[ "$count" =~ ^[0-9]+$ && "$count" -gt 0 ]] || count=2
    echo "$count"
}

# cpus_for_this_job: the cores this job may use on this node: the scheduler's count (NCPUS
# under PBS, SLURM_CPUS_ON_NODE under Slurm) but no more than this shell may run on (nproc
# counts the CPUs of its affinity mask and cgroup).
cpus_for_this_job() {
    local usable given="${NCPUS:-${SLURM_CPUS_ON_NODE:-}}"
    usable=$(nproc 2>/dev/null || echo 1)
    if [[ "$given" =~ ^[1-9][0-9]*$ && "$given" -lt "$usable" ]]; then usable=$given; fi
    echo "$usable"
}

# cpus_per_rank: CPUS_PER_RANK if set, else this node's cores shared out between its
# NPROC_PER_NODE ranks (at least 1).
cpus_per_rank() {
    local share=$(( $(cpus_for_this_job) / $(processes_per_node) ))
    echo "${CPUS_PER_RANK:-$(( share > 0 ? share : 1 ))}"
}

# mpi_flavor PROGRAM: openmpi, mpich (Hydra: MPICH, MVAPICH), pals (HPE Cray PALS) or
# unknown, from PROGRAM's --version and path; "none" when PROGRAM is not an mpiexec/mpirun.
# MPI_FLAVOR overrides it.
mpi_flavor() {
    local program=$1 version path
    if [[ -n "${MPI_FLAVOR:-}" ]]; then echo "$MPI_FLAVOR"; return; fi
    case "${program##*/}" in mpiexec* | mpirun*) ;; *) echo none; return ;; esac
    path=$(command -v "$program" 2>/dev/null || true)
    version=$("$program" --version 2>&1 | head -n 20 || true)
    case "$version" in
        *"Open MPI"* | *"OpenRTE"*) echo openmpi ;;
        *HYDRA* | *MPICH* | *MVAPICH*) echo mpich ;;
        *) if [[ "$path" == */pals/* || "${version,,}" == *pals* ]]; then echo pals; else echo unknown; fi ;;
    esac
}

# bind_args KIND FLAVOR: the CPU binding options that give each process its share of the
# node's cores, for an mpiexec of FLAVOR. KIND "node": one process per node (a torchrun,
# which starts the ranks and their loader workers): all of the node's cores. KIND "rank":
# one process per rank: cpus_per_rank cores each. Nothing with CPU_BIND=none (the MPI's own
# default: Open MPI binds each process to one core when it starts at most 2), nor when
# the node has fewer cores than ranks.
bind_args() {
    local kind=$1 flavor=$2 cpus
    [[ "${CPU_BIND:-auto}" == auto ]] || return 0
    if [[ "$kind" == node ]]; then
        cpus=$(cpus_for_this_job)
    else
        [[ $(cpus_for_this_job) -ge $(processes_per_node) ]] || return 0
        cpus=$(cpus_per_rank)
    fi
    case "$flavor:$kind" in
        openmpi:node) echo "--bind-to none" ;;
        openmpi:rank) echo "--map-by ppr:$(processes_per_node):node:PE=$cpus --bind-to core" ;;
        mpich:node) echo "-bind-to none" ;;
        mpich:rank) echo "-bind-to core:$cpus" ;;
        pals:*) echo "--depth=$cpus --cpu-bind depth" ;;
    esac
}

# with_binding KIND LAUNCHER...: the launcher line with bind_args added, unless the line
# already says how to bind (--bind-to, -bind-to, --cpu-bind, --depth, or a PE= in
# --map-by); an Open MPI line that maps ranks itself (--map-by) gets no per-rank binding
# either, as a second --map-by would clash with it.
with_binding() {
    local kind=$1
    shift
    local line="$*" flavor
    flavor=$(mpi_flavor "$1")
    if [[ " $line " =~ \ -(-)?(bind-to|cpu-bind|depth)[=\ ]|PE= ]]; then
        :
    elif [[ "$flavor:$kind" == openmpi:rank && " $line " == *" --map-by "* ]]; then
        :
    else
        line="$line $(bind_args "$kind" "$flavor")"
    fi
    echo "${line% }"
}

# node_launcher_line: NODE_LAUNCHER (starts one command on every node), else mpiexec with
# one process per node in its MPI's spelling, with node-wide binding (with_binding).
node_launcher_line() {
    if [[ -n "${NODE_LAUNCHER:-}" ]]; then
        with_binding node "$NODE_LAUNCHER"
    elif [[ $(mpi_flavor mpiexec) == openmpi ]]; then
        with_binding node mpiexec -n "$NNODES" --map-by ppr:1:node
    else
        with_binding node mpiexec -n "$NNODES" --ppn 1
    fi
}

# rank_launcher_line: RANK_LAUNCHER (starts every rank), else mpiexec with NPROC_PER_NODE
# ranks per node in its MPI's spelling, each bound to its share of cores (with_binding).
rank_launcher_line() {
    local ranks=$(( NNODES * NPROC_PER_NODE ))
    if [[ -n "${RANK_LAUNCHER:-}" ]]; then
        with_binding rank "$RANK_LAUNCHER"
    elif [[ $(mpi_flavor mpiexec) == openmpi ]]; then
        local binding
        binding=$(bind_args rank openmpi)
        echo "mpiexec -n $ranks ${binding:---map-by ppr:$NPROC_PER_NODE:node}"
    else
        with_binding rank mpiexec -n "$ranks" --ppn "$NPROC_PER_NODE"
    fi
}

# backend_note: one line that says which backend the job's ranks should end up with, so
# that a GPU job on gloo (or the reverse) shows in the job's output.
backend_note() {
    local gpus
    gpus=$(gpus_for_this_job)
    if [[ "${DDP_BACKEND:-auto}" != auto ]]; then
        echo "backend: ${DDP_BACKEND} (DDP_BACKEND); ${gpus:-0} GPU(s) for this job on this node"
    elif [[ "${gpus:-0}" -gt 0 ]]; then
        echo "backend: nccl expected (${gpus} GPU(s) for this job on this node; a torch that cannot" \
             "use them stops with the reason; DDP_BACKEND=gloo forces CPUs)"
    else
        echo "backend: gloo expected (no GPU for this job on this node)"
    fi
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
