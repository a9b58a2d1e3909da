//! Capacity through the cluster's autoscaler as a pure function: real-format Nodes and
//! Pods through the queue's cycle and `capacity::actions`, with no API server. A waiting
//! 2 × 8 gang in a scalable pool asks for exactly two whole nodes; a restart changes
//! nothing; arriving nodes end their requests and real work takes their placeholders'
//! room; warm placeholders follow their window; idle nodes are kept until the policy lets
//! them go; the pool's maximum and `max_spend` bound it all.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod objects;

use cluster::capacity::{self, CapacityAction, Settings};
use cluster::controller;
use cluster::memory::Memory;
use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use objects::{gang_member as member, gpu_node as node};
use serde_json::{json, Value};
use serve::state::{AppState, LoadedPolicy};
use std::sync::Arc;

/// Tuesday 2026-11-24 08:46:40 UTC.
const NOW: i64 = 1_795_510_000;

fn policy(extra: &str) -> (Arc<LoadedPolicy>, tempfile::TempDir) {
    policy_with(extra, "")
}

/// The test policy with `extra` in spot's autoscale block and `more` after it.
fn policy_with(extra: &str, more: &str) -> (Arc<LoadedPolicy>, tempfile::TempDir) {
    let text = format!(
        r#"
use std.nodes.{{dgx_h100}}
use std.tiers
pool base {{ capacity = reserved; node = dgx_h100; nodes = 1 }}
pool spot {{ capacity = spot; node = dgx_h100; nodes = 0..4; cost = 40 $/h; boot = 3m; notice = 2m }}
placement {{ gang = all_or_nothing; gang_timeout = 30m }}
team alpha {{ guaranteed = 8 gpu in base; burst = 64 gpu }}
autoscale spot {{
  up when pending_nodes(fits = spot) > 0 => add pending_nodes(fits = spot)
  down when idle > 10m
{extra}
}}
{more}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), text).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    (state.policy().unwrap(), dir)
}

fn settings() -> Settings {
    Settings {
        namespace: "gantry-system".into(),
        pool_label: "gantry.dev/pool".into(),
        image: capacity::PAUSE_IMAGE.into(),
        provisioning: None,
    }
}

/// A placeholder as gantry creates it, as the API server stores it (priority resolved).
fn placeholder(name: &str, on: Option<&str>) -> Value {
    let mut p = capacity::placeholder(&settings(), "spot", name, 8, "test");
    p["metadata"]["uid"] = json!(format!("uid-{name}"));
    p["spec"]["priority"] = json!(-1);
    if let Some(n) = on {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running"});
    }
    p
}

fn stores(nodes_json: &[Value], pods_json: &[Value]) -> Stores {
    let mut s = Stores::default();
    s.nodes.apply(Change::Init);
    for n in nodes_json {
        let n: Node = serde_json::from_value(n.clone()).unwrap();
        let seen = nodes::node(&n, "gantry.dev/pool").unwrap();
        s.nodes
            .apply(Change::InitApply(seen.node.name.clone(), seen));
    }
    s.nodes.apply(Change::InitDone);
    s.pods.apply(Change::Init);
    for p in pods_json {
        let p: Pod = serde_json::from_value(p.clone()).unwrap();
        s.pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    s.pods.apply(Change::InitDone);
    s
}

/// One cycle as the leader runs it: the capacity actions, and the memory after it.
fn cycle(
    policy: &LoadedPolicy,
    s: &Stores,
    memory: &Memory,
    now: i64,
) -> (Vec<CapacityAction>, Memory) {
    cycle_with(policy, s, memory, now, &settings())
}

fn cycle_with(
    policy: &LoadedPolicy,
    s: &Stores,
    memory: &Memory,
    now: i64,
    settings: &Settings,
) -> (Vec<CapacityAction>, Memory) {
    let (view, plan, _) = controller::cycle_with(s, policy, memory, now).unwrap();
    let actions = capacity::actions(&policy.program, &plan, s, settings);
    let mut next = memory.clone();
    next.arrived(next.arrivals(&view.fleet, now));
    next.remember(&plan, &Default::default());
    (actions, next)
}

fn names(actions: &[CapacityAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            CapacityAction::CreatePlaceholder { name, .. } => format!("create {name}"),
            CapacityAction::DeletePlaceholder { name, .. } => format!("delete {name}"),
            CapacityAction::KeepNode { node, .. } => format!("keep {node}"),
            CapacityAction::UnkeepNode { node, released } => {
                format!("unkeep {node}{}", if *released { " released" } else { "" })
            }
            CapacityAction::CreateProvisioningRequest { name, count, .. } => {
                format!("request {name} x{count}")
            }
            CapacityAction::DeleteProvisioningRequest { name, .. } => format!("withdraw {name}"),
        })
        .collect()
}

#[test]
fn a_waiting_gang_asks_for_exactly_two_whole_nodes() {
    let (policy, _dir) = policy("");
    let base = [node("b0", "base")];
    let gang = [member("g-0"), member("g-1")];
    // base's 8 GPUs cannot hold a 2 × 8 gang; spot has no nodes yet.
    let (actions, memory) = cycle(&policy, &stores(&base, &gang), &Memory::default(), NOW);
    assert_eq!(
        names(&actions),
        [
            "create gantry-placeholder-spot-0",
            "create gantry-placeholder-spot-1"
        ]
    );
    let CapacityAction::CreatePlaceholder { pod, .. } = &actions[0] else {
        panic!()
    };
    insta::assert_snapshot!(
        "placeholder_pod",
        serde_json::to_string_pretty(pod).unwrap()
    );

    // Restarted (the memory read back), the placeholders exist: nothing to do.
    let mut with = gang.to_vec();
    with.push(placeholder("gantry-placeholder-spot-0", None));
    with.push(placeholder("gantry-placeholder-spot-1", None));
    let (again, memory) = cycle(&policy, &stores(&base, &with), &memory, NOW + 10);
    assert!(again.is_empty(), "{again:?}");

    // The two nodes arrive and the placeholders are bound there: the requests are met,
    // nothing more is asked for; the gang is placed (on b0 and s0), the placeholders go
    // and every node is kept (s1 is in the scaled pool; b0 and s0 run work).
    let nodes = [node("b0", "base"), node("s0", "spot"), node("s1", "spot")];
    let mut bound = gang.to_vec();
    bound.push(placeholder("gantry-placeholder-spot-0", Some("s0")));
    bound.push(placeholder("gantry-placeholder-spot-1", Some("s1")));
    let (arrived, memory) = cycle(&policy, &stores(&nodes, &bound), &memory, NOW + 60);
    let mut got = names(&arrived);
    got.sort();
    assert_eq!(
        got,
        [
            "delete gantry-placeholder-spot-0",
            "delete gantry-placeholder-spot-1",
            "keep b0",
            "keep s0",
            "keep s1"
        ]
    );
    let booting: u32 = memory
        .scale
        .pools
        .get("spot")
        .map_or(0, |p| p.booting.iter().map(|b| b.nodes).sum());
    assert_eq!(booting, 0, "both requests met by the nodes that came");
}

#[test]
fn a_late_node_keeps_its_request_for_the_provision_timeout() {
    let (policy, _dir) = policy("");
    let base = [node("b0", "base")];
    let gang = [member("g-0"), member("g-1")];
    let (_, memory) = cycle(&policy, &stores(&base, &gang), &Memory::default(), NOW);
    let mut with = gang.to_vec();
    with.push(placeholder("gantry-placeholder-spot-0", None));
    with.push(placeholder("gantry-placeholder-spot-1", None));
    // Past the pool's 3 m boot with no node: the request stands (no churn of
    // placeholders) until cluster-autoscaler's provision timeout.
    let (late, memory) = cycle(&policy, &stores(&base, &with), &memory, NOW + 200);
    assert!(late.is_empty(), "{late:?}");
    let (later, _) = cycle(&policy, &stores(&base, &with), &memory, NOW + 600);
    assert!(later.is_empty(), "{later:?}");
}

#[test]
fn warm_placeholders_follow_their_window() {
    let (policy, _dir) = policy_with(
        "",
        r#"warm mornings in spot { size = 2 nodes; during = weekdays 08:00..12:00 "UTC" }"#,
    );
    let base = [node("b0", "base")];
    // 08:46 UTC on a Tuesday: two warm nodes wanted, none there yet.
    let (actions, memory) = cycle(&policy, &stores(&base, &[]), &Memory::default(), NOW);
    assert_eq!(
        names(&actions),
        [
            "create gantry-placeholder-spot-0",
            "create gantry-placeholder-spot-1"
        ]
    );
    // They hold two nodes while the window lasts.
    let nodes = [node("b0", "base"), node("s0", "spot"), node("s1", "spot")];
    let held = [
        placeholder("gantry-placeholder-spot-0", Some("s0")),
        placeholder("gantry-placeholder-spot-1", Some("s1")),
    ];
    let (during, memory) = cycle(&policy, &stores(&nodes, &held), &memory, NOW + 600);
    let mut got = names(&during);
    got.sort();
    assert_eq!(got, ["keep s0", "keep s1"], "kept, placeholders stay");
    // 13:00: the window is over; the placeholders go (the nodes stay kept until the
    // policy's own down trigger lets them go).
    let after = NOW + 4 * 3600 + 14 * 60;
    let (closed, _) = cycle(&policy, &stores(&nodes, &held), &memory, after);
    let deleted: Vec<String> = names(&closed)
        .into_iter()
        .filter(|a| a.starts_with("delete"))
        .collect();
    assert_eq!(
        deleted,
        [
            "delete gantry-placeholder-spot-0",
            "delete gantry-placeholder-spot-1"
        ]
    );
}

#[test]
fn idle_nodes_are_kept_until_the_down_trigger_then_released() {
    let (policy, _dir) = policy("");
    let nodes = [node("b0", "base"), node("s0", "spot")];
    let s = stores(&nodes, &[]);
    let (first, memory) = cycle(&policy, &s, &Memory::default(), NOW);
    assert_eq!(names(&first), ["keep s0"], "a scaled pool's node is kept");
    // Marked now; idle 11 minutes later the policy lets it go.
    let mut kept = node("s0", "spot");
    kept["metadata"]["annotations"] = json!({"gantry.dev/kept": "pool spot", capacity::CA_KEEP: "true", capacity::KARPENTER_KEEP: "true"});
    let s = stores(&[node("b0", "base"), kept.clone()], &[]);
    let (quiet, memory) = cycle(&policy, &s, &memory, NOW + 60);
    assert!(quiet.is_empty(), "{quiet:?}");
    let (down, memory) = cycle(&policy, &s, &memory, NOW + 11 * 60 + 60);
    assert_eq!(names(&down), ["unkeep s0 released"]);
    let patch = capacity::mark_patch(&down[0], NOW).unwrap();
    assert!(patch["metadata"]["annotations"][capacity::CA_KEEP].is_null());
    assert!(patch["metadata"]["annotations"]["gantry.dev/released"].is_string());
    // Released and still there (the cluster's autoscaler takes its time): left alone.
    let mut released = node("s0", "spot");
    released["metadata"]["annotations"] = json!({"gantry.dev/released": "2026-11-24T09:00:00Z"});
    let s = stores(&[node("b0", "base"), released], &[]);
    let (after, _) = cycle(&policy, &s, &memory, NOW + 13 * 60);
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn placeholders_never_exceed_the_pools_maximum_or_spend() {
    // Four 2 × 8 gangs want eight nodes; the pool allows four, max_spend three.
    let (policy, _dir) = policy("  max_spend = 120 $/h");
    let base = [node("b0", "base")];
    let mut gangs = Vec::new();
    for g in ["a", "b", "c", "d"] {
        for m in 0..2 {
            let mut p = member(&format!("{g}-{m}"));
            p["metadata"]["labels"]["gantry.dev/gang"] = json!(g);
            gangs.push(p);
        }
    }
    let (actions, _) = cycle(&policy, &stores(&base, &gangs), &Memory::default(), NOW);
    assert_eq!(
        names(&actions)
            .iter()
            .filter(|a| a.starts_with("create"))
            .count(),
        3,
        "{actions:?}"
    );
}

#[test]
fn placeholders_in_the_wrong_place_are_cleaned_up() {
    let (policy, _dir) = policy("");
    // No demand, no warm pool: a leftover placeholder (a crash, a policy change) goes;
    // one of a pool the policy no longer scales goes too; others' pods are not touched.
    let mut stray = placeholder("gantry-placeholder-gone-0", None);
    stray["metadata"]["labels"]["gantry.dev/placeholder"] = json!("gone");
    let mut elsewhere = placeholder("gantry-placeholder-spot-7", None);
    elsewhere["metadata"]["namespace"] = json!("ml");
    let s = stores(
        &[node("b0", "base")],
        &[
            placeholder("gantry-placeholder-spot-3", None),
            stray,
            elsewhere,
        ],
    );
    let (actions, _) = cycle(&policy, &s, &Memory::default(), NOW);
    let mut got = names(&actions);
    got.sort();
    assert_eq!(
        got,
        [
            "delete gantry-placeholder-gone-0",
            "delete gantry-placeholder-spot-3"
        ]
    );
}

/// The view with ProvisioningRequests as the API server holds them.
fn with_requests(mut s: Stores, requests: &[Value]) -> Stores {
    let mut cache = cluster::store::Cache::default();
    cache.apply(Change::Init);
    for r in requests {
        let o: kube::api::DynamicObject = serde_json::from_value(r.clone()).unwrap();
        cache.apply(Change::InitApply(
            cluster::provreq::key(&o),
            cluster::provreq::seen(&o),
        ));
    }
    cache.apply(Change::InitDone);
    s.provreqs = Some(cache);
    s
}

/// Settings that ask for scale-ups with ProvisioningRequests.
fn provisioning() -> Settings {
    Settings {
        provisioning: Some("autoscaling.x-k8s.io/v1".into()),
        ..settings()
    }
}

/// The first cycle of the 2 × 8 gang on `base` with no request made yet.
fn first_request_cycle(
    policy: &LoadedPolicy,
    base: &[Value],
    gang: &[Value],
) -> (Vec<CapacityAction>, Memory) {
    cycle_with(
        policy,
        &with_requests(stores(base, gang), &[]),
        &Memory::default(),
        NOW,
        &provisioning(),
    )
}

#[test]
fn with_provisioning_requests_a_gang_asks_for_its_nodes_atomically() {
    let (policy, _dir) = policy("");
    let provisioning = provisioning();
    let base = [node("b0", "base")];
    let gang = [member("g-0"), member("g-1")];
    let (actions, memory) = first_request_cycle(&policy, &base, &gang);
    assert_eq!(
        names(&actions),
        ["request gantry-spot-0 x2"],
        "one atomic request, no placeholder pods"
    );
    let CapacityAction::CreateProvisioningRequest {
        request, template, ..
    } = &actions[0]
    else {
        panic!()
    };
    insta::assert_snapshot!(
        "provisioning_request",
        serde_json::to_string_pretty(&json!({"request": request, "template": template})).unwrap()
    );
    // The request exists: nothing more. Provisioned, and the nodes came: it is withdrawn.
    let mut made = request.clone();
    made["metadata"]["uid"] = json!("uid-pr");
    let (again, _) = cycle_with(
        &policy,
        &with_requests(stores(&base, &gang), std::slice::from_ref(&made)),
        &memory,
        NOW + 10,
        &provisioning,
    );
    assert!(again.is_empty(), "{again:?}");
    made["status"] = json!({"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2026-11-24T08:50:00Z"}]});
    let nodes = [node("b0", "base"), node("s0", "spot"), node("s1", "spot")];
    let (arrived, _) = cycle_with(
        &policy,
        &with_requests(stores(&nodes, &gang), &[made]),
        &memory,
        NOW + 60,
        &provisioning,
    );
    assert!(
        names(&arrived).contains(&"withdraw gantry-spot-0".to_string()),
        "{arrived:?}"
    );
}

#[test]
fn a_failed_provisioning_request_is_not_repeated_while_its_scale_up_stands() {
    let (policy, _dir) = policy("");
    let provisioning = provisioning();
    let base = [node("b0", "base")];
    let gang = [member("g-0"), member("g-1")];
    let (actions, memory) = first_request_cycle(&policy, &base, &gang);
    let CapacityAction::CreateProvisioningRequest { request, .. } = &actions[0] else {
        panic!()
    };
    let mut failed = request.clone();
    failed["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "OutOfCapacity", "message": "no p5 capacity in the zone", "lastTransitionTime": "2026-11-24T08:50:00Z"}]});
    let (after, _) = cycle_with(
        &policy,
        &with_requests(stores(&base, &gang), &[failed]),
        &memory,
        NOW + 30,
        &provisioning,
    );
    assert!(after.is_empty(), "{after:?}");
}
