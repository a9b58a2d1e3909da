#!/bin/sh
# run.sh WORKLOAD.tsv: runs a workload to the end on the peer Slurm with accounting
# (slurmdbd; see README.md): a job with a time limit of M minutes sleeps about M × 0.6
# seconds, a hundred times shorter than its limit (users' limits overestimate too). Jobs
# alternate between the accounts physics and bio and the QOS high and normal. Waits until
# the queue is empty.
i=0
grep -v '^#' "$1" | while IFS="$(printf '\t')" read -r name nodes gpus minutes; do
  if [ $((i % 2)) = 0 ]; then account=physics; else account=bio; fi
  if [ $((i % 3)) = 0 ]; then qos=high; else qos=normal; fi
  sbatch -J "$name" -A "$account" --qos="$qos" -N "$nodes" --gres="gpu:h100:$gpus" \
    -t "$minutes" -o /dev/null --wrap "sleep $((minutes / 10 * 6 + 1))" >/dev/null
  i=$((i + 1))
done
while [ -n "$(squeue -h)" ]; do sleep 5; done
