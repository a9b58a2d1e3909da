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
use http_body_util::BodyExt;
use serde_json::Value;
use serve::app::app;
use serve::state::{AppState, FleetFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A service on the onprem-dgx policy and fleet, at a fixed time.
fn loaded() -> Arc<AppState> {
    loaded_with(&repo().join("policies/onprem-dgx/fleet.toml"))
}

/// A service on the onprem-dgx policy and the given fleet file.
fn loaded_with(fleet: &Path) -> Arc<AppState> {
    let state = Arc::new(AppState::new(Box::new(|| 1_795_000_000)));
    let dir = repo().join("policies/onprem-dgx");
    state.reload_policy(&dir).unwrap();
    state
        .refresh_inventory(&FleetFile(fleet.to_path_buf()))
        .unwrap();
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

/// `/mutate`'s answer applied to the review's pod, as the API server applies it.
async fn mutated(state: &Arc<AppState>, review: &Value) -> Value {
    let (_, body) = call(state, "POST", "/mutate", review.to_string().into_bytes()).await;
    let answer = json(&body);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let mut pod = review["request"]["object"].clone();
    if let Some(patch) = answer["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut pod, &patch).unwrap();
    }
    pod
}

/// Issue 17: with `reinvocationPolicy: IfNeeded` the API server runs the Priority plugin
/// after the mutation and calls the webhook again on the mutated pod. That second call
/// must change nothing: the stored pod keeps the tier's priority and one toleration.
#[tokio::test]
async fn a_reinvoked_mutation_changes_nothing() {
    let state = loaded();
    let mut review = json(&fixture("routed_notebook.json"));
    let once = mutated(&state, &review).await;
    // The Priority admission plugin resolves the class to its value.
    let class = once["spec"]["priorityClassName"]
        .as_str()
        .unwrap()
        .to_string();
    let tier = class.trim_start_matches("gantry-").replace('-', "_");
    let priority = state
        .policy()
        .unwrap()
        .program
        .tier(&tier)
        .unwrap()
        .priority;
    let mut stored = once.clone();
    stored["spec"]["priority"] = priority.into();
    review["request"]["object"] = stored.clone();
    let twice = mutated(&state, &review).await;
    assert_eq!(twice, stored, "the reinvoked webhook changed the pod");
    assert_eq!(twice["spec"]["tolerations"].as_array().unwrap().len(), 1);
    assert_eq!(twice["spec"]["priority"], priority);
    // And a third time, for good measure.
    review["request"]["object"] = twice.clone();
    assert_eq!(mutated(&state, &review).await, twice);
    // The validating webhook then sees the stored pod too.
    let (_, body) = call(&state, "POST", "/admit", review.to_string().into_bytes()).await;
    assert_eq!(json(&body)["response"]["allowed"], true);
    // One pod, one decision counted: reinvocations and /admit after /mutate are not.
    let m = metrics(&state).await;
    let counted: u64 = m
        .lines()
        .filter(|l| l.starts_with("gantry_admission_decisions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(counted, 1, "{m}");
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
    // A wrong method is a JSON error too (invariant 12), not an empty 405.
    let (status, bytes) = call(&state, "GET", "/admit", Vec::new()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(json(&bytes)["error"].as_str().unwrap().contains("POST"));
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
    let brief = s["last_reload"]["error"].as_str().unwrap();
    assert!(brief.contains("nowhere"), "{brief}");
    // Issue 16, item 8: by default no absolute path and no source line.
    let root = std::env::temp_dir().display().to_string();
    assert!(!brief.contains(&root), "{brief}");
    assert!(!s["policy"]["directory"].as_str().unwrap().contains(&root));
    assert!(!brief.contains("│"), "{brief}");
    assert_eq!(s["detail"], false);
    // `--status-detail` shows both.
    let mut detailed = AppState::new(Box::new(|| 5));
    detailed.status_detail = true;
    let detailed = Arc::new(detailed);
    let _ = detailed.reload_policy(&dir);
    let (_, bytes) = call(&detailed, "GET", "/v1/status", Vec::new()).await;
    let full = json(&bytes)["last_reload"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(full.contains(&root) && full.contains("│"), "{full}");
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
    let good = ONE_POOL;
    let (dir, state, first) = watched("watch", good);
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

const ONE_POOL: &str =
    "use std.nodes.{dgx_h100}\npool p { capacity = reserved; node = dgx_h100; nodes = 1 }\n";

/// A scratch policy directory holding `text`, loaded and watched: (dir, state, revision).
fn watched(name: &str, text: &str) -> (PathBuf, Arc<AppState>, String) {
    let dir = scratch(name);
    std::fs::write(dir.join("main.gantry"), text).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 5)));
    let first = state.reload_policy(&dir).unwrap();
    serve::watch(state.clone(), &dir).unwrap();
    (dir, state, first)
}

/// Revisions the state served, sampled every 10 ms for `for_ms`.
async fn revisions_served(state: &Arc<AppState>, for_ms: u64) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..for_ms / 10 {
        let r = state.policy().unwrap().revision.clone();
        if seen.last() != Some(&r) {
            seen.push(r);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    seen
}

/// The revision `text` would have as the policy of a directory of its own.
fn revision_of(text: &str, name: &str) -> String {
    let dir = scratch(name);
    std::fs::write(dir.join("main.gantry"), text).unwrap();
    let (_, hash) = serve::state::read_policy(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    hash
}

/// Issue 16, item 4: a policy file written in two parts (the first ending at a line
/// boundary, itself a valid policy without the deny rule) is never served half-written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_written_in_two_parts_is_not_served_half_written() {
    let head = ONE_POOL;
    let rule = "rule too_big: deny if job.gpus > 8 gpu \"too big\"\n";
    let (dir, state, first) = watched("half-written", &format!("{head}{rule}"));
    let half = revision_of(head, "half-written-head");
    let whole = format!("{head}# edited\n{rule}");
    let full = revision_of(&whole, "half-written-full");
    let writer = {
        let path = dir.join("main.gantry");
        let whole = whole.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::create(&path).unwrap();
            f.write_all(head.as_bytes()).unwrap();
            f.sync_all().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
            f.write_all(&whole.as_bytes()[head.len()..]).unwrap();
        })
    };
    let seen = revisions_served(&state, 3000).await;
    writer.join().unwrap();
    assert!(
        !seen.contains(&half),
        "the half-written policy was served: {seen:?}"
    );
    assert_eq!(seen.first(), Some(&first));
    assert_eq!(
        seen.last(),
        Some(&full),
        "the whole policy goes live: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 16, item 4: a policy directory deleted and made again is watched again at once,
/// not left to the periodic check (the helper's is a day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_directory_made_again_is_watched_again() {
    let good = ONE_POOL;
    let (dir, state, first) = watched("remade", good);
    std::fs::remove_dir_all(&dir).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    assert_eq!(
        state.policy().unwrap().revision,
        first,
        "the last good policy keeps serving"
    );
    std::fs::create_dir_all(&dir).unwrap();
    let again = format!("{good}# made again\n");
    std::fs::write(dir.join("main.gantry"), &again).unwrap();
    let seen = revisions_served(&state, 4000).await;
    assert_eq!(
        seen.last(),
        Some(&revision_of(&again, "remade-expected")),
        "{seen:?}"
    );
    // And it is watched: the next edit is picked up too.
    let third = format!("{good}# edited after\n");
    std::fs::write(dir.join("main.gantry"), &third).unwrap();
    let seen = revisions_served(&state, 3000).await;
    assert_eq!(
        seen.last(),
        Some(&revision_of(&third, "remade-third")),
        "{seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A policy served through a symlink that is swapped to a new checkout, the way git-sync
/// updates `current` (a new worktree, then a rename over the link), is reloaded at once,
/// though the old checkout is never touched; the next swap too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_git_sync_checkout_is_reloaded() {
    use std::os::unix::fs::symlink;
    let root = scratch("git-sync");
    let checkout = |name: &str, text: &str| {
        let dir = root.join(".worktrees").join(name).join("policies/p");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.gantry"), text).unwrap();
    };
    let swap = |name: &str| {
        let tmp = root.join("tmp-link");
        symlink(format!(".worktrees/{name}"), &tmp).unwrap();
        std::fs::rename(&tmp, root.join("current")).unwrap();
    };
    checkout("a", ONE_POOL);
    swap("a");
    let served = root.join("current/policies/p");
    let state = Arc::new(AppState::new(Box::new(|| 5)));
    let first = state.reload_policy(&served).unwrap();
    serve::watch(state.clone(), &served).unwrap();
    for (i, name) in ["b", "c"].into_iter().enumerate() {
        let text = format!("{ONE_POOL}# commit {i}\n");
        checkout(name, &text);
        swap(name);
        let seen = revisions_served(&state, 3000).await;
        assert_eq!(
            seen.last(),
            Some(&revision_of(&text, &format!("git-sync-{name}"))),
            "swap to {name}: {seen:?}"
        );
        assert_ne!(seen.last(), Some(&first));
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Recorded kube-scheduler extender calls (`tests/extender/*.json`, ExtenderArgs) against
/// the onprem-dgx policy on `tests/extender/fleet.toml`; `filter_*` go to
/// `/extender/filter`, `prioritize_*` to `/extender/prioritize`.
#[tokio::test]
async fn recorded_extender_calls() {
    let dir = repo().join("tests/extender");
    let state = loaded_with(&dir.join("fleet.toml"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 8);
    for name in names {
        let case = name.trim_end_matches(".json");
        let verb = case.split('_').next().unwrap();
        let body = std::fs::read(dir.join(&name)).unwrap();
        let (code, answer) = call(&state, "POST", &format!("/extender/{verb}"), body).await;
        assert_eq!(
            code,
            StatusCode::OK,
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
        insta::assert_snapshot!(
            format!("extender_{case}"),
            serde_json::to_string_pretty(&json(&answer)).unwrap()
        );
    }
}

async fn extender(state: &Arc<AppState>, verb: &str, case: &str) -> Value {
    let body = std::fs::read(repo().join("tests/extender").join(format!("{case}.json"))).unwrap();
    json(
        &call(state, "POST", &format!("/extender/{verb}"), body)
            .await
            .1,
    )
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn extender_applies_policy_and_inventory() {
    let state = loaded_with(&repo().join("tests/extender/fleet.toml"));
    // Eight GPUs in the training pool: only the healthy full node; the node with two
    // failed GPUs might fit later, the rest never.
    let whole = extender(&state, "filter", "filter_whole_node").await;
    assert_eq!(whole["NodeNames"], serde_json::json!(["train-0"]));
    assert_eq!(keys(&whole["FailedNodes"]), ["train-1"]);
    assert_eq!(
        keys(&whole["FailedAndUnresolvableNodes"]),
        ["cpu-0", "infer-0", "nb-0", "nb-1", "train-2"]
    );
    assert!(whole["FailedAndUnresolvableNodes"]["cpu-0"]
        .as_str()
        .unwrap()
        .contains("not in gantry's inventory"));
    assert_eq!(whole["Error"], "");
    // 80Gi is more than an 80 GB H100 has (81,559 MiB): never, and the message says why.
    let vram = extender(&state, "filter", "filter_vram_above_model").await;
    assert_eq!(vram["NodeNames"], serde_json::json!([]));
    assert!(vram["FailedAndUnresolvableNodes"]["train-0"]
        .as_str()
        .unwrap()
        .contains("less than the 81920 MiB asked (gantry.dev/vram)"));
    // Node objects in, node objects out.
    let objects = extender(&state, "filter", "filter_node_objects").await;
    assert!(objects.get("NodeNames").is_none());
    assert_eq!(objects["Nodes"]["kind"], "NodeList");
    assert_eq!(objects["Nodes"]["items"][0]["metadata"]["name"], "train-0");
    assert_eq!(objects["Nodes"]["items"].as_array().unwrap().len(), 1);
    // A pod the policy denies fits nowhere, and says which rule.
    let denied = extender(&state, "filter", "filter_denied").await;
    assert_eq!(denied["NodeNames"], serde_json::json!([]));
    assert_eq!(keys(&denied["FailedAndUnresolvableNodes"]).len(), 7);
    assert!(denied["FailedAndUnresolvableNodes"]["train-0"]
        .as_str()
        .unwrap()
        .contains("denied by rule require_vram"));
    // Pods without GPUs are not gantry's business.
    let cpu = extender(&state, "filter", "filter_cpu_only").await;
    assert_eq!(cpu["NodeNames"].as_array().unwrap().len(), 7);
    // An interactive one-GPU session is routed to the notebooks pool: the plain A100 node.
    let notebook = extender(&state, "filter", "filter_routed_notebook").await;
    assert_eq!(notebook["NodeNames"], serde_json::json!(["nb-0"]));
    // A MIG instance only fits a GPU in MIG mode with free slots.
    let mig = extender(&state, "filter", "filter_mig").await;
    assert_eq!(mig["NodeNames"], serde_json::json!(["nb-1"]));
    // Scores are 0..=10; nodes outside the pool or not fitting get 0, the best gets 10.
    for case in ["prioritize_one_gpu", "prioritize_four_gpus"] {
        let scores = extender(&state, "prioritize", case).await;
        let scores = scores.as_array().unwrap();
        assert_eq!(scores.len(), 7, "{case}");
        let of = |host: &str| {
            scores.iter().find(|s| s["Host"] == host).unwrap()["Score"]
                .as_i64()
                .unwrap()
        };
        for host in ["infer-0", "nb-0", "nb-1", "cpu-0"] {
            assert_eq!(of(host), 0, "{case}: {host}");
        }
        assert!(scores
            .iter()
            .all(|s| (0..=10).contains(&s["Score"].as_i64().unwrap())));
        assert!(scores.iter().any(|s| s["Score"] == 10), "{case}");
    }
}

#[tokio::test]
async fn extender_bad_requests() {
    let state = loaded_with(&repo().join("tests/extender/fleet.toml"));
    for (verb, body) in [
        ("filter", "{not json"),
        ("filter", r#"{"NodeNames": ["a"]}"#),
        ("prioritize", r#"{"Pod": 3, "NodeNames": ["a"]}"#),
        (
            "prioritize",
            r#"{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}}, "NodeNames": ["train-0"]}"#,
        ),
    ] {
        let (code, answer) = call(&state, "POST", &format!("/extender/{verb}"), body.into()).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{verb} {body}");
        assert!(json(&answer)["error"].is_string(), "{verb} {body}");
    }
}

#[tokio::test]
async fn plan_requests_are_bounded_and_never_hold_up_admission() {
    let state = loaded();
    // 100,000 nodes × 64 GPUs in a request of under 200 bytes.
    let huge = br#"{"jobs": [], "fleet": {"nodes": [{"name": "n", "count": 100000, "cpu_milli": 1000, "memory_mib": 1000, "gpus": {"count": 64, "model": "H100-SXM5-80GB"}}]}}"#;
    let (status, bytes) = call(&state, "POST", "/v1/plan", huge.to_vec()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(json(&bytes)["error"]
        .as_str()
        .unwrap()
        .contains("100000 nodes"));
    let many_gpus = br#"{"jobs": [], "fleet": {"nodes": [{"name": "n", "count": 2000, "cpu_milli": 1000, "memory_mib": 1000, "gpus": {"count": 64, "model": "H100-SXM5-80GB"}}]}}"#;
    let (status, bytes) = call(&state, "POST", "/v1/plan", many_gpus.to_vec()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(json(&bytes)["error"]
        .as_str()
        .unwrap()
        .contains("128000 GPUs"));
    let gangs = br#"{"jobs": [{"id": "g", "team": "nlp", "tier": "standard", "members": 100000, "gpus_per_member": 1}, {"id": "h", "team": "nlp", "tier": "standard", "members": 100000, "gpus_per_member": 1}]}"#;
    let (status, bytes) = call(&state, "POST", "/v1/plan", gangs.to_vec()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(json(&bytes)["error"]
        .as_str()
        .unwrap()
        .contains("200000 members"));
    // One plan at a time; while one is computed, another is told to retry and admission
    // is answered as usual.
    let jobs = br#"{"jobs": [{"id": "a", "team": "nlp", "tier": "standard", "gpus_per_member": 8, "vram_mib": 40000, "checkpoint_interval_s": 900, "pools": ["training"], "submitted_at": 1794999000}]}"#;
    let held = state.plan_slot.clone().try_acquire_owned().unwrap();
    let (status, bytes) = call(&state, "POST", "/v1/plan", jobs.to_vec()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(json(&bytes)["error"].as_str().unwrap().contains("retry"));
    let (status, _) = call(&state, "POST", "/mutate", fixture("gpu_pod.json")).await;
    assert_eq!(status, StatusCode::OK);
    drop(held);
    let (status, _) = call(&state, "POST", "/v1/plan", jobs.to_vec()).await;
    assert_eq!(status, StatusCode::OK);
}

/// Issue 16, item 2: a plan at its limits is computed off the runtime (here a single
/// thread): admission is answered while it runs.
#[tokio::test]
async fn admission_is_answered_while_a_large_plan_computes() {
    let state = loaded();
    let jobs: Vec<String> = (0..4000)
        .map(|i| format!(r#"{{"id": "j{i}", "team": "nlp", "tier": "standard", "gpus_per_member": {}, "vram_mib": 40000, "checkpoint_interval_s": 900, "submitted_at": 1794999000}}"#, 1 << (i % 4)))
        .collect();
    let body = format!(
        r#"{{"jobs": [{}], "fleet": {{"nodes": [{{"name": "n", "count": 10000, "cpu_milli": 224000, "memory_mib": 2000000, "gpus": {{"count": 8, "model": "H100-SXM5-80GB"}}}}]}}}}"#,
        jobs.join(",")
    );
    let planning = {
        let state = state.clone();
        tokio::spawn(async move { call(&state, "POST", "/v1/plan", body.into_bytes()).await })
    };
    // Let the plan start, then admit.
    tokio::task::yield_now().await;
    let (status, _) = call(&state, "POST", "/mutate", fixture("gpu_pod.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !planning.is_finished(),
        "admission was answered while the plan computed"
    );
    let (status, bytes) = planning.await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(json(&bytes)["decisions"].as_array().unwrap().len(), 4000);
}

#[tokio::test]
async fn a_plan_past_its_deadline_is_answered_503() {
    let mut state = loaded();
    Arc::get_mut(&mut state).unwrap().plan_deadline = std::time::Duration::from_nanos(1);
    let jobs: Vec<String> = (0..3000)
        .map(|i| format!(r#"{{"id": "j{i}", "team": "nlp", "tier": "standard", "gpus_per_member": 1, "vram_mib": 40000, "checkpoint_interval_s": 900, "submitted_at": 1794999000}}"#))
        .collect();
    let body = format!(r#"{{"jobs": [{}]}}"#, jobs.join(","));
    let (status, bytes) = call(&state, "POST", "/v1/plan", body.into_bytes()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(json(&bytes)["error"]
        .as_str()
        .unwrap()
        .contains("took longer"));
}

#[tokio::test]
async fn a_reinvoked_mutation_keeps_the_class_and_priority_it_set() {
    let state = loaded();
    let revision = state.policy().unwrap().revision.clone();
    // The pod as the API server stores it after the first mutation: gantry's class, and
    // the priority the Priority plugin resolved from it. A tierless pod gets the default
    // tier's class (std.tiers: best_effort).
    let mut review: Value = serde_json::from_slice(&fixture("gpu_pod.json")).unwrap();
    let pod = &mut review["request"]["object"];
    pod["spec"]["priorityClassName"] = "gantry-standard".into();
    pod["spec"]["priority"] = 500.into();
    let (status, bytes) = call(&state, "POST", "/mutate", review.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    let ops = readable(json(&bytes), &revision)["response"]["patch"].to_string();
    assert!(!ops.contains("priorityClassName"), "{ops}");
    assert!(!ops.contains("/spec/priority"), "{ops}");
    let mut review: Value = serde_json::from_slice(&fixture("gpu_pod.json")).unwrap();
    let labels = review["request"]["object"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap();
    labels.remove("gantry.dev/tier");
    let (_, bytes) = call(&state, "POST", "/mutate", review.to_string().into_bytes()).await;
    let ops = readable(json(&bytes), &revision)["response"]["patch"].to_string();
    assert!(ops.contains("gantry-best-effort"), "{ops}");
}

#[tokio::test]
async fn an_update_of_a_pod_being_deleted_is_never_denied() {
    let state = loaded();
    // No team and an unknown tier: denied on create, but a pod being deleted passes.
    let mut review: Value = serde_json::from_slice(&fixture("gpu_pod.json")).unwrap();
    review["request"]["operation"] = "UPDATE".into();
    let pod = &mut review["request"]["object"];
    pod["metadata"]["labels"] = serde_json::json!({"gantry.dev/tier": "nope"});
    pod["metadata"]["deletionTimestamp"] = "2026-11-24T04:00:00Z".into();
    let (status, bytes) = call(&state, "POST", "/admit", review.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&bytes)["response"]["allowed"], true);
}

/// Issue 18: the queue's own patches — the assignment annotation, the gate removed and the
/// node affinity added, the eviction mark — are not judged again, so a pod the current
/// policy would refuse (vision may not run critical) is still placed and evicted. Issue
/// 51: only gantry's own identity may make them; anyone else is denied, naming the keys.
#[tokio::test]
async fn the_queues_own_patches_are_never_denied() {
    let state = loaded();
    let mut review: Value =
        serde_json::from_slice(&fixture("update_finalizer_removed.json")).unwrap();
    let old = review["request"]["object"].clone();
    review["request"]["oldObject"] = old;
    review["request"]["userInfo"] = serde_json::json!({
        "username": "system:serviceaccount:gantry-system:gantry",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:gantry-system"]
    });
    let pod = &mut review["request"]["object"];
    pod["metadata"]["annotations"] = serde_json::json!({
        "gantry.dev/assigned-node": "train-0",
        "gantry.dev/preempted": "reclaim: for ml/other"
    });
    pod["spec"]["affinity"] = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["train-0"]}]}]}}});
    let (status, bytes) = call(&state, "POST", "/admit", review.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json(&bytes)["response"]["allowed"],
        true,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    // The same patch from a user is denied, naming gantry's keys.
    review["request"]["userInfo"] = serde_json::json!({"username": "alice"});
    let (_, bytes) = call(&state, "POST", "/admit", review.to_string().into_bytes()).await;
    let answer = json(&bytes);
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("gantry.dev/assigned-node") && message.contains("gantry.dev/preempted"),
        "{message}"
    );
}

/// Issue 18: with `serve --queue` a GPU pod is created gated (`gantry.dev/queue`), other
/// gates kept; reinvoking adds nothing; CPU-only pods pass ungated.
#[tokio::test]
async fn with_the_queue_gpu_pods_are_created_gated() {
    let mut state = AppState::new(Box::new(|| 1_795_000_000));
    state.queue = true;
    let state = Arc::new(state);
    state
        .reload_policy(&repo().join("policies/onprem-dgx"))
        .unwrap();
    state
        .refresh_inventory(&FleetFile(repo().join("policies/onprem-dgx/fleet.toml")))
        .unwrap();
    let mut review = json(&fixture("gpu_pod.json"));
    let once = mutated(&state, &review).await;
    assert_eq!(
        once["spec"]["schedulingGates"],
        serde_json::json!([{"name": "gantry.dev/queue"}])
    );
    review["request"]["object"] = once.clone();
    assert_eq!(
        mutated(&state, &review).await,
        once,
        "reinvoked: no second gate"
    );
    // Another controller's gate stays, gantry's is added after it.
    let mut other = json(&fixture("gpu_pod.json"));
    other["request"]["object"]["spec"]["schedulingGates"] =
        serde_json::json!([{"name": "example.com/quota"}]);
    let gated = mutated(&state, &other).await;
    assert_eq!(
        gated["spec"]["schedulingGates"],
        serde_json::json!([{"name": "example.com/quota"}, {"name": "gantry.dev/queue"}])
    );
    let cpu = json(&fixture("cpu_only.json"));
    assert!(mutated(&state, &cpu).await["spec"]["schedulingGates"].is_null());
}

/// The JSON block that follows `after` in the README.
fn readme_json_after(after: &str) -> Value {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let at = readme
        .find(after)
        .unwrap_or_else(|| panic!("README shows `{after}`"));
    let rest = &readme[at..];
    let start = rest.find("```json\n").unwrap() + "```json\n".len();
    let end = start + rest[start..].find("```").unwrap();
    json(&rest.as_bytes()[start..end])
}

/// What differs from run to run (times, the policy's revision and commit, paths as the
/// working directory shows them) made equal.
fn steady(mut v: Value) -> Value {
    fn file_name(v: &mut Value) {
        match v {
            Value::String(s) => {
                *s = s
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("file:")
                    .into();
            }
            Value::Array(a) => a.iter_mut().for_each(file_name),
            _ => {}
        }
    }
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if ["at", "read_at", "loaded_at", "git_commit", "revision"]
                        .contains(&k.as_str())
                    {
                        *x = Value::Null;
                    } else if ["directory", "files", "source"].contains(&k.as_str()) {
                        file_name(x);
                    } else {
                        walk(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::String(s) if s.starts_with("fnv1a") => *s = "fnv1a".into(),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// Issue 23: the README's curl examples show what the service answers: `/v1/status`, the
/// `/mutate` response for `tests/admission/gpu_pod.json`, and its patch decoded.
#[tokio::test]
async fn the_readme_curl_examples_are_what_the_service_answers() {
    let state = loaded();
    let (_, status) = call(&state, "GET", "/v1/status", Vec::new()).await;
    assert_eq!(
        steady(json(&status)),
        steady(readme_json_after(
            "curl -s http://127.0.0.1:8080/v1/status\n"
        ))
    );
    let (_, mutated) = call(&state, "POST", "/mutate", fixture("gpu_pod.json")).await;
    let mutated = json(&mutated);
    let shown = readme_json_after(
        "curl -s -X POST http://127.0.0.1:8080/mutate --data-binary @tests/admission/gpu_pod.json\n```",
    );
    assert_eq!(
        steady(mutated["response"]["allowed"].clone()),
        steady(shown["response"]["allowed"].clone())
    );
    let decode = |v: &Value| -> Value {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["response"]["patch"].as_str().unwrap())
            .unwrap();
        json(&bytes)
    };
    assert_eq!(steady(decode(&mutated)), steady(decode(&shown)));
    assert_eq!(
        steady(decode(&mutated)),
        steady(readme_json_after(
            "| jq -r .response.patch | base64 -d | jq .\n"
        ))
    );
}
