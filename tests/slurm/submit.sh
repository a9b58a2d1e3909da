#!/bin/sh
# submit.sh WORKLOAD.tsv: submits a workload to the peer Slurm of ../../../shared/peers/slurm
# (SLURM_CONF set), in file order; jobs sleep longer than their limit so none ends while
# the plan is read.
grep -v '^#' "$1" | while IFS="$(printf '\t')" read -r name nodes gpus minutes; do
  sbatch -J "$name" -N "$nodes" --gres="gpu:h100:$gpus" -t "$minutes" -o /dev/null --wrap 'sleep 36000' >/dev/null
done
