//! `gantry simulate` does what the queue controller does. The same random workload is
//! run twice: through the controller's own cycle against the in-process API server
//! (gated pods arrive, the cycle assigns and releases them, kube-scheduler's binding is
//! played by the fake server, a pod is deleted when its declared runtime is over), and
//! through the replay (`engine::sim::replay`) of the same jobs on the fleet the controller
//! saw. Every job must start at the same moment in both and be given the same first ETA.

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
use engine::core::alloc::Request;
use engine::core::gang::JobShape;
use engine::inventory::jobs_file::Job;
use engine::sim::replay::{self, Config};
use engine::sim::trace::Trace;
use harness::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

/// Two 8-GPU nodes, two teams of 8 GPUs each, no preemption (the controller evicts a
/// pod for good where the replay queues a victim again; a tier never preempted does not
/// borrow), conservative backfill; fair share as `fair_share` says.
fn policy(fair_share: &str) -> String {
    format!(
        r#"
use std.nodes.{{dgx_h100}}

pool training {{ capacity = reserved; node = dgx_h100; nodes = 2 }}

tier batch {{ priority = 100; preempt = never }}

placement {{ packing = best_fit; backfill = conservative(depth = all); backfill_window = 24h }}

cohort lab {{
  fair_share = {fair_share}; half_life = 1h
  team alpha {{ guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }}
  team beta {{ guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }}
}}
"#
    )
}

/// The controller's accounting step at most (`cluster::memory`): usage is charged up to
/// each moment the loop below decides at, in steps no longer than this, as the
/// controller's cycles (every 10 s at least) charge it.
const STEP_S: i64 = 300;

#[derive(Debug, Clone)]
struct Arrival {
    after_s: i64,
    alpha: bool,
    /// 1 for a single pod, 2 for a gang of two.
    members: u32,
    gpus: u32,
    runtime_s: i64,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (
        0..4i64,
        any::<bool>(),
        prop_oneof![4 => Just(1u32), 1 => Just(2)],
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        1..8i64,
    )
        .prop_map(|(gap, alpha, members, gpus, minutes)| Arrival {
            after_s: gap * 120,
            alpha,
            members,
            // A gang's members take 2 or 4 GPUs each: a tier never preempted runs only
            // inside its team's guarantee (8 GPUs).
            gpus: if members > 1 { gpus.clamp(2, 4) } else { gpus },
            runtime_s: minutes * 300,
        })
}

fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// One job as the trace and the pod give it.
struct Planned {
    id: String,
    team: &'static str,
    members: u32,
    gpus: u32,
    submit: i64,
    runtime_s: i64,
}

fn planned(arrivals: &[Arrival]) -> Vec<Planned> {
    let mut t = NOW;
    arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            t += a.after_s;
            Planned {
                id: format!("ml/{}{i}", if a.members > 1 { "g" } else { "j" }),
                team: if a.alpha { "alpha" } else { "beta" },
                members: a.members,
                gpus: a.gpus,
                submit: t,
                runtime_s: a.runtime_s,
            }
        })
        .collect()
}

/// (first start, first ETA as a time) by job id.
type Seen = BTreeMap<String, (Option<i64>, Option<i64>)>;

/// The workload through the controller's cycle on the fake API server, its memory kept as
/// the controller keeps it (usage charged before each decision).
async fn through_the_controller(h: &mut Harness, jobs: &[Planned]) -> Seen {
    let mut seen: Seen = jobs.iter().map(|j| (j.id.clone(), (None, None))).collect();
    let mut ends: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut next = 0;
    loop {
        let arrival = jobs.get(next).map(|j| j.submit);
        let end = ends.keys().next().copied();
        let Some(t) = [arrival, end].into_iter().flatten().min() else {
            break;
        };
        // As the replay orders one instant: completions, then arrivals, then decisions.
        for id in ends.remove(&t).unwrap_or_default() {
            for pod in pods_of(jobs, &id) {
                h.api.delete(Kind::Pods, &pod);
            }
        }
        while let Some(j) = jobs.get(next).filter(|j| j.submit == t) {
            let name = j.id.trim_start_matches("ml/");
            for pod_key in pods_of(jobs, &j.id) {
                let pod_name = pod_key.trim_start_matches("ml/");
                let gang = (j.members > 1).then_some((name, j.members));
                let mut pod = gated(pod_name, j.team, "batch", j.gpus, gang);
                pod["metadata"]["creationTimestamp"] = json!(rfc3339(t));
                pod["metadata"]["annotations"] =
                    json!({"gantry.dev/runtime": j.runtime_s.to_string()});
                h.api.apply(Kind::Pods, pod);
            }
            next += 1;
        }
        h.settle().await;
        let running = controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, t)
            .unwrap()
            .0
            .jobs;
        let mut at = h.memory.accounted_to.unwrap_or(t);
        while at < t {
            at = (at + STEP_S).min(t);
            h.memory.account(&running, at);
        }
        h.memory.account(&running, t);
        for round in 0..8 {
            h.settle().await;
            let (view, plan, actions) =
                controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, t).unwrap();
            // As the controller's loop keeps it: the bookings passed on, the starts.
            h.memory
                .remember(&plan, &cluster::memory::node_pools(&view.fleet));
            if round == 0 {
                for d in &plan.decisions {
                    let eta = d.reason.as_ref().and_then(|r| r.eta_s).map(|e| t + e);
                    if let Some(s) = seen.get_mut(&d.job).filter(|s| s.1.is_none()) {
                        s.1 = eta;
                    }
                }
            }
            let (done, refused) = controller::enact(&h.client, &actions, t, || true).await;
            h.live.stores().remember_evictions(&done, &refused);
            let bound_before: Vec<String> = bound(h);
            h.settle().await;
            h.api.bind_released_at(&rfc3339(t));
            let newly: Vec<String> = bound(h)
                .into_iter()
                .filter(|k| !bound_before.contains(k))
                .collect();
            for j in jobs {
                let members = pods_of(jobs, &j.id);
                if !members.iter().any(|k| newly.contains(k)) {
                    continue;
                }
                let now_bound = bound(h);
                assert!(
                    members.iter().all(|k| now_bound.contains(k)),
                    "{} bound in part: {members:?}",
                    j.id
                );
                seen.get_mut(&j.id).unwrap().0 = Some(t);
                ends.entry(t + j.runtime_s).or_default().push(j.id.clone());
            }
            if actions.is_empty() && newly.is_empty() {
                break;
            }
        }
    }
    seen
}

/// The pods of job `id`: itself, or its gang's members `<gang>-<k>`.
fn pods_of(jobs: &[Planned], id: &str) -> Vec<String> {
    let j = jobs.iter().find(|j| j.id == id).unwrap();
    if j.members == 1 {
        return vec![id.to_string()];
    }
    (0..j.members).map(|k| format!("{id}-{k}")).collect()
}

/// Pods bound to a node, by key.
fn bound(h: &Harness) -> Vec<String> {
    h.api
        .pods()
        .into_iter()
        .filter(|(_, p)| p["spec"]["nodeName"].is_string())
        .map(|(k, _)| k)
        .collect()
}

/// The same workload through the replay, on the fleet the controller sees.
async fn through_the_replay(h: &Harness, jobs: &[Planned]) -> Seen {
    h.settle().await;
    let (view, _, _) = controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, NOW).unwrap();
    let trace = Trace {
        jobs: jobs
            .iter()
            .map(|j| Job {
                id: j.id.clone(),
                team: Some(j.team.into()),
                tier: Some("batch".into()),
                submitted_at: Some(j.submit),
                runtime_s: Some(j.runtime_s as u64),
                shape: JobShape {
                    members: j.members,
                    member: Request {
                        cpu_milli: 8000,
                        memory_mib: 65536,
                        num_gpu: j.gpus,
                        gpu_milli: 1000,
                        ..Request::default()
                    },
                    ..JobShape::default()
                },
                ..Job::default()
            })
            .collect(),
        events: Vec::new(),
    };
    let m = replay::replay(
        &h.policy.program,
        view.fleet.clone(),
        trace,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    m.job_outcomes
        .iter()
        .map(|o| (o.id.clone(), (o.first_start, o.first_eta)))
        .collect()
}

/// Both runs of `arrivals` under `fair_share` agree.
fn agree(arrivals: &[Arrival], fair_share: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut h = harness_with(&policy(fair_share), None).await;
        let jobs = planned(arrivals);
        let replayed = through_the_replay(&h, &jobs).await;
        let enacted = through_the_controller(&mut h, &jobs).await;
        let differ: Vec<String> = enacted
            .iter()
            .filter(|(id, seen)| replayed.get(*id) != Some(seen))
            .map(|(id, (start, eta))| {
                let (rs, re) = replayed.get(id).copied().unwrap_or_default();
                let rel = |t: Option<i64>| t.map(|t| t - NOW);
                format!(
                    "{id}: controller starts {:?} (first ETA {:?}), replay {:?} ({:?})",
                    rel(*start),
                    rel(*eta),
                    rel(rs),
                    rel(re)
                )
            })
            .collect();
        assert!(
            differ.is_empty(),
            "the replay parts from the controller:\n{}",
            differ.join("\n")
        );
        assert!(
            enacted.values().all(|(s, _)| s.is_some()),
            "every job ran: {enacted:?}"
        );
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(6), ..ProptestConfig::default() })]

    #[test]
    fn the_replay_starts_and_promises_as_the_controller_does(arrivals in prop::collection::vec(arrival(), 3..10)) {
        agree(&arrivals, "off");
    }

    #[test]
    fn with_fair_share_accruing_too(arrivals in prop::collection::vec(arrival(), 3..10)) {
        agree(&arrivals, "drf");
    }
}
