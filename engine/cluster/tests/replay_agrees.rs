//! `gantry simulate` does what the queue controller does. The same random workload is
//! run twice: through the controller's own cycle against the in-process API server
//! (gated pods arrive, the cycle assigns and releases them, kube-scheduler's binding is
//! played by the fake server, a pod is deleted when its actual runtime is over, which its
//! declared runtime, an estimate nobody enforces, sometimes misses), and
//! through the replay (`engine::sim::replay`) of the same jobs on the fleet the controller
//! saw. Every job must start at the same moment in both, be given the same first ETA,
//! be preempted as often and wait as long (a victim queued again from its eviction).

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
use engine::sim::predict::Estimates;
use engine::sim::replay::{self, Config};
use engine::sim::trace::Trace;
use harness::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

/// Two 8-GPU nodes, two teams of 8 GPUs each, conservative backfill; fair share as
/// `fair_share` says. `batch` is never preempted (so it runs only inside its team's
/// guarantee); `scavenger` borrows and is preempted once `min_runtime` is over, so a
/// reclaim waits for it and both sides must wake up when its protection ends, though
/// nothing arrives then; its pods stop within `grace`.
fn policy(fair_share: &str, grace: &str) -> String {
    format!(
        r#"
use std.nodes.{{dgx_h100}}

pool training {{ capacity = reserved; node = dgx_h100; nodes = 2 }}

tier batch {{ priority = 100; preempt = never }}
tier scavenger {{ priority = 10; preempt = immediately; min_runtime = 10m; grace = {grace} }}

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
    scavenger: bool,
    /// 1 for a single pod, 2 for a gang of two.
    members: u32,
    gpus: u32,
    /// What the pod declares (`gantry.dev/runtime`), an estimate nobody enforces.
    runtime_s: i64,
    /// How long it really runs.
    actual_s: i64,
}

/// Arrivals of `batch` jobs only with exact estimates, or of both tiers with estimates
/// that are sometimes off.
fn arrival(preempting: bool) -> impl Strategy<Value = Arrival> {
    let off = prop_oneof![
        2 => Just(0i64),
        u32::from(preempting) => Just(-150),
        u32::from(preempting) => Just(420),
    ];
    arrival_running(preempting, off.prop_map(|off| (100, off)))
}

/// Arrivals whose limits are up to 4 times what they run, or shorter (they run out
/// their limit): of `batch` jobs only, or of both tiers.
fn limited_arrival(preempting: bool) -> impl Strategy<Value = Arrival> {
    let percent = prop_oneof![Just(25i64), Just(50), Just(100), Just(130)];
    arrival_running(preempting, percent.prop_map(|p| (p, 0)))
}

/// Arrivals that run (percent of their declared runtime, plus seconds) as `actual` says.
fn arrival_running(
    preempting: bool,
    actual: impl Strategy<Value = (i64, i64)>,
) -> impl Strategy<Value = Arrival> {
    (
        0..4i64,
        any::<bool>(),
        prop_oneof![1 => Just(false), u32::from(preempting) => Just(true)],
        prop_oneof![4 => Just(1u32), 1 => Just(2)],
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        1..8i64,
        actual,
    )
        .prop_map(
            |(gap, alpha, scavenger, members, gpus, minutes, (percent, off))| Arrival {
                after_s: gap * 120,
                alpha,
                scavenger,
                members,
                // A batch gang's members take 2 or 4 GPUs each: a tier never preempted runs
                // only inside its team's guarantee (8 GPUs).
                gpus: if members > 1 && !scavenger {
                    gpus.clamp(2, 4)
                } else {
                    gpus
                },
                runtime_s: minutes * 300,
                actual_s: minutes * 3 * percent + off,
            },
        )
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
    tier: &'static str,
    members: u32,
    gpus: u32,
    submit: i64,
    runtime_s: i64,
    actual_s: i64,
    /// `runtime_s` is an enforced limit (`activeDeadlineSeconds`), not an estimate.
    limited: bool,
}

fn planned(arrivals: &[Arrival], limited: bool) -> Vec<Planned> {
    let mut t = NOW;
    arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            t += a.after_s;
            Planned {
                // Ids in arrival order (single digits): running jobs are in id order in
                // the controller's snapshot and in arrival order in the replay's, and
                // victims of equal cost are taken in snapshot order (README, "What the
                // replay leaves out"). A replacement (`j3-r1`) sorts where `j3` was.
                id: format!("ml/j{i}"),
                team: if a.alpha { "alpha" } else { "beta" },
                tier: if a.scavenger { "scavenger" } else { "batch" },
                members: a.members,
                gpus: a.gpus,
                submit: t,
                runtime_s: a.runtime_s,
                actual_s: a.actual_s,
                limited,
            }
        })
        .collect()
}

impl Planned {
    /// How long a run lasts: its actual runtime, or up to its limit.
    fn ran_s(&self) -> i64 {
        if self.limited {
            self.actual_s.min(self.runtime_s)
        } else {
            self.actual_s
        }
    }
}

/// What a job went through, as both sides count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Outcome {
    first_start: Option<i64>,
    /// The first ETA given, as a time.
    first_eta: Option<i64>,
    preemptions: u32,
    /// Seconds waited over all its runs, each from when it was queued (again).
    queue_wait_s: i64,
}

type Seen = BTreeMap<String, Outcome>;

/// A job in the cluster, as the test plays its owner (a Job controller): its pods now (a
/// victim's are replaced at once by pods with new names, created at its eviction), which
/// run they are, whether they run, and since when they are queued.
struct Owned {
    pods: Vec<String>,
    run: u32,
    running: bool,
    queued_at: i64,
}

/// The job a decision's id names: a replaced pod's id (`j3-r1`), or a gang's replacements
/// queued beside its terminating members (`j3+j3-0-r1`), is the job it replaces.
fn job_of(decided: &str) -> String {
    let id = decided.split('+').next().unwrap_or(decided);
    match id.rsplit_once("-r") {
        Some((base, n)) if n.parse::<u32>().is_ok() => base.to_string(),
        _ => id.to_string(),
    }
}

/// The pods of `j`'s run `run`: itself, or its gang's members `<gang>-<k>`; `-r<run>`
/// after a run's replacements.
fn pod_names(j: &Planned, run: u32) -> Vec<String> {
    let again = if run == 0 {
        String::new()
    } else {
        format!("-r{run}")
    };
    if j.members == 1 {
        return vec![format!("{}{again}", j.id)];
    }
    (0..j.members)
        .map(|k| format!("{}-{k}{again}", j.id))
        .collect()
}

/// Creates `j`'s pods of run `run` at `t`.
fn create_pods(h: &Harness, j: &Planned, run: u32, t: i64) {
    let gang_name = j.id.trim_start_matches("ml/");
    for pod_key in pod_names(j, run) {
        let pod_name = pod_key.trim_start_matches("ml/");
        let gang = (j.members > 1).then_some((gang_name, j.members));
        let mut pod = gated(pod_name, j.team, j.tier, j.gpus, gang);
        pod["metadata"]["creationTimestamp"] = json!(rfc3339(t));
        if j.limited {
            pod["spec"]["activeDeadlineSeconds"] = json!(j.runtime_s);
        } else {
            pod["metadata"]["annotations"] = json!({"gantry.dev/runtime": j.runtime_s.to_string()});
        }
        h.api.apply(Kind::Pods, pod);
    }
}

/// The workload through the controller's cycle on the fake API server, its memory kept as
/// the controller keeps it (usage charged before each decision).
async fn through_the_controller(h: &mut Harness, jobs: &[Planned], grace_s: i64) -> Seen {
    let mut seen: Seen = jobs
        .iter()
        .map(|j| (j.id.clone(), Outcome::default()))
        .collect();
    let mut owned: BTreeMap<String, Owned> = BTreeMap::new();
    // (job, run) by when the run ends; terminating pods by when their grace is over.
    let mut ends: BTreeMap<i64, Vec<(String, u32)>> = BTreeMap::new();
    let mut stops: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    // As the controller's loop wakes: at each plan's next decision time too.
    let mut wakes: std::collections::BTreeSet<i64> = std::collections::BTreeSet::new();
    let planned_by_id: BTreeMap<&str, &Planned> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    let mut next = 0;
    h.memory.predictions.on = jobs.iter().any(|j| j.limited);
    loop {
        let arrival = jobs.get(next).map(|j| j.submit);
        let end = ends.keys().next().copied();
        let stop = stops.keys().next().copied();
        let wake = wakes.pop_first();
        let Some(t) = [arrival, end, stop, wake].into_iter().flatten().min() else {
            break;
        };
        if let Some(w) = wake.filter(|w| *w > t) {
            wakes.insert(w);
        }
        // Usage up to now, by what ran until now: the controller's cycles (every 10 s at
        // least) charge it as it goes.
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
        // As the replay orders one instant: completions, then arrivals, then decisions.
        for pod in stops.remove(&t).unwrap_or_default() {
            h.api.delete(Kind::Pods, &pod);
        }
        for (id, run) in ends.remove(&t).unwrap_or_default() {
            let o = owned.get_mut(&id).unwrap();
            if o.run == run && o.running {
                for pod in &o.pods {
                    h.api.delete(Kind::Pods, pod);
                }
                o.running = false;
            }
        }
        while let Some(j) = jobs.get(next).filter(|j| j.submit == t) {
            create_pods(h, j, 0, t);
            owned.insert(
                j.id.clone(),
                Owned {
                    pods: pod_names(j, 0),
                    run: 0,
                    running: false,
                    queued_at: t,
                },
            );
            next += 1;
        }
        h.settle().await;
        for _round in 0..8 {
            h.settle().await;
            let (view, plan, actions) =
                controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, t).unwrap();
            // As the controller's loop keeps it: the predictions, the bookings passed on,
            // the starts.
            if let Some(learned) = view.learned.clone() {
                h.memory.predictions = cluster::predictions::Predictions {
                    on: true,
                    ..learned
                };
            }
            let bookings_moved = h
                .memory
                .remember(&plan, &cluster::memory::node_pools(&view.fleet));
            if let Some(at) = plan.next_decision_at.filter(|at| *at > t) {
                wakes.insert(at);
            }
            if std::env::var_os("DEBUG_AGREE").is_some() {
                for d in &plan.decisions {
                    let why = d.reason.as_ref().map(|r| r.message.as_str()).unwrap_or("");
                    eprintln!("controller {}: {} {:?} {why}", t - NOW, d.job, d.action);
                }
                eprintln!("controller {}: actions {:?}", t - NOW, kinds(&actions));
                for j in view.jobs.iter().filter(|j| j.started_at.is_some()) {
                    let nodes: Vec<&str> = j.placement.iter().map(|p| p.node.as_str()).collect();
                    let started = j.started_at.map(|s| s - NOW);
                    eprintln!("  running {} {:?} from {started:?} {nodes:?}", j.id, j.tier);
                }
            }
            for d in &plan.decisions {
                let eta = d.reason.as_ref().and_then(|r| r.eta_s).map(|e| t + e);
                if let Some(s) = seen
                    .get_mut(&job_of(&d.job))
                    .filter(|s| s.first_eta.is_none())
                {
                    s.first_eta = eta;
                }
            }
            let (done, refused) = controller::enact(&h.client, &actions, t, || true).await;
            h.live.stores().remember_evictions(&done, &refused);
            h.settle().await;
            // The owner replaces an evicted job's pods at once; without a kubelet here, the
            // old ones go when their grace is over.
            let pods = h.api.pods();
            for (id, o) in owned.iter_mut().filter(|(_, o)| o.running) {
                let gone = |k: &String| {
                    pods.get(k)
                        .is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string())
                };
                if !o.pods.iter().any(gone) {
                    continue;
                }
                stops
                    .entry(t + grace_s)
                    .or_default()
                    .extend(o.pods.iter().filter(|k| pods.contains_key(*k)).cloned());
                o.run += 1;
                o.running = false;
                o.queued_at = t;
                let j = planned_by_id[id.as_str()];
                o.pods = pod_names(j, o.run);
                create_pods(h, j, o.run, t);
                seen.get_mut(id).unwrap().preemptions += 1;
            }
            let bound_before: Vec<String> = bound(h);
            h.settle().await;
            h.api.bind_released_at(&rfc3339(t));
            let now_bound = bound(h);
            let newly: Vec<String> = now_bound
                .iter()
                .filter(|k| !bound_before.contains(k))
                .cloned()
                .collect();
            for (id, o) in owned.iter_mut().filter(|(_, o)| !o.running) {
                if !o.pods.iter().any(|k| newly.contains(k)) {
                    continue;
                }
                assert!(
                    o.pods.iter().all(|k| now_bound.contains(k)),
                    "{id} bound in part: {:?}",
                    o.pods
                );
                o.running = true;
                let s = seen.get_mut(id).unwrap();
                s.first_start.get_or_insert(t);
                s.queue_wait_s += t - o.queued_at;
                let runtime = planned_by_id[id.as_str()].ran_s();
                ends.entry(t + runtime)
                    .or_default()
                    .push((id.clone(), o.run));
            }
            // As the controller's loop decides again at once when the bookings moved.
            if actions.is_empty() && newly.is_empty() && !bookings_moved {
                break;
            }
        }
    }
    seen
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
                tier: Some(j.tier.into()),
                submitted_at: Some(j.submit),
                runtime_s: Some(j.runtime_s as u64),
                // The pod's estimate: planned with, not enforced; or its deadline.
                estimate_only: !j.limited,
                actual_runtime_s: Some(j.actual_s as u64),
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
        (*view.fleet).clone(),
        trace,
        &Config {
            estimates: if jobs.iter().any(|j| j.limited) {
                Estimates::Predicted
            } else {
                Estimates::Limits
            },
            ..Config::default()
        },
        &mut |_| {},
    )
    .unwrap();
    m.job_outcomes
        .iter()
        .map(|o| {
            let outcome = Outcome {
                first_start: o.first_start,
                first_eta: o.first_eta,
                preemptions: o.preemptions,
                queue_wait_s: o.queue_wait_s,
            };
            (o.id.clone(), outcome)
        })
        .collect()
}

/// Both runs of `arrivals` under `fair_share` agree, scavengers stopping within
/// `grace_s`.
fn agree(arrivals: &[Arrival], fair_share: &str, grace_s: i64) {
    agree_with(arrivals, fair_share, grace_s, false);
}

/// [`agree`], with pods that declare `activeDeadlineSeconds` (`limited`) planned with
/// runtimes predicted from their team's finished jobs on both sides.
fn agree_with(arrivals: &[Arrival], fair_share: &str, grace_s: i64, limited: bool) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let policy = policy(fair_share, &format!("{grace_s}s"));
        let mut h = harness_with(&policy, None).await;
        let jobs = planned(arrivals, limited);
        let replayed = through_the_replay(&h, &jobs).await;
        let enacted = through_the_controller(&mut h, &jobs, grace_s).await;
        let differ: Vec<String> = enacted
            .iter()
            .filter(|(id, seen)| replayed.get(*id) != Some(seen))
            .map(|(id, c)| {
                let r = replayed.get(id).copied().unwrap_or_default();
                let rel = |t: Option<i64>| t.map(|t| t - NOW);
                format!(
                    "{id}: controller starts {:?} (first ETA {:?}, preempted {}, waited {} s), replay {:?} ({:?}, {}, {} s)",
                    rel(c.first_start),
                    rel(c.first_eta),
                    c.preemptions,
                    c.queue_wait_s,
                    rel(r.first_start),
                    rel(r.first_eta),
                    r.preemptions,
                    r.queue_wait_s
                )
            })
            .collect();
        assert!(
            differ.is_empty(),
            "the replay parts from the controller:\n{}",
            differ.join("\n")
        );
        assert!(
            enacted.values().all(|o| o.first_start.is_some()),
            "every job ran: {enacted:?}"
        );
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(6), ..ProptestConfig::default() })]

    #[test]
    fn the_replay_starts_and_promises_as_the_controller_does(arrivals in prop::collection::vec(arrival(false), 3..10)) {
        agree(&arrivals, "off", 0);
    }

    #[test]
    fn with_fair_share_accruing_too(arrivals in prop::collection::vec(arrival(false), 3..10)) {
        agree(&arrivals, "drf", 0);
    }

    /// Reclaims that wait for a scavenger's `min_runtime`: both sides wake up when it
    /// ends, evict, and queue the victim again from its eviction; its pods stop at once or
    /// within a grace, holding their GPUs off the preemptor's nodes until they are gone.
    #[test]
    fn with_reclaims_that_wait_for_protection(
        arrivals in prop::collection::vec(arrival(true), 3..10),
        fair_share in prop_oneof![Just("off"), Just("drf")],
        grace_s in prop_oneof![Just(0i64), Just(90)],
    ) {
        agree(&arrivals, fair_share, grace_s);
    }

    /// Limits that are up to 4 times what jobs run, or shorter: both sides predict each
    /// job's runtime from its team's finished jobs when it is queued, plan with the
    /// prediction until it is outlived, then with the limit.
    #[test]
    fn with_predicted_runtimes(
        arrivals in prop::collection::vec(limited_arrival(false), 3..10),
        fair_share in prop_oneof![Just("off"), Just("drf")],
    ) {
        agree_with(&arrivals, fair_share, 0, true);
    }

    /// The same with reclaims: a victim evicted is not learned from, and is predicted
    /// afresh when it is queued again.
    #[test]
    fn with_predicted_runtimes_and_reclaims(
        arrivals in prop::collection::vec(limited_arrival(true), 3..10),
        grace_s in prop_oneof![Just(0i64), Just(90)],
    ) {
        agree_with(&arrivals, "off", grace_s, true);
    }
}

/// A job of `members` pods of `gpus` each that declares `runtime_s` and runs `actual_s`.
fn run(
    after_s: i64,
    alpha: bool,
    scavenger: bool,
    members: u32,
    gpus: u32,
    runtime_s: i64,
    actual_s: i64,
) -> Arrival {
    Arrival {
        after_s,
        alpha,
        scavenger,
        members,
        gpus,
        runtime_s,
        actual_s,
    }
}

fn at(after_s: i64, alpha: bool, scavenger: bool, gpus: u32, runtime_s: i64) -> Arrival {
    Arrival {
        after_s,
        alpha,
        scavenger,
        members: 1,
        gpus,
        runtime_s,
        actual_s: runtime_s,
    }
}

/// beta's scavenger is preempted twice: for beta's own job once its `min_runtime` ends,
/// and, started again from its eviction, for alpha's, which waits for its protection too.
#[test]
fn a_victim_queued_again_is_preempted_again() {
    let arrivals = [
        at(0, false, true, 1, 1500),
        at(120, false, false, 8, 1200),
        at(360, false, false, 2, 1200),
        at(360, true, false, 8, 1500),
    ];
    agree(&arrivals, "off", 90);
}

/// alpha's scavenger is reclaimed for alpha's own job once its `min_runtime` ends; the job
/// placed beside the victims' stopping pods starts when they are gone.
#[test]
fn a_job_placed_beside_stopping_victims() {
    let arrivals = [
        at(0, true, true, 1, 1500),
        at(0, false, false, 8, 1200),
        at(360, false, false, 2, 1200),
        at(360, true, false, 8, 1500),
    ];
    agree(&arrivals, "off", 90);
}

/// Under fair share, usage up to each moment is charged by the jobs that ran until then
/// (the harness once charged it by those still running after that moment's ends, and
/// j5 started at 1020 s against the replay's 1080 s).
#[test]
fn usage_is_charged_by_what_ran_until_each_moment() {
    let mut arrivals = vec![
        at(0, true, false, 2, 600),
        at(120, false, false, 4, 900),
        at(0, true, false, 2, 1200),
        at(240, true, false, 8, 300),
        at(120, false, false, 2, 600),
        at(0, false, false, 1, 600),
    ];
    arrivals[2].members = 2;
    arrivals[4].members = 2;
    agree(&arrivals, "drf", 0);
}

/// At 1200 s gang j4 reclaims j2's node; j3 is placed on it in the same plan. The controller
/// releases nothing onto a node whose pods are being evicted, and decides again once they
/// are gone, when j2's replacement goes first: the replay holds j3 back the same way.
#[test]
fn a_job_placed_where_a_victim_stops_is_decided_again() {
    let mut arrivals = vec![
        at(0, true, false, 2, 1200),
        at(240, true, false, 4, 1200),
        at(360, false, true, 8, 900),
        at(240, true, true, 8, 300),
        at(120, false, false, 2, 300),
        at(240, false, true, 1, 300),
    ];
    arrivals[4].members = 2;
    agree(&arrivals, "drf", 0);
}

/// At 1200 s j5 reclaims beta's scavenger j2, whose pods stop for 90 s on n1 (not j5's
/// node). Its replacement's first ETA is when they are gone, not when j2 was to end (the
/// controller once kept the victim's own end for what it holds: 1800 s).
#[test]
fn a_victim_holds_its_gpus_elsewhere_only_through_its_grace() {
    let mut arrivals = vec![
        at(0, false, false, 1, 600),
        at(0, false, false, 2, 900),
        at(0, false, true, 4, 1800),
        at(120, false, true, 4, 600),
        at(0, true, false, 2, 1800),
        at(0, false, false, 8, 600),
    ];
    arrivals[1].members = 2;
    arrivals[4].members = 2;
    agree(&arrivals, "off", 90);
}

/// At 600 s j4 is placed and alpha then borrows, so beta's j3 may reclaim alpha's j1,
/// whose protection has just ended: the controller's next cycle does at once, and so
/// does the replay's (it once waited for j1's end at 900 s).
#[test]
fn what_is_placed_is_followed_by_another_cycle_at_once() {
    let mut arrivals = vec![
        at(0, false, false, 2, 600),
        at(0, true, true, 4, 900),
        at(120, true, false, 1, 900),
        at(240, false, false, 8, 300),
        at(240, true, true, 4, 600),
    ];
    arrivals[0].members = 2;
    agree(&arrivals, "off", 0);
}

/// Gang j2 is evicted at 1500 s and predicted again then; its replacements queue as
/// `j2+j2-0-r2` beside its stopping members and are `j2` once those are gone (1590 s).
/// The controller once predicted it afresh at that rename, from a history that had
/// learned j5 (ended 1530 s) meanwhile, and placed it at once; the replay keeps the
/// prediction made at the eviction and waits for j7's reservation.
#[test]
fn a_gangs_replacements_keep_their_prediction_when_their_name_changes() {
    let arrivals = vec![
        run(0, false, false, 1, 4, 1800, 900),
        run(120, true, true, 1, 2, 1800, 900),
        run(120, true, true, 2, 2, 1500, 1500),
        run(240, true, false, 2, 2, 1500, 1950),
        run(360, false, true, 1, 4, 1500, 1950),
        run(240, true, true, 1, 1, 1800, 450),
        run(120, true, false, 1, 2, 1200, 300),
        run(120, true, true, 1, 8, 300, 75),
    ];
    agree_with(&arrivals, "off", 90, true);
}

/// At 1200 s j6 reclaims j1 on n1, to start when j1's pods are gone (1290 s); then j4
/// reclaims gang j0, whose member on n1 stops until 1380 s. The controller releases j6
/// only once no pods stop on n1 (1380 s); the replay once started it at 1290 s.
#[test]
fn a_preemptor_starts_once_no_pods_stop_on_its_nodes() {
    let arrivals = vec![
        run(0, true, true, 2, 4, 1500, 750),
        run(360, false, true, 1, 1, 1200, 1200),
        run(240, true, false, 1, 4, 900, 450),
        run(240, false, true, 2, 2, 300, 75),
        run(120, true, false, 1, 1, 300, 75),
        run(0, false, false, 1, 2, 600, 300),
        run(240, false, false, 1, 2, 300, 75),
    ];
    agree_with(&arrivals, "off", 90, true);
}

/// As above, and while j6 is held (1290–1380 s) the controller shows it starting at each
/// cycle's now (its end, and so j0's first ETA, counts from 1290 s), not at its release.
#[test]
fn a_held_preemptor_is_seen_starting_now() {
    let arrivals = vec![
        run(0, true, true, 2, 4, 2100, 1050),
        run(360, false, true, 1, 2, 1800, 2340),
        run(240, true, false, 1, 4, 2100, 2730),
        run(240, false, true, 2, 2, 300, 150),
        run(120, true, false, 1, 1, 1200, 300),
        run(0, false, false, 1, 2, 900, 450),
        run(240, false, false, 1, 2, 600, 600),
    ];
    agree_with(&arrivals, "off", 90, true);
}

/// Gang j1 is evicted at 750 s and its replacements are placed at once, while its old
/// members stop until 840 s: meanwhile the controller's view shows the gang running from
/// the old members' start (0 s), which once made its new run look past its prediction
/// (450 s), so it was planned with its 1,200 s limit from then on; a run now starts no
/// earlier than it was queued.
#[test]
fn a_gang_placed_beside_its_stopping_members_runs_from_its_placement() {
    let arrivals = vec![
        run(0, true, false, 1, 1, 300, 75),
        run(0, true, true, 2, 1, 1200, 1200),
        run(0, true, false, 1, 1, 1500, 750),
        run(0, true, false, 2, 4, 300, 75),
        run(240, false, false, 1, 1, 1500, 375),
        run(360, false, true, 1, 8, 300, 75),
        run(0, false, false, 1, 1, 1200, 300),
        run(240, false, false, 1, 1, 300, 75),
        run(0, true, false, 1, 8, 300, 75),
    ];
    agree_with(&arrivals, "off", 90, true);
}

#[test]
fn a_plan_whose_bookings_moved_is_decided_again_at_once() {
    let arrivals = vec![
        run(0, true, false, 1, 1, 300, 300),
        run(0, true, false, 1, 1, 300, 75),
        run(0, true, false, 1, 1, 300, 300),
        run(0, false, false, 1, 8, 1800, 1800),
        run(120, false, true, 1, 1, 300, 75),
        run(120, false, false, 2, 4, 300, 75),
        run(360, true, false, 1, 1, 1500, 1500),
        run(360, true, false, 1, 4, 1200, 300),
    ];
    agree_with(&arrivals, "off", 0, true);
}

/// One plan evicts both scavengers on n0: beta's for beta's 8-GPU job, which lands on
/// n0, and alpha's for alpha's quota, whose job lands on n1. Beta's job takes the whole
/// of n0, alpha's victim's GPU included: neither side holds that GPU for the victim, so
/// the victims queued again are promised the new jobs' ends on both (the controller's
/// view gave up beta's nomination, n0 looking one GPU over; the replay promised n0 as
/// soon as the victims were gone).
#[test]
fn a_victim_stopping_where_another_preemptor_lands_is_that_preemptors() {
    let arrivals = vec![
        run(0, false, true, 1, 1, 900, 900),
        run(0, true, true, 1, 1, 900, 900),
        run(120, true, false, 1, 8, 300, 300),
        run(0, false, false, 1, 8, 300, 300),
    ];
    agree_with(&arrivals, "off", 90, false);
}
