#!/bin/bash
#PBS -N ddp_ch06
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 06 as a PBS job: fp16 autocast without a GradScaler (the pitfall: the gradients
# underflow to zero), with one, and bf16 without one; then DDP's gradient all-reduce
# uncompressed and compressed to fp16 and bf16, with the bytes per step measured.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/06_mixed_precision/mixed_precision.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/06_mixed_precision/mixed_precision.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/06_mixed_precision/amp_grad_scaler.py --precision fp16 --variant bad
launch_torchrun scripts/06_mixed_precision/amp_grad_scaler.py --precision fp16 --variant good
launch_torchrun scripts/06_mixed_precision/amp_grad_scaler.py --precision bf16
launch_torchrun scripts/06_mixed_precision/compressed_gradients.py
