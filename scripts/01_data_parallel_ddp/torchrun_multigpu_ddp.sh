#!/bin/bash
#PBS -N ddp_ch01
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 01 as a PBS job: the pitfall run (no DistributedSampler), the fixed run, and
# what DistributedSampler hands each rank, with one torchrun per node.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/01_data_parallel_ddp/torchrun_multigpu_ddp.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/01_data_parallel_ddp/torchrun_multigpu_ddp.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/01_data_parallel_ddp/multinode_ddp_basic.py --variant bad
launch_torchrun scripts/01_data_parallel_ddp/multinode_ddp_basic.py --variant good
launch_torchrun scripts/01_data_parallel_ddp/distributed_dataloader.py
