//! The controller plans a pod with the runtime it declares, as `gantry simulate` plans an
//! imported pod: its `gantry.dev/runtime` estimate, bounded by its
//! `activeDeadlineSeconds` (the limit the kubelet enforces). An estimate is a claim no one
//! enforces, so a pod that has run past it is planned with its deadline, and with no
//! estimate past that.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::Kind;
use cluster::controller;
use harness::*;
use serde_json::json;

fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_is_planned_with_its_declared_runtime_then_its_deadline() {
    let h = harness().await;
    let mut run = gated("run", "alpha", "standard", 8, None);
    run["metadata"]["annotations"] = json!({"gantry.dev/runtime": "10m"});
    run["spec"]["activeDeadlineSeconds"] = json!(3600);
    h.api.apply(Kind::Pods, run);
    h.cycle_at(NOW).await;
    assert_eq!(h.api.bind_released_at(&rfc3339(NOW)), 1);
    // A 2×8 gang waits for run's node: its ETA is run's end as declared.
    h.gang("g", "alpha", 2, 8);
    let eta_at = |now: i64| {
        h.api.finish_deletions();
        let (view, plan, _) =
            controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, now).unwrap();
        let run = view.jobs.iter().find(|j| j.id.ends_with("run")).unwrap();
        let gang = plan
            .decisions
            .iter()
            .find(|d| d.job.ends_with('g'))
            .unwrap();
        let eta = gang.reason.as_ref().and_then(|r| r.eta_s);
        (run.runtime_s, eta)
    };
    h.settle().await;
    // Inside its estimate: 10 minutes from its start.
    assert_eq!(eta_at(NOW + 60), (Some(600), Some(540)));
    // Past it: its deadline, an hour from its start.
    assert_eq!(eta_at(NOW + 700), (Some(3600), Some(2900)));
    // Past the deadline too (no kubelet here to end it): nothing to go by.
    let (runtime, eta) = eta_at(NOW + 3700);
    assert_eq!(runtime, None);
    assert_eq!(eta, None, "no ETA from a runtime no one declares");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_does_not_read_keeps_the_pod_out_with_the_reason() {
    let h = harness().await;
    let mut pod = gated("soon", "alpha", "standard", 1, None);
    pod["metadata"]["annotations"] = json!({"gantry.dev/runtime": "soon"});
    h.api.apply(Kind::Pods, pod);
    h.settle().await;
    let (view, _, _) = controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, NOW).unwrap();
    let u = view
        .unqueued
        .iter()
        .find(|u| u.pod.ends_with("soon"))
        .unwrap();
    assert_eq!(u.reason, "InvalidLabels");
    assert!(
        u.message.contains("gantry.dev/runtime: soon"),
        "{}",
        u.message
    );
}
