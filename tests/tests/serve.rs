//! `gantry serve` without a socket: the axum app driven with `oneshot`. Recorded
//! AdmissionReview requests (`tests/admission/*.json`: a GPU pod, a MIG pod, a gang member,
//! a CPU-only pod, a dry run, an UPDATE, denied pods, a routed notebook) are answered by
//! the onprem-dgx policy; the responses are snapshotted with the JSON Patch decoded.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use engine::serve::app::app;
use engine::serve::state::{AppState, FleetFile, Inventory, InventorySource};
use http_body_util::BodyExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A service on the onprem-dgx policy and fleet, at a fixed time.
fn loaded() -> Arc<AppState> {
    let state = Arc::new(AppState::new(Box::new(|| 1_795_000_000)));
    let dir = repo().join("policies/onprem-dgx");
    state.reload_policy(&dir).unwrap();
    let source = FleetFile(dir.join("fleet.toml"));
    state.set_inventory(Inventory {
        fleet: Arc::new(source.read().unwrap()),
        source: source.name(),
        read_at: 1_795_000_000,
        error: None,
    });
    state
}

async fn call(
    state: &Arc<AppState>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes.to_vec())
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("tests/admission").join(name)).unwrap()
}

/// The response with its patch decoded and the policy revision replaced, for snapshots.
fn readable(mut v: Value, revision: &str) -> Value {
    if let Some(patch) = v["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("standard base64");
        let ops: Value = serde_json::from_slice(&bytes).expect("the patch is JSON");
        assert!(ops.is_array(), "a JSON Patch is an array of operations");
        v["response"]["patch"] = ops;
    }
    let text = v
        .to_string()
        .replace(&revision.replace(':', "-"), "<revision>");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn recorded_admission_reviews() {
    let state = loaded();
    let revision = state.policy().unwrap().revision.clone();
    let mut names: Vec<String> = std::fs::read_dir(repo().join("tests/admission"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 9);
    for name in names {
        let case = name.trim_end_matches(".json");
        let (code, body) = call(&state, "POST", "/mutate", fixture(&name)).await;
        assert_eq!(code, StatusCode::OK, "{case}");
        let response = json(&body);
        let request = json(&fixture(&name));
        assert_eq!(
            response["response"]["uid"], request["request"]["uid"],
            "{case}: uid echoed"
        );
        assert_eq!(response["apiVersion"], "admission.k8s.io/v1");
        insta::assert_snapshot!(
            format!("admission_mutate_{case}"),
            serde_json::to_string_pretty(&readable(response, &revision)).unwrap()
        );
        // `/admit` answers the same, without a patch.
        let (_, body) = call(&state, "POST", "/admit", fixture(&name)).await;
        let validating = json(&body);
        assert!(validating["response"].get("patch").is_none(), "{case}");
        assert_eq!(
            validating["response"]["allowed"],
            json(&call(&state, "POST", "/mutate", fixture(&name)).await.1)["response"]["allowed"]
        );
    }
}

#[tokio::test]
async fn admission_outcomes() {
    let state = loaded();
    let mutate = |name: &'static str| {
        let state = state.clone();
        async move { json(&call(&state, "POST", "/mutate", fixture(name)).await.1)["response"].clone() }
    };
    let cpu = mutate("cpu_only.json").await;
    assert_eq!(cpu["allowed"], true);
    assert!(
        cpu.get("patch").is_none(),
        "pods without GPUs pass untouched"
    );
    let denied = mutate("denied_no_checkpoint.json").await;
    assert_eq!(denied["allowed"], false);
    assert!(denied["status"]["message"]
        .as_str()
        .unwrap()
        .contains("rule checkpoint_for_standard"));
    let update = mutate("update.json").await;
    assert_eq!(update["allowed"], true);
    assert!(
        update.get("patch").is_none(),
        "an UPDATE is validated, not mutated"
    );
    // A dry run is answered like any request but not counted as a decision.
    let before = metrics(&state).await;
    mutate("dry_run.json").await;
    let after = metrics(&state).await;
    let allowed = |m: &str| {
        m.lines()
            .find(|l| {
                l.starts_with(
                    "gantry_admission_decisions_total{action=\"allow\",reason=\"allowed\"}",
                )
            })
            .map(str::to_string)
    };
    assert_eq!(allowed(&before), allowed(&after));
    mutate("gpu_pod.json").await;
    assert_ne!(allowed(&after), allowed(&metrics(&state).await));
}

async fn metrics(state: &Arc<AppState>) -> String {
    String::from_utf8(call(state, "GET", "/metrics", Vec::new()).await.1).unwrap()
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let state = loaded();
    for (body, code, want) in [
        (b"{not json".to_vec(), StatusCode::BAD_REQUEST, "not an AdmissionReview"),
        (br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}"#.to_vec(), StatusCode::BAD_REQUEST, "expected apiVersion admission.k8s.io/v1"),
        (br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(), StatusCode::BAD_REQUEST, "has no `request`"),
        (vec![b' '; 2 * 1024 * 1024], StatusCode::PAYLOAD_TOO_LARGE, "over the 1048576-byte limit"),
    ] {
        let (status, bytes) = call(&state, "POST", "/admit", body).await;
        assert_eq!(status, code, "{want}");
        let v = json(&bytes);
        assert!(v["error"].as_str().unwrap().contains(want), "{v}");
    }
    let (status, bytes) = call(&state, "GET", "/nowhere", Vec::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(json(&bytes)["error"].is_string());
    let (status, bytes) = call(&state, "POST", "/v1/plan", br#"{"jobs": "none"}"#.to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json(&bytes)["error"]
        .as_str()
        .unwrap()
        .contains("`jobs` is required"));
    let m = metrics(&state).await;
    assert!(
        m.contains("gantry_requests_total{endpoint=\"/admit\",code=\"400\"} 3"),
        "{m}"
    );
    assert!(
        m.contains("gantry_requests_total{endpoint=\"/admit\",code=\"413\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("gantry_gpus{model=\"H100-SXM5-80GB\",health=\"healthy\"} 160"),
        "{m}"
    );
    assert!(m.contains("gantry_policy_info{revision=\"fnv1a:"), "{m}");
}

#[tokio::test]
async fn plan_status_and_readiness() {
    let empty = Arc::new(AppState::new(Box::new(|| 0)));
    let (status, _) = call(&empty, "GET", "/readyz", Vec::new()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let state = loaded();
    let (status, _) = call(&state, "GET", "/readyz", Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    let jobs = br#"{"jobs": [{"id": "a", "team": "nlp", "tier": "standard", "gpus_per_member": 8, "vram_mib": 40000, "checkpoint_interval_s": 900, "pools": ["training"], "submitted_at": 1794999000}]}"#;
    let (status, bytes) = call(&state, "POST", "/v1/plan", jobs.to_vec()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let plan = json(&bytes);
    assert_eq!(plan["decisions"][0]["action"], "place");
    assert_eq!(plan["now"], 1_795_000_000);
    assert!(plan["policy_revision"]
        .as_str()
        .unwrap()
        .starts_with("fnv1a:"));
    let (_, bytes) = call(&state, "GET", "/v1/status", Vec::new()).await;
    let s = json(&bytes);
    assert_eq!(s["inventory"]["gpus"], 176);
    assert_eq!(s["policy"]["files"].as_array().unwrap().len(), 3);
    assert_eq!(s["last_reload"]["ok"], true);
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gantry-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_bad_policy_never_replaces_the_running_one() {
    let dir = scratch("reload");
    let good = "use std.nodes.{dgx_h100}\nuse std.tiers\npool p { capacity = reserved; node = dgx_h100; nodes = 1 }\n";
    std::fs::write(dir.join("main.gantry"), good).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 5)));
    let first = state.reload_policy(&dir).unwrap();
    std::fs::write(
        dir.join("main.gantry"),
        "pool p { capacity = reserved; node = nowhere; nodes = 1 }\n",
    )
    .unwrap();
    let error = state.reload_policy(&dir).unwrap_err();
    assert!(error.contains("the last good one keeps serving"), "{error}");
    assert_eq!(state.policy().unwrap().revision, first);
    let (_, bytes) = call(&state, "GET", "/v1/status", Vec::new()).await;
    let s = json(&bytes);
    assert_eq!(s["last_reload"]["ok"], false);
    assert!(s["last_reload"]["error"]
        .as_str()
        .unwrap()
        .contains("nowhere"));
    assert_eq!(s["policy"]["revision"], first.as_str());
    // Deleting the only file is a change like any other: refused, the old one serves.
    std::fs::remove_file(dir.join("main.gantry")).unwrap();
    assert!(state.reload_policy(&dir).is_err());
    assert_eq!(state.policy().unwrap().revision, first);
    std::fs::write(
        dir.join("main.gantry"),
        format!("{good}# a comment changes the revision\n"),
    )
    .unwrap();
    let second = state.reload_policy(&dir).unwrap();
    assert_ne!(second, first);
    let m = metrics(&state).await;
    assert!(
        m.contains("gantry_policy_reloads_total{result=\"failed\"} 2"),
        "{m}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_changes_are_picked_up_by_the_watcher() {
    let dir = scratch("watch");
    let good =
        "use std.nodes.{dgx_h100}\npool p { capacity = reserved; node = dgx_h100; nodes = 1 }\n";
    std::fs::write(dir.join("main.gantry"), good).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 5)));
    let first = state.reload_policy(&dir).unwrap();
    let _watcher = engine::serve::watch(state.clone(), &dir).unwrap();
    std::fs::write(dir.join("main.gantry"), format!("{good}# changed\n")).unwrap();
    let mut waited = 0;
    while state.policy().unwrap().revision == first && waited < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited += 1;
    }
    assert_ne!(
        state.policy().unwrap().revision,
        first,
        "the watcher reloads the policy"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
