//! The enactment as a pure function: real-format Pod objects (as the watch delivers
//! them, with gantry's annotations, gates and conditions) through the queue view, the
//! decision and `enact::actions`, with no API server at all.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod objects;

use cluster::controller;
use cluster::enact::Action;
use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use objects::{gang_member as member, gpu_node};
use serde_json::{json, Value};
use serve::state::{AppState, LoadedPolicy};
use std::sync::Arc;

const NOW: i64 = 1_795_510_000;
const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers
pool training { capacity = reserved; node = dgx_h100; nodes = 2 }
placement { gang = all_or_nothing; gang_timeout = 15m }
cohort lab {
  team alpha { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }
  team beta { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }
}
"#;

fn policy() -> (Arc<LoadedPolicy>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    (state.policy().unwrap(), dir)
}

fn node(name: &str) -> Node {
    serde_json::from_value(gpu_node(name, "training")).unwrap()
}

/// The engine's memory.
fn memory() -> cluster::memory::Memory {
    cluster::memory::Memory::default()
}

/// A fixed assignment seal key, as the leader reads it from its Secret.
fn seal() -> cluster::seal::Seal {
    cluster::seal::Seal::from_text("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap()
}

/// Assigned by gantry: the node and its seal.
fn assigned(mut p: Value, node: &str) -> Value {
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let seal = seal().sign(&uid, node);
    p["metadata"]["annotations"] =
        json!({"gantry.dev/assigned-node": node, "gantry.dev/assignment-seal": seal});
    p
}

fn released(mut p: Value, node: &str) -> Value {
    p = assigned(p, node);
    p["spec"]["schedulingGates"] = Value::Null;
    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}});
    p
}

fn bound(mut p: Value, node: &str) -> Value {
    p = released(p, node);
    p["spec"]["nodeName"] = json!(node);
    p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
    p
}

fn stores(pods_json: &[Value]) -> Stores {
    let mut s = Stores::default();
    s.nodes.apply(Change::Init);
    for n in ["n0", "n1"] {
        let seen = nodes::node(&node(n), "gantry.dev/pool").unwrap();
        s.nodes.apply(Change::InitApply(n.into(), seen));
    }
    s.nodes.apply(Change::InitDone);
    s.pods.apply(Change::Init);
    for p in pods_json {
        let p: Pod = serde_json::from_value(p.clone()).unwrap();
        s.pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    s.pods.apply(Change::InitDone);
    s.seal = Some(seal());
    s
}

fn actions(pods_json: &[Value]) -> Vec<String> {
    let (policy, _dir) = policy();
    let (_, _, actions) =
        controller::cycle_with(&stores(pods_json), &policy, &memory(), NOW).unwrap();
    actions
        .iter()
        .map(|a| {
            let v = serde_json::to_value(a).unwrap();
            format!("{} {}", v["action"].as_str().unwrap(), a.pod().name)
        })
        .collect()
}

#[test]
fn a_gang_is_assigned_whole_then_released_whole() {
    assert_eq!(
        actions(&[member("a"), member("b")]),
        ["assign a", "assign b", "release a", "release b"]
    );
}

#[test]
fn after_a_crash_while_releasing_the_release_is_completed() {
    // a was released before the crash, b still holds its gate: only b is left to do.
    assert_eq!(
        actions(&[released(member("a"), "n0"), assigned(member("b"), "n1")]),
        ["release b"]
    );
    // Even once a is bound.
    assert_eq!(
        actions(&[bound(member("a"), "n0"), assigned(member("b"), "n1")]),
        ["release b"]
    );
}

#[test]
fn after_a_crash_while_assigning_nothing_is_released_early() {
    // a assigned, b not, none released: decide again; a's annotation stands for the new
    // assignment, and releases come only after b's.
    let got = actions(&[assigned(member("a"), "n0"), member("b")]);
    let release = got.iter().position(|a| a.starts_with("release")).unwrap();
    let assign_b = got.iter().position(|a| a == "assign b").unwrap();
    assert!(assign_b < release, "{got:?}");
}

#[test]
fn a_placed_gang_needs_nothing_more() {
    assert!(actions(&[bound(member("a"), "n0"), bound(member("b"), "n1")]).is_empty());
}

#[test]
fn a_waiting_reason_is_written_once() {
    let (policy, _dir) = policy();
    let only = [member("a")];
    let (_, _, first) = controller::cycle_with(&stores(&only), &policy, &memory(), NOW).unwrap();
    let Some(Action::Wait {
        reason, message, ..
    }) = first.first()
    else {
        panic!("{first:?}");
    };
    assert_eq!(reason, "GangIncomplete");
    // The pod now carries the condition: the next cycle writes nothing.
    let mut with = member("a");
    with["status"]["conditions"] = json!([{"type": "gantry.dev/Queued", "status": "True", "reason": reason, "message": message}]);
    let (_, _, second) = controller::cycle_with(&stores(&[with]), &policy, &memory(), NOW).unwrap();
    assert!(second.is_empty(), "{second:?}");
}

#[test]
fn a_reclaim_evicts_the_whole_gang_and_never_a_pod_already_going() {
    let mut lender = member("beta-0");
    lender["metadata"]["labels"] = json!({"gantry.dev/team": "beta", "gantry.dev/tier": "standard", "gantry.dev/policy-revision": "r1"});
    let got = actions(&[
        bound(member("a"), "n0"),
        bound(member("b"), "n1"),
        lender.clone(),
    ]);
    assert!(
        got.contains(&"evict a".to_string()) && got.contains(&"evict b".to_string()),
        "{got:?}"
    );
    // Once they are terminating they are not evicted again; the lender waits for them.
    let mut going_a = bound(member("a"), "n0");
    going_a["metadata"]["deletionTimestamp"] = json!("2026-11-24T08:45:00Z");
    let mut going_b = bound(member("b"), "n1");
    going_b["metadata"]["deletionTimestamp"] = json!("2026-11-24T08:45:00Z");
    let got = actions(&[going_a, going_b, lender]);
    assert!(!got.iter().any(|a| a.starts_with("evict")), "{got:?}");
}

#[test]
fn a_pod_kube_scheduler_will_not_bind_says_so_once() {
    let mut refused = released(member("a"), "n0");
    refused["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/2 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}"}]);
    let got = actions(&[refused.clone(), released(member("b"), "n1")]);
    assert_eq!(got, ["wait a"]);
    let (policy, _dir) = policy();
    let (_, _, acts) = controller::cycle_with(
        &stores(&[refused.clone(), released(member("b"), "n1")]),
        &policy,
        &memory(),
        NOW,
    )
    .unwrap();
    let Some(Action::Wait {
        reason, message, ..
    }) = acts.first()
    else {
        panic!("{acts:?}")
    };
    assert_eq!(reason, "NotBound");
    assert!(
        message.contains("untolerated taint") && message.contains("n0"),
        "{message}"
    );
    let conditions = refused["status"]["conditions"].as_array().unwrap().clone();
    let mut noted = refused;
    let mut all = conditions;
    all.push(json!({"type": "gantry.dev/Queued", "status": "True", "reason": reason, "message": message}));
    noted["status"]["conditions"] = Value::Array(all);
    assert!(actions(&[noted, released(member("b"), "n1")]).is_empty());
}

#[test]
fn a_preemptor_names_victims_whose_eviction_was_refused() {
    let mut lender = member("beta-0");
    lender["metadata"]["labels"] = json!({"gantry.dev/team": "beta", "gantry.dev/tier": "standard", "gantry.dev/policy-revision": "r1"});
    let message = |pods_json: &[Value]| {
        let (policy, _dir) = policy();
        let (_, _, acts) =
            controller::cycle_with(&stores(pods_json), &policy, &memory(), NOW).unwrap();
        acts.iter()
            .find_map(|a| match a {
                // A nomination carries its condition in the same write.
                Action::Wait {
                    pod,
                    reason,
                    message,
                    ..
                }
                | Action::Nominate {
                    pod,
                    reason,
                    message,
                    ..
                } if pod.name == "beta-0" => Some((reason.clone(), message.clone())),
                _ => None,
            })
            .unwrap()
    };
    let (reason, first) = message(&[
        bound(member("a"), "n0"),
        bound(member("b"), "n1"),
        lender.clone(),
    ]);
    assert_eq!(reason, "Preempting");
    assert!(!first.contains("refused"), "{first}");
    // A cycle later the victims carry gantry's mark but are not terminating: the
    // Eviction API said no.
    let marked = |name: &str, node: &str| {
        let mut p = bound(member(name), node);
        let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
        let mark = "reclaim: for ml/beta-0";
        p["metadata"]["annotations"]["gantry.dev/preempted"] = json!(mark);
        p["metadata"]["annotations"]["gantry.dev/preemption-seal"] =
            json!(seal().sign_mark("preempted", &uid, mark));
        p
    };
    let (_, then) = message(&[marked("a", "n0"), marked("b", "n1"), lender]);
    assert!(
        then.contains("refused to evict ml/a, ml/b") && then.contains("PodDisruptionBudget"),
        "{then}"
    );
}

/// A gated pod whose gantry labels do not read waits with a condition and an Event that
/// say which label and why, once.
#[test]
fn a_gated_pod_with_labels_that_do_not_read_is_told_why() {
    let mut broken = member("a");
    broken["metadata"]["labels"]["gantry.dev/gang-size"] = json!("many");
    let (policy, _dir) = policy();
    let (_, _, acts) =
        controller::cycle_with(&stores(&[broken.clone()]), &policy, &memory(), NOW).unwrap();
    let Some(Action::Wait {
        reason, message, ..
    }) = acts.first()
    else {
        panic!("{acts:?}")
    };
    assert_eq!(reason, "InvalidLabels");
    assert!(message.contains("gantry.dev/gang-size: many"), "{message}");
    // `/v1/queue` shows it too, in no team's figures.
    let (view, plan, _) =
        controller::cycle_with(&stores(&[broken.clone()]), &policy, &memory(), NOW).unwrap();
    let report = controller::queue_report(&view, &plan, true);
    let row = report.jobs.iter().find(|r| r.job == "ml/a").unwrap();
    assert_eq!(
        (row.state.as_str(), row.not_queued, row.team.as_deref()),
        ("invalid_labels", true, None)
    );
    assert_eq!(row.reason.as_deref(), Some(message.as_str()));
    let mut metrics = String::new();
    report.render_metrics(&policy.program, &mut metrics);
    assert!(!metrics.contains("gantry_queue_pending_jobs{"), "{metrics}");
    broken["status"]["conditions"] = json!([{"type": "gantry.dev/Queued", "status": "True",
        "reason": reason, "message": message}]);
    assert!(actions(&[broken]).is_empty(), "said once");
}

/// A gang whose members differ (here one asks for 4 GPUs, the other for 8, so it would
/// be sized and charged as its first member) is not queued: every member is told why.
#[test]
fn a_gang_whose_members_differ_waits_and_says_how() {
    let mut small = member("b");
    small["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "8", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}});
    let got = actions(&[member("a"), small.clone()]);
    assert_eq!(got, ["wait a", "wait b"]);
    let (policy, _dir) = policy();
    let (_, _, acts) = controller::cycle_with(
        &stores(&[member("a"), small.clone()]),
        &policy,
        &memory(),
        NOW,
    )
    .unwrap();
    for a in &acts {
        let Action::Wait {
            reason, message, ..
        } = a
        else {
            panic!("{acts:?}")
        };
        assert_eq!(reason, "GangMismatch");
        assert!(message.contains("differ in resources"), "{message}");
    }
    let (view, plan, _) = controller::cycle_with(
        &stores(&[member("a"), small.clone()]),
        &policy,
        &memory(),
        NOW,
    )
    .unwrap();
    let rows: Vec<(String, String, f64)> = controller::queue_report(&view, &plan, true)
        .jobs
        .into_iter()
        .filter(|r| r.not_queued)
        .map(|r| (r.job, r.state, r.gpus))
        .collect();
    assert_eq!(
        rows,
        [
            ("ml/a".into(), "gang_mismatch".into(), 8.0),
            ("ml/b".into(), "gang_mismatch".into(), 4.0)
        ]
    );
    let mut retiered = member("b");
    retiered["metadata"]["labels"]["gantry.dev/tier"] = json!("standard");
    let (_, _, acts) =
        controller::cycle_with(&stores(&[member("a"), retiered]), &policy, &memory(), NOW).unwrap();
    assert!(
        acts.iter().all(
            |a| matches!(a, Action::Wait { message, .. } if message.contains("differ in tier"))
        ),
        "{acts:?}"
    );
}
