#!/bin/bash
#PBS -N ddp_ch16
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 16 as a PBS job: FSDP2 next to DDP (the same losses; memory per rank measured),
# then checkpoints: every rank saving its own state_dict (the pitfall), DCP's sharded save,
# and a resume from it with half the processes per node (a different world size).
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/16_fsdp/torchrun_fsdp.sh
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch16): every node
# must see it, so on a multi-node job use a shared file system, not a node's /tmp.
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/16_fsdp/torchrun_fsdp.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch16_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
SCRIPT=scripts/16_fsdp/sharded_checkpoint.py
HALF=$(( NPROC_PER_NODE > 1 ? NPROC_PER_NODE / 2 : 1 ))

launch_torchrun scripts/16_fsdp/fsdp_vs_ddp.py
launch_torchrun "$SCRIPT" --variant bad --checkpoint-dir "$CHECKPOINT_DIR/bad"
launch_torchrun "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/good"
# The same checkpoint, loaded by half as many ranks (NPROC_PER_NODE is read per launch).
NPROC_PER_NODE=$HALF launch_torchrun "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/half" \
    --resume-from "$CHECKPOINT_DIR/good/epoch_1"
