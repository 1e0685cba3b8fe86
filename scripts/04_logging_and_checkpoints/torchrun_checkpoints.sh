#!/bin/bash
#PBS -N ddp_ch04
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 04 as a PBS job: the pitfall run (every rank logs and saves the wrapper), the
# fixed run, and a run stopped after epoch 2 then resumed, with one torchrun per node.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/04_logging_and_checkpoints/torchrun_checkpoints.sh
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch04): every node
# must see it, so on a multi-node job use a shared file system, not a node's /tmp.
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/04_logging_and_checkpoints/torchrun_checkpoints.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch04_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
SCRIPT=scripts/04_logging_and_checkpoints/train_with_checkpoints.py

launch_torchrun "$SCRIPT" --variant bad --checkpoint-dir "$CHECKPOINT_DIR"
launch_torchrun "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/straight"
launch_torchrun "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/resumed" --stop-after-epoch 2
launch_torchrun "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/resumed" --resume
