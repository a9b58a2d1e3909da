//! The API server hears from gantry only on change: a waiting queue is told why once,
//! not again each cycle as time passes (no countdowns, no exact positions), a completion
//! rewrites only the pods whose reason changed in kind, and a pod told it waits is told
//! it was placed when it is released.

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
use harness::*;

/// Alpha may burst to 16 GPUs and plans its jobs as 2-hour ones; beta is alone.
const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 2 }

placement { gang = all_or_nothing; gang_timeout = 15m; packing = best_fit;
            backfill = conservative(depth = all) }

cohort lab {
  team alpha { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 0 gpu; default_runtime = 2h }
  team beta { guaranteed = 8 gpu in training; burst = 8 gpu; lend = 8 gpu; default_runtime = 2h }
}
"#;

fn queued(pod: &serde_json::Value) -> Option<(String, String)> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "gantry.dev/Queued")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").into(),
                c["reason"].as_str().unwrap_or("").into(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_queue_is_told_once_and_a_placed_pod_stops_saying_it_waits() {
    let h = harness_with(POLICY, None).await;
    // Alpha fills both nodes, at its burst.
    h.gang("run", "alpha", 2, 8);
    h.cycle().await;
    assert_eq!(h.api.bind_released(), 2);
    // Twelve of alpha's pods wait behind its own quota, with ETAs from its running jobs'
    // estimates and positions 1 to 12.
    for i in 0..12 {
        h.api.apply(
            Kind::Pods,
            gated(&format!("w{i:02}"), "alpha", "best_effort", 1 + i % 4, None),
        );
    }
    let (actions, _) = h.cycle().await;
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(a, cluster::enact::Action::Wait { .. }))
            .count(),
        12,
        "{:?}",
        kinds(&actions)
    );
    let (_, message) = waiting(&h.pod("w11")).unwrap();
    assert!(message.contains("queue position 11-30"), "{message}");
    assert!(!message.contains(" in about "), "a countdown: {message}");
    // An hour of cycles every 10 s with nothing changing but the clock: not one write.
    let writes = h.api.writes().len();
    let events = h.api.events().len();
    for step in 1..=360 {
        let (actions, _) = h.cycle_at(NOW + 10 * step).await;
        assert!(
            actions.is_empty(),
            "at +{}s: {:?}",
            10 * step,
            kinds(&actions)
        );
    }
    assert_eq!(h.api.writes().len(), writes);
    assert_eq!(h.api.events().len(), events);

    // Alpha's running gang ends: room for 16 GPUs of alpha's quota. Those placed are
    // released and their conditions turn False (the others' ETAs and places changed,
    // and they are told so).
    h.api.delete(Kind::Pods, "ml/run-0");
    h.api.delete(Kind::Pods, "ml/run-1");
    let later = NOW + 3_700;
    let (actions, _) = h.cycle_at(later).await;
    let released: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            cluster::enact::Action::Release { pod, told, .. } => {
                assert!(*told, "{} was told it waits", pod.name);
                Some(pod.name.clone())
            }
            _ => None,
        })
        .collect();
    assert!(!released.is_empty(), "{:?}", kinds(&actions));
    for name in &released {
        assert_eq!(
            queued(&h.pod(name)),
            Some(("False".into(), "Placed".into())),
            "{name}"
        );
    }
    // Bound when they were released. A waiting pod may be told once more (a job that
    // backfilled in the release's cycle can change another's reason from capacity to
    // quota), and then the queue is quiet for ten minutes of cycles.
    let at = chrono::DateTime::from_timestamp(later, 0)
        .unwrap()
        .to_rfc3339();
    h.api.bind_released_at(&at);
    let mut told = Vec::new();
    for step in 1..=60 {
        let (actions, _) = h.cycle_at(later + 10 * step).await;
        assert!(
            actions
                .iter()
                .all(|a| matches!(a, cluster::enact::Action::Wait { .. })),
            "{:?}",
            kinds(&actions)
        );
        told.extend(actions.iter().map(|a| (step, a.pod().name.clone())));
    }
    assert!(
        told.len() <= 12 - released.len() && told.iter().all(|(step, _)| *step == 1),
        "{told:?}"
    );
}

/// A released pod whose condition write was lost is told it was placed once bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_still_said_to_wait_is_corrected() {
    let h = harness_with(POLICY, None).await;
    h.gang("run", "alpha", 2, 8);
    h.cycle().await;
    h.api.bind_released();
    h.api
        .apply(Kind::Pods, gated("late", "beta", "best_effort", 8, None));
    h.cycle().await;
    assert_eq!(queued(&h.pod("late")).unwrap().0, "True");
    h.api.delete(Kind::Pods, "ml/run-0");
    h.api.delete(Kind::Pods, "ml/run-1");
    // The release goes through; the condition write after it does not.
    h.api.fail_after(1);
    let (actions, _) = h.cycle().await;
    assert!(
        kinds(&actions).contains(&"release late".to_string()),
        "{:?}",
        kinds(&actions)
    );
    h.api.heal();
    assert_eq!(queued(&h.pod("late")).unwrap().0, "True");
    h.api.bind_released();
    let (actions, _) = h.cycle().await;
    assert_eq!(kinds(&actions), ["placed late"]);
    assert_eq!(
        queued(&h.pod("late")),
        Some(("False".into(), "Placed".into()))
    );
}

/// Every write through gantry's client is counted by verb and resource, for
/// `gantry_api_writes_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_counted_by_verb_and_resource() {
    let h = harness_with(POLICY, None).await;
    h.api
        .apply(Kind::Pods, gated("w", "beta", "best_effort", 1, None));
    let url = h.api.serve().await;
    let client = cluster::bounded::client(apiserver::config(&url)).unwrap();
    let before = cluster::api_writes::counts();
    let pod = cluster::enact::PodRef {
        namespace: "ml".into(),
        name: "w".into(),
        uid: "uid-w".into(),
    };
    let wait = cluster::enact::Action::Wait {
        pod,
        reason: "NoCapacity".into(),
        message: "none free".into(),
        event: true,
    };
    cluster::controller::apply(&client, &wait, NOW)
        .await
        .unwrap();
    let after = cluster::api_writes::counts();
    let grew = |verb: &str, resource: &str| {
        let key = (verb.to_string(), resource.to_string());
        after.get(&key).copied().unwrap_or(0) - before.get(&key).copied().unwrap_or(0)
    };
    assert_eq!(grew("patch", "pods/status"), 1, "{after:?}");
    assert_eq!(grew("create", "events"), 1, "{after:?}");
    let state = serve::state::AppState::new(Box::new(|| NOW));
    state.metrics.set_api_writes(after);
    let text = state.metrics.render(None, &Default::default());
    assert!(
        text.contains("gantry_api_writes_total{verb=\"patch\",resource=\"pods/status\"}"),
        "{text}"
    );
}

/// A reason whose words change under the same code (its place in the queue) rewrites the
/// condition only; an Event is written when the code changes, as `kubectl get events`
/// shows changes of state, not every refinement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_under_the_same_code_writes_no_event() {
    let h = harness_with(POLICY, None).await;
    // Alpha's standard gang fills both nodes; nothing of alpha's may preempt it.
    for m in 0..2 {
        h.api.apply(
            Kind::Pods,
            gated(
                &format!("run-{m}"),
                "alpha",
                "standard",
                8,
                Some(("run", 2)),
            ),
        );
    }
    h.cycle().await;
    assert_eq!(h.api.bind_released(), 2);
    h.api
        .apply(Kind::Pods, gated("w0", "alpha", "best_effort", 2, None));
    h.cycle().await;
    let (code, message) = waiting(&h.pod("w0")).unwrap();
    assert!(message.contains("queue position 1"), "{message}");
    let events = h.api.events().len();
    // A higher tier of alpha's queues ahead: w0 is now second, same code. Its
    // reservation stays on its node (s0's booking goes beside it, best fit), so only its
    // place changed: the place told is held for a while (a band held saves a write),
    // then written once, and a later cycle has nothing new to say.
    h.api
        .apply(Kind::Pods, gated("s0", "alpha", "standard", 2, None));
    let (actions, _) = h.cycle().await;
    let (again, message) = waiting(&h.pod("w0")).unwrap();
    assert_eq!(again, code);
    assert!(message.contains("queue position 1"), "{message}");
    assert!(
        !kinds(&actions).contains(&"wait w0".to_string()),
        "{actions:?}"
    );
    let (moved, _) = h.cycle_at(NOW + cluster::telling::BAND_HOLD_S).await;
    assert!(kinds(&moved).contains(&"wait w0".to_string()), "{moved:?}");
    let (again, message) = waiting(&h.pod("w0")).unwrap();
    assert_eq!(again, code);
    assert!(message.contains("queue position 2"), "{message}");
    let (later, _) = h.cycle_at(NOW + cluster::telling::BAND_HOLD_S + 60).await;
    assert!(!kinds(&later).contains(&"wait w0".to_string()), "{later:?}");
    let w0_events = h
        .api
        .events()
        .iter()
        .skip(events)
        .filter(|e| e["involvedObject"]["name"] == "w0")
        .count();
    assert_eq!(w0_events, 0, "{:?}", kinds(&actions));
    // s0's first reason is news: it gets its Event.
    assert!(h
        .api
        .events()
        .iter()
        .any(|e| e["involvedObject"]["name"] == "s0"));
}

/// A reason that comes back is counted on its first Event, as Kubernetes' recorder
/// counts a repeated Event: one object per (pod, reason), its count and last time moving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_that_comes_back_counts_on_its_event() {
    let h = harness_with(POLICY, None).await;
    h.api
        .apply(Kind::Pods, gated("flip", "beta", "best_effort", 1, None));
    let url = h.api.serve().await;
    let client = cluster::bounded::client(apiserver::config(&url)).unwrap();
    let pod = cluster::enact::PodRef {
        namespace: "ml".into(),
        name: "flip".into(),
        uid: "uid-series-flip".into(),
    };
    let wait = |reason: &str, message: &str| cluster::enact::Action::Wait {
        pod: pod.clone(),
        reason: reason.into(),
        message: message.into(),
        event: true,
    };
    let of = |reason: &str| -> Vec<serde_json::Value> {
        h.api
            .events()
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == "flip" && e["reason"] == reason)
            .collect()
    };
    let apply = |a: cluster::enact::Action, at: i64| {
        let client = client.clone();
        async move { cluster::controller::apply(&client, &a, at).await.unwrap() }
    };
    apply(wait("NoCapacity", "none free"), NOW).await;
    apply(wait("QuotaExhausted", "at its burst"), NOW + 60).await;
    apply(
        wait("NoCapacity", "none free; expected to start by 10:40"),
        NOW + 120,
    )
    .await;
    assert_eq!(h.api.events().len(), 2, "{:?}", h.api.events());
    let capacity = of("NoCapacity");
    assert_eq!(capacity.len(), 1);
    let e = &capacity[0];
    assert_eq!(e["count"], 2, "{e}");
    assert_eq!(e["message"], "none free; expected to start by 10:40");
    assert_ne!(e["firstTimestamp"], e["lastTimestamp"], "{e}");
    assert_eq!(of("QuotaExhausted")[0]["count"], 1);
    // A restarted gantry has no counts: it reads the Event's and adds one.
    cluster::events::forget_counts();
    apply(wait("QuotaExhausted", "at its burst"), NOW + 180).await;
    assert_eq!(of("QuotaExhausted")[0]["count"], 2);
    // Events expire (their TTL): the next repeat starts a new series at 1.
    h.api.expire_events();
    apply(wait("NoCapacity", "none free"), NOW + 240).await;
    let capacity = of("NoCapacity");
    assert_eq!(capacity.len(), 1);
    assert_eq!(capacity[0]["count"], 1);
    // An Event someone else made under a series' name (it is derived from public
    // fields) is left as it is; gantry's goes under a name of its own.
    let forged: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": cluster::events::series_name(&pod, "Reserved"), "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": "other", "namespace": "ml", "uid": "uid-other"},
        "reason": "Reserved", "message": "not gantry's", "count": 7
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), "ml")
        .create(&Default::default(), &forged)
        .await
        .unwrap();
    cluster::events::forget_counts();
    apply(wait("Reserved", "held for it"), NOW + 300).await;
    let reserved = of("Reserved");
    assert_eq!(reserved.len(), 1, "{reserved:?}");
    assert_eq!(reserved[0]["message"], "held for it");
    assert_eq!(reserved[0]["count"], 1);
    let forged_now: Vec<serde_json::Value> = h
        .api
        .events()
        .into_iter()
        .filter(|e| e["involvedObject"]["uid"] == "uid-other")
        .collect();
    assert_eq!(forged_now[0]["count"], 7);
    assert_eq!(forged_now[0]["message"], "not gantry's");
    // Each request (create, get, patch) is one the shipped RBAC allows.
    let allowed = apiserver::rbac::example_rules(&["rbac.yaml", "rbac-queue.yaml"]);
    for (method, path, watch) in h.api.requests() {
        let rule = apiserver::rbac::needs(&method, &path, watch);
        assert!(allowed.contains(&rule), "{rule:?} is not allowed");
    }
    let verbs: Vec<String> = h
        .api
        .requests()
        .iter()
        .map(|(m, p, w)| apiserver::rbac::needs(m, p, *w))
        .filter(|r| r.1 == "events")
        .map(|r| r.2)
        .collect();
    for verb in ["create", "get", "patch"] {
        assert!(verbs.iter().any(|v| v == verb), "{verbs:?}");
    }
}

/// Telling a queue why it waits goes on beside the cycles: with every status write
/// hanging for seconds, a completion's room is still given to a waiting pod at once,
/// and once the API server answers again every waiting pod is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_tellings_never_hold_up_a_release() {
    use std::time::{Duration, Instant};
    let h = harness().await;
    let (_state, _dir) = h.lead(|| NOW, Duration::from_millis(100));
    h.gang("run", "alpha", 2, 8);
    let start = Instant::now();
    while h.api.bind_released() < 2 {
        h.api.bind_released();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the gang never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        if h.pod("run-0")["spec"]["nodeName"].is_string() {
            break;
        }
    }
    // Every status write hangs for 6 s (and then fails) for a while.
    for _ in 0..40 {
        h.api
            .fault("/status", apiserver::Fault::Hang(Duration::from_secs(6)));
    }
    // alpha's own, at its burst: they wait on its quota and preempt nothing (a
    // nomination is not a telling: it is written before its victims' evictions).
    for i in 0..12 {
        h.api.apply(
            Kind::Pods,
            gated(&format!("w{i:02}"), "alpha", "best_effort", 8, None),
        );
    }
    // The cycles tell them (and hang on it); meanwhile alpha's gang ends.
    tokio::time::sleep(Duration::from_millis(800)).await;
    h.api.delete(Kind::Pods, "ml/run-0");
    h.api.delete(Kind::Pods, "ml/run-1");
    let freed = Instant::now();
    let released = |h: &Harness| {
        (0..12)
            .filter(|i| {
                h.pod(&format!("w{i:02}"))["spec"]["schedulingGates"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            })
            .count()
    };
    while released(&h) < 2 {
        assert!(
            freed.elapsed() < Duration::from_secs(4),
            "no release within 4 s while tellings hang (6 s each)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The API server answers again: each pod still waiting is told why, once.
    let told = Instant::now();
    loop {
        h.api.bind_released();
        let untold: Vec<String> = (0..12)
            .map(|i| format!("w{i:02}"))
            .filter(|n| {
                h.pod(n)["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty())
            })
            .filter(|n| waiting(&h.pod(n)).is_none())
            .collect();
        if untold.is_empty() && h.api.faults_left() == 0 {
            break;
        }
        assert!(
            told.elapsed() < Duration::from_secs(60),
            "still untold: {untold:?}, {} faults left",
            h.api.faults_left()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // No pod got the same Event twice.
    let mut seen = std::collections::BTreeMap::new();
    for e in h.api.events() {
        let name = e["metadata"]["name"].as_str().unwrap_or("").to_string();
        *seen.entry(name).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

/// Issue 52: a queue draining one completion at a time costs each refill its release and
/// its condition turned `False` — not a rewrite of every pod whose place moved (the
/// first three are exact, so without the band's hold each completion rewrote three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_queue_costs_each_refill_its_own_writes() {
    let h = harness_with(harness::POLICY, None).await;
    for i in 0..16 {
        let mut p = gated(
            &format!("r{i:02}"),
            if i < 8 { "alpha" } else { "beta" },
            "standard",
            1,
            None,
        );
        p["spec"]["schedulingGates"] = serde_json::json!(null);
        p["spec"]["nodeName"] = serde_json::json!(if i < 8 { "n0" } else { "n1" });
        p["status"] = serde_json::json!({"phase": "Running",
            "startTime": "2026-11-24T08:00:00Z",
            "conditions": [{"type": "PodScheduled", "status": "True"}]});
        h.api.apply(Kind::Pods, p);
    }
    for i in 0..20 {
        h.api.apply(
            Kind::Pods,
            gated(&format!("w{i:02}"), "alpha", "standard", 1, None),
        );
    }
    h.cycle().await;
    let told = (0..20)
        .filter(|i| waiting(&h.pod(&format!("w{i:02}"))).is_some())
        .count();
    assert_eq!(told, 20);
    let before = h.api.writes().len();
    for k in 0..8 {
        h.api.delete(Kind::Pods, &format!("ml/r{k:02}"));
        h.cycle_at(NOW + 10 * (k + 1)).await;
        h.api.bind_released();
    }
    let pods_writes: Vec<(String, String)> = h
        .api
        .writes()
        .into_iter()
        .skip(before)
        .filter(|(_, path)| !path.starts_with("leases"))
        .collect();
    let released = (0..20)
        .filter(|i| {
            h.pod(&format!("w{i:02}"))["spec"]["schedulingGates"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
        .count();
    assert_eq!(released, 8, "each completion refilled");
    assert!(
        pods_writes.len() <= 2 * released,
        "{} writes for {released} refills: {pods_writes:?}",
        pods_writes.len()
    );
}
