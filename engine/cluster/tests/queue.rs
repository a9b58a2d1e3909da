//! Gantry as the queue, cycle by cycle, against the in-process API server: a gang waits
//! for its members and is then released whole, a borrower is evicted whole when the
//! lender reclaims, a waiting pod carries its reason (once, not every cycle), a crash in
//! the middle of placing a gang is completed or undone, and a cycle with nothing new
//! writes nothing.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::{FakeApi, Kind};
use cluster::controller;
use cluster::enact::Action;
use cluster::watch::Live;
use harness::*;
use serde_json::{json, Value};
use serve::state::{AppState, ClusterOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_for_its_members_then_is_released_whole() {
    let h = harness().await;
    h.api.apply(
        Kind::Pods,
        gated("g-0", "alpha", "best_effort", 8, Some(("g", 2))),
    );
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["wait g-0"]);
    let (reason, message) = waiting(&h.pod("g-0")).unwrap();
    assert_eq!(reason, "GangIncomplete", "{message}");
    assert!(
        message.contains("1 of its 2 members has arrived"),
        "{message}"
    );
    assert!(message.contains("queue position 1"), "{message}");
    assert_eq!(h.api.events().len(), 1);
    // Nothing changed: no write at all, and no second Event.
    let writes = h.api.writes().len();
    let (actions, _) = h.cycle().await;
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(h.api.writes().len(), writes);

    h.api.apply(
        Kind::Pods,
        gated("g-1", "alpha", "best_effort", 8, Some(("g", 2))),
    );
    let (actions, done) = h.cycle().await;
    assert_eq!(
        kinds(&actions),
        ["assign g-0", "assign g-1", "release g-0", "release g-1"]
    );
    assert_eq!(done, 4);
    for p in ["g-0", "g-1"] {
        let pod = h.pod(p);
        assert!(pod["spec"]["schedulingGates"].is_null(), "{pod}");
        assert!(pod["metadata"]["annotations"]["gantry.dev/assigned-node"].is_string());
    }
    assert_eq!(h.api.bind_released(), 2);
    let nodes: Vec<String> = ["g-0", "g-1"]
        .iter()
        .map(|p| h.pod(p)["spec"]["nodeName"].as_str().unwrap().to_string())
        .collect();
    assert_ne!(nodes[0], nodes[1], "two 8-GPU members on two 8-GPU nodes");
    let (actions, _) = h.cycle().await;
    assert!(
        actions.is_empty(),
        "a placed gang needs nothing more: {actions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lender_reclaims_by_evicting_the_borrowing_gang_whole() {
    let h = harness().await;
    // alpha borrows beta's 8 GPUs for a 2×8 gang.
    h.gang("a", "alpha", 2, 8);
    h.cycle().await;
    assert_eq!(h.api.bind_released(), 2);
    // beta wants its guarantee back.
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "standard", 8, None));
    let (actions, _) = h.cycle().await;
    let k = kinds(&actions);
    // Its node is held for it, and it is told why it waits, in one write.
    assert_eq!(k.first().map(String::as_str), Some("nominate b-0"), "{k:?}");
    assert!(!k.contains(&"wait b-0".to_string()), "{k:?}");
    assert!(
        k.contains(&"evict a-0".to_string()) && k.contains(&"evict a-1".to_string()),
        "the whole gang: {k:?}"
    );
    let b = h.pod("b-0");
    assert!(
        b["metadata"]["annotations"]["gantry.dev/nominated-node"].is_string(),
        "{b}"
    );
    for p in ["a-0", "a-1"] {
        let pod = h.pod(p);
        assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
        let mark = pod["metadata"]["annotations"]["gantry.dev/preempted"]
            .as_str()
            .unwrap();
        assert!(
            mark.contains("reclaim") && mark.contains("ml/b-0"),
            "{mark}"
        );
    }
    assert_eq!(waiting(&h.pod("b-0")).unwrap().0, "Preempting");
    let events = h.api.events();
    assert_eq!(
        events.iter().filter(|e| e["reason"] == "Preempted").count(),
        2
    );
    // The victims' Events record the preemption; the preemptor's condition says it.
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "Preempting")
            .count(),
        0
    );
    // While the victims terminate nothing is evicted twice, and the preemptor is not
    // told again what it was told.
    let (actions, _) = h.cycle().await;
    assert!(
        !kinds(&actions)
            .iter()
            .any(|a| a.starts_with("evict") || a == "wait b-0"),
        "{actions:?}"
    );
    // They are gone: beta is placed.
    assert_eq!(h.api.finish_deletions(), 2);
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["release b-0"]);
    assert_eq!(waiting(&h.pod("b-0")).unwrap().0, "Placed");
    // The preemptor's own writes: its nomination with its condition, its release, its
    // condition turned False (issue 52: at most three per placed pod).
    let own: Vec<(String, String)> = h
        .api
        .writes()
        .into_iter()
        .filter(|(_, path)| path.contains("b-0"))
        .collect();
    assert_eq!(
        own,
        [
            ("PATCH".to_string(), "pods/ml/b-0/status".to_string()),
            ("PATCH".to_string(), "pods/ml/b-0".to_string()),
            ("PATCH".to_string(), "pods/ml/b-0/status".to_string()),
        ]
    );
    assert!(
        !h.api
            .events()
            .iter()
            .any(|e| e["involvedObject"]["name"] == "b-0"),
        "no Event of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_assigning_is_undone_and_one_while_releasing_is_completed() {
    let h = harness().await;
    h.gang("g", "alpha", 2, 8);
    // Crash after the first assignment.
    h.api.fail_after(1);
    let (_, done) = h.cycle().await;
    assert_eq!(done, 1);
    h.api.heal();
    // The next cycle decides again: g-0 keeps its annotation (the same node), g-1 is
    // assigned, and only then are both released.
    let (actions, _) = h.cycle().await;
    assert_eq!(
        kinds(&actions),
        ["assign g-1", "release g-0", "release g-1"]
    );

    // Another gang, crash after one member is released: the next cycle completes it.
    h.gang("k", "beta", 2, 8);
    h.api.bind_released();
    h.api.finish_deletions();
    // Room for k: g goes away.
    h.api.delete(Kind::Pods, "ml/g-0");
    h.api.delete(Kind::Pods, "ml/g-1");
    h.api.fail_after(3);
    let (actions, done) = h.cycle().await;
    assert_eq!(
        kinds(&actions),
        ["assign k-0", "assign k-1", "release k-0", "release k-1"]
    );
    // Three writes went through: both assignments and k-0's release (a pod never told it
    // waits needs no condition written when released).
    assert_eq!(done, 3);
    let released = |p: &str| h.pod(p)["spec"]["schedulingGates"].is_null();
    assert!(released("k-0") && !released("k-1"));
    h.api.heal();
    let (actions, _) = h.cycle().await;
    assert!(
        kinds(&actions).contains(&"release k-1".to_string()),
        "{actions:?}"
    );
    assert!(released("k-0") && released("k-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_lease_one_leader() {
    use cluster::lease::{run, Election};
    let api = FakeApi::new();
    let url = api.serve().await;
    let client = || kube::Client::try_from(apiserver::config(&url)).unwrap();
    let election = |who: &str| Election {
        duration: Duration::from_millis(1_500),
        renew: Duration::from_millis(200),
        ..Election::new("gantry-system", who)
    };
    let (a_tx, a) = tokio::sync::watch::channel(false);
    let (b_tx, b) = tokio::sync::watch::channel(false);
    let task_a = tokio::spawn(run(client(), election("replica-a"), a_tx));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let task_b = tokio::spawn(run(client(), election("replica-b"), b_tx));
    // Over a few renewals exactly one leads: the first.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(*a.borrow() && !*b.borrow(), "a leads, b follows");
    }
    let lease = api.lease("gantry-system/gantry-queue").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");
    // a dies without giving the lease up: b takes it over once it has seen the lease
    // unrenewed for its whole duration, not before.
    task_a.abort();
    let died = std::time::Instant::now();
    while !*b.borrow() {
        assert!(died.elapsed() < Duration::from_secs(6), "b never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        died.elapsed() >= Duration::from_millis(1_000),
        "taken over too early: {:?}",
        died.elapsed()
    );
    let lease = api.lease("gantry-system/gantry-queue").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    task_b.abort();
}

mod replay {
    //! Random arrivals and completions over many cycles, with the cluster carrying each
    //! cycle out (released pods bound, evicted pods gone): gangs are released whole, no
    //! node holds more GPUs than it has, every waiting pod says why, and once nothing
    //! changes a cycle writes nothing.

    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Single {
            team: bool,
            tier: u8,
            gpus: u32,
        },
        Gang {
            team: bool,
            tier: u8,
            size: u32,
            gpus: u32,
        },
        Finish {
            pick: usize,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (any::<bool>(), 0..3u8, 1..=8u32).prop_map(|(team, tier, gpus)| Step::Single { team, tier, gpus }),
            2 => (any::<bool>(), 0..3u8, 2..=3u32, prop_oneof![Just(4u32), Just(8u32)])
                .prop_map(|(team, tier, size, gpus)| Step::Gang { team, tier, size, gpus }),
            2 => any::<usize>().prop_map(|pick| Step::Finish { pick }),
        ]
    }

    fn gpus_of(p: &Value) -> u64 {
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(0)
    }

    fn check(h: &Harness) {
        let pods = h.api.pods();
        let mut gangs: BTreeMap<String, (u32, u32, u32)> = BTreeMap::new();
        let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
        for (key, p) in &pods {
            let gated = p["spec"]["schedulingGates"]
                .as_array()
                .is_some_and(|g| !g.is_empty());
            if let Some(g) = p["metadata"]["labels"]["gantry.dev/gang"].as_str() {
                let size: u32 = p["metadata"]["labels"]["gantry.dev/gang-size"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let e = gangs.entry(g.to_string()).or_insert((size, 0, 0));
                if gated {
                    e.1 += 1
                } else {
                    e.2 += 1
                }
            }
            let node = p["spec"]["nodeName"]
                .as_str()
                .or_else(|| p["metadata"]["annotations"]["gantry.dev/assigned-node"].as_str());
            if let Some(n) = node {
                if !p["metadata"]["deletionTimestamp"].is_string()
                    || p["spec"]["nodeName"].is_string()
                {
                    *per_node.entry(n.to_string()).or_insert(0) += gpus_of(p);
                }
            }
            if gated && p["metadata"]["annotations"]["gantry.dev/assigned-node"].is_null() {
                assert!(waiting(p).is_some(), "{key} waits without a reason: {p}");
            }
        }
        for (g, (size, gated, released)) in gangs {
            // Members may finish (be deleted) one by one; what must never be seen is
            // part of a gang released while another part is still held.
            assert!(
                released == 0 || gated == 0,
                "gang {g} half released: {released} of {size} released, {gated} gated"
            );
        }
        for (n, used) in per_node {
            assert!(
                used <= 8,
                "{n} holds {used} GPUs: {:#?}",
                pods.iter()
                    .map(|(k, p)| (
                        k,
                        p["spec"]["nodeName"].clone(),
                        p["metadata"]["annotations"].clone(),
                        p["metadata"]["deletionTimestamp"].clone(),
                        gpus_of(p),
                        p["status"]["conditions"].clone()
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(6), ..ProptestConfig::default() })]

        #[test]
        fn many_cycles_keep_gangs_whole_and_nodes_within_capacity(steps in prop::collection::vec(step(), 4..14)) {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async {
                let h = harness().await;
                let tiers = ["critical", "standard", "best_effort"];
                let mut n = 0;
                for s in &steps {
                    n += 1;
                    match *s {
                        Step::Single { team, tier, gpus } => {
                            let team = if team { "alpha" } else { "beta" };
                            h.api.apply(Kind::Pods, gated(&format!("s{n}"), team, tiers[tier as usize], gpus, None));
                        }
                        Step::Gang { team, tier, size, gpus } => {
                            let team = if team { "alpha" } else { "beta" };
                            for m in 0..size {
                                h.api.apply(Kind::Pods, gated(&format!("g{n}-{m}"), team, tiers[tier as usize], gpus, Some((&format!("g{n}"), size))));
                            }
                        }
                        Step::Finish { pick } => {
                            let bound: Vec<String> = h.api.pods().into_iter().filter(|(_, p)| p["spec"]["nodeName"].is_string()).map(|(k, _)| k).collect();
                            if !bound.is_empty() {
                                let k = &bound[pick % bound.len()];
                                h.api.delete(Kind::Pods, k);
                            }
                        }
                    }
                    h.cycle().await;
                    check(&h);
                    h.api.bind_released();
                    h.api.finish_deletions();
                }
                // Let it settle, then nothing more is written.
                for _ in 0..8 {
                    let (actions, _) = h.cycle().await;
                    h.api.bind_released();
                    h.api.finish_deletions();
                    check(&h);
                    if actions.is_empty() {
                        break;
                    }
                }
                let writes = h.api.writes().len();
                let (actions, _) = h.cycle().await;
                assert!(actions.is_empty(), "settled, yet: {actions:?}");
                assert_eq!(h.api.writes().len(), writes);
            });
        }
    }
}

/// The engine's memory (usage for fair share, autoscaler state, starts) is written to the
/// ConfigMap gantry-state by the leader and read back by the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_keeps_the_engines_memory_in_a_config_map() {
    let h = harness().await;
    let clock = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    };
    let (_state, _dir) = h.lead(clock, Duration::from_millis(500));
    h.api
        .apply(Kind::Pods, gated("m-0", "alpha", "best_effort", 8, None));
    // Nudge cycles until the pod runs and its usage has been written.
    let start = std::time::Instant::now();
    let saved = loop {
        h.api.bind_released();
        let mut touch = gated("nudge", "beta", "best_effort", 1, None);
        touch["metadata"]["labels"]["n"] = json!(start.elapsed().as_millis().to_string());
        h.api.apply(Kind::Pods, touch);
        if let Some(cm) = h.api.config_map("gantry-system/gantry-state") {
            let memory: cluster::memory::Memory =
                serde_json::from_str(cm["data"]["memory.json"].as_str().unwrap()).unwrap();
            if memory
                .usage
                .iter()
                .any(|u| u.team == "alpha" && u.gpu_s > 0.0)
            {
                break memory;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no memory written"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        saved
            .starts
            .iter()
            .any(|s| s.team.as_deref() == Some("alpha")),
        "{saved:?}"
    );
    // A new leader starts from it.
    let loaded = cluster::memory::load(&h.client, "gantry-system")
        .await
        .unwrap();
    assert_eq!(loaded.usage, saved.usage);
}

/// Between its release and its binding a pod's room is promised: the extender lets that
/// pod onto its node and keeps every other pod off it, whatever annotations they carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extender_keeps_released_pods_room_for_them() {
    use serve::state::InventorySource;
    use tower::ServiceExt;
    let h = harness().await;
    h.api
        .apply(Kind::Pods, gated("p-0", "alpha", "best_effort", 8, None));
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["release p-0"]);
    let node = h.pod("p-0")["metadata"]["annotations"]["gantry.dev/assigned-node"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| NOW)));
    state.reload_policy(dir.path()).unwrap();
    state.refresh_inventory(&h.live).unwrap();
    assert_eq!(
        h.live.read().unwrap().running.len(),
        1,
        "the promise counts"
    );
    let app = serve::app::app(state);
    let filter = |pod: Value| {
        let app = app.clone();
        let node = node.clone();
        async move {
            let body = json!({"Pod": pod, "NodeNames": [node]}).to_string();
            let request = axum::http::Request::post("/extender/filter")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body))
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    let released = filter(h.pod("p-0")).await;
    assert_eq!(released["NodeNames"], json!([node]), "{released}");
    let mut other = gated("intruder", "beta", "best_effort", 8, None);
    other["spec"]["schedulingGates"] = Value::Null;
    let refused = filter(other.clone()).await;
    assert_eq!(refused["NodeNames"], json!([]), "{refused}");
    // Issue 51: an assignment its author wrote, or one copied from the released pod with
    // its seal, does not make the extender skip the check for room.
    other["metadata"]["annotations"] = h.pod("p-0")["metadata"]["annotations"].clone();
    let forged = filter(other).await;
    assert_eq!(forged["NodeNames"], json!([]), "{forged}");
}

/// Two replicas run the queue on one cluster: only the Lease holder writes, so each pod
/// of a gang is assigned once and released once; when the holder stops, the other
/// carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_write_as_one() {
    let h = harness().await;
    let second = {
        let url = h.api.serve().await;
        let client = kube::Client::try_from(apiserver::config(&url)).unwrap();
        let options = ClusterOptions {
            kubeconfig: None,
            in_cluster: false,
            pool_label: "gantry.dev/pool".into(),
            sync_timeout: Duration::from_secs(10),
            watch_jobs: true,
            placeholder_image: None,
            provisioning_requests: false,
            predict_runtimes: false,
        };
        Live::with_client(client, url, &options).await.unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), POLICY).unwrap();
    let start_queue = |live: &Live, who: &str| {
        let state = Arc::new(AppState::new(Box::new(|| NOW)));
        state.reload_policy(dir.path()).unwrap();
        let election = cluster::lease::Election {
            duration: Duration::from_millis(1_500),
            renew: Duration::from_millis(200),
            ..cluster::lease::Election::new("gantry-system", who)
        };
        live.start_queue_with(state.clone(), election, Duration::from_secs(60));
        state
    };
    let a = start_queue(&h.live, "replica-a");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = start_queue(&second, "replica-b");
    h.gang("g", "alpha", 2, 8);
    let released = |p: &str| h.pod(p)["spec"]["schedulingGates"].is_null();
    let start = std::time::Instant::now();
    while !(released("g-0") && released("g-1")) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the gang was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writes = |p: &str| {
        h.api
            .writes()
            .iter()
            .filter(|(verb, path)| verb == "PATCH" && path == &format!("pods/ml/{p}"))
            .count()
    };
    assert_eq!(
        (writes("g-0"), writes("g-1")),
        (2, 2),
        "one assign and one release each: {:?}",
        h.api.writes()
    );
    assert_eq!(h.live.leading(), Some(true));
    assert_eq!(second.leading(), Some(false));
    // Both replicas show the queue.
    assert!(a.queue_report().is_some() && b.queue_report().is_some());
    // The leader goes away: the other takes over and places the next pod.
    drop(h.live);
    let start = std::time::Instant::now();
    while second.leading() != Some(true) {
        assert!(start.elapsed() < Duration::from_secs(10), "no takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.api.bind_released();
    h.api
        .apply(Kind::Pods, gated("late", "beta", "best_effort", 8, None));
    let start = std::time::Instant::now();
    loop {
        let pod = h.api.get_object(Kind::Pods, "ml/late").unwrap();
        if waiting(&pod).is_some() || pod["spec"]["schedulingGates"].is_null() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the new leader did not act: {pod}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A refused write skips the rest of its job's writes and nothing else: a
/// PodDisruptionBudget refusing one eviction (429) holds up no other job, and a gang whose
/// assignment failed is not released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_holds_up_only_its_own_job() {
    use cluster::enact::PodRef;
    let h = harness().await;
    h.api
        .apply(Kind::Pods, gated("a-0", "alpha", "best_effort", 8, None));
    h.api
        .apply(Kind::Pods, gated("a-1", "alpha", "best_effort", 8, None));
    h.cycle().await;
    h.api.bind_released();
    h.api.update(Kind::Pods, "ml/a-0", |p| {
        p["metadata"]["labels"]["pdb"] = json!("block")
    });
    let pod = |name: &str| PodRef {
        namespace: "ml".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    };
    let evict = |name: &str| Action::Evict {
        pod: pod(name),
        job: format!("ml/{name}"),
        for_job: "ml/b".into(),
        cause: "reclaim".into(),
        grace_s: 30,
        marked: false,
        mark_seal: None,
    };
    let actions = vec![
        evict("a-0"),
        evict("a-1"),
        // A gang whose first member no longer exists: its release must not follow.
        Action::Assign {
            pod: pod("gone"),
            job: "ml/g".into(),
            node: "n0".into(),
            seal: None,
        },
        Action::Release {
            pod: pod("gone-too"),
            job: "ml/g".into(),
            node: "n0".into(),
            patch: json!({}),
            told: false,
        },
    ];
    let (done, refused) = controller::enact(&h.client, &actions, NOW, || true).await;
    assert_eq!(kinds(&done), ["evict a-1"], "{refused:?}");
    assert_eq!(
        kinds(&refused.iter().map(|(a, _)| a.clone()).collect::<Vec<_>>()),
        ["evict a-0", "assign gone"]
    );
    assert!(refused[0].1.contains("disruption budget"), "{refused:?}");
    assert!(
        !h.api
            .writes()
            .iter()
            .any(|(_, path)| path.contains("gone-too")),
        "the gang's release was skipped"
    );
    h.settle().await;
    assert!(h.pod("a-1")["metadata"]["deletionTimestamp"].is_string());
    assert!(h.pod("a-0")["metadata"]["deletionTimestamp"].is_null());
}
