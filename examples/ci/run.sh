#!/usr/bin/env bash
# The CI workflow's steps on this repository's examples: check, fmt --check, test, and a
# diff of the autoscale policy against its on-demand variant with gates. Prints the
# markdown the workflow would post.
set -euo pipefail
cd "$(dirname "$0")/../.."
gantry() { cargo run --quiet --release -- "$@"; }

gantry check --deny-warnings policies/ examples/
gantry fmt --check policies/ examples/
gantry test policies/ examples/
gantry diff \
  --old examples/autoscale/on-demand/policy.gantry \
  --new examples/autoscale/policy.gantry \
  --fleet examples/autoscale/fleet.toml \
  --trace examples/autoscale/trace.jsonl \
  --history examples/autoscale/history.jsonl \
  --format markdown \
  --max-jobs 10 \
  --fail-if 'cost > 5%' \
  --fail-if 'ttfg_p95(tier=standard) > 10%'
