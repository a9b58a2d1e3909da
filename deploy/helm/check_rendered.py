"""Checks a rendered gantry chart (helm template output on stdin) beyond schema validity.

  helm template gantry deploy/helm/gantry -f VALUES | python3 deploy/helm/check_rendered.py [RBAC-FILES...]

- no mapping repeats a key (kubectl and the API server reject such manifests);
- every pod runs non-root with a read-only root filesystem, no privilege escalation and
  no capabilities, and no probe calls /v1/plan (a busy plan must not fail a probe);
- the webhooks call the Service the chart makes, the serving certificate names it, and
  the PodDisruptionBudget and ServiceMonitor select what they should;
- the RBAC rules the chart grants equal those of the example manifests given as
  arguments (examples/kubernetes/rbac*.yaml, agent.yaml), verb for verb.
"""
import sys
import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    pass


def construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"repeated key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

errors = []


def fail(msg):
    errors.append(msg)


def load(text):
    return [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d]


def rules(docs):
    out = set()
    for d in docs:
        if d.get("kind") in ("ClusterRole", "Role"):
            for r in d.get("rules", []):
                for g in r.get("apiGroups", []):
                    for res in r.get("resources", []):
                        for v in r.get("verbs", []):
                            out.add((d["kind"], g, res, v))
    return out


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


docs = load(sys.stdin.read())
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)

for w in by_kind.get("Deployment", []) + by_kind.get("DaemonSet", []):
    name = f'{w["kind"]}/{w["metadata"]["name"]}'
    pod = w["spec"]["template"]["spec"]
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        fail(f"{name}: the pod is not runAsNonRoot")
    if not matches(w["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"]):
        fail(f"{name}: the selector does not match the pod's labels")
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        if not sc.get("readOnlyRootFilesystem") or sc.get("allowPrivilegeEscalation", True):
            fail(f"{name}/{c['name']}: writable root filesystem or privilege escalation")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"{name}/{c['name']}: capabilities are not all dropped")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            path = c.get(probe, {}).get("httpGet", {}).get("path", "")
            if path.startswith("/v1/plan"):
                fail(f"{name}/{c['name']}: {probe} calls {path}")

services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
server_pods = [d["spec"]["template"]["metadata"]["labels"] for d in by_kind.get("Deployment", [])]
for s in services.values():
    if not any(matches(s["spec"]["selector"], p) for p in server_pods):
        fail(f'Service/{s["metadata"]["name"]} selects no server pod')
hosts = {n for c in by_kind.get("Certificate", []) for n in c["spec"].get("dnsNames", [])}
for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
    for cfg in by_kind.get(kind, []):
        for hook in cfg["webhooks"]:
            svc = hook["clientConfig"]["service"]
            if svc["name"] not in services:
                fail(f'{kind}: {hook["name"]} calls Service {svc["name"]}, which the chart does not make')
            host = f'{svc["name"]}.{svc["namespace"]}.svc'
            if by_kind.get("Certificate") and host not in hosts:
                fail(f"{kind}: the serving certificate does not name {host}")
            if not by_kind.get("Certificate") and not hook["clientConfig"].get("caBundle"):
                fail(f"{kind}: no caBundle and no cert-manager Certificate")
for pdb in by_kind.get("PodDisruptionBudget", []):
    if not any(matches(pdb["spec"]["selector"]["matchLabels"], p) for p in server_pods):
        fail("PodDisruptionBudget selects no server pod")
for sm in by_kind.get("ServiceMonitor", []):
    if not any(matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"]) for s in services.values()):
        fail("ServiceMonitor selects no Service")

if len(sys.argv) > 1:
    expected = set()
    for path in sys.argv[1:]:
        with open(path) as f:
            expected |= rules(load(f.read()))
    got = rules(docs)
    for r in sorted(expected - got):
        fail(f"RBAC: the examples grant {r}, the chart does not")
    for r in sorted(got - expected):
        fail(f"RBAC: the chart grants {r}, the examples do not")

for e in errors:
    print(f"error: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"ok: {len(docs)} objects")
