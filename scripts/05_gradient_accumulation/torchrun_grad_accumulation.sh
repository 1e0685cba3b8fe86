#!/bin/bash
#PBS -N ddp_ch05
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 05 as a PBS job: gradient accumulation without no_sync() (K all-reduces per
# optimizer step), with it (one), and both ways timed side by side in one run, with one
# torchrun per node.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/05_gradient_accumulation/torchrun_grad_accumulation.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/05_gradient_accumulation/torchrun_grad_accumulation.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/05_gradient_accumulation/grad_accumulation.py --variant bad --accumulation-steps 4
launch_torchrun scripts/05_gradient_accumulation/grad_accumulation.py --variant good --accumulation-steps 4
launch_torchrun scripts/05_gradient_accumulation/time_no_sync.py --accumulation-steps 4
