//! The many-cycle replay the property tests share: a random queue decided cycle by
//! cycle, each plan applied at once, checking at every cycle what a controller's user
//! relies on (no "now" ETA, reservations kept where promised, a kept `Decider` planning
//! as `decide` does, the cycle's memos changing nothing).

#![allow(
    dead_code,
    reason = "each test file that includes this module uses part of it"
)]

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Node};
use engine::core::gang::JobShape;
use engine::core::mig::MigTable;
use engine::decide::plan::{Action, Plan};
use engine::decide::snapshot::Snapshot;
use engine::inventory::catalog;
use engine::inventory::jobs_file::Job;
use proptest::prelude::*;
use std::collections::BTreeMap;

pub fn fleet(nodes: u32) -> Fleet {
    Fleet {
        nodes: (0..nodes)
            .map(|i| {
                let mut n =
                    Node::uniform(&format!("n{i}"), 224_000, 2_097_152, 8, "H100-SXM5-80GB");
                n.pool = Some("gpu".into());
                n
            })
            .collect(),
    }
}

pub fn decide(
    program: &lang::ir::Program,
    fleet: Fleet,
    jobs: Vec<Job>,
    now: i64,
) -> (Snapshot, Plan) {
    let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &mig).unwrap();
    let plan = engine::cycle::decide(program, &snapshot, now);
    // Each test switch of the engine must leave the plan as it is: holder records written
    // at once rather than when first read, victims searched afresh for every job rather
    // than through the kept cost indexes and memos (and every job tried, not turned away
    // by the memo of shapes that did not fit), and every cache within the cycle off.
    type Switch = (fn(bool), &'static str);
    let switches: [Switch; 3] = [
        (
            engine::decide::record_holders_at_once,
            "holder records written at once",
        ),
        (
            engine::decide::find_victims_afresh,
            "victims searched afresh",
        ),
        (engine::decide::memos_off, "the cycle's caches off"),
    ];
    for (switch, what) in switches {
        switch(true);
        let switched = engine::cycle::decide(program, &snapshot, now);
        switch(false);
        assert_eq!(
            serde_json::to_string(&switched).unwrap(),
            serde_json::to_string(&plan).unwrap(),
            "{what} change the plan"
        );
    }
    (snapshot, plan)
}

/// Whether a replay checks that reserved jobs start by the ETA they were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promises {
    Off,
    /// A later start fails the case.
    Strict,
    /// Later starts are counted.
    Count,
    /// [`Promises::Strict`], and every job that waited starts exactly at the first ETA it
    /// was told (conservative backfill with exact runtimes: each first ETA is a booking,
    /// and a job placed at its booked start lands where it was booked).
    FirstEta,
    /// [`Promises::Strict`] for the jobs whose id starts with this; others are not checked
    /// (a higher tier may rightly overtake them).
    StrictFor(&'static str),
}

impl Promises {
    /// Whether the reservations of job `id` are checked.
    fn covers(self, id: &str) -> bool {
        match self {
            Promises::Off => false,
            Promises::Strict | Promises::Count | Promises::FirstEta => true,
            Promises::StrictFor(prefix) => id.starts_with(prefix),
        }
    }
}

/// What a many-cycle replay saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReplayStats {
    pub arrivals: usize,
    pub preemptions: usize,
    /// Reserved jobs whose start was checked against the ETA they were given.
    pub promises_checked: usize,
    /// Of those, the ones that started later (counted with [`Promises::Count`]).
    pub promises_late: usize,
    /// Of those, the ones that started exactly then.
    pub promises_exact: usize,
    /// Cycles in which a job that waited (and could ever run) held no reservation.
    pub waited_unreserved: usize,
    /// Jobs that started after waiting with an ETA, by how the first ETA they were
    /// given compares with their start: (exact, earlier start, later start).
    pub first_etas: (usize, usize, usize),
}

/// Replays `jobs` (each with `submitted_at`) cycle by cycle: at each instant the plan is
/// applied at once (placements start, victims stop and wait again with their whole
/// runtime ahead), and time moves to the next arrival or expected end. Checks at every
/// cycle that no queued job is told "now" (an ETA is absent or in the future), and with
/// `promises`, that every job given a reservation starts no later than the ETA it was
/// given (only where nothing can legitimately overtake it).
pub fn replay(
    program: &lang::ir::Program,
    nodes: u32,
    arrivals: Vec<Job>,
    promises: Promises,
) -> Result<ReplayStats, TestCaseError> {
    replay_on(program, &fleet(nodes), arrivals, promises)
}

/// [`replay`] on a given fleet.
pub fn replay_on(
    program: &lang::ir::Program,
    fleet: &Fleet,
    arrivals: Vec<Job>,
    promises: Promises,
) -> Result<ReplayStats, TestCaseError> {
    replay_with(program, fleet, arrivals, promises, false)
}

/// [`replay_on`], also deciding at each plan's `next_decision_at` (a protection or grace
/// ending, a checkpoint), as the queue controller and `simulate` do.
pub fn replay_waking(
    program: &lang::ir::Program,
    fleet: &Fleet,
    arrivals: Vec<Job>,
    promises: Promises,
) -> Result<ReplayStats, TestCaseError> {
    replay_with(program, fleet, arrivals, promises, true)
}

fn replay_with(
    program: &lang::ir::Program,
    fleet: &Fleet,
    mut arrivals: Vec<Job>,
    promises: Promises,
    wake_at_decisions: bool,
) -> Result<ReplayStats, TestCaseError> {
    arrivals.sort_by_key(|j| (j.submitted_at, j.id.clone()));
    let total = arrivals.len();
    let mut arrivals = std::collections::VecDeque::from(arrivals);
    let mut pending: Vec<Job> = Vec::new();
    let mut running: Vec<Job> = Vec::new();
    let mut promised: BTreeMap<String, i64> = BTreeMap::new();
    let mut first_eta: BTreeMap<String, i64> = BTreeMap::new();
    let mut stats = ReplayStats {
        arrivals: total,
        ..ReplayStats::default()
    };
    let mut now = arrivals.front().and_then(|j| j.submitted_at).unwrap_or(0);
    // Kept across the cycles, as the controller and `simulate` keep it: its plans must be
    // `decide`'s, byte for byte.
    let mut decider = engine::cycle::Decider::new();
    // Another, with what it keeps switched off now and then: its plan is `decide`'s too.
    let mut switched_decider = engine::cycle::Decider::new();
    for cycle in 0..400 {
        while arrivals
            .front()
            .is_some_and(|j| j.submitted_at.unwrap_or(0) <= now)
        {
            pending.extend(arrivals.pop_front());
        }
        running.retain(|j| j.started_at.unwrap_or(0) + j.runtime_s.unwrap_or(0) as i64 > now);
        let mut jobs = running.clone();
        jobs.extend(pending.iter().cloned());
        let (snapshot, plan) = decide(program, fleet.clone(), jobs, now);
        if std::env::var("DEBUG_REPLAY").is_ok() {
            for d in &plan.decisions {
                eprintln!(
                    "t={now} {} {:?} {:?} {:?}",
                    d.job,
                    d.action,
                    d.reason.as_ref().map(|r| (
                        r.code,
                        r.eta_s.map(|e| e + now),
                        r.message.clone()
                    )),
                    d.placement
                );
            }
        }
        let kept = decider.decide(program, &with_revisions(&snapshot), now);
        prop_assert_eq!(
            serde_json::to_string(&kept).unwrap(),
            serde_json::to_string(&plan).unwrap(),
            "a kept Decider's plan differs from decide's at {}",
            now
        );
        let keep_nothing = cycle % 8 == 7;
        engine::decide::keep_nothing(keep_nothing);
        let switched = switched_decider.decide(program, &with_revisions(&snapshot), now);
        engine::decide::keep_nothing(false);
        prop_assert_eq!(
            serde_json::to_string(&switched).unwrap(),
            serde_json::to_string(&plan).unwrap(),
            "a Decider keeping nothing ({}) differs from decide's at {}",
            keep_nothing,
            now
        );
        for p in &plan.preemptions {
            stats.preemptions += 1;
            if let Some(k) = running.iter().position(|j| j.id == p.job) {
                let mut v = running.remove(k);
                v.placement.clear();
                v.started_at = None;
                v.preemptions += 1;
                pending.push(v);
            }
        }
        for d in &plan.decisions {
            let Some(k) = pending.iter().position(|j| j.id == d.job) else {
                continue;
            };
            // Its work starts once its victims have stopped, after their grace, as
            // `simulate` starts it: its runtime counts from then.
            let work_from = plan
                .preemptions
                .iter()
                .filter(|p| p.for_job == d.job)
                .map(|p| now + p.grace_s as i64)
                .max()
                .unwrap_or(now);
            if let Some(started) = d.started(&pending[k], work_from) {
                if let Some(by) = promised.get(&d.job) {
                    prop_assert!(
                        now <= *by || matches!(promises, Promises::Count),
                        "{} was promised a start by {by} (reserved) and started at {now}",
                        d.job
                    );
                    stats.promises_checked += 1;
                    stats.promises_late += usize::from(now > *by);
                    stats.promises_exact += usize::from(now == *by);
                }
                if let Some(first) = first_eta.get(&d.job) {
                    prop_assert!(
                        !matches!(promises, Promises::FirstEta) || now == *first,
                        "{} was first told it starts at {first} and started at {now}",
                        d.job
                    );
                    match now.cmp(first) {
                        std::cmp::Ordering::Equal => stats.first_etas.0 += 1,
                        std::cmp::Ordering::Less => stats.first_etas.1 += 1,
                        std::cmp::Ordering::Greater => stats.first_etas.2 += 1,
                    }
                }
                pending.remove(k);
                running.push(started);
                continue;
            }
            if let Some(r) = &d.reason {
                prop_assert!(
                    r.eta_s.is_none_or(|e| e > 0),
                    "{} is queued with an ETA of {:?}",
                    d.job,
                    r.eta_s
                );
                use engine::decide::plan::ReasonCode;
                let waits = matches!(
                    r.code,
                    ReasonCode::QuotaExhausted
                        | ReasonCode::NoCapacity
                        | ReasonCode::WaitingForReservation
                );
                stats.waited_unreserved += usize::from(waits);
                if let Some(eta) = r.eta_s {
                    first_eta.entry(d.job.clone()).or_insert(now + eta);
                }
                if promises.covers(&d.job) && r.code == ReasonCode::Reserved {
                    let by = now + r.eta_s.unwrap_or(0);
                    let e = promised.entry(d.job.clone()).or_insert(by);
                    *e = (*e).min(by);
                }
            }
            if d.action == Action::Deny {
                pending.remove(k);
            }
        }
        // Each waiting job is booked where this plan booked it, as the controller and
        // `simulate` pass it on.
        let booked = plan.bookings_made();
        for j in &mut pending {
            j.booked = booked.get(&j.id).cloned();
        }
        let next_end = running
            .iter()
            .map(|j| j.started_at.unwrap_or(0) + j.runtime_s.unwrap_or(0) as i64)
            .min();
        let next_arrival = arrivals.front().and_then(|j| j.submitted_at);
        let next_decision = plan.next_decision_at.filter(|_| wake_at_decisions);
        match next_end
            .into_iter()
            .chain(next_arrival)
            .chain(next_decision)
            .min()
        {
            Some(t) => now = t.max(now + 1),
            None => break,
        }
    }
    Ok(stats)
}

/// `snapshot` with each job state named by a digest of what it is (its job, and where and
/// since when it runs), as a caller that keeps states names them: one revision is one
/// job and placement, so the kept `Decider` reuses what it remembered of unchanged jobs.
/// One state in seven is left unnamed, as a caller may: the Decider works those out
/// afresh, beside the named ones.
pub fn with_revisions(snapshot: &Snapshot) -> Snapshot {
    use std::hash::{Hash, Hasher};
    let mut tagged = snapshot.clone();
    for js in &mut tagged.jobs {
        let mut h = std::hash::DefaultHasher::new();
        format!("{:?}", js.job).hash(&mut h);
        if let Some(r) = &js.running {
            format!("{:?}", (&r.members, r.started_at)).hash(&mut h);
        }
        js.revision = Some(h.finish()).filter(|h| h % 7 != 0);
    }
    tagged
}

/// A job of `members` members of `gpus` whole GPUs each.
pub fn job(id: String, tier: &str, members: u32, gpus: u32, runtime: u64, at: i64) -> Job {
    Job {
        id,
        tier: Some(tier.into()),
        submitted_at: Some(at),
        runtime_s: Some(runtime),
        shape: JobShape {
            members,
            member: Request {
                cpu_milli: 4_000,
                memory_mib: 16_384,
                num_gpu: gpus,
                gpu_milli: 1000,
                ..Request::default()
            },
            ..JobShape::default()
        },
        ..Job::default()
    }
}
