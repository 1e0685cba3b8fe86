#!/bin/bash
#SBATCH --job-name=ddp_ch14_preemptible
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=4
#SBATCH --time=00:15:00
#SBATCH --signal=B:USR1@60
#SBATCH --requeue
#SBATCH --open-mode=append
# Add your site's account, partition and GPUs on the sbatch line (or here, as #SBATCH lines):
#     sbatch -A <account> -p <partition> --ntasks-per-node=4 --gpus-per-node=4 ...
#
# Chapter 14 as a Slurm job that can be stopped and requeued. 60 s before the time limit
# (--signal=B:USR1@60), or when someone runs `scancel --signal=USR1 --batch <jobid>`, Slurm
# sends SIGUSR1 to this batch shell; the trap below passes it on to every rank. The ranks
# agree on a step, save a checkpoint there and exit with code 75; this script then
# requeues the job (`scontrol requeue`), which runs it again from the top: the same job
# id, so the same checkpoint directory, and the training resumes from it.
# (--open-mode=append: the requeued run's output goes after the first run's.)
#
# Submit from the repository root; arguments go to the training script:
#     sbatch scripts/14_fault_tolerance/slurm_preemptible.sh
#     sbatch scripts/14_fault_tolerance/slurm_preemptible.sh --epochs 20 --heartbeat 30
# Checkpoints go to CHECKPOINT_DIR (sbatch --export=ALL,CHECKPOINT_DIR=/scratch/$USER/ch14):
# a file system every node sees. Parameters (virtual environment, modules):
# scripts/slurm_common.sh.
set -euo pipefail

# shellcheck source=scripts/slurm_common.sh
source "${REPO_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}/scripts/slurm_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

CHECKPOINT_DIR="${CHECKPOINT_DIR:-$HOME/ddp_checkpoints/ch14_$SLURM_JOB_ID}"
REQUEUE_EXIT_CODE=75  # train_resilient.py's "checkpoint saved, run me again"
echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID; checkpoints in $CHECKPOINT_DIR"

# --8<-- [start:forward]
# srun in the background, so that this shell can take the signal while it runs: bash runs
# a trap only between commands, and `wait` is one it can interrupt. The trap passes the
# signal on with scancel to every step of the job, which reaches each rank on every node
# directly (srun passes a SIGUSR1 on too, srun(1), but turns a SIGTERM into a SIGKILL of
# every rank: a plain scancel, which signals srun as well, can end the ranks before they
# save; stop the job with USR1, as --signal=B:USR1@60 does). --kill-on-bad-exit=0: the
# first rank to exit with 75 must not get the others killed before they have exited too
# (a rank that crashes still ends the others: their next collective times out).
without_job_port srun --kill-on-bad-exit=0 python scripts/14_fault_tolerance/train_resilient.py \
    --checkpoint-dir "$CHECKPOINT_DIR" "$@" &
srun_pid=$!
# shellcheck disable=SC2329  # called by the traps
forward() {
    echo "job script: got SIG$1, passing it to the ranks"
    scancel --signal="$1" "$SLURM_JOB_ID"
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
code=0
wait "$srun_pid" || code=$?
while kill -0 "$srun_pid" 2>/dev/null; do  # a trap ended the wait, not srun: wait again
    code=0
    wait "$srun_pid" || code=$?
done
# --8<-- [end:forward]

# --8<-- [start:requeue]
if [[ "$code" -eq "$REQUEUE_EXIT_CODE" ]]; then
    echo "job script: the ranks saved a checkpoint and exited with $code: requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
echo "job script: training exited with code $code"
exit "$code"
# --8<-- [end:requeue]
