#!/bin/sh
# run.sh WORKLOAD.tsv: runs a workload to the end on the peer Slurm with accounting and an
# association limit per account (see README.md). A job with a time limit of M minutes
# sleeps M minutes less 3 seconds, so it ends before its limit and Slurm's plan, made from
# limits, is exact. Waits until the queue is empty.
grep -v '^#' "$1" | while IFS="$(printf '\t')" read -r name account nodes gpus minutes; do
  sbatch -J "$name" -A "$account" -N "$nodes" --gres="gpu:h100:$gpus" -t "$minutes" \
    -o /dev/null --wrap "sleep $((minutes * 60 - 3))" >/dev/null
done
while [ -n "$(squeue -h)" ]; do sleep 5; done
