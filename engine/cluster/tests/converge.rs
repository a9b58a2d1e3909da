//! Whatever happens on the API server — pods bound, finished and deleted, nodes cordoned
//! and removed, watches cut, the event log compacted — the view ends up showing exactly
//! what a fresh list would show.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::{FakeApi, Kind};
use cluster::watch::Live;
use proptest::prelude::*;
use serde_json::{json, Value};
use serve::state::{ClusterOptions, InventorySource, Seen};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Bind { pod: u8, node: u8, gpus: u8 },
    Finish { pod: u8 },
    Delete { pod: u8 },
    Cordon { node: u8, on: bool },
    RemoveNode { node: u8 },
    AddNode { node: u8 },
    HangUp,
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..40u8, 0..6u8, 0..4u8).prop_map(|(pod, node, gpus)| Op::Bind { pod, node, gpus }),
        2 => (0..40u8).prop_map(|pod| Op::Finish { pod }),
        2 => (0..40u8).prop_map(|pod| Op::Delete { pod }),
        1 => (0..6u8, any::<bool>()).prop_map(|(node, on)| Op::Cordon { node, on }),
        1 => (0..6u8).prop_map(|node| Op::RemoveNode { node }),
        1 => (0..6u8).prop_map(|node| Op::AddNode { node }),
        1 => Just(Op::HangUp),
        1 => Just(Op::Compact),
    ]
}

fn node(i: u8, cordoned: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("n{i}"), "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gantry.dev/pool": "p"}},
        "spec": {"unschedulable": cordoned},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(i: u8, node: u8, gpus: u8) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("p{i}"), "namespace": "ns"},
        "spec": {"nodeName": format!("n{node}"), "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()},
            "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}})
}

/// What a view built from a fresh list shows, compared on what matters.
fn summary(seen: &Seen) -> (Vec<String>, Vec<(String, String)>, Vec<String>) {
    let mut running: Vec<(String, String)> = seen
        .running
        .iter()
        .map(|j| {
            (
                j.id.clone(),
                format!("{}x{}", j.placement[0].node, j.shape.member.num_gpu),
            )
        })
        .collect();
    running.sort();
    (
        seen.fleet.nodes.iter().map(|n| n.name.clone()).collect(),
        running,
        seen.closed.keys().cloned().collect(),
    )
}

fn options() -> ClusterOptions {
    ClusterOptions {
        kubeconfig: None,
        in_cluster: false,
        pool_label: "gantry.dev/pool".into(),
        sync_timeout: Duration::from_secs(10),
        watch_jobs: false,
        placeholder_image: None,
        provisioning_requests: false,
        predict_runtimes: false,
    }
}

async fn connect(api: &Arc<FakeApi>) -> Live {
    let url = api.serve().await;
    let client = kube::Client::try_from(apiserver::config(&url)).unwrap();
    Live::with_client(client, url, &options()).await.unwrap()
}

fn apply(api: &FakeApi, op: &Op) {
    match *op {
        Op::Bind { pod: p, node, gpus } => {
            api.apply(Kind::Pods, pod(p, node, gpus));
        }
        Op::Finish { pod } => {
            let key = format!("ns/p{pod}");
            if api.get_object(Kind::Pods, &key).is_some() {
                api.update(Kind::Pods, &key, |p| {
                    p["status"]["phase"] = json!("Succeeded")
                });
            }
        }
        Op::Delete { pod } => api.delete(Kind::Pods, &format!("ns/p{pod}")),
        Op::Cordon { node: n, on } => {
            api.apply(Kind::Nodes, node(n, on));
        }
        Op::RemoveNode { node } => api.delete(Kind::Nodes, &format!("n{node}")),
        Op::AddNode { node: n } => {
            api.apply(Kind::Nodes, node(n, false));
        }
        Op::HangUp => api.hang_up(),
        Op::Compact => api.compact(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: harness::cases(12), ..ProptestConfig::default() })]

    #[test]
    fn the_view_converges_to_what_a_fresh_list_shows(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let api = FakeApi::new();
            for i in 0..4 {
                api.apply(Kind::Nodes, node(i, false));
            }
            let live = connect(&api).await;
            for op in &ops {
                apply(&api, op);
                tokio::task::yield_now().await;
            }
            let fresh = connect(&api).await;
            let want = summary(&fresh.read().unwrap());
            let mut changes = live.changes().unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            loop {
                let got = summary(&live.read().unwrap());
                if got == want {
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "after {ops:?}\nview {got:?}\nfresh list {want:?}");
                let _ = tokio::time::timeout(Duration::from_millis(300), changes.changed()).await;
            }
        });
    }
}
