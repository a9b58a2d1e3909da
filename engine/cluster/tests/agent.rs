//! The node agent: recorded NVML readings (`tests/nvml/`) → the labels and annotations it
//! publishes → the Node patch (snapshotted), nothing when the Node already says it, the
//! agent's own annotations removed when they no longer apply; against the in-process API
//! server, one publish writes once and a second writes nothing; and the cluster view
//! reads what the agent wrote (an unhealthy GPU is not placeable).

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;

use apiserver::{FakeApi, Kind};
use cluster::agent;
use engine::inventory::nvml::{publish, HostReading};
use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};
use serve::state::AgentOptions;
use std::path::PathBuf;
use std::time::Duration;

fn readings() -> Vec<(String, HostReading)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/nvml");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".reading.json") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((stem.to_string(), serde_json::from_str(&text).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 2, "the recorded readings are here");
    out
}

/// The recorded DGX H100 reading.
fn dgx() -> HostReading {
    readings()
        .into_iter()
        .find(|(n, _)| n == "dgx-h100")
        .map(|(_, r)| r)
        .unwrap()
}

/// The in-process API server with a bare node `gpu-1`, a client for it, and agent
/// options publishing to that node every `interval`, at most once per `min_patch`.
async fn agent_on_gpu_1(
    interval: Duration,
    min_patch: Duration,
    once: bool,
) -> (std::sync::Arc<FakeApi>, kube::Client, AgentOptions) {
    let api = FakeApi::new();
    api.apply(Kind::Nodes, bare("gpu-1"));
    let url = api.serve().await;
    let client = kube::Client::try_from(apiserver::config(&url)).unwrap();
    let options = AgentOptions {
        kubeconfig: None,
        in_cluster: false,
        node_name: "gpu-1".into(),
        interval,
        min_patch_interval: min_patch,
        once,
    };
    (api, client, options)
}

/// A Node as the kubelet registers it, before any GPU labels.
fn bare(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "capacity": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn node(v: &Value) -> Node {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn each_reading_becomes_one_patch_and_then_none() {
    for (name, reading) in readings() {
        let published = publish::published(&reading);
        let patch = agent::patch_for(&node(&bare("gpu-1")), &published).unwrap();
        insta::assert_snapshot!(
            format!("agent_patch_{name}"),
            serde_json::to_string_pretty(&patch).unwrap()
        );
        // Once applied, the node says it all: no patch.
        let mut applied = bare("gpu-1");
        json_patch::merge(&mut applied, &patch);
        assert_eq!(
            agent::patch_for(&node(&applied), &published),
            None,
            "{name}"
        );
    }
}

#[test]
fn a_gpu_that_recovers_loses_its_annotation_and_nothing_else_is_touched() {
    let reading = dgx();
    let mut node_json = bare("gpu-1");
    json_patch::merge(
        &mut node_json,
        &agent::patch_for(&node(&bare("gpu-1")), &publish::published(&reading)).unwrap(),
    );
    node_json["metadata"]["annotations"]["team.example/owner"] = json!("ml-infra");
    let mut healed = reading.clone();
    for d in &mut healed.devices {
        d.xids.clear();
    }
    let patch = agent::patch_for(&node(&node_json), &publish::published(&healed)).unwrap();
    assert_eq!(
        patch,
        json!({"metadata": {"annotations": {"gantry.dev/unhealthy-gpus": null}}})
    );
}

#[test]
fn the_cluster_view_reads_what_the_agent_published() {
    let reading = dgx();
    let mut node_json = bare("gpu-1");
    json_patch::merge(
        &mut node_json,
        &agent::patch_for(&node(&bare("gpu-1")), &publish::published(&reading)).unwrap(),
    );
    // The device plugin still offers all eight; the agent saw XID 79 on GPU 3.
    let seen = cluster::nodes::node(&node(&node_json), "gantry.dev/pool").unwrap();
    let unhealthy: Vec<u32> = seen
        .node
        .gpus
        .iter()
        .filter(|g| !g.healthy)
        .map(|g| g.index)
        .collect();
    assert_eq!(unhealthy, [3]);
    assert!(
        seen.notes
            .iter()
            .any(|n| n.contains("GPU 3 is unhealthy: XID 79")),
        "{:?}",
        seen.notes
    );
    assert!(seen.node.gpus.iter().all(|g| g.nvlink_island == Some(0)));
    // The device plugin withholds GPU 3 as well: still one unhealthy GPU, not two.
    node_json["status"]["allocatable"]["nvidia.com/gpu"] = json!("7");
    let seen = cluster::nodes::node(&node(&node_json), "gantry.dev/pool").unwrap();
    assert_eq!(seen.node.gpus.iter().filter(|g| !g.healthy).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_patches_its_node_once_and_then_writes_nothing() {
    let (api, client, options) =
        agent_on_gpu_1(Duration::from_millis(20), Duration::from_secs(10), true).await;
    let reading = dgx();
    let from = reading.clone();
    agent::run(client.clone(), &options, Box::new(move || Ok(from.clone())))
        .await
        .unwrap();
    let patched = api.get_object(Kind::Nodes, "gpu-1").unwrap();
    assert_eq!(
        patched["metadata"]["labels"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    assert_eq!(
        patched["metadata"]["annotations"]["gantry.dev/unhealthy-gpus"],
        "3: XID 79"
    );
    let from = reading.clone();
    agent::run(client.clone(), &options, Box::new(move || Ok(from.clone())))
        .await
        .unwrap();
    assert_eq!(
        api.writes(),
        [("PATCH".to_string(), "nodes/gpu-1".to_string())],
        "one patch, then nothing"
    );
    // agent.yaml's RBAC covers every request it made.
    let missing_rules =
        apiserver::rbac::not_allowed(&api, &apiserver::rbac::example_rules(&["agent.yaml"]));
    assert!(missing_rules.is_empty(), "{missing_rules:?}");
    // A node that does not exist is named in the error.
    let missing = AgentOptions {
        node_name: "nope".into(),
        ..options
    };
    let from = reading.clone();
    let e = agent::run(client, &missing, Box::new(move || Ok(from.clone())))
        .await
        .unwrap_err();
    assert!(e.contains("node nope does not exist"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_gpu_is_published_at_most_once_per_min_interval() {
    let (api, client, options) =
        agent_on_gpu_1(Duration::from_millis(10), Duration::from_millis(400), false).await;
    let reading = dgx();
    // Every reading flips GPU 3 between healthy and XID 79.
    let mut n = 0u64;
    let read = Box::new(move || {
        n += 1;
        let mut r = reading.clone();
        if n.is_multiple_of(2) {
            for d in &mut r.devices {
                d.xids.clear();
            }
        }
        Ok(r)
    });
    let run = tokio::spawn(async move { agent::run(client, &options, read).await });
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    run.abort();
    let patches = api.writes().len();
    assert!(
        (2..=4).contains(&patches),
        "about one patch per 400 ms over 1.3 s, not one per 10 ms reading: {patches}"
    );
}
