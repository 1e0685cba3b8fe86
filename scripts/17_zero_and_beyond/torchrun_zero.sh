#!/bin/bash
#PBS -N ddp_ch17
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 17 as a PBS job, with one torchrun per node: Adam's state per rank under plain DDP
# and under ZeroRedundancyOptimizer, and their parameters compared; a ZeRO checkpoint saved
# from rank 0 alone (the pitfall) and consolidated first (the fix), each resumed; a
# two-dimensional DeviceMesh.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/17_zero_and_beyond/torchrun_zero.sh
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch17): every node
# must see it, so on a multi-node job use a shared file system, not a node's /tmp.
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/17_zero_and_beyond/torchrun_zero.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch17_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
DIR=scripts/17_zero_and_beyond

launch_torchrun "$DIR/zero_optimizer.py"
launch_torchrun "$DIR/zero_checkpoint.py" --variant bad --checkpoint-dir "$CHECKPOINT_DIR"
launch_torchrun "$DIR/zero_checkpoint.py" --variant good --checkpoint-dir "$CHECKPOINT_DIR"
launch_torchrun "$DIR/device_mesh_2d.py"
