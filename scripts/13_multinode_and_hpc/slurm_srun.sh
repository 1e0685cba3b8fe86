#!/bin/bash
#SBATCH --job-name=ddp_ch13_srun
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=4
#SBATCH --time=00:15:00
# Add your site's account, partition and GPUs on the sbatch line (or here, as #SBATCH lines):
#     sbatch -A <account> -p <partition> --ntasks-per-node=4 --gpus-per-node=4 ...
#
# Chapter 13 as a Slurm job: srun alone starts every rank, one task per GPU (on CPUs, the
# 2 tasks per node asked for above); no torchrun, no mpiexec. setup_distributed() reads
# SLURM_PROCID, SLURM_LOCALID and the step's task count, and finds rank 0 at MASTER_ADDR
# and MASTER_PORT (the first node, a port derived from the job id: scripts/slurm_common.sh).
# First where_am_i.py (who runs where), then chapter 01's training.
#
# Submit from the repository root (more nodes: sbatch --nodes=2 ...):
#     sbatch scripts/13_multinode_and_hpc/slurm_srun.sh
#     sbatch --nodes=2 --ntasks-per-node=4 --gpus-per-node=4 scripts/13_multinode_and_hpc/slurm_srun.sh
# Parameters (virtual environment, modules): scripts/slurm_common.sh.
set -euo pipefail

# shellcheck source=scripts/slurm_common.sh
source "${REPO_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}/scripts/slurm_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_srun scripts/13_multinode_and_hpc/where_am_i.py
launch_srun scripts/01_data_parallel_ddp/multinode_ddp_basic.py
