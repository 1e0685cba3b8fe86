#!/bin/bash
#PBS -N ddp_ch19
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:10:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 19 as a PBS job: a metric that is not a sum (the mean of the ranks' F1 against
# counts all-reduced), a decision every rank must share (early stopping from each rank's own
# validation loss: the 5 s timeout stops the job, exit code 1; then one decision for all),
# and a data file prepared once per node (every rank preparing it: torn reads, exit code 1;
# then local rank 0 writes it atomically while the others wait).
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/19_metrics_and_decisions/torchrun_metrics_and_decisions.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/19_metrics_and_decisions/torchrun_metrics_and_decisions.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
# The cache file goes to CACHE_DIR (default: a folder of the node's /tmp, a disk of its own).
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }
CACHE_DIR=${CACHE_DIR:-${TMPDIR:-/tmp}/ddp_ch19_${PBS_JOBID:-$$}}
DIR=scripts/19_metrics_and_decisions

# A bad variant that is meant to fail: a non-zero exit here is the lesson, not a broken job.
expect_failure() {
    if launch_torchrun "$@"; then
        echo "the bad variant did not fail: $*" >&2
        exit 1
    else
        echo "the bad variant failed as expected (exit code $?)"
    fi
}

launch_torchrun "$DIR/metric_across_ranks.py" --variant bad
launch_torchrun "$DIR/metric_across_ranks.py" --variant good
expect_failure "$DIR/early_stopping.py" --variant bad
launch_torchrun "$DIR/early_stopping.py" --variant good --fix all-reduce
expect_failure "$DIR/prepare_once.py" --variant bad --cache-dir "$CACHE_DIR"
launch_torchrun "$DIR/prepare_once.py" --variant good --cache-on node-local --cache-dir "$CACHE_DIR"
rm -rf "$CACHE_DIR"  # this node's copy (a scheduler's own $TMPDIR goes with the job anyway)
