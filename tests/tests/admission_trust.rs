//! Recorded AdmissionReviews (`tests/admission_trust/cases/*.json`, with `userInfo`) for
//! every way around gantry's tenancy that the webhooks close, and the honest variants
//! beside them, judged against a policy whose teams are bound to namespaces and
//! identities (`tests/admission_trust/policy/`) with the queue on.
//!
//! Each case carries `expect`: what `/mutate` says (`allow`, `deny` or `skip` when the
//! case is about a pod the mutating webhook never saw), what `/admit` says of the pod as
//! the API server hands it over (after `/mutate`'s patch when it allowed), and `says`, a
//! text every denial must hold. Responses are snapshotted, patches decoded.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
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
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn state() -> Arc<AppState> {
    let mut state = AppState::new(Box::new(|| 1_795_000_000));
    state.queue = true;
    let state = Arc::new(state);
    state
        .reload_policy(&repo().join("tests/admission_trust/policy"))
        .unwrap();
    state
        .refresh_inventory(&FleetFile(repo().join("policies/onprem-dgx/fleet.toml")))
        .unwrap();
    state
}

async fn call(state: &Arc<AppState>, path: &str, body: &Value) -> Value {
    let request = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// The JSON Patch of an answer, decoded.
fn patch(answer: &Value) -> Option<Value> {
    let text = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

fn verdict(answer: &Value) -> &'static str {
    if answer["response"]["allowed"] == true {
        "allow"
    } else {
        "deny"
    }
}

fn check(case: &str, who: &str, answer: &Value, expect: &Value) {
    let want = expect[who].as_str().unwrap();
    assert_eq!(verdict(answer), want, "{case}: {who}: {answer}");
    if want == "deny" {
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        let says = expect["says"].as_str().unwrap_or("gantry:");
        assert!(message.contains(says), "{case}: {who}: {message}");
        assert_eq!(answer["response"]["status"]["code"], 403, "{case}: {who}");
    }
}

#[tokio::test]
async fn recorded_tenancy_reviews() {
    let state = state();
    let dir = repo().join("tests/admission_trust/cases");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{} cases", names.len());
    for path in names {
        let case = path.file_stem().unwrap().to_string_lossy().into_owned();
        let review: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let expect = review["expect"].clone();
        assert_eq!(
            case.starts_with("allow"),
            expect["admit"] == "allow" || expect["mutate"] == "allow",
            "{case}: the name says what is expected"
        );
        let mut snapshot = serde_json::json!({});
        let mut seen_by_admit = review.clone();
        if expect["mutate"] != "skip" {
            let mut mutated = call(&state, "/mutate", &review).await;
            check(&case, "mutate", &mutated, &expect);
            if let Some(ops) = patch(&mutated) {
                let ops: json_patch::Patch = serde_json::from_value(ops.clone()).unwrap();
                let pod = &mut seen_by_admit["request"]["object"];
                json_patch::patch(pod, &ops).unwrap();
                mutated["response"]["patch"] = patch(&mutated).unwrap();
            }
            snapshot["mutate"] = mutated["response"].clone();
        }
        if expect["admit"] != "skip" {
            let admitted = call(&state, "/admit", &seen_by_admit).await;
            check(&case, "admit", &admitted, &expect);
            assert!(admitted["response"].get("patch").is_none(), "{case}");
            snapshot["admit"] = admitted["response"].clone();
        }
        let text = serde_json::to_string_pretty(&snapshot).unwrap().replace(
            &state.policy().unwrap().revision.replace(':', "-"),
            "<revision>",
        );
        insta::assert_snapshot!(format!("admission_trust_{case}"), text);
    }
}

/// The team a pod's namespace decides is written on it, so the queue charges that team.
#[tokio::test]
async fn the_namespace_decides_the_team_label() {
    let state = state();
    let path = repo().join("tests/admission_trust/cases/allow_team_from_namespace.json");
    let review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let answer = call(&state, "/mutate", &review).await;
    let ops = patch(&answer).unwrap();
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/metadata/labels/gantry.dev~1team" && op["value"] == "vision"),
        "{ops}"
    ); // Reinvoked on the pod it mutated, the webhook changes nothing.
    let apply = |pod: &mut Value, ops: Value| {
        let ops: json_patch::Patch = serde_json::from_value(ops).unwrap();
        json_patch::patch(pod, &ops).unwrap();
    };
    let mut once = review["request"]["object"].clone();
    apply(&mut once, ops);
    let mut again = review.clone();
    again["request"]["object"] = once.clone();
    let answer = call(&state, "/mutate", &again).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let mut twice = once.clone();
    if let Some(ops) = patch(&answer) {
        apply(&mut twice, ops);
    }
    assert_eq!(twice, once, "the reinvoked webhook changed the pod");
}

/// An update of a pod being deleted is never refused, whatever it changes: a finalizer's
/// owner must be able to let the pod go.
#[tokio::test]
async fn updates_of_pods_being_deleted_pass() {
    let state = state();
    let path =
        repo().join("tests/admission_trust/cases/deny_revision_and_assignment_stripped.json");
    let mut review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    review["request"]["object"]["metadata"]["deletionTimestamp"] = "2026-11-24T04:00:00Z".into();
    for endpoint in ["/admit", "/mutate"] {
        let answer = call(&state, endpoint, &review).await;
        assert_eq!(answer["response"]["allowed"], true, "{endpoint}: {answer}");
    }
}

/// The shipped validating webhook is not sent gantry's own writes (issue 52): a dead
/// replica behind a fail-closed webhook must not stall the queue. The identity it spares
/// is the one `/admit` trusts by default.
#[test]
fn the_shipped_validating_webhook_spares_gantrys_own_identity() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/kubernetes/webhooks.yaml");
    let text = std::fs::read_to_string(file).unwrap();
    let validating = text
        .split("\n---\n")
        .find(|d| d.contains("kind: ValidatingWebhookConfiguration"))
        .unwrap();
    let spared = format!(
        "request.userInfo.username != '{}'",
        serve::trust::DEFAULT_CONTROLLER
    );
    assert!(validating.contains(&spared), "{validating}");
}
