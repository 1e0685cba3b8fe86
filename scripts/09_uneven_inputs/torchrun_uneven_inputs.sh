#!/bin/bash
#PBS -N ddp_ch09
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:10:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 09 as a PBS job: ranks with different numbers of batches. The pitfall run (a plain
# loop: the ranks with more batches wait in an all-reduce; the 5 s timeout stops the job,
# exit code 1), then the two fixes: the Join context manager, and even shards.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/09_uneven_inputs/torchrun_uneven_inputs.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/09_uneven_inputs/torchrun_uneven_inputs.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

# The bad variant is meant to fail: a non-zero exit here is the lesson, not a broken job.
if launch_torchrun scripts/09_uneven_inputs/uneven_inputs.py --variant bad; then
    echo "the bad variant did not fail: expected a timeout" >&2
    exit 1
else
    echo "the bad variant failed as expected (exit code $?)"
fi
launch_torchrun scripts/09_uneven_inputs/uneven_inputs.py --variant good --fix join
launch_torchrun scripts/09_uneven_inputs/uneven_inputs.py --variant good --fix even
