//! The view a leader keeps from cycle to cycle (`queue::ViewKeeper`, `controller::Kept`)
//! is the one a fresh cycle builds, at every step of random event sequences: pods of
//! every kind (gated, gangs by label or by owner Job, bound, foreign, CPU-only, assigned
//! with a genuine or a forged seal, stopping, with unreadable labels) added, changed and
//! deleted; nodes cordoned, interrupted, shrunk and deleted; owner Jobs resized; the
//! seal's key and the policy's namespace bindings changed; the pods relisted. The plan
//! and the actions of a kept cycle are a fresh cycle's too.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use cluster::controller;
use cluster::memory::Memory;
use cluster::queue::{self, Trust, ViewKeeper};
use cluster::seal::SEAL_ANNOTATION;
use cluster::store::{Cache, Change, Stores};
use cluster::{nodes, owners, pods};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::{json, Value};
use serve::state::{AppState, LoadedPolicy};
use std::sync::Arc;

const NOW: i64 = 1_795_510_000;
const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];
const NAMESPACES: [&str; 2] = ["alpha", "beta"];

fn policy(bound: bool) -> (Arc<LoadedPolicy>, tempfile::TempDir) {
    let namespaces = |team: &str| {
        if bound {
            format!("; namespaces = [\"{team}\"]")
        } else {
            String::new()
        }
    };
    let text = format!(
        r#"
use std.nodes.{{dgx_h100}}
use std.tiers
pool training {{ capacity = reserved; node = dgx_h100; nodes = 4 }}
placement {{ gang = all_or_nothing; gang_timeout = 15m }}
cohort lab {{
  team alpha {{ guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu{} }}
  team beta {{ guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu{} }}
}}
"#,
        namespaces("alpha"),
        namespaces("beta")
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), text).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    (state.policy().unwrap(), dir)
}

fn seal(which: u8) -> cluster::seal::Seal {
    let text = if which == 0 {
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
    } else {
        "HxwdHh8AAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRo"
    };
    cluster::seal::Seal::from_text(text).unwrap()
}

#[derive(Debug, Clone, Copy)]
enum NodeShape {
    Ready,
    Cordoned,
    Interrupted,
    NotReady,
    FourGpus,
}

fn node_json(name: &str, shape: NodeShape) -> Value {
    let gpus = if matches!(shape, NodeShape::FourGpus) {
        "4"
    } else {
        "8"
    };
    let mut n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gantry.dev/pool": "training"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": gpus},
                   "conditions": [{"type": "Ready", "status": "True"}]}});
    match shape {
        NodeShape::Cordoned => n["spec"]["unschedulable"] = json!(true),
        NodeShape::Interrupted => {
            n["spec"]["taints"] =
                json!([{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}])
        }
        NodeShape::NotReady => n["status"]["conditions"][0]["status"] = json!("False"),
        NodeShape::Ready | NodeShape::FourGpus => {}
    }
    n
}

/// What one pod is.
#[derive(Debug, Clone)]
enum PodKind {
    /// Gated by the webhook; in a gang by label when given (name, size).
    Gated { gpus: u32, gang: Option<(u8, u32)> },
    /// Gated, one of owner Job `job`'s pods (no gang label).
    Owned { job: u8, gpus: u32 },
    /// Bound and running; admitted by gantry or not (foreign).
    Bound {
        node: usize,
        gpus: u32,
        admitted: bool,
        stopping: bool,
    },
    /// A CPU-only pod bound to a node.
    CpuOnly { node: usize },
    /// Assigned by the queue (a genuine seal) or claiming it (a forged one); released
    /// (its gate gone) or not.
    Assigned {
        node: usize,
        genuine: bool,
        released: bool,
        gang: Option<(u8, u32)>,
    },
    /// Gated, with a gang size that does not read.
    Unreadable,
}

#[derive(Debug, Clone)]
struct PodSpec {
    name: u8,
    namespace: usize,
    team: Option<&'static str>,
    kind: PodKind,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    let gang = prop::option::of((0u8..3, 2u32..4));
    let kind = prop_oneof![
        3 => (prop::sample::select(vec![1u32, 2, 4, 8]), gang.clone())
            .prop_map(|(gpus, gang)| PodKind::Gated { gpus, gang }),
        2 => (0u8..3, prop::sample::select(vec![2u32, 4]))
            .prop_map(|(job, gpus)| PodKind::Owned { job, gpus }),
        2 => (0..NODES.len(), prop::sample::select(vec![1u32, 2, 4]), any::<bool>(), prop::bool::weighted(0.2))
            .prop_map(|(node, gpus, admitted, stopping)| PodKind::Bound { node, gpus, admitted, stopping }),
        1 => (0..NODES.len()).prop_map(|node| PodKind::CpuOnly { node }),
        2 => (0..NODES.len(), prop::bool::weighted(0.7), any::<bool>(), gang)
            .prop_map(|(node, genuine, released, gang)| PodKind::Assigned { node, genuine, released, gang }),
        1 => Just(PodKind::Unreadable),
    ];
    (
        0u8..10,
        0..NAMESPACES.len(),
        prop::option::of(prop::sample::select(vec!["alpha", "beta", "ghost"])),
        kind,
    )
        .prop_map(|(name, namespace, team, kind)| PodSpec {
            name,
            namespace,
            team,
            kind,
        })
}

fn pod_json(s: &PodSpec, key: &cluster::seal::Seal) -> Value {
    let (name, ns) = (format!("p{}", s.name), NAMESPACES[s.namespace]);
    let uid = format!("uid-{ns}-{name}");
    let gpus = match &s.kind {
        PodKind::Gated { gpus, .. } | PodKind::Owned { gpus, .. } => *gpus,
        PodKind::Bound { gpus, .. } => *gpus,
        PodKind::CpuOnly { .. } => 0,
        PodKind::Assigned { .. } | PodKind::Unreadable => 2,
    };
    let mut labels = json!({"gantry.dev/tier": "best_effort", "gantry.dev/policy-revision": "r1"});
    if let Some(t) = s.team {
        labels["gantry.dev/team"] = json!(t);
    }
    let mut requests = json!({"cpu": "1", "memory": "8Gi"});
    if gpus > 0 {
        requests["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid,
            "creationTimestamp": "2026-11-24T08:40:00Z", "labels": labels, "annotations": {}},
        "spec": {"schedulingGates": [{"name": "gantry.dev/queue"}],
            "containers": [{"name": "main", "resources": {"requests": requests.clone(), "limits": requests}}]},
        "status": {"phase": "Pending"}});
    let gang = |p: &mut Value, gang: &Option<(u8, u32)>| {
        if let Some((g, n)) = gang {
            p["metadata"]["labels"]["gantry.dev/gang"] = json!(format!("g{g}"));
            p["metadata"]["labels"]["gantry.dev/gang-size"] = json!(n.to_string());
        }
    };
    let bind = |p: &mut Value, node: usize| {
        p["spec"].as_object_mut().unwrap().remove("schedulingGates");
        p["spec"]["nodeName"] = json!(NODES[node]);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:41:00Z",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-24T08:41:00Z"}]});
    };
    match &s.kind {
        PodKind::Gated { gang: g, .. } => gang(&mut p, g),
        PodKind::Owned { job, .. } => {
            let owner = format!("job{job}");
            p["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!(owner);
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
                "name": owner, "uid": format!("uid-job-{owner}"), "controller": true}]);
        }
        PodKind::Bound {
            node,
            admitted,
            stopping,
            ..
        } => {
            bind(&mut p, *node);
            if !admitted {
                p["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("gantry.dev/policy-revision");
            }
            if *stopping {
                p["metadata"]["deletionTimestamp"] = json!("2026-11-24T09:00:00Z");
            }
        }
        PodKind::CpuOnly { node } => {
            bind(&mut p, *node);
            p["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove("gantry.dev/policy-revision");
        }
        PodKind::Assigned {
            node,
            genuine,
            released,
            gang: g,
        } => {
            gang(&mut p, g);
            let node = NODES[*node];
            p["metadata"]["annotations"]["gantry.dev/assigned-node"] = json!(node);
            let sealed = if *genuine {
                key.sign(p["metadata"]["uid"].as_str().unwrap(), node)
            } else {
                "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_string()
            };
            p["metadata"]["annotations"][SEAL_ANNOTATION] = json!(sealed);
            if *released {
                p["spec"].as_object_mut().unwrap().remove("schedulingGates");
            }
        }
        PodKind::Unreadable => {
            p["metadata"]["labels"]["gantry.dev/gang"] = json!("bad");
            p["metadata"]["labels"]["gantry.dev/gang-size"] = json!("many");
        }
    }
    p
}

fn job_json(i: u8, parallelism: u32, ns: usize) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("job{i}"), "namespace": NAMESPACES[ns], "uid": format!("uid-job-job{i}")},
        "spec": {"parallelism": parallelism, "template": {"spec": {"containers": []}}},
        "status": {"active": 0}})
}

#[derive(Debug, Clone)]
enum Event {
    Pod(PodSpec),
    DeletePod(u8, usize),
    Node(usize, NodeShape),
    DeleteNode(usize),
    OwnerJob(u8, u32, usize),
    DeleteOwnerJob(u8, usize),
    /// The seal's key: the first, another, none.
    Seal(u8),
    RelistPods,
    /// Whether the teams are bound to their namespaces.
    Bindings(bool),
    /// Nothing changes: the clock moves.
    Tick,
}

fn event() -> impl Strategy<Value = Event> {
    let shape = prop::sample::select(vec![
        NodeShape::Ready,
        NodeShape::Cordoned,
        NodeShape::Interrupted,
        NodeShape::NotReady,
        NodeShape::FourGpus,
    ]);
    prop_oneof![
        12 => pod_spec().prop_map(Event::Pod),
        3 => (0u8..10, 0..NAMESPACES.len()).prop_map(|(n, ns)| Event::DeletePod(n, ns)),
        2 => (0..NODES.len(), shape).prop_map(|(n, s)| Event::Node(n, s)),
        1 => (0..NODES.len()).prop_map(Event::DeleteNode),
        2 => (0u8..3, 1u32..4, 0..NAMESPACES.len()).prop_map(|(j, p, ns)| Event::OwnerJob(j, p, ns)),
        1 => (0u8..3, 0..NAMESPACES.len()).prop_map(|(j, ns)| Event::DeleteOwnerJob(j, ns)),
        1 => (0u8..3).prop_map(Event::Seal),
        1 => Just(Event::RelistPods),
        1 => any::<bool>().prop_map(Event::Bindings),
        2 => Just(Event::Tick),
    ]
}

fn convert_pod(v: &Value) -> (String, cluster::pods::PodSeen) {
    let p: Pod = serde_json::from_value(v.clone()).unwrap();
    (pods::key(&p), pods::pod(&p))
}

fn convert_node(v: &Value) -> Option<cluster::nodes::NodeSeen> {
    let n: Node = serde_json::from_value(v.clone()).unwrap();
    nodes::node(&n, "gantry.dev/pool")
}

/// A synced cluster of four ready nodes, no pods, no owner Jobs.
fn empty() -> Stores {
    let mut s = Stores::default();
    for n in NODES {
        s.nodes.apply(Change::InitApply(
            n.to_string(),
            convert_node(&node_json(n, NodeShape::Ready)).unwrap(),
        ));
    }
    s.nodes.apply(Change::InitDone);
    s.pods.apply(Change::InitDone);
    let mut jobs = Cache::default();
    jobs.apply(Change::InitDone);
    s.jobs = Some(jobs);
    s.seal = Some(seal(0));
    s
}

/// Applies `e` to the caches; returns whether the teams' bindings are now on.
fn apply(s: &mut Stores, e: &Event, bound: bool) -> bool {
    let key = s.seal.clone().unwrap_or_else(|| seal(0));
    match e {
        Event::Pod(spec) => {
            let (k, p) = convert_pod(&pod_json(spec, &key));
            s.pods.apply(Change::Apply(k, p));
        }
        Event::DeletePod(n, ns) => {
            s.pods
                .apply(Change::Delete(format!("{}/p{n}", NAMESPACES[*ns])));
        }
        Event::Node(i, shape) => {
            if let Some(n) = convert_node(&node_json(NODES[*i], *shape)) {
                s.nodes.apply(Change::Apply(NODES[*i].to_string(), n));
            }
        }
        Event::DeleteNode(i) => {
            s.nodes.apply(Change::Delete(NODES[*i].to_string()));
        }
        Event::OwnerJob(j, parallelism, ns) => {
            let job: Job = serde_json::from_value(job_json(*j, *parallelism, *ns)).unwrap();
            let cache = s.jobs.as_mut().unwrap();
            cache.apply(Change::Apply(owners::key(&job), owners::job(&job)));
        }
        Event::DeleteOwnerJob(j, ns) => {
            let cache = s.jobs.as_mut().unwrap();
            cache.apply(Change::Delete(format!("{}/job{j}", NAMESPACES[*ns])));
        }
        Event::Seal(which) => s.seal = (*which < 2).then(|| seal(*which)),
        Event::RelistPods => {
            let all: Vec<_> = s
                .pods
                .objects()
                .iter()
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect();
            s.pods.apply(Change::Init);
            for (k, p) in all {
                s.pods.apply(Change::InitApply(k, p));
            }
            s.pods.apply(Change::InitDone);
        }
        Event::Bindings(on) => return *on,
        Event::Tick => {}
    }
    bound
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cluster_cases(48)))]

    #[test]
    fn a_kept_view_and_cycle_are_a_fresh_ones_at_every_step(
        events in prop::collection::vec(event(), 1..40),
    ) {
        let (with_bindings, _d1) = policy(true);
        let (without, _d2) = policy(false);
        let mut stores = empty();
        let mut bound = true;
        let mut keeper = ViewKeeper::default();
        let mut kept = controller::Kept::default();
        let memory = Memory::default();
        for (step, e) in events.iter().enumerate() {
            bound = apply(&mut stores, e, bound);
            let policy = if bound { &with_bindings } else { &without };
            let now = NOW + 10 * step as i64;
            let trust = Trust {
                seal: stores.seal.as_ref(),
                program: Some(&policy.program),
                now,
                predictions: None,
            };
            let fresh = format!("{:?}", queue::view(&stores, trust));
            let again = format!("{:?}", keeper.view(&stores, trust));
            prop_assert_eq!(again, fresh, "the view after step {}: {:?}", step, e);
            let fresh = format!("{:?}", controller::cycle_with(&stores, policy, &memory, now));
            let again = format!("{:?}", controller::cycle_kept(&stores, policy, &memory, now, &mut kept));
            prop_assert_eq!(again, fresh, "the cycle after step {}: {:?}", step, e);
        }
    }
}

/// `n`, times `GANTRY_SOAK` when set.
fn cluster_cases(n: u32) -> u32 {
    let soak = std::env::var("GANTRY_SOAK")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    n.saturating_mul(soak.unwrap_or(1).max(1))
}

#[test]
fn a_cache_journals_what_changed_and_a_relist_changes_everything() {
    let mut c: Cache<u32> = Cache::default();
    c.apply(Change::InitApply("a".into(), 1));
    c.apply(Change::InitDone);
    let g = c.generation();
    assert_eq!(c.since(g), cluster::store::Since::Nothing);
    c.apply(Change::Apply("b".into(), 2));
    c.apply(Change::Delete("a".into()));
    c.apply(Change::Delete("nothing".into()));
    assert_eq!(
        c.since(g),
        cluster::store::Since::Keys(&["b".to_string(), "a".to_string()])
    );
    assert_eq!(
        c.since(0),
        cluster::store::Since::Everything,
        "from before the list"
    );
    let before_relist = c.generation();
    c.apply(Change::Init);
    c.apply(Change::InitDone);
    assert_eq!(c.since(before_relist), cluster::store::Since::Everything);
    // A journal longer than the objects plus its slack is cut: readers behind rebuild.
    let g = c.generation();
    for i in 0..2_000 {
        c.apply(Change::Apply("x".into(), i));
    }
    assert_eq!(c.since(g), cluster::store::Since::Everything);
    let g = c.generation();
    c.apply(Change::Apply("y".into(), 0));
    assert_eq!(c.since(g), cluster::store::Since::Keys(&["y".to_string()]));
}

#[test]
fn a_keeper_handed_other_stores_reads_them_whole() {
    let (policy, _dir) = policy(true);
    let key = seal(0);
    let one = |name: u8| {
        let spec = PodSpec {
            name,
            namespace: 0,
            team: Some("alpha"),
            kind: PodKind::Gated {
                gpus: 1,
                gang: None,
            },
        };
        convert_pod(&pod_json(&spec, &key))
    };
    // Two caches at the same generation, holding different pods.
    let (mut a, mut b) = (empty(), empty());
    let (k, p) = one(1);
    a.pods.apply(Change::Apply(k, p));
    let (k, p) = one(2);
    b.pods.apply(Change::Apply(k, p));
    assert_eq!(a.pods.generation(), b.pods.generation());
    let mut keeper = ViewKeeper::default();
    let view_of = |keeper: &mut ViewKeeper, s: &Stores| {
        let t = Trust {
            seal: s.seal.as_ref(),
            program: Some(&policy.program),
            now: NOW,
            predictions: None,
        };
        let view = keeper.view(s, t).unwrap();
        view.jobs.into_iter().map(|j| j.id).collect::<Vec<String>>()
    };
    assert_eq!(view_of(&mut keeper, &a), ["alpha/p1"]);
    assert_eq!(
        view_of(&mut keeper, &b),
        ["alpha/p2"],
        "b's pods, not a's kept"
    );
}
