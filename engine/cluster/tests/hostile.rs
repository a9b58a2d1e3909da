//! Objects and answers written to hurt: a Node that claims two billion GPUs or `8Gi` of
//! them, a watch line that never ends, a list that is not JSON, an error body of many
//! MiB, and a ConfigMap or Secret read that fails. Each is bounded (memory, log and note
//! sizes) and nothing is written that acts on it; the engine's memory is never written
//! before it was read, and nothing is placed before the seal's key was.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::{FakeApi, Fault, Kind};
use cluster::memory::{Memory, CONFIG_MAP, KEY, UNREADABLE_KEY};
use cluster::watch::Live;
use engine::decide::snapshot::UsageRecord;
use harness::{gated, node};
use serde_json::{json, Value};
use serve::state::{AppState, ClusterOptions, InventorySource, Seen};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The process's peak resident memory, MiB (Linux; 0 elsewhere).
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// The whole test binary never holds more than this; the hostile objects here took
/// gigabytes before they were bounded.
const PEAK_RSS_BOUND_MIB: u64 = 1024;

fn options(timeout: Duration) -> ClusterOptions {
    apiserver::view_options(timeout)
}

/// A client as `gantry serve` makes it (bounded lines, kube's retries off).
async fn connect(api: &Arc<FakeApi>, timeout: Duration) -> Result<Live, String> {
    let url = api.serve().await;
    let client = cluster::bounded::client(apiserver::config(&url)).unwrap();
    Live::with_client(client, url, &options(timeout)).await
}

async fn until(live: &Live, what: &str, ok: impl Fn(&Seen) -> bool) -> Seen {
    let start = Instant::now();
    loop {
        if let Ok(seen) = live.read() {
            if ok(&seen) {
                return seen;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claiming_more_gpus_than_any_node_has_is_closed_not_allocated() {
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("honest"));
    let mut counted = node("counted");
    counted["metadata"]["labels"]["nvidia.com/gpu.count"] = json!("2000000000");
    api.apply(Kind::Nodes, counted);
    let mut gibi = node("gibi");
    gibi["status"]["allocatable"]["nvidia.com/gpu"] = json!("8Gi");
    gibi["status"]["capacity"]["nvidia.com/gpu"] = json!("8Gi");
    api.apply(Kind::Nodes, gibi);
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    let seen = until(&live, "the honest node", |s| s.fleet.nodes.len() == 1).await;
    // The two claims hold no GPUs at all: they are left out of the fleet (closed), with
    // a note each, and nothing was sized by them.
    assert_eq!(seen.fleet.nodes[0].name, "honest");
    assert_eq!(seen.fleet.nodes[0].gpus.len(), 8);
    for (name, claim) in [("counted", "2000000000 GPUs"), ("gibi", "8589934592 GPUs")] {
        assert!(
            seen.notes.iter().any(|n| n.starts_with(name)
                && n.contains(claim)
                && n.contains("above the 1024")
                && n.contains("the node is closed")),
            "{name}: {:?}",
            seen.notes
        );
    }
    assert!(!seen.closed.contains_key("honest"));
    assert!(
        peak_rss_mib() < PEAK_RSS_BOUND_MIB,
        "{} MiB",
        peak_rss_mib()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_line_that_never_ends_fails_the_watch_which_starts_again() {
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("n0"));
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    until(&live, "n0", |s| s.fleet.nodes.len() == 1).await;
    // The next node watch gets 80 MiB of one line, past the 64 MiB bound.
    api.fault("/api/v1/nodes?*watch=true", Fault::Garbage(80 << 20));
    let watches_before = api.watches().len();
    api.hang_up();
    let start = Instant::now();
    while api.faults_left() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the watch was not made again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The watch is made again and follows changes as before.
    api.apply(Kind::Nodes, node("n1"));
    until(&live, "n1 after the broken watch", |s| {
        s.fleet.nodes.len() == 2
    })
    .await;
    assert!(api.watches().len() > watches_before);
    assert!(
        peak_rss_mib() < PEAK_RSS_BOUND_MIB,
        "{} MiB",
        peak_rss_mib()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_lists_and_long_error_bodies_are_reported_short() {
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("n0"));
    // Every node list fails for a while: 20 MiB that is not JSON, then a 500 with a 20
    // MiB body, again and again.
    for _ in 0..50 {
        api.fault("/api/v1/nodes?*limit=", Fault::Garbage(20 << 20));
        api.fault("/api/v1/nodes?*limit=", Fault::LongError(20 << 20));
    }
    let err = connect(&api, Duration::from_secs(3)).await.unwrap_err();
    assert!(err.contains("still waiting"), "{err}");
    assert!(err.len() < 2048, "{} bytes: {}", err.len(), &err[..200]);
    // Once the API server answers properly the view is complete.
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("n0"));
    api.fault("/api/v1/nodes?*limit=", Fault::LongError(20 << 20));
    api.fault("/api/v1/nodes?*limit=", Fault::Garbage(20 << 20));
    let live = connect(&api, Duration::from_secs(20)).await.unwrap();
    assert_eq!(live.read().unwrap().fleet.nodes.len(), 1);
    assert!(
        peak_rss_mib() < PEAK_RSS_BOUND_MIB,
        "{} MiB",
        peak_rss_mib()
    );
}

fn remembered() -> Memory {
    Memory {
        usage: vec![UsageRecord {
            team: "alpha".into(),
            at: harness::NOW - harness::NOW % 3600,
            gpu_s: 7.0 * 86_400.0 * 8.0,
            cpu_s: 0.0,
            memory_mib_s: 0.0,
        }],
        ..Memory::default()
    }
}

fn config_map(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": CONFIG_MAP, "namespace": "gantry-system", "resourceVersion": "1"},
           "data": {KEY: text}})
}

/// A 500, a conflict and a read that never answers in time, one after another, on the
/// first reads of the memory: the leader decides, enacts and writes nothing until a read
/// succeeds, and then keeps what was there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_is_never_written_before_it_was_read() {
    let h = harness::harness().await;
    let key = format!("gantry-system/{CONFIG_MAP}");
    h.api.set_config_map(
        &key,
        config_map(&serde_json::to_string(&remembered()).unwrap()),
    );
    let path = format!("configmaps/{CONFIG_MAP}");
    h.api.fault(&path, Fault::Status(500));
    h.api.fault(&path, Fault::Status(409));
    h.api.fault(&path, Fault::Hang(Duration::from_secs(12)));
    let (_state, _dir) = h.lead(|| harness::NOW, Duration::from_millis(100));
    h.api
        .apply(Kind::Pods, gated("m-0", "alpha", "best_effort", 8, None));
    let start = Instant::now();
    let pod_writes = |api: &FakeApi| {
        api.writes()
            .iter()
            .filter(|(_, p)| !p.contains("leases"))
            .count()
    };
    while h.api.faults_left() > 0 {
        assert_eq!(
            pod_writes(&h.api),
            0,
            "written before the memory was read: {:?}",
            h.api.writes()
        );
        assert!(start.elapsed() < Duration::from_secs(40), "faults not used");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Read at last: the pod is placed and the memory written, with what was there.
    let saved = loop {
        h.api.bind_released();
        let cm = h.api.config_map(&key).unwrap();
        let memory: Memory = serde_json::from_str(cm["data"][KEY].as_str().unwrap()).unwrap();
        if memory
            .starts
            .iter()
            .any(|s| s.team.as_deref() == Some("alpha"))
        {
            break memory;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not placed after the memory was read: {:?}",
            h.api.writes()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let kept = remembered().usage[0].gpu_s;
    assert!(
        saved
            .usage
            .iter()
            .any(|u| u.team == "alpha" && u.gpu_s >= kept),
        "{:?}",
        saved.usage
    );
}

/// The seal's key lives in the Secret `gantry-seal`, never in the memory ConfigMap,
/// where anyone who may read ConfigMaps in gantry's namespace could forge assignments. A
/// key an older gantry kept in the ConfigMap moves to the Secret (assignments sealed with
/// it stay trusted) and leaves the ConfigMap; while the Secret cannot be read, nothing is
/// placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_key_lives_in_a_secret_and_leaves_the_config_map() {
    let h = harness::harness().await;
    let key = format!("gantry-system/{CONFIG_MAP}");
    let legacy = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
    let old = Memory {
        seal_key: Some(legacy.into()),
        ..remembered()
    };
    h.api
        .set_config_map(&key, config_map(&serde_json::to_string(&old).unwrap()));
    let secret_path = format!("secrets/{}", cluster::seal_secret::SECRET);
    h.api.fault(&secret_path, Fault::Status(500));
    h.api
        .fault(&secret_path, Fault::Hang(Duration::from_secs(12)));
    let (_state, _dir) = h.lead(|| harness::NOW, Duration::from_millis(100));
    h.api
        .apply(Kind::Pods, gated("m-0", "alpha", "best_effort", 8, None));
    let start = Instant::now();
    while h.api.faults_left() > 0 {
        let writes: Vec<_> = h
            .api
            .writes()
            .into_iter()
            .filter(|(_, p)| !p.contains("leases"))
            .collect();
        assert!(
            writes.is_empty(),
            "written before the key was read: {writes:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(40), "faults not used");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Read at last: the Secret is made from the old key, the pod placed under it.
    while !h.pod("m-0")["spec"]["schedulingGates"].is_null() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not placed: {:?}",
            h.api.writes()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret = h
        .api
        .secret(&format!("gantry-system/{}", cluster::seal_secret::SECRET))
        .expect("the leader made the Secret");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(secret).unwrap();
    let made = cluster::seal_secret::key_of(&secret, "gantry-system").unwrap();
    assert_eq!(made.text(), legacy, "the old key was moved, not replaced");
    let pod = h.pod("m-0");
    let annotations = &pod["metadata"]["annotations"];
    assert!(made.verify(
        pod["metadata"]["uid"].as_str().unwrap(),
        annotations["gantry.dev/assigned-node"].as_str().unwrap(),
        annotations[cluster::seal::SEAL_ANNOTATION]
            .as_str()
            .unwrap(),
    ));
    let text = h.api.config_map(&key).unwrap()["data"][KEY].to_string();
    assert!(
        !text.contains(legacy) && !text.contains("seal_key"),
        "the key is still in the ConfigMap: {text}"
    );
    assert!(
        text.contains("alpha"),
        "the rest of the memory is kept: {text}"
    );
}

/// A memory that does not parse is started afresh, and its text is written back beside
/// the new one for a person to mend: nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_that_does_not_parse_is_kept_beside_the_new_one() {
    let h = harness::harness().await;
    let key = format!("gantry-system/{CONFIG_MAP}");
    h.api
        .set_config_map(&key, config_map("{\"usage\": [broken"));
    let mut memory = cluster::memory::load(&h.client, "gantry-system")
        .await
        .unwrap();
    assert_eq!(memory.unreadable.as_deref(), Some("{\"usage\": [broken"));
    assert!(memory.usage.is_empty());
    memory.usage = remembered().usage;
    cluster::memory::save(&h.client, "gantry-system", &memory)
        .await
        .unwrap();
    let cm = h.api.config_map(&key).unwrap();
    assert_eq!(cm["data"][UNREADABLE_KEY], json!("{\"usage\": [broken"));
    let again = cluster::memory::load(&h.client, "gantry-system")
        .await
        .unwrap();
    assert_eq!(again.usage, remembered().usage);
    // Only a missing ConfigMap reads as empty; a failed read is an error.
    h.api
        .fault(&format!("configmaps/{CONFIG_MAP}"), Fault::Status(500));
    assert!(cluster::memory::load(&h.client, "gantry-system")
        .await
        .is_err());
}

/// While hostile Nodes arrive and a watch line never ends, the service keeps answering
/// `/healthz` (and reads the view) without delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_answered_throughout() {
    use tower::ServiceExt;
    let api = FakeApi::new();
    api.apply(Kind::Nodes, node("n0"));
    let live = connect(&api, Duration::from_secs(10)).await.unwrap();
    let state = Arc::new(AppState::new(Box::new(|| harness::NOW)));
    state.refresh_inventory(&live).unwrap();
    let attack = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                let mut n = node(&format!("hostile-{i}"));
                n["metadata"]["labels"]["nvidia.com/gpu.count"] = json!("2000000000");
                n["status"]["allocatable"]["nvidia.com/gpu"] = json!("8Gi");
                api.apply(Kind::Nodes, n);
                if i == 5 {
                    api.fault("/api/v1/nodes?*watch=true", Fault::Garbage(70 << 20));
                    api.hang_up();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let asked = Instant::now();
        let request = axum::http::Request::builder()
            .uri("/healthz")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = serve::app::app(state.clone())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::OK);
        slowest = slowest.max(asked.elapsed());
        state.refresh_inventory(&live).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    attack.await.unwrap();
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
    let seen = until(&live, "every hostile node seen", |s| {
        s.notes
            .iter()
            .filter(|n| n.contains("the node is closed"))
            .count()
            >= 20
    })
    .await;
    assert_eq!(seen.fleet.nodes.len(), 1);
    assert!(
        peak_rss_mib() < PEAK_RSS_BOUND_MIB,
        "{} MiB",
        peak_rss_mib()
    );
}
