#!/bin/bash
#PBS -N ddp_ch13_torchrun
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 13 as a PBS job: one torchrun per node (started by mpiexec on a multi-node job,
# see NODE_LAUNCHER in scripts/pbs_common.sh), c10d rendezvous at the first node on a port
# derived from the job id. First where_am_i.py (who runs where), then chapter 01's training.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/13_multinode_and_hpc/pbs_torchrun.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/13_multinode_and_hpc/pbs_torchrun.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/13_multinode_and_hpc/where_am_i.py
launch_torchrun scripts/01_data_parallel_ddp/multinode_ddp_basic.py
