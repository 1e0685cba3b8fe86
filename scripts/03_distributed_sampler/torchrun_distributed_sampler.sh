#!/bin/bash
#PBS -N ddp_ch03
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 03 as a PBS job: shuffling without and with set_epoch(), then an evaluation
# that counts the sampler's padded duplicates next to one that counts every sample once.
# The evaluation set has 1001 samples, so with 2, 3, 4, 5, 6 or 8 ranks it does not split
# evenly and the bad run's accuracy differs from the reference; with 7 it happens to split.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/03_distributed_sampler/torchrun_distributed_sampler.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/03_distributed_sampler/torchrun_distributed_sampler.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/03_distributed_sampler/set_epoch_shuffling.py --variant bad
launch_torchrun scripts/03_distributed_sampler/set_epoch_shuffling.py --variant good
launch_torchrun scripts/03_distributed_sampler/distributed_eval.py --variant bad
launch_torchrun scripts/03_distributed_sampler/distributed_eval.py --variant good
