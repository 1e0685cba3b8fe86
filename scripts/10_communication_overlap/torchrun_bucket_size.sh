#!/bin/bash
#PBS -N ddp_ch10
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 10 as a PBS job: tiny gradient buckets (one all-reduce per gradient tensor),
# DDP's default buckets, and a sweep of bucket sizes timed side by side in one run, with
# one torchrun per node. The sweep's plot goes to $PLOT (default: bucket_sweep_<job id>.png
# in your home directory).
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/10_communication_overlap/torchrun_bucket_size.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/10_communication_overlap/torchrun_bucket_size.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/10_communication_overlap/bucket_size.py --variant bad
launch_torchrun scripts/10_communication_overlap/bucket_size.py --variant good
launch_torchrun scripts/10_communication_overlap/bucket_sweep.py \
    --plot "${PLOT:-$HOME/bucket_sweep_${JOB_ID}.png}"
