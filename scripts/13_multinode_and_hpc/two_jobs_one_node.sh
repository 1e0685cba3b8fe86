#!/bin/bash
# Two jobs on one node, as a scheduler may place them: chapter 13's pitfall, on any machine.
#
#     bash scripts/13_multinode_and_hpc/two_jobs_one_node.sh bad    # both fix MASTER_PORT=29500
#     bash scripts/13_multinode_and_hpc/two_jobs_one_node.sh good   # ports from the job ids
#
# Job 1001.pbs (a longer one) starts first; once its rank 0 listens, job 1002.pbs starts on
# the same node. Each job is 2 ranks of fixed_port.py --variant bad|good, started the way an
# MPI launcher or srun starts them: one process per rank, each told its RANK, WORLD_SIZE and
# LOCAL_RANK, none told a port (torchrun would choose its own). Then each job's exit code and
# output: its ranks' logs, in rank order. (Every rank here ends by itself, at once or at its
# timeout, so nothing ends the others early, and the output is the same on every run.)
# bad: the second job's rank 0 cannot listen on 29500, which the first holds, and the second
# job fails. good: each job's port is derived from its job id; both finish.
set -euo pipefail

variant=${1:-}
[[ "$variant" == bad || "$variant" == good ]] || { echo "usage: bash $0 bad|good" >&2; exit 2; }
cd "$(dirname "$0")/../.."
job_script=scripts/13_multinode_and_hpc/fixed_port.py
logs=$(mktemp -d)
trap 'jobs -p | xargs -r kill 2>/dev/null || true; rm -rf "$logs"' EXIT

# run_job JOB_ID ARGS...: 2 ranks of the job script, each with its own log; the job's exit
# code is its first failing rank's.
run_job() {
    local job_id=$1 rank code status=0
    shift
    local -a pids=()
    for rank in 0 1; do
        PBS_JOBID=$job_id RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 \
            python "$job_script" --variant "$variant" "$@" > "$logs/$job_id.rank$rank" 2>&1 &
        pids+=($!)
    done
    for rank in 0 1; do
        wait "${pids[$rank]}" || { code=$?; [[ $status -ne 0 ]] || status=$code; }
    done
    return "$status"
}

long_job=(--num-samples 12288)  # 6 times the data: the first job is still running when the second starts
echo "job 1001.pbs: 2 ranks of $job_script --variant $variant ${long_job[*]}"
run_job 1001.pbs "${long_job[@]}" &
first=$!
until grep -qs "^rank 0 listens" "$logs/1001.pbs.rank0"; do
    kill -0 "$first" 2>/dev/null || break  # it ended before listening: show why below
    sleep 0.2
done
echo "job 1002.pbs: 2 ranks of $job_script --variant $variant, on the same node"
second_status=0
run_job 1002.pbs || second_status=$?
first_status=0
wait "$first" || first_status=$?

echo "=== job 1001.pbs: exit code $first_status"
cat "$logs/1001.pbs.rank0" "$logs/1001.pbs.rank1"
echo "=== job 1002.pbs: exit code $second_status"
cat "$logs/1002.pbs.rank0" "$logs/1002.pbs.rank1"
[[ $first_status -eq 0 && $second_status -eq 0 ]]
