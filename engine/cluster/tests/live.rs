//! The live cluster view against an in-process API server speaking the real wire format
//! (`apiserver/`): first lists (paginated), watches that follow changes, bookmarks, a
//! relist after a compacted resourceVersion, RBAC refusals, a kubeconfig file, and the
//! extender of `gantry serve` judging nodes on what the bound pods leave free.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;

use apiserver::{FakeApi, Kind};
use cluster::watch::Live;
use serde_json::{json, Value};
use serve::state::{AppState, ClusterOptions, InventorySource, Seen};
use std::sync::Arc;
use std::time::Duration;

fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// An API server holding the fixtures (the finished pod is left out, as the field
/// selector would leave it out anyway — it is tested separately).
fn loaded() -> Arc<FakeApi> {
    let api = FakeApi::new();
    for n in fixture("nodes.json") {
        api.apply(Kind::Nodes, n);
    }
    for p in fixture("pods.json") {
        api.apply(Kind::Pods, p);
    }
    api
}

fn options(timeout: Duration) -> ClusterOptions {
    apiserver::view_options(timeout)
}

async fn connect(api: &Arc<FakeApi>, timeout: Duration) -> Result<Live, String> {
    let url = api.serve().await;
    let config = apiserver::config(&url);
    let client = kube::Client::try_from(config).unwrap();
    Live::with_client(client, url, &options(timeout)).await
}

/// Waits (up to 10 s) until what the view reads satisfies `ok`.
async fn until(live: &Live, what: &str, ok: impl Fn(&Seen) -> bool) -> Seen {
    let mut changes = live.changes().unwrap();
    let wait = async {
        loop {
            if let Ok(seen) = live.read() {
                if ok(&seen) {
                    return seen;
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), changes.changed()).await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(10), wait).await {
        Ok(seen) => seen,
        Err(_) => panic!(
            "timed out waiting for: {what}; last read: {:?}",
            live.read()
                .map(|s| (s.fleet.nodes.len(), s.running.len(), s.closed))
        ),
    }
}

fn running_ids(seen: &Seen) -> Vec<String> {
    seen.running.iter().map(|j| j.id.clone()).collect()
}

fn pod(ns: &str, name: &str, node: Option<&str>, gpus: u32) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-24T08:00:00Z",
                     "labels": {"gantry.dev/team": "research"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                  "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
                                "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:00:05Z"});
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_lists_then_follows_the_watch() {
    let api = loaded();
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    let seen = live.read().unwrap();
    assert_eq!(seen.fleet.nodes.len(), 7, "GPU nodes only");
    let ids = running_ids(&seen);
    assert!(ids.contains(&"research/llama-70b-0".to_string()));
    assert!(!ids.iter().any(|i| i.contains("finished")), "{ids:?}");
    assert!(
        !ids.iter().any(|i| i.contains("waiting")),
        "pending pods hold nothing"
    );
    assert!(
        !ids.iter().any(|i| i.contains("coredns")),
        "pods on CPU nodes are not counted"
    );
    assert!(live.name().starts_with("kubernetes:http://127.0.0.1:"));

    // A pod is bound: it shows up.
    api.apply(Kind::Pods, pod("research", "new-4", Some("b200-0"), 4));
    until(&live, "the new pod", |s| {
        running_ids(s).contains(&"research/new-4".into())
    })
    .await;
    // It finishes: the field selector turns that into a DELETED event.
    api.update(Kind::Pods, "research/new-4", |p| {
        p["status"]["phase"] = json!("Succeeded")
    });
    until(&live, "the finished pod gone", |s| {
        !running_ids(s).contains(&"research/new-4".into())
    })
    .await;
    // A pod is deleted.
    api.delete(Kind::Pods, "research/llama-70b-0");
    until(&live, "the deleted pod gone", |s| {
        !running_ids(s).contains(&"research/llama-70b-0".into())
    })
    .await;
    // A node is cordoned, another comes back Ready.
    api.update(Kind::Nodes, "b200-0", |n| {
        n["spec"]["unschedulable"] = json!(true)
    });
    api.update(Kind::Nodes, "train-2", |n| {
        n["spec"]["taints"] =
            json!([{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}]);
        for c in n["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == "Ready" {
                c["status"] = json!("True");
                c["reason"] = json!("KubeletReady");
            }
        }
    });
    let seen = until(&live, "b200-0 cordoned, train-2 Ready", |s| {
        s.closed.contains_key("b200-0") && !s.closed.contains_key("train-2")
    })
    .await;
    assert_eq!(seen.closed["b200-0"], "cordoned (spec.unschedulable)");
    // A node leaves: its GPUs and the pods counted on it go.
    api.delete(Kind::Nodes, "train-1");
    let seen = until(&live, "train-1 gone", |s| {
        s.fleet.nodes.iter().all(|n| n.name != "train-1")
    })
    .await;
    assert!(!running_ids(&seen).contains(&"research/sweep-7".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_first_list_is_read_page_by_page() {
    let api = loaded();
    for i in 0..1_201 {
        api.apply(
            Kind::Pods,
            pod("bulk", &format!("p-{i:04}"), Some("b200-0"), 0),
        );
    }
    let live = connect(&api, Duration::from_secs(20)).await.unwrap();
    let seen = live.read().unwrap();
    assert_eq!(
        seen.running
            .iter()
            .filter(|j| j.id.starts_with("bulk/"))
            .count(),
        1_201
    );
    let pod_lists: Vec<_> = api
        .lists()
        .into_iter()
        .filter(|(k, _, _)| *k == Kind::Pods)
        .collect();
    assert_eq!(pod_lists.len(), 3, "500 + 500 + 210 items: {pod_lists:?}");
    assert!(pod_lists.iter().all(|(_, limit, _)| *limit == Some(500)));
    assert_eq!(pod_lists.iter().filter(|(_, _, cont)| *cont).count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_resource_version_means_a_fresh_list() {
    let api = loaded();
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    let lists_before = api.lists().len();
    // The API server restarts and compacts while gantry is not watching: the resume
    // point is gone, and so is a pod.
    api.pause();
    api.hang_up();
    api.delete(Kind::Pods, "research/sweep-7");
    api.compact();
    api.resume();
    let seen = until(&live, "the view relisted", |s| {
        !running_ids(s).contains(&"research/sweep-7".into())
    })
    .await;
    assert!(running_ids(&seen).contains(&"research/llama-70b-0".into()));
    assert!(
        api.lists().len() > lists_before,
        "a 410 Gone must lead to a new list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_move_the_resume_point() {
    let api = loaded();
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    // Nodes change, pods do not: only bookmarks tell the pod watch about the newer version.
    for _ in 0..5 {
        api.update(Kind::Nodes, "cpu-0", |n| {
            n["metadata"]["labels"]["touched"] = json!("yes")
        });
    }
    let newest = api.resource_version();
    tokio::time::sleep(Duration::from_millis(600)).await;
    api.hang_up();
    let start = std::time::Instant::now();
    loop {
        let resumed: Vec<u64> = api
            .watches()
            .iter()
            .filter(|(k, _)| *k == Kind::Pods)
            .filter_map(|(_, rv)| rv.parse().ok())
            .collect();
        if resumed.len() >= 2 {
            assert!(
                resumed.last().copied().unwrap() >= newest,
                "the pod watch resumed from {resumed:?}, before the bookmark's {newest}"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no second watch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_rbac_is_named_at_startup() {
    let api = loaded();
    api.forbid(Kind::Pods);
    // Long enough for the first refused list to come back on a loaded 2-core CI machine:
    // with 2 s, and once with 5 s (beside the whole workspace's tests), it had not, and
    // the message named no refusal.
    let err = connect(&api, Duration::from_secs(10)).await.unwrap_err();
    assert!(
        err.contains("waiting for the first complete list of pods"),
        "{err}"
    );
    assert!(err.contains("forbidden"), "{err}");
    assert!(err.contains("list and watch on nodes and pods"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_file_selects_the_cluster() {
    let api = loaded();
    let url = api.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, apiserver::kubeconfig(&url)).unwrap();
    let mut opts = options(Duration::from_secs(10));
    opts.kubeconfig = Some(path.clone());
    let live = Live::start(&opts).await.unwrap();
    assert_eq!(live.read().unwrap().fleet.nodes.len(), 7);
    opts.kubeconfig = Some(dir.path().join("missing"));
    let err = Live::start(&opts).await.unwrap_err();
    assert!(
        err.contains("kubeconfig") && err.contains("missing"),
        "{err}"
    );
}

const POLICY: &str = r#"
use std.nodes.{dgx_h100, dgx_a100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 8 }
pool inference { capacity = reserved; node = dgx_h100; nodes = 1 }
pool notebooks { capacity = reserved; node = dgx_a100; nodes = 1 }

placement { packing = least_fragmentation }

team research { guaranteed = 16 gpu in training; burst = 40 gpu }
team serving { guaranteed = 4 gpu in inference }
team students { guaranteed = 4 gpu in notebooks }
"#;

fn extender_args(gpus: u32, team: &str, nodes: &[&str]) -> Value {
    json!({
        "Pod": {"metadata": {"name": "p", "namespace": "research", "labels": {"gantry.dev/team": team}},
                "spec": {"containers": [{"name": "main", "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
                    "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}},
        "NodeNames": nodes,
    })
}

async fn call(app: &axum::Router, path: &str, body: &Value) -> Value {
    use tower::ServiceExt;
    let request = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extender_judges_nodes_on_what_bound_pods_leave_free() {
    let api = loaded();
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 1_795_510_000)));
    state.reload_policy(dir.path()).unwrap();
    state.refresh_inventory(&live).unwrap();
    let app = serve::app::app(state.clone());

    // 8 GPUs: train-0 is full, train-1 has 5 healthy GPUs free, train-2 is not Ready,
    // train-3 is cordoned, infer-0 has only 4 GPUs, b200-0 is empty.
    let nodes = [
        "train-0", "train-1", "train-2", "train-3", "infer-0", "b200-0",
    ];
    let r = call(
        &app,
        "/extender/filter",
        &extender_args(8, "research", &nodes),
    )
    .await;
    assert_eq!(r["NodeNames"], json!(["b200-0"]), "{r:#}");
    let failed = &r["FailedNodes"];
    assert!(
        failed["train-0"]
            .as_str()
            .unwrap()
            .contains("does not fit now"),
        "{r:#}"
    );
    assert!(
        failed["train-1"]
            .as_str()
            .unwrap()
            .contains("does not fit now"),
        "{r:#}"
    );
    assert!(
        failed["train-2"].as_str().unwrap().contains("not Ready"),
        "{r:#}"
    );
    assert!(
        failed["train-3"].as_str().unwrap().contains("cordoned"),
        "{r:#}"
    );
    assert!(
        r["FailedAndUnresolvableNodes"]["infer-0"]
            .as_str()
            .unwrap()
            .contains("never fits"),
        "{r:#}"
    );

    // 1 GPU, least fragmentation: the partly used node before the empty one, and the
    // team's own pool (training) before inference.
    let r = call(
        &app,
        "/extender/prioritize",
        &extender_args(1, "research", &["b200-0", "train-1", "infer-0"]),
    )
    .await;
    let score = |host: &str| {
        r.as_array()
            .unwrap()
            .iter()
            .find(|h| h["Host"] == host)
            .unwrap()["Score"]
            .as_i64()
            .unwrap()
    };
    assert!(score("train-1") > score("b200-0"), "{r:#}");
    assert!(score("b200-0") > score("infer-0"), "{r:#}");

    // Pods come and go: the extender follows without a restart.
    for i in 0..5 {
        api.apply(
            Kind::Pods,
            pod("research", &format!("fill-{i}"), Some("train-1"), 1),
        );
    }
    until(&live, "train-1 filled", |s| {
        running_ids(s)
            .iter()
            .filter(|i| i.contains("fill-"))
            .count()
            == 5
    })
    .await;
    state.refresh_inventory(&live).unwrap();
    let r = call(
        &app,
        "/extender/filter",
        &extender_args(1, "research", &["train-1", "b200-0"]),
    )
    .await;
    assert_eq!(
        r["NodeNames"],
        json!(["b200-0"]),
        "train-1 is full now: {r:#}"
    );
}
