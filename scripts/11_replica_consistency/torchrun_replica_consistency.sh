#!/bin/bash
#PBS -N ddp_ch11
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 11 as a PBS job: a training step that calls model.module(x) (the replicas drift
# apart: per-rank checksums, step by step), one that calls the wrapper (they stay equal),
# and what DDP's constructor and per-rank seeds do, with one torchrun per node.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/11_replica_consistency/torchrun_replica_consistency.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/11_replica_consistency/torchrun_replica_consistency.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/11_replica_consistency/wrapper_bypass.py --variant bad
launch_torchrun scripts/11_replica_consistency/wrapper_bypass.py --variant good
launch_torchrun scripts/11_replica_consistency/seeds_and_broadcast.py
