//! The RBAC in `examples/kubernetes/` covers every request gantry makes: the queue runs
//! its own loop (watches, a gang waiting then placed, a reclaim by eviction, Events, the
//! Lease, the memory ConfigMap) against the in-process API server, which notes every
//! request; each must be allowed by `rbac.yaml` + `rbac-queue.yaml`.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::rbac::{needs, rules, Rule};
use harness::*;
use serde_json::json;
use serve::state::AppState;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn paths_map_to_the_rules_the_authorizer_checks() {
    let r = |g: &str, res: &str, v: &str| (g.to_string(), res.to_string(), v.to_string());
    assert_eq!(needs("GET", "/api/v1/pods", true), r("", "pods", "watch"));
    assert_eq!(needs("GET", "/api/v1/nodes", false), r("", "nodes", "list"));
    assert_eq!(
        needs("POST", "/api/v1/namespaces/ml/pods/p/eviction", false),
        r("", "pods/eviction", "create")
    );
    assert_eq!(
        needs(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/g/leases/q",
            false
        ),
        r("coordination.k8s.io", "leases", "update")
    );
    assert_eq!(
        needs("GET", "/apis/batch/v1/jobs", true),
        r("batch", "jobs", "watch")
    );
    let yaml = "rules:\n  - apiGroups: [\"\"]\n    resources: [\"pods\", \"nodes\"]\n    verbs: [\"get\"]\n";
    assert_eq!(
        rules(yaml),
        [r("", "nodes", "get"), r("", "pods", "get")].into()
    );
}

/// Waits (up to 15 s) until `done`.
async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(15), "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_rbac_allows_every_request_the_queue_makes() {
    // The test policy with an autoscaled pool: capacity is driven through placeholders.
    let policy = format!(
        "{POLICY}\npool spot {{ capacity = spot; node = dgx_h100; nodes = 0..2; cost = 40 $/h }}\nautoscale spot {{ up when pending_nodes(fits = spot) > 0 => add pending_nodes(fits = spot) }}\n"
    );
    let h = harness_with(&policy, Some(cluster::capacity::PAUSE_IMAGE.into())).await;
    // A placeholder left over from before: the queue deletes it.
    let mut stray = cluster::capacity::placeholder(
        &cluster::capacity::Settings {
            namespace: "gantry-system".into(),
            pool_label: "gantry.dev/pool".into(),
            image: cluster::capacity::PAUSE_IMAGE.into(),
            provisioning: None,
        },
        "spot",
        "gantry-placeholder-spot-9",
        8,
        "left over",
    );
    stray["metadata"]["uid"] = json!("uid-stray");
    stray["spec"]["priority"] = json!(-1);
    h.api.apply(Kind::Pods, stray);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), &policy).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| NOW)));
    state.reload_policy(dir.path()).unwrap();
    let election = cluster::lease::Election {
        duration: Duration::from_millis(1_500),
        renew: Duration::from_millis(200),
        ..cluster::lease::Election::new("gantry-system", "replica-a")
    };
    // Two of std.tiers' three classes exist, one with another value than its tier's.
    let class = |name: &str, value: i32| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": name}, "value": value})
    };
    h.api
        .apply(Kind::PriorityClasses, class("gantry-critical", 1000));
    h.api
        .apply(Kind::PriorityClasses, class("gantry-standard", 900));
    h.live
        .start_queue_with(state, election, Duration::from_millis(100));
    until("the tiers' classes are checked", || {
        !h.live.stores().class_notes.is_empty()
    })
    .await;
    let notes = h.live.stores().class_notes.clone();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains("`gantry-standard` has value 900"),
        "{notes:?}"
    );
    assert!(
        notes[1].contains("`gantry-best-effort` does not exist"),
        "{notes:?}"
    );
    // alpha borrows the whole cluster with a Job of two 8-GPU pods; the first waits.
    h.api.apply(
        Kind::Jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-job-train"},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": []}}}}),
    );
    let member = |name: &str| {
        let mut pod = gated(name, "alpha", "best_effort", 8, None);
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": "train", "uid": "uid-job-train", "controller": true}]);
        pod
    };
    h.api.apply(Kind::Pods, member("train-0"));
    until("train-0 waits", || waiting(&h.pod("train-0")).is_some()).await;
    h.api.apply(Kind::Pods, member("train-1"));
    until("the gang is released", || {
        h.pod("train-0")["spec"]["schedulingGates"].is_null()
            && h.pod("train-1")["spec"]["schedulingGates"].is_null()
    })
    .await;
    h.api.bind_released();
    // beta reclaims its guarantee: the gang is evicted whole, then beta is placed.
    h.api
        .apply(Kind::Pods, gated("b", "beta", "standard", 8, None));
    until("the reclaim evicts the whole gang", || {
        ["train-0", "train-1"]
            .iter()
            .all(|p| h.pod(p)["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    h.api.finish_deletions();
    until("beta is released", || {
        h.pod("b")["spec"]["schedulingGates"].is_null()
    })
    .await;
    // Work pinned to the autoscaled pool, which has no nodes: it is asked for one.
    let mut pinned = gated("s", "alpha", "best_effort", 8, None);
    pinned["spec"]["nodeSelector"] = json!({"gantry.dev/pool": "spot"});
    h.api.apply(Kind::Pods, pinned);
    until("a placeholder is created", || {
        h.api
            .pods()
            .keys()
            .any(|k| k.starts_with("gantry-system/gantry-placeholder-spot-0"))
    })
    .await;
    until("the memory is saved", || {
        h.api.config_map("gantry-system/gantry-state").is_some()
    })
    .await;

    until("the stray placeholder is gone", || {
        h.api
            .get_object(Kind::Pods, "gantry-system/gantry-placeholder-spot-9")
            .is_none()
    })
    .await;
    let allowed = apiserver::rbac::example_rules(&["rbac.yaml", "rbac-queue.yaml"]);
    let needed: BTreeSet<Rule> = h
        .api
        .requests()
        .iter()
        .map(|(m, p, w)| needs(m, p, *w))
        .collect();
    let missing: Vec<&Rule> = needed.difference(&allowed).collect();
    assert!(
        missing.is_empty(),
        "requests the example RBAC does not allow: {missing:?}"
    );
    // The scenario reached every kind of request the queue makes.
    for (g, r, v) in [
        ("", "nodes", "watch"),
        ("", "pods", "watch"),
        ("batch", "jobs", "watch"),
        ("", "pods", "patch"),
        ("", "pods/status", "patch"),
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "create"),
        ("", "configmaps", "patch"),
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "nodes", "patch"),
    ] {
        assert!(
            needed.contains(&(g.to_string(), r.to_string(), v.to_string())),
            "the scenario made no {v} on {g}/{r}: {needed:?}"
        );
    }
}
