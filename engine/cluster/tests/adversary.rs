//! Pods whose labels, annotations, gates and bindings an adversary chose, beside honest
//! ones, through the queue for many cycles (pure: view → plan → actions, the actions
//! applied as the API server and kube-scheduler would). Whatever the adversary writes:
//! - no pod is released unless gantry assigned it, with its own seal, before (this cycle
//!   or an earlier one): a forged or copied assignment never jumps the queue;
//! - no job is charged to a team whose namespaces do not hold its pods;
//! - no running job holds room on a node it was not given: each member is bound there or
//!   carries gantry's seal for it;
//! - gantry never assigns, releases or evicts a pod its policy does not let into the queue
//!   (it may say why such a pod waits).

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod harness_cases {
    /// `n`, times `GANTRY_SOAK` when set.
    pub fn cases(n: u32) -> u32 {
        let soak = std::env::var("GANTRY_SOAK")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok());
        n.saturating_mul(soak.unwrap_or(1).max(1))
    }
}

use cluster::controller;
use cluster::enact::Action;
use cluster::memory::Memory;
use cluster::pods::{NOMINATED_ANNOTATION, NOMINATION_SEAL_ANNOTATION};
use cluster::seal::SEAL_ANNOTATION;
use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::{json, Value};
use serve::state::{AppState, LoadedPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const NOW: i64 = 1_795_510_000;
const NODES: [&str; 3] = ["n0", "n1", "n2"];
const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers
pool training { capacity = reserved; node = dgx_h100; nodes = 3 }
placement { gang = all_or_nothing; gang_timeout = 15m }
cohort lab {
  team alpha { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu; namespaces = ["alpha"] }
  team beta { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu; namespaces = ["beta"] }
}
"#;

fn policy() -> (Arc<LoadedPolicy>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    (state.policy().unwrap(), dir)
}

fn memory() -> Memory {
    Memory::default()
}

/// A fixed assignment seal key, as the leader reads it from its Secret.
fn the_seal() -> cluster::seal::Seal {
    cluster::seal::Seal::from_text("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap()
}

fn node_json(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gantry.dev/pool": "training"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// What the adversary chooses for one pod.
#[derive(Debug, Clone)]
struct Claim {
    namespace: &'static str,
    team: Option<&'static str>,
    revision: bool,
    gated: bool,
    /// An assignment annotation: the node, and the seal (none, garbage, or copied from
    /// another pod's genuine assignment).
    assigned: Option<(usize, SealClaim)>,
    bound: Option<usize>,
    gpus: u32,
}

#[derive(Debug, Clone, Copy)]
enum SealClaim {
    None,
    Garbage,
    CopiedFromHonest,
}

fn claim() -> impl Strategy<Value = Claim> {
    (
        prop::sample::select(vec!["alpha", "beta", "mallory"]),
        prop::option::of(prop::sample::select(vec!["alpha", "beta", "ghost"])),
        any::<bool>(),
        any::<bool>(),
        prop::option::of((
            0..NODES.len(),
            prop::sample::select(vec![
                SealClaim::None,
                SealClaim::Garbage,
                SealClaim::CopiedFromHonest,
            ]),
        )),
        prop::option::weighted(0.25, 0..NODES.len()),
        prop::sample::select(vec![1u32, 2, 4, 8]),
    )
        .prop_map(
            |(namespace, team, revision, gated, assigned, bound, gpus)| Claim {
                namespace,
                team,
                revision,
                gated,
                assigned,
                bound,
                gpus,
            },
        )
}

/// An honest pod as the webhook leaves it: its namespace's team, gated.
fn honest(i: usize, team: &str, gpus: u32) -> Value {
    pod(&format!("honest-{i}"), team, Some(team), true, true, gpus)
}

fn pod(
    name: &str,
    namespace: &str,
    team: Option<&str>,
    revision: bool,
    gated: bool,
    gpus: u32,
) -> Value {
    let mut labels = json!({"gantry.dev/tier": "best_effort"});
    if let Some(t) = team {
        labels["gantry.dev/team"] = json!(t);
    }
    if revision {
        labels["gantry.dev/policy-revision"] = json!("r1");
    }
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}"),
            "creationTimestamp": "2026-11-24T08:40:00Z", "labels": labels, "annotations": {}},
        "spec": {"containers": [{"name": "main", "resources": {
            "requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()},
            "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}});
    if gated {
        p["spec"]["schedulingGates"] = json!([{"name": "gantry.dev/queue"}]);
    }
    p
}

fn hostile(i: usize, c: &Claim, honest_seal: &str) -> Value {
    let mut p = pod(
        &format!("adv-{i}"),
        c.namespace,
        c.team,
        c.revision,
        c.gated,
        c.gpus,
    );
    if let Some((n, seal)) = c.assigned {
        p["metadata"]["annotations"]["gantry.dev/assigned-node"] = json!(NODES[n]);
        match seal {
            SealClaim::None => {}
            SealClaim::Garbage => {
                p["metadata"]["annotations"][SEAL_ANNOTATION] =
                    json!("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
            }
            SealClaim::CopiedFromHonest => {
                p["metadata"]["annotations"][SEAL_ANNOTATION] = json!(honest_seal)
            }
        }
    }
    if let Some(n) = c.bound {
        p["spec"]["nodeName"] = json!(NODES[n]);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
    }
    p
}

fn stores(pods_json: &BTreeMap<String, Value>) -> Stores {
    let mut s = Stores::default();
    for n in NODES {
        let node: Node = serde_json::from_value(node_json(n)).unwrap();
        s.nodes.apply(Change::InitApply(
            n.to_string(),
            nodes::node(&node, "gantry.dev/pool").unwrap(),
        ));
    }
    s.nodes.apply(Change::InitDone);
    for p in pods_json.values() {
        let p: Pod = serde_json::from_value(p.clone()).unwrap();
        s.pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    s.pods.apply(Change::InitDone);
    s.seal = Some(the_seal());
    s
}

fn key(p: &Value) -> String {
    format!(
        "{}/{}",
        p["metadata"]["namespace"].as_str().unwrap(),
        p["metadata"]["name"].as_str().unwrap()
    )
}

/// A pod the policy lets into the queue: its namespace holds its team.
fn admitted(p: &Value) -> bool {
    let ns = p["metadata"]["namespace"].as_str().unwrap();
    match p["metadata"]["labels"]["gantry.dev/team"].as_str() {
        Some(t @ ("alpha" | "beta")) => t == ns,
        Some(_) => true, // an unknown team is the cycle's to refuse, with a reason
        None => false,   // no default team: nothing admits it
    }
}

fn sealed(p: &Value) -> Option<String> {
    let node = p["metadata"]["annotations"]["gantry.dev/assigned-node"].as_str()?;
    let seal = p["metadata"]["annotations"][SEAL_ANNOTATION].as_str()?;
    let uid = p["metadata"]["uid"].as_str()?;
    the_seal().verify(uid, node, seal).then(|| node.to_string())
}

/// A release whose patch assigns the pod with gantry's seal (a one-pod job's one patch).
fn released_with_a_seal(a: &Action) -> bool {
    matches!(a, Action::Release { patch, node, .. }
        if patch["metadata"]["annotations"]["gantry.dev/assigned-node"] == json!(node)
            && patch["metadata"]["annotations"][SEAL_ANNOTATION].is_string())
}

/// The node gantry nominated the pod to (sealed, not expired at `now`).
fn nominated(p: &Value, now: i64) -> Option<String> {
    let pod = cluster::pods::pod(&serde_json::from_value(p.clone()).ok()?);
    cluster::nomination::held(&pod, Some(&the_seal()), now).map(|(node, _)| node.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: harness_cases::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn adversarial_pods_never_jump_the_queue_or_hold_what_they_were_not_given(
        claims in prop::collection::vec(claim(), 1..8),
        honest_pods in prop::collection::vec((prop::sample::select(vec!["alpha", "beta"]), prop::sample::select(vec![2u32, 4, 8])), 1..6),
        binds in prop::collection::vec(any::<bool>(), 8),
    ) {
        let (policy, _dir) = policy();
        let memory = memory();
        let seal = the_seal();
        let mut pods: BTreeMap<String, Value> = BTreeMap::new();
        for (i, (team, gpus)) in honest_pods.iter().enumerate() {
            let p = honest(i, team, *gpus);
            pods.insert(key(&p), p);
        }
        // A genuine seal, of an honest pod's assignment, for the adversary to copy.
        let honest_seal = seal.sign("uid-alpha-honest-0", "n0");
        for (i, c) in claims.iter().enumerate() {
            let p = hostile(i, c, &honest_seal);
            pods.insert(key(&p), p);
        }
        let hostile_keys: BTreeSet<String> = pods.keys().filter(|k| k.contains("/adv-")).cloned().collect();
        for cycle in 0..6 {
            let (view, _plan, actions) =
                controller::cycle_with(&stores(&pods), &policy, &memory, NOW + cycle * 10).unwrap();
            let mut assigned_now: BTreeSet<String> = BTreeSet::new();
            for a in &actions {
                let k = format!("{}/{}", a.pod().namespace, a.pod().name);
                let p = &pods[&k];
                let acts_on = matches!(a, Action::Assign { .. } | Action::Release { .. } | Action::Evict { .. });
                prop_assert!(!acts_on || admitted(p) || !hostile_keys.contains(&k),
                    "cycle {cycle}: gantry placed or evicted {k}, which its policy does not let in: {a:?}");
                match a {
                    Action::Assign { node, seal: s, .. } => {
                        prop_assert!(s.as_deref().is_some_and(|s| seal.verify(&a.pod().uid, node, s)), "{a:?}");
                        assigned_now.insert(k.clone());
                    }
                    Action::Release { node, patch, .. } => {
                        let sealed_here = patch["metadata"]["annotations"][SEAL_ANNOTATION]
                            .as_str()
                            .is_some_and(|s| seal.verify(&a.pod().uid, node, s));
                        let given = sealed(p).as_deref() == Some(node.as_str()) || sealed_here;
                        prop_assert!(given || assigned_now.contains(&k),
                            "cycle {cycle}: {k} released onto {node} without gantry's assignment");
                    }
                    _ => {}
                }
            }
            // Who is charged, and for what room.
            for job in view.jobs.iter().filter(|j| !j.placement.is_empty()) {
                if job.team.as_deref() == Some(cluster::queue::FOREIGN) {
                    // Not gantry's: bound where it holds, never placed by gantry.
                    let p = &pods[&job.id];
                    prop_assert_eq!(p["spec"]["nodeName"].as_str(), job.placement.first().map(|m| m.node.as_str()));
                    continue;
                }
                let members = &view.members[&job.id];
                for (m, placed) in members.iter().zip(&job.placement) {
                    let p = &pods[m];
                    if let Some(team) = job.team.as_deref() {
                        if team == "alpha" || team == "beta" {
                            prop_assert_eq!(p["metadata"]["namespace"].as_str(), Some(team),
                                "cycle {}: {} charged to {}", cycle, m, team);
                        }
                    }
                    let bound = p["spec"]["nodeName"].as_str() == Some(placed.node.as_str());
                    let given = sealed(p).as_deref() == Some(placed.node.as_str())
                        || nominated(p, NOW + cycle * 10).as_deref() == Some(placed.node.as_str());
                    prop_assert!(bound || given,
                        "cycle {cycle}: {m} holds room on {} it was not given", placed.node);
                }
            }
            // Carry the actions out as the API server and kube-scheduler would.
            for a in &actions {
                let k = format!("{}/{}", a.pod().namespace, a.pod().name);
                let p = pods.get_mut(&k).unwrap();
                match a {
                    Action::Assign { node, seal: s, .. } => {
                        p["metadata"]["annotations"]["gantry.dev/assigned-node"] = json!(node);
                        p["metadata"]["annotations"][SEAL_ANNOTATION] = json!(s);
                    }
                    Action::Unassign { .. } => {
                        p["metadata"]["annotations"] = json!({});
                    }
                    Action::Release { node, patch, .. } => {
                        // The patch as the API server merges it (a one-pod job's carries
                        // its sealed assignment), then kube-scheduler's binding.
                        let mut merged = patch.clone();
                        if let Some(m) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("uid");
                        }
                        json_patch::merge(p, &merged);
                        p["spec"]["schedulingGates"] = Value::Null;
                        if binds[(cycle as usize) % binds.len()] {
                            p["spec"]["nodeName"] = json!(node);
                            p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
                        }
                    }
                    Action::Evict { .. } => {
                        p["status"]["phase"] = json!("Succeeded");
                    }
                    Action::Nominate { text, seal: s, .. } => {
                        p["metadata"]["annotations"][NOMINATED_ANNOTATION] = json!(text);
                        p["metadata"]["annotations"][NOMINATION_SEAL_ANNOTATION] = json!(s);
                    }
                    Action::Unnominate { .. } => {
                        if let Some(a) = p["metadata"]["annotations"].as_object_mut() {
                            a.remove(NOMINATED_ANNOTATION);
                            a.remove(NOMINATION_SEAL_ANNOTATION);
                        }
                    }
                    Action::Wait { .. } | Action::Placed { .. } => {}
                }
            }
            pods.retain(|_, p| p["status"]["phase"] != "Succeeded");
        }
    }
}

/// The issue's own case: a pod created with `gantry.dev/assigned-node` naming a node
/// that is already full is not released there, and holds nothing, while honest pods are
/// placed; its forged annotation is not written over until gantry places it itself.
#[test]
fn a_self_assigned_pod_is_neither_released_nor_counted() {
    let (policy, _dir) = policy();
    let memory = memory();
    let seal = the_seal();
    let mut running = honest(0, "alpha", 8);
    running["spec"]["schedulingGates"] = Value::Null;
    running["spec"]["nodeName"] = json!("n0");
    running["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
    running["metadata"]["annotations"] = json!({"gantry.dev/assigned-node": "n0",
        SEAL_ANNOTATION: seal.sign("uid-alpha-honest-0", "n0")});
    let mut forged = pod("jumper", "beta", Some("beta"), true, true, 8);
    forged["metadata"]["annotations"]["gantry.dev/assigned-node"] = json!("n0");
    let waiting = honest(1, "alpha", 8);
    let pods: BTreeMap<String, Value> = [running, forged, waiting]
        .into_iter()
        .map(|p| (key(&p), p))
        .collect();
    let (view, _, actions) = controller::cycle_with(&stores(&pods), &policy, &memory, NOW).unwrap();
    let on_n0: u32 = view
        .jobs
        .iter()
        .filter(|j| j.placement.iter().any(|m| m.node == "n0"))
        .map(|j| j.shape.member.num_gpu)
        .sum();
    assert_eq!(
        on_n0, 8,
        "only the honest running pod holds n0: {:?}",
        view.jobs
    );
    for a in &actions {
        if let Action::Release { pod, node, .. } | Action::Assign { pod, node, .. } = a {
            assert_ne!(node, "n0", "{a:?}");
            if pod.name == "jumper" {
                assert!(
                    matches!(a, Action::Assign { .. })
                        || actions.iter().any(
                            |b| matches!(b, Action::Assign { pod: p, .. } if p.name == "jumper")
                        )
                        || released_with_a_seal(a),
                    "{a:?}"
                );
            }
        }
    }
    assert!(
        actions.iter().any(|a| a.pod().name == "honest-1"
            && (matches!(a, Action::Assign { .. }) || released_with_a_seal(a))),
        "{actions:?}"
    );
}

/// A bound pod gantry did not admit holds its GPUs as busy: never a victim, charged to no
/// team, and the node's GPUs stay healthy, so a job that would fit the node when it is
/// gone waits for capacity instead of being told the node is too small.
#[test]
fn a_foreign_pod_is_busy_not_broken() {
    let (policy, _dir) = policy();
    let memory = memory();
    let mut foreign = pod("outsider", "mallory", None, false, false, 4);
    foreign["spec"]["nodeName"] = json!("n0");
    foreign["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
    let mut pods: BTreeMap<String, Value> = BTreeMap::new();
    pods.insert(key(&foreign), foreign);
    for i in 0..3 {
        let p = honest(i, "alpha", 8);
        pods.insert(key(&p), p);
    }
    let (view, plan, actions) =
        controller::cycle_with(&stores(&pods), &policy, &memory, NOW).unwrap();
    assert!(view
        .fleet
        .nodes
        .iter()
        .all(|n| n.gpus.iter().all(|g| g.healthy)));
    let outsider = view
        .jobs
        .iter()
        .find(|j| j.id == "mallory/outsider")
        .unwrap();
    assert_eq!(outsider.team.as_deref(), Some(cluster::queue::FOREIGN));
    assert!(plan.preemptions.iter().all(|p| p.job != "mallory/outsider"));
    assert!(
        actions.iter().all(|a| a.pod().name != "outsider"),
        "{actions:?}"
    );
    // Two of alpha's 8-GPU pods fit the two free nodes (its burst is 16); the third
    // waits for capacity or quota, never as if no node could hold it.
    for d in plan.decisions.iter().filter(|d| d.reason.is_some()) {
        let code = d
            .reason
            .as_ref()
            .map(|r| format!("{:?}", r.code))
            .unwrap_or_default();
        assert!(!code.contains("NeverFits"), "{d:?}");
    }
}

/// Issue 52's double booking: a GPU fails under two running 4-GPU pods. The pod that no
/// longer fits is left out of the cycle, but what it holds it still holds: its node is
/// closed to new work, never counted free, so no waiting pod is released onto it (the
/// other nodes are full, so before this it went to the "free" room on the failed node).
#[test]
fn a_node_whose_gpus_no_longer_cover_its_pods_is_closed_not_freed() {
    let (policy, _dir) = policy();
    let memory = memory();
    let seal = the_seal();
    let mut pods: BTreeMap<String, Value> = BTreeMap::new();
    let running = [
        ("alpha", 4, "n0"),
        ("alpha", 4, "n0"),
        ("beta", 8, "n1"),
        ("beta", 8, "n2"),
    ];
    for (i, (team, gpus, node)) in running.into_iter().enumerate() {
        let mut p = honest(10 + i, team, gpus);
        let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
        p["spec"]["schedulingGates"] = Value::Null;
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
        p["metadata"]["annotations"] =
            json!({"gantry.dev/assigned-node": node, SEAL_ANNOTATION: seal.sign(&uid, node)});
        pods.insert(key(&p), p);
    }
    let waiting = honest(20, "alpha", 2);
    pods.insert(key(&waiting), waiting);
    let mut stores = stores(&pods);
    let mut failed = node_json("n0");
    failed["status"]["capacity"] = json!({"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"});
    failed["status"]["allocatable"]["nvidia.com/gpu"] = json!("7");
    let failed: Node = serde_json::from_value(failed).unwrap();
    stores.nodes.apply(Change::Apply(
        "n0".into(),
        nodes::node(&failed, "gantry.dev/pool").unwrap(),
    ));
    let (_, plan, actions) = controller::cycle_with(&stores, &policy, &memory, NOW).unwrap();
    for a in &actions {
        assert!(
            !matches!(a, Action::Assign { .. } | Action::Release { .. }),
            "nothing fits but the failed node's phantom room: {actions:?}"
        );
    }
    let d = plan
        .decisions
        .iter()
        .find(|d| d.job == "alpha/honest-20")
        .unwrap();
    assert!(d.placement.iter().all(|m| m.node != "n0"), "{d:?}");
}

/// A gated pod naming a team whose namespaces do not hold it (the webhooks never judged
/// it) is not queued and never placed; it is told why, once.
#[test]
fn a_pod_outside_its_teams_namespaces_waits_and_says_why() {
    let (policy, _dir) = policy();
    let memory = memory();
    let stranger = pod("sneak", "mallory", Some("alpha"), true, true, 8);
    let mut pods: BTreeMap<String, Value> = BTreeMap::new();
    pods.insert(key(&stranger), stranger.clone());
    let (view, plan, actions) =
        controller::cycle_with(&stores(&pods), &policy, &memory, NOW).unwrap();
    assert!(view.jobs.is_empty(), "{:?}", view.jobs);
    // `/v1/queue` shows it, claiming no team for it.
    let rows = controller::queue_report(&view, &plan, true).jobs;
    assert!(
        matches!(rows.as_slice(), [r] if r.state == "team_not_bound" && r.team.is_none() && r.gpus == 8.0),
        "{rows:?}"
    );
    let [Action::Wait {
        reason, message, ..
    }] = actions.as_slice()
    else {
        panic!("{actions:?}")
    };
    assert_eq!(reason, "TeamNotBound");
    assert!(
        message.contains("team `alpha` is not bound to namespace `mallory`"),
        "{message}"
    );
    let mut told = stranger;
    told["status"]["conditions"] = json!([{"type": "gantry.dev/Queued", "status": "True",
        "reason": reason, "message": message}]);
    pods.insert(key(&told), told);
    let (_, _, again) = controller::cycle_with(&stores(&pods), &policy, &memory, NOW).unwrap();
    assert!(again.is_empty(), "said once: {again:?}");
}

/// An eviction mark is believed only with gantry's seal. A pod's author who marks their
/// running pod as a victim of a nominated job (where the webhooks do not judge) does not
/// hand its GPUs to that job or get it evicted; it stays charged to its team (the job is
/// placed elsewhere, its nomination given up as its node is full). The same
/// mark with gantry's seal does take it out: the check is what decides.
#[test]
fn an_eviction_mark_counts_only_with_gantrys_seal() {
    let (policy, _dir) = policy();
    let memory = memory();
    let seal = the_seal();
    let mut preemptor = honest(0, "alpha", 8);
    let text = cluster::nomination::text("n0", NOW + 600);
    preemptor["metadata"]["annotations"] = json!({NOMINATED_ANNOTATION: text,
        NOMINATION_SEAL_ANNOTATION: seal.sign_mark("nominated", "uid-alpha-honest-0", &text)});
    let mut victim = honest(1, "beta", 8);
    victim["spec"]["schedulingGates"] = Value::Null;
    victim["spec"]["nodeName"] = json!("n0");
    victim["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z"});
    let mark = cluster::enact::eviction_mark("reclaim", "alpha/honest-0");
    let genuine = seal.sign_mark("preempted", "uid-beta-honest-1", &mark);
    victim["metadata"]["annotations"] = json!({"gantry.dev/assigned-node": "n0",
        SEAL_ANNOTATION: seal.sign("uid-beta-honest-1", "n0"),
        "gantry.dev/preempted": mark});
    let copied = seal.sign_mark("preempted", "uid-beta-other", &mark);
    for (mark_seal, believed) in [
        (None, false),
        (Some(copied.as_str()), false),
        (Some(genuine.as_str()), true),
    ] {
        let mut v = victim.clone();
        if let Some(s) = mark_seal {
            v["metadata"]["annotations"][cluster::pods::PREEMPTION_SEAL_ANNOTATION] = json!(s);
        }
        let mut pods: BTreeMap<String, Value> = BTreeMap::new();
        pods.insert(key(&preemptor), preemptor.clone());
        pods.insert(key(&v), v);
        let (view, _, actions) =
            controller::cycle_with(&stores(&pods), &policy, &memory, NOW).unwrap();
        let charged = view
            .jobs
            .iter()
            .any(|j| j.id == "beta/honest-1" && j.team.as_deref() == Some("beta"));
        assert_eq!(charged, !believed, "seal {mark_seal:?}: {:?}", view.jobs);
        if !believed {
            assert!(
                !actions.iter().any(
                    |a| matches!(a, Action::Release { node, .. } if node == "n0")
                        || (matches!(a, Action::Evict { .. }) && a.pod().name == "honest-1")
                ),
                "seal {mark_seal:?}: {actions:?}"
            );
        }
    }
}
