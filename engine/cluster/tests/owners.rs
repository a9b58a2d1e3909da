//! Gangs from the pods' owners: a `batch/v1` Job's parallelism and a JobSet's Jobs make
//! one gang, admitted whole, with no gantry label on the pods; a pod's own
//! `gantry.dev/gang-size` wins; a pod whose Job is not in the view yet waits.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use cluster::controller;
use cluster::owners::{self, Membership, Owners};
use harness::*;
use k8s_openapi::api::batch::v1::Job;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A `batch/v1` Job as the API server returns it.
fn job(name: &str, parallelism: u32, completions: Option<u32>, jobset: Option<&str>) -> Value {
    let mut labels = json!({});
    if let Some(set) = jobset {
        labels["jobset.sigs.k8s.io/jobset-name"] = json!(set);
    }
    let mut spec = json!({"parallelism": parallelism, "template": {"spec": {"containers": []}}});
    if let Some(c) = completions {
        spec["completions"] = json!(c);
        spec["completionMode"] = json!("Indexed");
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-job-{name}"), "labels": labels},
        "spec": spec, "status": {"active": 0}})
}

/// A gated 8-GPU pod of Job `owner`, labelled the way the Job controller labels it.
fn job_pod(name: &str, owner: &str, jobset: Option<&str>) -> Value {
    let mut pod = gated(name, "alpha", "best_effort", 8, None);
    pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!(owner);
    pod["metadata"]["labels"]["job-name"] = json!(owner);
    if let Some(set) = jobset {
        pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = json!(set);
    }
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": owner, "uid": format!("uid-job-{owner}"), "controller": true, "blockOwnerDeletion": true}]);
    pod
}

#[test]
fn a_jobs_size_is_its_parallelism_capped_by_the_completions_left() {
    let size = |v: Value| owners::job(&serde_json::from_value::<Job>(v).unwrap()).size;
    assert_eq!(size(job("a", 4, None, None)), 4, "work queue: parallelism");
    assert_eq!(size(job("b", 4, Some(4), None)), 4);
    assert_eq!(size(job("c", 8, Some(3), None)), 3, "fewer completions");
    let mut done = job("d", 4, Some(10), None);
    done["status"]["succeeded"] = json!(8);
    assert_eq!(size(done), 2, "two completions left");
    let mut parallel0 = job("e", 0, None, None);
    parallel0["spec"]["parallelism"] = json!(0);
    assert_eq!(size(parallel0), 1, "a paused Job's pods are still one each");
    let mut none = job("f", 1, None, None);
    none["spec"].as_object_mut().unwrap().remove("parallelism");
    assert_eq!(size(none), 1, "parallelism defaults to 1");
}

#[test]
fn membership_prefers_the_pods_own_labels_then_its_job_then_its_jobset() {
    let jobs: BTreeMap<String, owners::OwnerJob> = [
        job("solo", 1, None, None),
        job("pair", 2, Some(2), None),
        job("js-leader", 1, None, Some("js")),
        job("js-workers", 3, Some(3), Some("js")),
    ]
    .into_iter()
    .map(|v| {
        let j = owners::job(&serde_json::from_value::<Job>(v).unwrap());
        (format!("ml/{}", j.name), j)
    })
    .collect();
    let o = Owners::new(Some(&jobs));
    let seen = |v: Value| cluster::pods::pod(&serde_json::from_value(v).unwrap());
    assert_eq!(
        o.membership(&seen(job_pod("solo-0", "solo", None))),
        Membership::Single
    );
    assert_eq!(
        o.membership(&seen(job_pod("pair-0", "pair", None))),
        Membership::Gang("ml/pair".into(), 2)
    );
    assert_eq!(
        o.membership(&seen(job_pod("js-workers-0", "js-workers", Some("js")))),
        Membership::Gang("ml/js".into(), 4),
        "a JobSet's Jobs are one gang"
    );
    assert_eq!(
        o.membership(&seen(job_pod("x-0", "missing", None))),
        Membership::OwnerUnseen("ml/missing".into())
    );
    let mut one = job_pod("pair-1", "pair", None);
    one["metadata"]["labels"]["gantry.dev/gang-size"] = json!("1");
    assert_eq!(
        o.membership(&seen(one)),
        Membership::Single,
        "the pod's own size wins"
    );
    let mut labelled = job_pod("js-leader-0", "js-leader", Some("js"));
    labelled["metadata"]["labels"]["gantry.dev/gang-size"] = json!("5");
    assert_eq!(
        o.membership(&seen(labelled)),
        Membership::Gang("ml/js".into(), 5),
        "with a declared size the JobSet label names the gang, not the child Job"
    );
    assert_eq!(
        Owners::new(None).membership(&seen(job_pod("pair-0", "pair", None))),
        Membership::Single,
        "Jobs not watched: pods go by their own labels"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_pods_are_admitted_whole() {
    let h = harness().await;
    h.api.apply(Kind::Jobs, job("train", 2, Some(2), None));
    h.api.apply(Kind::Pods, job_pod("train-0", "train", None));
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["wait train-0"]);
    let (reason, message) = waiting(&h.pod("train-0")).unwrap();
    assert_eq!(reason, "GangIncomplete", "{message}");
    assert!(
        message.contains("1 of its 2 members has arrived"),
        "{message}"
    );

    h.api.apply(Kind::Pods, job_pod("train-1", "train", None));
    let (actions, done) = h.cycle().await;
    assert_eq!(
        kinds(&actions),
        [
            "assign train-0",
            "assign train-1",
            "release train-0",
            "release train-1"
        ]
    );
    assert_eq!(done, 4);
    assert_eq!(h.api.bind_released(), 2);
    let (actions, _) = h.cycle().await;
    assert!(actions.is_empty(), "{actions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_of_a_jobset_are_one_gang() {
    let h = harness().await;
    h.api
        .apply(Kind::Jobs, job("js-leader", 1, Some(1), Some("js")));
    h.api
        .apply(Kind::Jobs, job("js-workers", 1, Some(1), Some("js")));
    h.api.apply(
        Kind::Pods,
        job_pod("js-workers-0", "js-workers", Some("js")),
    );
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["wait js-workers-0"]);
    h.api
        .apply(Kind::Pods, job_pod("js-leader-0", "js-leader", Some("js")));
    let (actions, _) = h.cycle().await;
    assert_eq!(
        kinds(&actions),
        [
            "assign js-leader-0",
            "assign js-workers-0",
            "release js-leader-0",
            "release js-workers-0"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_job_is_not_seen_yet_waits_without_a_write() {
    let h = harness().await;
    h.api.apply(Kind::Pods, job_pod("late-0", "late", None));
    h.settle().await;
    let (view, _, actions) =
        controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, NOW).unwrap();
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(view.owner_unseen, ["ml/late-0"]);
    h.api.apply(Kind::Jobs, job("late", 1, None, None));
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["release late-0"]);
}
