#!/bin/bash
#PBS -N ddp_ch18
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:20:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 18 as a PBS job: the GPT's loss over padded documents, bad then good (the gradient
# against one process's), then DDP against FSDP2 with a DCP checkpoint resumed in the run.
# With TEXT_FILE set (qsub -v TEXT_FILE=$HOME/data/input.txt), it also trains the --preset gpu
# model (nanoGPT's shakespeare-char shape and recipe) on packed windows of that text, in bf16,
# compiled, and reports real tokens per second and MFU.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/18_transformer/torchrun_gpt.sh
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch18): every node
# must see it, so on a multi-node job use a shared file system, not a node's /tmp.
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/18_transformer/torchrun_gpt.sh
# Optimizer steps of the CPU-sized runs: STEPS (default: each script's own, 100 and 12).
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch18_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
SCRIPT=scripts/18_transformer/gpt_ddp.py
steps=()
if [[ -n "${STEPS:-}" ]]; then steps=(--steps "$STEPS"); fi

launch_torchrun "$SCRIPT" --batching padded --variant bad ${steps[@]+"${steps[@]}"}
launch_torchrun "$SCRIPT" --batching padded --variant good ${steps[@]+"${steps[@]}"}
if [[ -n "${TEXT_FILE:-}" ]]; then
    launch_torchrun "$SCRIPT" --preset gpu --text-file "$TEXT_FILE" --steps 1500 --eval-every 250 \
        --bf16 --compile --target-loss 1.5 --checkpoint-dir "$CHECKPOINT_DIR/gpt"
fi
launch_torchrun scripts/18_transformer/gpt_fsdp.py --checkpoint-dir "$CHECKPOINT_DIR" ${steps[@]+"${steps[@]}"}
