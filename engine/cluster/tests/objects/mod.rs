//! Real-format API objects the queue tests share: an 8 × H100 node of a pool, and a gated
//! member of alpha's 2 × 8 best-effort gang as the webhook leaves it.

#![allow(dead_code, reason = "each test binary uses part of it")]

use serde_json::{json, Value};

/// A Ready node with eight H100s in `pool`.
pub fn gpu_node(name: &str, pool: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gantry.dev/pool": pool}},
        "spec": {},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A gated 8-GPU member of alpha's best-effort gang `g` of two.
pub fn gang_member(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-11-24T08:40:00Z",
            "labels": {"gantry.dev/team": "alpha", "gantry.dev/tier": "best_effort",
                       "gantry.dev/policy-revision": "r1", "gantry.dev/gang": "g", "gantry.dev/gang-size": "2"}},
        "spec": {"schedulingGates": [{"name": "gantry.dev/queue"}],
                 "containers": [{"name": "main", "resources": {
                     "requests": {"cpu": "8", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending"}})
}
