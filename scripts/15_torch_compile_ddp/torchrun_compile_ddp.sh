#!/bin/bash
#PBS -N ddp_ch15
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:20:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 15 as a PBS job, with one torchrun per node: torch.compile of a DDP model, split by
# DDPOptimizer into one subgraph per bucket, the recompilation of the smaller last batch and
# its fix (mark_dynamic), and the checkpoint saved from the compiled wrapper (the pitfall: a
# plain model cannot load it) against the plain model's state (the fix).
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/15_torch_compile_ddp/torchrun_compile_ddp.sh
# Every rank compiles. Inductor caches what it compiled in TORCHINDUCTOR_CACHE_DIR (default
# torchinductor_$USER under $TMPDIR, or /tmp): where PBS gives each job its own TMPDIR, every
# job starts cold. A directory that outlives the job lets later jobs start warm (qsub -v
# TORCHINDUCTOR_CACHE_DIR=/scratch/$USER/inductor_cache); on a file system shared by several
# nodes that is as safe as its rename and flock support.
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch15).
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/15_torch_compile_ddp/torchrun_compile_ddp.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch15_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
SCRIPT=scripts/15_torch_compile_ddp/compile_ddp.py

launch_torchrun "$SCRIPT" --variant bad --checkpoint-dir "$CHECKPOINT_DIR"
launch_torchrun "$SCRIPT" --last-batch dynamic --checkpoint-dir "$CHECKPOINT_DIR"
