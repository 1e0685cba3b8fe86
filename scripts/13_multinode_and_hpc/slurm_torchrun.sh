#!/bin/bash
#SBATCH --job-name=ddp_ch13_torchrun
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --time=00:15:00
# Add your site's account, partition and GPUs on the sbatch line (or here, as #SBATCH lines):
#     sbatch -A <account> -p <partition> --gpus-per-node=4 ...
#
# Chapter 13 as a Slurm job: srun starts one torchrun per node (--ntasks-per-node=1), the
# torchruns meet at the first node (c10d rendezvous on a port derived from the job id) and
# each starts NPROC_PER_NODE ranks (one per GPU, or 2 on CPUs). First where_am_i.py (who
# runs where), then chapter 01's training.
#
# Submit from the repository root (more nodes: sbatch --nodes=2 ...):
#     sbatch scripts/13_multinode_and_hpc/slurm_torchrun.sh
#     sbatch --nodes=2 --gpus-per-node=4 scripts/13_multinode_and_hpc/slurm_torchrun.sh
# Parameters (processes per node, virtual environment, modules): scripts/slurm_common.sh.
set -euo pipefail

# shellcheck source=scripts/slurm_common.sh
source "${REPO_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}/scripts/slurm_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/13_multinode_and_hpc/where_am_i.py
launch_torchrun scripts/01_data_parallel_ddp/multinode_ddp_basic.py
