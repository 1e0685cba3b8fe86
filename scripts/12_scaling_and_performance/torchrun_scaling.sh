#!/bin/bash
#PBS -N ddp_ch12
#PBS -l select=1:ncpus=16:ngpus=4
#PBS -l walltime=00:30:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 12 as a PBS job: the input pipeline's pitfall (bad, then good) with one torchrun
# per node and the nvitop monitor, then the scaling study on the first node over 1, 2, 4, ...
# of the job's GPUs (CPU cores without GPUs), with the side-by-side ceiling. Its plot goes to
# $PLOT (default: scaling_<job id>.png in your home directory), the monitor's CSV and plot
# to $MONITOR_DIR (default: monitor_<job id>/ next to the plot). A CIFAR-10 copy: DATA_DIR=...
# Steps per epoch of every run: STEPS (default 8; the study leaves out its first 2, so more
# steps give steadier step times: qsub -v STEPS=30 ...).
#
# Submit from the repository root:
#     qsub scripts/12_scaling_and_performance/torchrun_scaling.sh
# Without PBS, on one machine (CPU or GPUs), the same script:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes bash scripts/12_scaling_and_performance/torchrun_scaling.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

data=()
if [[ -n "${DATA_DIR:-}" ]]; then data=(--data-dir "$DATA_DIR"); fi
plot="${PLOT:-$HOME/scaling_${JOB_ID}.png}"
monitor_dir="${MONITOR_DIR:-$(dirname "$plot")/monitor_${JOB_ID}}"
steps="${STEPS:-8}"
launch_torchrun scripts/12_scaling_and_performance/train_ddp.py --variant bad --steps-per-epoch "$steps" \
    "${data[@]}"
launch_torchrun scripts/12_scaling_and_performance/train_ddp.py --variant good --steps-per-epoch "$steps" \
    --monitor-dir "$monitor_dir" "${data[@]}"

# The study: 1, 2, 4, ... ranks up to this node's processes, a batch that splits over each.
ranks=() n=1
while (( n <= NPROC_PER_NODE )); do ranks+=("$n"); n=$(( n * 2 )); done
python scripts/12_scaling_and_performance/scaling_study.py --ranks "${ranks[@]}" \
    --batch-size $(( 8 * ranks[-1] )) --steps-per-epoch "$steps" --plot "$plot"
