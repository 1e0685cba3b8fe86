#!/bin/bash
#PBS -N ddp_ch14
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 14 as a PBS job: a rank killed at step 10 and torchrun restarting the group (the
# run resumes from its checkpoint), then the pitfall: rank 0 killed while it writes a
# checkpoint, straight onto the checkpoint's path (bad: the restart cannot read it, the run
# is lost) and through a temporary file renamed over the previous one (good: it resumes).
#
# Submit from the repository root:
#     qsub scripts/14_fault_tolerance/torchrun_fault_tolerance.sh
# Checkpoints go to CHECKPOINT_DIR (qsub -v CHECKPOINT_DIR=/scratch/$USER/ch14): every node
# must see it. Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/14_fault_tolerance/torchrun_fault_tolerance.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
# A requeue on PBS: qdel sends SIGTERM (then SIGKILL after the queue's kill_delay); the
# ranks save and exit with 75, and the job script can submit itself again (qsub, with the
# same CHECKPOINT_DIR), as scripts/14_fault_tolerance/slurm_preemptible.sh requeues with
# scontrol requeue. (qrerun keeps the job id, but needs PBS manager or operator privilege.)
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch14_$JOB_ID}"
echo "checkpoints in $CHECKPOINT_DIR"
SCRIPT=scripts/14_fault_tolerance/train_resilient.py
# torch 2.14's torchrun shares its rendezvous store with the ranks; a restarted group then
# reads the previous group's addresses and cannot connect. A store of their own avoids it.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

launch_torchrun --max-restarts=1 "$SCRIPT" --checkpoint-dir "$CHECKPOINT_DIR/restart" --fail-at-step 10
if launch_torchrun --max-restarts=1 "$SCRIPT" --variant bad --checkpoint-dir "$CHECKPOINT_DIR/bad" \
        --fail-during-save 12; then
    echo "the bad variant did not fail: expected a checkpoint that cannot be read" >&2
    exit 1
else
    echo "the bad variant failed as expected (exit code $?)"
fi
launch_torchrun --max-restarts=1 "$SCRIPT" --variant good --checkpoint-dir "$CHECKPOINT_DIR/good" \
    --fail-during-save 12
