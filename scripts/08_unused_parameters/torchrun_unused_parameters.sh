#!/bin/bash
#PBS -N ddp_ch08
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 08 as a PBS job: a branch that is not used on every step. A plain DDP(model)
# fails with PyTorch's "Expected to have finished reduction" error (the bad variant, meant
# to fail), find_unused_parameters=True trains, the alternatives are tried one by one,
# and the flag's cost is timed, with one torchrun per node.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4):
#     qsub scripts/08_unused_parameters/torchrun_unused_parameters.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/08_unused_parameters/torchrun_unused_parameters.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

# The bad variant is meant to fail: a non-zero exit here is the lesson, not a broken job.
if launch_torchrun scripts/08_unused_parameters/unused_parameters.py --variant bad; then
    echo "the bad variant did not fail: expected DDP's unused-parameter error" >&2
    exit 1
else
    echo "the bad variant failed as expected (exit code $?)"
fi
launch_torchrun scripts/08_unused_parameters/unused_parameters.py --variant good
launch_torchrun scripts/08_unused_parameters/which_fix_works.py
launch_torchrun scripts/08_unused_parameters/time_find_unused.py
