//! Capacity reconciliation for 50 autoscaled pools (1,000 nodes × 8 GPUs, 10 of the pools
//! with a warm window, 25 full pools each with a waiting 2 × 8 gang pinned to it): the
//! first cycle asks for placeholders and marks nodes; once the cluster shows them, the
//! next cycle must write nothing. Prints the writes of each cycle and the time
//! `capacity::actions` takes on the settled view.
//!
//! `cargo bench -p cluster --bench capacity`

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark code"
)]

use cluster::capacity::{self, CapacityAction, Settings};
use cluster::controller;
use cluster::memory::Memory;
use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};
use serve::state::AppState;
use std::collections::BTreeMap;
use std::time::Instant;

const POOLS: usize = 50;
const NODES_PER_POOL: usize = 20;
/// Tuesday 2026-11-24 08:46:40 UTC.
const NOW: i64 = 1_795_510_000;

fn policy() -> String {
    let mut text = String::from("use std.nodes.{dgx_h100}\nuse std.tiers\n");
    for p in 0..POOLS {
        text.push_str(&format!(
            "pool p{p:02} {{ capacity = spot; node = dgx_h100; nodes = 0..40; cost = 40 $/h; boot = 5m }}\nautoscale p{p:02} {{\n  up when pending_nodes(fits = p{p:02}) > 0 => add pending_nodes(fits = p{p:02})\n  down when idle > 30m\n}}\n"
        ));
        if p % 5 == 0 {
            text.push_str(&format!(
                "warm w{p:02} in p{p:02} {{ size = 22 nodes; during = weekdays 00:00..23:59 \"UTC\" }}\n"
            ));
        }
    }
    text.push_str("team alpha { burst = 100000 gpu }\n");
    text
}

fn node(p: usize, i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("p{p:02}-n{i:02}"), "labels": {"gantry.dev/pool": format!("p{p:02}"),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(name: &str, pool: usize, node: Option<String>, gang: Option<&str>) -> Value {
    let mut labels = json!({"gantry.dev/team": "alpha", "gantry.dev/tier": "best_effort",
                            "gantry.dev/policy-revision": "r1"});
    if let Some(g) = gang {
        labels["gantry.dev/gang"] = json!(g);
        labels["gantry.dev/gang-size"] = json!("2");
    }
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-24T08:00:00Z", "labels": labels},
        "spec": {"nodeSelector": {"gantry.dev/pool": format!("p{pool:02}")},
                 "containers": [{"name": "main", "resources": {
                     "requests": {"cpu": "8", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"}});
    match node {
        Some(n) => p["spec"]["nodeName"] = json!(n),
        None => {
            p["spec"]["schedulingGates"] = json!([{"name": "gantry.dev/queue"}]);
            p["status"] = json!({"phase": "Pending"});
        }
    }
    p
}

fn stores(nodes_json: &BTreeMap<String, Value>, pods_json: &BTreeMap<String, Value>) -> Stores {
    let mut s = Stores::default();
    s.nodes.apply(Change::Init);
    for n in nodes_json.values() {
        let n: Node = serde_json::from_value(n.clone()).unwrap();
        let seen = nodes::node(&n, "gantry.dev/pool").unwrap();
        s.nodes
            .apply(Change::InitApply(seen.node.name.clone(), seen));
    }
    s.nodes.apply(Change::InitDone);
    s.pods.apply(Change::Init);
    for p in pods_json.values() {
        let p: Pod = serde_json::from_value(p.clone()).unwrap();
        s.pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    s.pods.apply(Change::InitDone);
    s
}

/// What the API server would hold after `actions` (placeholders stay pending).
fn apply(
    actions: &[CapacityAction],
    nodes_json: &mut BTreeMap<String, Value>,
    pods_json: &mut BTreeMap<String, Value>,
) {
    for a in actions {
        match a {
            CapacityAction::CreatePlaceholder { name, pod, .. } => {
                let mut p = pod.clone();
                p["metadata"]["uid"] = json!(format!("uid-{name}"));
                p["spec"]["priority"] = json!(-1);
                pods_json.insert(format!("gantry-system/{name}"), p);
            }
            CapacityAction::DeletePlaceholder {
                namespace, name, ..
            } => {
                pods_json.remove(&format!("{namespace}/{name}"));
            }
            CapacityAction::KeepNode { node, .. } | CapacityAction::UnkeepNode { node, .. } => {
                let patch = capacity::mark_patch(a, NOW).unwrap();
                json_patch::merge(nodes_json.get_mut(node).unwrap(), &patch);
            }
            // Placeholders only here.
            CapacityAction::CreateProvisioningRequest { .. }
            | CapacityAction::DeleteProvisioningRequest { .. } => {}
        }
    }
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), policy()).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    let policy = state.policy().unwrap();
    let settings = Settings {
        namespace: "gantry-system".into(),
        pool_label: "gantry.dev/pool".into(),
        image: capacity::PAUSE_IMAGE.into(),
        provisioning: None,
    };
    let mut nodes_json = BTreeMap::new();
    let mut pods_json = BTreeMap::new();
    for p in 0..POOLS {
        for i in 0..NODES_PER_POOL {
            let n = node(p, i);
            let name = n["metadata"]["name"].as_str().unwrap().to_string();
            // Half the pools full, the others half busy.
            if p % 2 == 0 || i % 2 == 0 {
                let pod_name = format!("run-{name}");
                pods_json.insert(
                    format!("ml/{pod_name}"),
                    pod(&pod_name, p, Some(name.clone()), None),
                );
            }
            nodes_json.insert(name, n);
        }
        if p % 2 == 0 {
            for m in 0..2 {
                let name = format!("g{p:02}-{m}");
                pods_json.insert(
                    format!("ml/{name}"),
                    pod(&name, p, None, Some(&format!("g{p:02}"))),
                );
            }
        }
    }
    let mut memory = Memory::default();
    let mut cycle =
        |nodes_json: &BTreeMap<String, Value>, pods_json: &BTreeMap<String, Value>, now: i64| {
            let s = stores(nodes_json, pods_json);
            let (view, plan, _) = controller::cycle_with(&s, &policy, &memory, now).unwrap();
            let actions = capacity::actions(&policy.program, &plan, &s, &settings);
            memory.arrived(memory.arrivals(&view.fleet, now));
            memory.remember(&plan, &Default::default());
            (actions, s, plan)
        };
    let (first, _, _) = cycle(&nodes_json, &pods_json, NOW);
    let count = |kind: &str, a: &[CapacityAction]| {
        a.iter()
            .filter(|x| serde_json::to_value(x).unwrap()["action"] == kind)
            .count()
    };
    println!(
        "first cycle: {} writes ({} placeholders created, {} nodes marked kept)",
        first.len(),
        count("create_placeholder", &first),
        count("keep_node", &first)
    );
    apply(&first, &mut nodes_json, &mut pods_json);
    let (second, settled, plan) = cycle(&nodes_json, &pods_json, NOW + 10);
    println!(
        "cycle after, nothing changed: {} writes {:?}",
        second.len(),
        second.iter().take(3).collect::<Vec<_>>()
    );
    let mut times = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let a = capacity::actions(&policy.program, &plan, &settled, &settings);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert!(a.is_empty());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "capacity::actions on the settled view ({POOLS} pools, {} nodes, {} pods): median {:.2} ms, max {:.2} ms",
        nodes_json.len(),
        pods_json.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(second.is_empty(), "a settled cluster needs no writes");
}
