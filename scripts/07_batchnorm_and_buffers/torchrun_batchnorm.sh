#!/bin/bash
#PBS -N ddp_ch07
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 07 as a PBS job: plain BatchNorm with per-rank buffers (the ranks' running
# statistics and evaluations differ), plain BatchNorm with DDP's buffer broadcast (the
# ranks agree, on rank 0's statistics), and SyncBatchNorm (the global batch's statistics),
# with one torchrun per node. On GPUs the good variant runs torch.nn.SyncBatchNorm.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/07_batchnorm_and_buffers/torchrun_batchnorm.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/07_batchnorm_and_buffers/torchrun_batchnorm.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant bad --broadcast-buffers no
launch_torchrun scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant bad --broadcast-buffers yes
launch_torchrun scripts/07_batchnorm_and_buffers/batchnorm_ddp.py --variant good
