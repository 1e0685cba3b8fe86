#!/bin/bash
#PBS -N ddp_ch02
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:10:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 02 as a PBS job: the tour of the collectives, then the pitfall run (a rank
# skips an all_reduce: the job stops at the 5 s timeout, exit code 1) and the fixed run.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/02_collectives/collectives_pbs.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/02_collectives/collectives_pbs.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_torchrun scripts/02_collectives/collectives_tour.py
# The bad variant is meant to fail: a non-zero exit here is the lesson, not a broken job.
if launch_torchrun scripts/02_collectives/collective_order.py --variant bad; then
    echo "the bad variant did not fail: expected a timeout" >&2
    exit 1
else
    echo "the bad variant failed as expected (exit code $?)"
fi
launch_torchrun scripts/02_collectives/collective_order.py --variant good
