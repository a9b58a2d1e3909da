//! The cluster view at 5,000 nodes and 50,000 pods: converting the objects as their watch
//! events arrive, building what the service serves from the caches (the fleet, running
//! jobs and the occupancy the extender reads), and extender filter calls against it.
//!
//! `cargo bench -p cluster --bench view` prints medians and percentiles; it is a plain
//! harness because the extender target is a p99, which criterion does not report.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark code"
)]

use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};
use serve::state::{AppState, InventorySource, Seen};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODES: usize = 5_000;
const PODS: usize = 50_000;
/// Nodes kube-scheduler hands the extender for one pod at 5,000 nodes: its adaptive
/// `percentageOfNodesToScore` is 50 - 5000/125 = 10%.
const CANDIDATES: usize = 500;

const POLICY: &str = r#"
use std.nodes.{dgx_h100, dgx_a100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 4000 }
pool inference { capacity = reserved; node = dgx_h100; nodes = 800 }
pool notebooks { capacity = reserved; node = dgx_a100; nodes = 200 }

placement { packing = least_fragmentation }

team research { guaranteed = 16000 gpu in training; burst = 32000 gpu }
team serving { guaranteed = 6400 gpu in inference }
team students { guaranteed = 1600 gpu in notebooks }
"#;

fn node(i: usize) -> Node {
    let (pool, product, memory, mig) = match i % 25 {
        0..=19 => ("training", "NVIDIA-H100-80GB-HBM3", "81559", false),
        20..=23 => ("inference", "NVIDIA-H100-80GB-HBM3", "81559", false),
        _ => ("notebooks", "NVIDIA-A100-SXM4-40GB", "40960", true),
    };
    let mut allocatable = json!({"cpu": "191500m", "memory": "2063597568Ki", "pods": "110",
                                 "nvidia.com/gpu": if mig { "4" } else { "8" }});
    if mig {
        allocatable["nvidia.com/mig-1g.5gb"] = json!("14");
        allocatable["nvidia.com/mig-3g.20gb"] = json!("4");
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("gpu-{i:05}"), "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": format!("gpu-{i:05}"), "gantry.dev/pool": pool,
                "gantry.dev/rack": format!("r{}", i / 32),
                "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": memory,
                "nvidia.com/mig.strategy": if mig { "mixed" } else { "none" }}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": allocatable.clone(), "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    }))
    .unwrap()
}

/// 4 daemon-set pods per node (20,000), then GPU pods (1, 2, 4 or 8 GPUs; MIG slices on
/// the notebook nodes) first-fit onto the nodes until 50,000 pods, some left pending.
fn pods() -> Vec<Pod> {
    let mut out = Vec::with_capacity(PODS);
    let pod = |name: String, node: Option<String>, resources: Value, team: &str| -> Pod {
        let mut spec = json!({"containers": [{"name": "main", "image": "x",
            "resources": {"requests": resources.clone(), "limits": resources}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": team, "resourceVersion": "1",
                "creationTimestamp": "2026-11-24T06:00:00Z",
                "labels": {"gantry.dev/team": team, "app": "bench"}},
            "spec": spec,
            "status": {"phase": "Running", "startTime": "2026-11-24T06:00:05Z"}
        }))
        .unwrap()
    };
    for i in 0..NODES {
        for d in 0..4 {
            out.push(pod(
                format!("ds-{d}-{i}"),
                Some(format!("gpu-{i:05}")),
                json!({"cpu": "100m", "memory": "256Mi"}),
                "kube-system",
            ));
        }
    }
    let mut free: Vec<u32> = (0..NODES)
        .map(|i| if i % 25 == 24 { 4 } else { 8 })
        .collect();
    let mut mig_free: Vec<u32> = (0..NODES).map(|_| 4).collect();
    let mut next = 0usize;
    let mut k = 0usize;
    while out.len() < PODS {
        k += 1;
        let gpus = [1, 1, 1, 2, 2, 4, 8][k % 7];
        let i = next % NODES;
        next += 1 + k % 3;
        let name = format!("job-{k}");
        if i % 25 == 24 {
            let placed = (mig_free[i] > 0).then(|| {
                mig_free[i] -= 1;
                format!("gpu-{i:05}")
            });
            let r = json!({"cpu": "2", "memory": "16Gi", "nvidia.com/mig-3g.20gb": "1"});
            out.push(pod(name, placed, r, "students"));
            continue;
        }
        let team = if i % 25 >= 20 { "serving" } else { "research" };
        let placed = (free[i] >= gpus).then(|| {
            free[i] -= gpus;
            format!("gpu-{i:05}")
        });
        let r = json!({"cpu": (gpus * 8).to_string(), "memory": format!("{}Gi", gpus * 64),
                       "nvidia.com/gpu": gpus.to_string()});
        out.push(pod(name, placed, r, team));
    }
    out
}

/// A source that hands out one fixed reading.
struct Fixed(Seen);
impl InventorySource for Fixed {
    fn name(&self) -> String {
        "bench".into()
    }
    fn read(&self) -> Result<Seen, String> {
        Ok(self.0.clone())
    }
}

fn stats(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let at = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name}: n={} median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        xs.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        xs.last().unwrap().as_secs_f64() * 1e3
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it with no arguments,
    // so keep that run short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (rounds, calls) = if quick { (1, 20) } else { (10, 2_000) };
    let node_objects: Vec<Node> = (0..NODES).map(node).collect();
    let pod_objects = pods();
    let bound = pod_objects
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    println!("{NODES} nodes, {} pods ({bound} bound)", pod_objects.len());

    // 1. Converting every object, as a first list delivers them.
    let mut convert = Vec::new();
    let mut stores = Stores::default();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut s = Stores::default();
        s.nodes.apply(Change::Init);
        for n in &node_objects {
            let seen = nodes::node(n, "gantry.dev/pool").unwrap();
            s.nodes
                .apply(Change::InitApply(seen.node.name.clone(), seen));
        }
        s.nodes.apply(Change::InitDone);
        s.pods.apply(Change::Init);
        for p in &pod_objects {
            s.pods.apply(Change::InitApply(pods::key(p), pods::pod(p)));
        }
        s.pods.apply(Change::InitDone);
        convert.push(t.elapsed());
        stores = s;
    }
    stats("convert 5,000 nodes + 50,000 pods (first list)", convert);

    // 2. What the service does after a change: read the caches, then the occupancy.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 1_795_510_000)));
    state.reload_policy(dir.path()).unwrap();
    let policy = state.policy().unwrap();
    let mut build = Vec::new();
    let mut seen_only = Vec::new();
    let mut last = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let seen = stores.seen().unwrap();
        seen_only.push(t.elapsed());
        state.refresh_inventory(&Fixed(seen.clone())).unwrap();
        // A new generation each round, so the occupancy is really built.
        state.refresh_inventory(&Fixed(Seen::default())).unwrap();
        state.refresh_inventory(&Fixed(seen)).unwrap();
        let inventory = state.inventory().unwrap();
        let t = Instant::now();
        let occupancy = state.occupancy(&policy, &inventory);
        build.push(t.elapsed() + *seen_only.last().unwrap());
        last = Some(occupancy);
    }
    let occupancy = last.unwrap();
    println!(
        "running jobs {}, occupancy problems {}, idle GPUs {}",
        occupancy.running,
        occupancy.problems.len(),
        occupancy.idle_gpus()
    );
    stats("read the caches (fleet + running jobs)", seen_only);
    stats("snapshot: caches + occupancy", build);

    // 3. Extender filter calls through the app: a 1-GPU research pod, 500 candidates.
    let app = serve::app::app(state.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let names: Vec<String> = (0..CANDIDATES)
        .map(|i| format!("gpu-{:05}", (i * 10) % NODES))
        .collect();
    let args = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "research", "labels": {"gantry.dev/team": "research"}},
                "spec": {"containers": [{"name": "main", "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"}}}]}},
        "NodeNames": names,
    })
    .to_string();
    for path in ["/extender/filter", "/extender/prioritize"] {
        let mut times = Vec::with_capacity(calls);
        let mut fits = 0;
        for _ in 0..calls {
            use tower::ServiceExt;
            let request = axum::http::Request::post(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(args.clone()))
                .unwrap();
            let t = Instant::now();
            let body = runtime.block_on(async {
                let response = app.clone().oneshot(request).await.unwrap();
                assert_eq!(response.status(), 200);
                http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .unwrap()
                    .to_bytes()
            });
            times.push(t.elapsed());
            let v: Value = serde_json::from_slice(&body).unwrap();
            fits = v["NodeNames"].as_array().map_or(0, Vec::len);
        }
        if path.ends_with("filter") {
            println!("filter keeps {fits} of {CANDIDATES} candidates");
        }
        stats(&format!("{path} ({CANDIDATES} candidates)"), times);
    }
}
