#!/bin/sh
# run.sh WORKLOAD.tsv: runs a workload to the end on the peer Slurm with accounting (see
# README.md). Each job is submitted at its offset from the start of the run, with its time
# limit, and sleeps what it runs: `ok` sleeps its runtime (limits overestimate, as users'
# do), `timeout` sleeps 5 minutes past its limit (Slurm ends it: TIMEOUT), `cancel`
# cancels itself once it has run its runtime (CANCELLED after a start), `cancel_pending`
# is cancelled 10 seconds after its submission, before it can start. Waits until the
# queue is empty.
t0=$(date +%s)
grep -v '^#' "$1" | while IFS="$(printf '\t')" read -r name account at nodes gpus minutes runs how; do
  while [ $(($(date +%s) - t0)) -lt "$at" ]; do sleep 1; done
  case $how in
    timeout) cmd="sleep $((minutes * 60 + 300))" ;;
    cancel) cmd="sleep $runs; scancel \$SLURM_JOB_ID; sleep 60" ;;
    *) cmd="sleep $runs" ;;
  esac
  id=$(sbatch --parsable -J "$name" -A "$account" -N "$nodes" --gres="gpu:h100:$gpus" \
    -t "$minutes" -o /dev/null --wrap "$cmd")
  if [ "$how" = cancel_pending ]; then (sleep 10; scancel "$id") & fi
done
sleep 15
while [ -n "$(squeue -h)" ]; do sleep 5; done
