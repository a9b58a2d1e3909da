//! A job's life in a replay: waiting, running (from when its GPUs are free), stopped back
//! to waiting with its checkpointed progress, done or denied; and what it counts for in
//! the recorder while it holds GPUs.

use super::record::Recorder;
use crate::core::fleet::{Fleet, MILLI};
use crate::core::mig::MigTable;
use crate::core::packing::OnNode;
use crate::core::placer::Choice;
use crate::decide::plan::{human_duration, Decision, Reason};
use crate::decide::snapshot::{self, JobState, Running};
use crate::inventory::jobs_file::{Job, PlacedMember};
use crate::sim::metrics::JobOutcome;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Phase {
    /// Not submitted yet.
    Future,
    Pending,
    Running(Run),
    Done,
    Denied,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Run {
    members: Vec<PlacedMember>,
    /// When work starts: the placement time, or later while a victim's grace runs.
    work_from: i64,
    /// Recorder columns and amounts this run adds while it holds GPUs.
    contrib: Vec<(usize, f64)>,
}

#[derive(Debug, Clone)]
pub(super) struct SimJob {
    pub job: Job,
    member_milli: u64,
    work_s: i64,
    /// Its actual runtime is past its limit: it ends at the limit, its work undone.
    timed_out: bool,
    /// The first ETA a decision gave it.
    first_eta: Option<i64>,
    /// Its limit, where decisions plan with a shorter prediction (`sim::predict`) held
    /// in `job.runtime_s`; taken back into `job.runtime_s` once a run outlives it.
    limit_s: Option<u64>,
    /// How long its last run ran, once done: what a cluster sees of it (its pods' life).
    last_run_s: u64,
    /// The prediction it was planned with at arrival, for its outcome.
    predicted_s: Option<u64>,
    /// Where its `runtime_s` is an estimate nobody enforces (`estimate_only`): the
    /// estimate each run is planned with, and what it is planned with once a run
    /// outlives it (its enforced limit, or none), as the controller plans a pod
    /// (`core::declared::Runtime::after`).
    estimate: Option<(u64, Option<u64>)>,
    /// The warm pool whose idle node its first run started on.
    pub started_warm: Option<String>,
    /// The trace's interrupted runs still to come, seconds each (`interrupted_after_s`).
    interruptions: std::collections::VecDeque<u64>,
    /// Work saved by checkpoints (or done by earlier runs that ended in a checkpoint).
    saved_s: i64,
    pub phase: Phase,
    queued_since: i64,
    /// It was stopped and queued again: it queues from then, not from its submission, as
    /// its replacement pods do in a cluster (Kueue's `Eviction` requeue timestamp).
    requeued: bool,
    queue_wait_s: i64,
    first_start: Option<i64>,
    lost_gpu_s: f64,
    /// The pools it ran in, sorted (most jobs run in one: a set's node would cost more).
    pools: Vec<String>,
    rule: Option<String>,
    routed_to: Option<String>,
    reason: Option<Reason>,
    /// Seconds waited under each reason code, and the code waited under since when.
    waited_by: BTreeMap<String, i64>,
    waiting_under: Option<(String, i64)>,
    /// The code of the last stretch of waiting closed: a start put off counts for it.
    last_waited: Option<String>,
    /// Its start was put off (pods stopping on its nodes): until it starts, decisions see
    /// it as starting at each cycle's now, as the controller shows a nominated job whose
    /// victims are gone (`cluster::nomination`).
    pub held: bool,
    pub generation: u64,
    /// Bumped on every change to what [`SimJob::state`] reads (phase, placement, the job
    /// record), so a decision state built earlier can be reused while it is current.
    pub revision: u64,
}

/// A trace job in the replay: not arrived yet (its record, and what one member counts for
/// in milli-GPUs, worked out on the fleet the replay starts with), arrived, or completed,
/// when only its outcome is kept (a year's replay holds a million jobs; most are done).
#[derive(Debug)]
pub(super) enum Slot {
    Future(Box<Job>, u64),
    Live(Box<SimJob>),
    Completed(Box<JobOutcome>),
}

impl Slot {
    pub fn new(job: Job, fleet: &Fleet, mig: &MigTable) -> Slot {
        let member_milli = snapshot::member_milli(fleet, mig, &job.shape.member);
        Slot::Future(Box::new(job), member_milli)
    }

    pub fn live(&self) -> Option<&SimJob> {
        match self {
            Slot::Live(job) => Some(job),
            _ => None,
        }
    }

    pub fn live_mut(&mut self) -> Option<&mut SimJob> {
        match self {
            Slot::Live(job) => Some(job),
            _ => None,
        }
    }

    /// When the trace submits it.
    pub fn submitted_at(&self) -> Option<i64> {
        match self {
            Slot::Future(job, _) => job.submitted_at,
            Slot::Live(job) => job.job.submitted_at,
            Slot::Completed(outcome) => Some(outcome.submitted_at),
        }
    }

    /// The job arrives: from here on it is a [`SimJob`].
    pub fn arrive(&mut self, t: i64) -> Option<&mut SimJob> {
        if let Slot::Future(job, member_milli) = self {
            let job = std::mem::take(&mut **job);
            *self = Slot::Live(Box::new(SimJob::new(job, *member_milli)));
        }
        let job = self.live_mut()?;
        job.arrive(t);
        Some(job)
    }

    /// A completed job is kept as its outcome only (its outcome no longer changes).
    pub fn complete(&mut self, end: i64) {
        if let Slot::Live(job) = self {
            if job.phase == Phase::Done {
                *self = Slot::Completed(Box::new(job.outcome(end)));
            }
        }
    }

    /// The job's outcome at `end`, and whether it was submitted by then.
    pub fn outcome(self, end: i64) -> (JobOutcome, bool) {
        match self {
            Slot::Future(job, member_milli) => {
                (SimJob::new(*job, member_milli).outcome(end), false)
            }
            Slot::Live(job) => (job.outcome(end), job.phase != Phase::Future),
            Slot::Completed(outcome) => (*outcome, true),
        }
    }
}

/// The replay's job slots, with a log of the slots handed out to change since the last
/// [`Slots::take_touched`]: a slot not in it has not changed, so a decision state built
/// from it is still current (read access goes through `Deref`; writes only through
/// [`Slots::get_mut`]).
#[derive(Debug, Default)]
pub(super) struct Slots {
    slots: Vec<Slot>,
    touched: Vec<usize>,
}

impl Slots {
    pub fn new(slots: Vec<Slot>) -> Slots {
        Slots {
            slots,
            touched: Vec::new(),
        }
    }

    /// Slot `index` to change, noted as touched.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Slot> {
        let slot = self.slots.get_mut(index)?;
        self.touched.push(index);
        Some(slot)
    }

    /// The slots touched since the last call, ascending, once each.
    pub fn take_touched(&mut self, into: &mut Vec<usize>) {
        into.clear();
        std::mem::swap(into, &mut self.touched);
        into.sort_unstable();
        into.dedup();
    }

    pub fn into_inner(self) -> Vec<Slot> {
        self.slots
    }
}

impl std::ops::Deref for Slots {
    type Target = [Slot];

    fn deref(&self) -> &[Slot] {
        &self.slots
    }
}

impl SimJob {
    fn new(mut job: Job, member_milli: u64) -> SimJob {
        let interruptions = std::mem::take(&mut job.interrupted_after_s).into();
        // Decisions plan with `runtime_s`; the job runs for its actual runtime, stopped
        // at its limit when that is shorter (as Slurm's TIMEOUT): `runtime_s`, or for an
        // estimate nobody enforces, `runtime_limit_s` if it has one.
        let enforced = if job.estimate_only {
            job.runtime_limit_s
        } else {
            job.runtime_s
        };
        let (work, timed_out) = match (enforced, job.actual_runtime_s) {
            (Some(limit), Some(actual)) if actual > limit => (limit, true),
            (_, Some(actual)) => (actual, false),
            (_, None) => (job.runtime_s.unwrap_or(0), false),
        };
        let estimate = job
            .runtime_s
            .filter(|_| job.estimate_only)
            .map(|e| (e, job.runtime_limit_s));
        let work_s = i64::try_from(work).unwrap_or(i64::MAX / 4);
        SimJob {
            job,
            member_milli,
            work_s,
            timed_out,
            first_eta: None,
            limit_s: None,
            predicted_s: None,
            last_run_s: 0,
            estimate,
            started_warm: None,
            interruptions,
            saved_s: 0,
            phase: Phase::Future,
            queued_since: 0,
            requeued: false,
            queue_wait_s: 0,
            first_start: None,
            lost_gpu_s: 0.0,
            pools: Vec::new(),
            rule: None,
            routed_to: None,
            reason: None,
            waited_by: BTreeMap::new(),
            waiting_under: None,
            last_waited: None,
            held: false,
            generation: 0,
            revision: 0,
        }
    }

    /// Closes the current stretch of waiting at `now`, counting it for its reason.
    fn close_wait(&mut self, now: i64) {
        if let Some((code, since)) = self.waiting_under.take() {
            *self.waited_by.entry(code.clone()).or_insert(0) += (now - since).max(0);
            self.last_waited = Some(code);
        }
    }

    pub fn arrive(&mut self, t: i64) {
        self.revision += 1;
        self.phase = Phase::Pending;
        self.queued_since = t;
    }

    /// It has not run yet.
    pub fn never_started(&self) -> bool {
        self.first_start.is_none()
    }

    /// Decisions plan with `predicted` seconds instead of its limit, where that is
    /// shorter.
    pub fn plan_with(&mut self, predicted: u64) {
        // An estimate is planned with as given: predictions stand in for limits.
        let Some(limit) = self.job.runtime_s.filter(|_| self.estimate.is_none()) else {
            return;
        };
        if predicted < limit {
            self.limit_s = Some(limit);
            self.predicted_s.get_or_insert(predicted);
            self.job.runtime_s = Some(predicted);
            // Planned with, not enforced: the limit stands behind it, and a plan wakes
            // when it passes (as the controller plans a predicted pod).
            self.job.estimate_only = true;
            self.job.runtime_limit_s = Some(limit);
            self.revision += 1;
        }
    }

    /// Its limit again in place of a prediction still standing: a new run is predicted
    /// afresh.
    fn unpredicted(&mut self) {
        if let Some(limit) = self.limit_s.take() {
            self.job.runtime_s = Some(limit);
            self.job.estimate_only = false;
            self.job.runtime_limit_s = None;
        }
    }

    /// What the job's runtime is bounded by, and what it ran: for the predictions of
    /// later jobs, once it is done (`None` without a limit).
    pub fn ran(&self) -> Option<(u64, u64)> {
        if self.estimate.is_some() {
            return None;
        }
        let limit = self.limit_s.or(self.job.runtime_s)?;
        Some((limit, self.last_run_s.min(limit)))
    }

    /// When the current run, ending at `ends`, outlives the runtime decisions plan it
    /// with (a prediction or an estimate shorter than what it really runs).
    pub fn outlives_prediction(&self, ends: i64) -> Option<i64> {
        let (Phase::Running(run), Some(planned)) = (&self.phase, self.job.runtime_s) else {
            return None;
        };
        let on_estimate = self.estimate.is_some_and(|(e, _)| e == planned);
        if self.limit_s.is_none() && !on_estimate {
            return None;
        }
        let at = run.work_from + i64::try_from(planned).unwrap_or(i64::MAX / 4);
        (at < ends).then_some(at)
    }

    /// The run of `generation` has outlived its prediction or its estimate: decisions
    /// plan with its limit from now on, or with no runtime where nothing limits it (true
    /// when that changed the job).
    pub fn prediction_outlived(&mut self, generation: u64) -> bool {
        if generation != self.generation || !matches!(self.phase, Phase::Running(_)) {
            return false;
        }
        let next = match (self.limit_s.take(), self.estimate) {
            (Some(limit), _) => {
                self.job.estimate_only = false;
                self.job.runtime_limit_s = None;
                Some(limit)
            }
            (None, Some((_, after))) => after,
            (None, None) => return false,
        };
        if self.job.runtime_s == next {
            return false;
        }
        self.job.runtime_s = next;
        self.revision += 1;
        true
    }

    /// When the current run, ending at `ends`, is stopped as the trace recorded: its
    /// next interrupted run's length after the run's work began.
    pub fn interrupted_at(&self, ends: i64) -> Option<i64> {
        let Phase::Running(run) = &self.phase else {
            return None;
        };
        let ran = *self.interruptions.front()?;
        let at = run.work_from + i64::try_from(ran).unwrap_or(i64::MAX / 4);
        (at < ends).then_some(at)
    }

    /// Whether the run of `generation` is current; its recorded interruption is used up
    /// if so.
    pub fn take_interruption(&mut self, generation: u64) -> bool {
        let current = generation == self.generation && matches!(self.phase, Phase::Running(_));
        if current {
            self.interruptions.pop_front();
        }
        current
    }

    /// GPUs over all members (MIG instances by their share of compute slices).
    pub fn gpus(&self) -> f64 {
        f64::from(self.job.shape.members) * self.member_milli as f64 / f64::from(MILLI)
    }

    /// The job as a decision cycle sees it, or `None` when it neither waits nor runs.
    pub fn state(
        &self,
        fleet: &Fleet,
        fleet_index: &HashMap<String, usize>,
        now: i64,
    ) -> Option<JobState> {
        let running = match &self.phase {
            Phase::Pending => None,
            Phase::Running(run) => {
                let members = run
                    .members
                    .iter()
                    .map(|p| choice(fleet, fleet_index, p))
                    .collect::<Option<Vec<_>>>()?;
                Some(Running {
                    members,
                    started_at: self.shown_start(run, now),
                    last_checkpoint_at: self.last_checkpoint(run, now),
                })
            }
            _ => return None,
        };
        let mut job = Box::new(self.job.clone());
        if self.requeued {
            job.submitted_at = Some(self.queued_since);
        }
        if let Phase::Running(run) = &self.phase {
            job.placement.clone_from(&run.members);
            job.started_at = Some(self.shown_start(run, now));
        }
        Some(JobState {
            job,
            running,
            member_milli: self.member_milli,
            revision: None,
        })
    }

    /// When decisions at `now` see the run start: a start put off shows as now until it
    /// comes.
    fn shown_start(&self, run: &Run, now: i64) -> i64 {
        if self.held {
            run.work_from.min(now)
        } else {
            run.work_from
        }
    }

    /// The running job's last checkpoint at `now` (what a reused decision state must be
    /// brought up to); read by debug checks only.
    #[cfg(debug_assertions)]
    pub fn checkpoint_at(&self, now: i64) -> Option<i64> {
        match &self.phase {
            Phase::Running(run) => self.last_checkpoint(run, now),
            _ => None,
        }
    }

    fn last_checkpoint(&self, run: &Run, now: i64) -> Option<i64> {
        last_checkpoint(run.work_from, self.job.checkpoint_interval_s, now)
    }

    /// GPU-seconds since the last checkpoint (or start) of the current run.
    pub fn lost_gpu_s(&self, now: i64) -> f64 {
        let Phase::Running(run) = &self.phase else {
            return 0.0;
        };
        let since = self.last_checkpoint(run, now).unwrap_or(run.work_from);
        self.gpus() * (now - since).max(0) as f64
    }

    /// Starts the job where `d` placed it; work begins at `free_at`. `prices` are each
    /// member's pool and price per GPU-hour. Returns when it will finish.
    pub fn start(
        &mut self,
        d: &Decision,
        free_at: i64,
        prices: &[(String, f64)],
        rec: &mut Recorder,
    ) -> Option<i64> {
        if self.phase != Phase::Pending {
            return None;
        }
        let members: Vec<PlacedMember> = d
            .placement
            .iter()
            .map(|a| PlacedMember {
                node: a.node.clone(),
                gpus: a.gpus.clone(),
                gpu_milli: Some(a.gpu_milli),
                mig_starts: a.mig_starts.clone(),
            })
            .collect();
        let per_member = self.member_milli as f64 / f64::from(MILLI);
        let tier = self.job.tier.as_deref().unwrap_or("-");
        let team = self.job.team.as_deref().unwrap_or("-");
        let mut contrib = Vec::new();
        for (pool, price) in prices {
            if let Err(at) = self.pools.binary_search(pool) {
                self.pools.insert(at, pool.clone());
            }
            for (name, amount) in [
                (format!("alloc.pool.{pool}"), per_member),
                (format!("alloc.tier.{tier}"), per_member),
                (format!("alloc.team.{team}"), per_member),
                (format!("cost.team.{team}"), per_member * price),
            ] {
                let c = rec.column(&name);
                rec.add(c, amount);
                contrib.push((c, amount));
            }
        }
        if let Some(r) = &d.routed_to {
            self.routed_to = Some(r.pool.clone());
            self.rule = Some(r.rule.clone());
        }
        self.close_wait(free_at);
        self.held = false;
        self.queue_wait_s += free_at - self.queued_since;
        self.first_start.get_or_insert(free_at);
        self.generation += 1;
        self.revision += 1;
        self.reason = None;
        self.phase = Phase::Running(Run {
            members,
            work_from: free_at,
            contrib,
        });
        Some(free_at + (self.work_s - self.saved_s).max(0))
    }

    /// A run placed to begin later (its victims still stopping) begins at `to` instead:
    /// pods stop on its nodes until then, and the controller releases nothing onto a node
    /// while pods stop there (`cluster::enact`). Returns when it now ends.
    pub fn put_off_start(&mut self, to: i64) -> Option<i64> {
        let Phase::Running(run) = &mut self.phase else {
            return None;
        };
        let from = run.work_from;
        if to <= from {
            return None;
        }
        run.work_from = to;
        self.held = true;
        self.queue_wait_s += to - from;
        if self.first_start == Some(from) {
            self.first_start = Some(to);
        }
        if let Some(code) = &self.last_waited {
            *self.waited_by.entry(code.clone()).or_insert(0) += to - from;
        }
        self.generation += 1;
        self.revision += 1;
        Some(to + (self.work_s - self.saved_s).max(0))
    }

    /// When its run started, while it runs.
    pub fn run_started(&self) -> Option<i64> {
        match &self.phase {
            Phase::Running(run) => Some(run.work_from),
            _ => None,
        }
    }

    /// What one member counts for, in milli-GPUs.
    pub fn member_milli(&self) -> u64 {
        self.member_milli
    }

    /// Stops the running job now, keeping the progress of its last checkpoint; it waits
    /// again. Returns where it ran.
    pub fn stop(
        &mut self,
        now: i64,
        lost_gpu_s: f64,
        rec: &mut Recorder,
    ) -> Option<Vec<PlacedMember>> {
        let Phase::Running(run) = std::mem::replace(&mut self.phase, Phase::Pending) else {
            return None;
        };
        if let Some(at) = self.last_checkpoint(&run, now) {
            self.saved_s += at - run.work_from;
        }
        for (c, amount) in &run.contrib {
            rec.add(*c, -amount);
        }
        self.lost_gpu_s += lost_gpu_s;
        self.queued_since = now;
        self.requeued = true;
        // A new run is planned with the estimate again, as a replacement pod declares it.
        if let Some((e, _)) = self.estimate {
            self.job.runtime_s = Some(e);
        }
        self.unpredicted();
        self.generation += 1;
        self.revision += 1;
        Some(run.members)
    }

    /// Ends the run if `generation` is still current; true when it did.
    pub fn finish(&mut self, generation: u64, now: i64, rec: &mut Recorder) -> bool {
        if generation != self.generation {
            return false;
        }
        let Phase::Running(run) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return false;
        };
        self.last_run_s = u64::try_from(now - run.work_from).unwrap_or(0);
        self.revision += 1;
        for (c, amount) in &run.contrib {
            rec.add(*c, -amount);
        }
        true
    }

    pub fn deny(&mut self, d: &Decision) {
        self.revision += 1;
        self.phase = Phase::Denied;
        self.rule = d.reason.as_ref().and_then(|r| r.rule.clone());
        self.reason = d.reason.clone();
    }

    /// The job waits from `now` for the decision's reason; the time since it was queued
    /// (or since its last reason) counts for the reason it waited under until now.
    pub fn wait(&mut self, d: &Decision, now: i64) {
        let code = d.reason.as_ref().map_or(String::from("queued"), code_name);
        match &self.waiting_under {
            Some((current, _)) if *current == code => {}
            Some(_) => {
                self.close_wait(now);
                self.waiting_under = Some((code, now));
            }
            None => self.waiting_under = Some((code, self.queued_since.min(now))),
        }
        if self.first_eta.is_none() {
            self.first_eta = d.reason.as_ref().and_then(|r| r.eta_s).map(|e| now + e);
        }
        self.reason = d.reason.clone();
    }

    /// The reason the job waited longest under, with its share, as of `end`; for jobs that
    /// ran as well as for those still waiting.
    fn main_wait(&self, end: i64) -> Option<String> {
        let mut by = self.waited_by.clone();
        if let Some((code, since)) = &self.waiting_under {
            *by.entry(code.clone()).or_insert(0) += (end - since).max(0);
        }
        let total: i64 = by.values().sum();
        let (code, longest) = by
            .into_iter()
            .filter(|(_, w)| *w > 0)
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))?;
        Some(format!(
            "{code} ({} of {} waited)",
            human_duration(longest),
            human_duration(total)
        ))
    }

    /// What it uses per second while it runs, for fair share's usage.
    pub fn usage(&self) -> Option<crate::decide::usage::Use<'_>> {
        let Phase::Running(run) = &self.phase else {
            return None;
        };
        Some(crate::decide::usage::Use {
            team: self.job.team.as_deref()?,
            rate: crate::decide::usage::rate(&self.job.shape.member, run.members.len()),
        })
    }

    pub fn runs_on(&self, node: &str) -> bool {
        matches!(&self.phase, Phase::Running(run) if run.members.iter().any(|m| m.node == node))
    }

    pub fn nodes(&self) -> Vec<String> {
        match &self.phase {
            Phase::Running(run) => run.members.iter().map(|m| m.node.clone()).collect(),
            _ => Vec::new(),
        }
    }

    pub fn outcome(&self, end: i64) -> JobOutcome {
        let status = match self.phase {
            Phase::Done => "completed",
            Phase::Running(_) => "running",
            Phase::Denied => "denied",
            Phase::Pending | Phase::Future => "waiting",
        };
        JobOutcome {
            id: self.job.id.clone(),
            team: self.job.team.clone(),
            tier: self.job.tier.clone(),
            status,
            submitted_at: self.job.submitted_at.unwrap_or(0),
            first_start: self.first_start,
            queue_wait_s: self.queue_wait_s,
            pools: self.pools.clone(),
            preemptions: self.job.preemptions,
            lost_gpu_s: self.lost_gpu_s,
            rule: self.rule.clone(),
            routed_to: self.routed_to.clone(),
            reason: match self.phase {
                Phase::Pending | Phase::Denied => self
                    .reason
                    .as_ref()
                    .map(|r| format!("{}: {}", code_name(r), r.message)),
                _ => None,
            },
            main_wait: self.main_wait(end),
            timed_out: self.timed_out && self.phase == Phase::Done,
            first_eta: self.first_eta,
            predicted_runtime_s: self.predicted_s,
            started_warm: self.started_warm.clone(),
        }
    }
}

pub(super) fn choice(
    fleet: &Fleet,
    index: &HashMap<String, usize>,
    p: &PlacedMember,
) -> Option<Choice> {
    let n = *index.get(&p.node)?;
    let node = fleet.nodes.get(n)?;
    let gpus = p
        .gpus
        .iter()
        .map(|g| node.gpus.iter().position(|x| x.index == *g))
        .collect::<Option<Vec<_>>>()?;
    Some(Choice {
        node: n,
        on: OnNode {
            gpus,
            mig_starts: p.mig_starts.clone(),
        },
    })
}

/// A reason code as the plan spells it (`no_capacity`).
fn code_name(r: &Reason) -> String {
    serde_json::to_value(r.code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Jobs pending and running.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub pending: usize,
    pub running: usize,
}

impl Counts {
    /// What one job in `phase` counts for.
    pub fn of(phase: &Phase) -> Counts {
        Counts {
            pending: usize::from(*phase == Phase::Pending),
            running: usize::from(matches!(phase, Phase::Running(_))),
        }
    }

    /// A job went from counting `before` to counting `after`.
    pub fn moved(&mut self, before: Counts, after: Counts) {
        self.pending = (self.pending + after.pending).saturating_sub(before.pending);
        self.running = (self.running + after.running).saturating_sub(before.running);
    }
}

/// The last checkpoint by `now` of a run whose work started at `work_from`, taking one
/// every `every_s` seconds.
pub(super) fn last_checkpoint(work_from: i64, every_s: Option<u64>, now: i64) -> Option<i64> {
    let every = i64::try_from(every_s?).ok()?;
    let ran = now - work_from;
    (every > 0 && ran >= every).then(|| work_from + ran / every * every)
}

/// The first time after `now` at which [`last_checkpoint`] gives another answer
/// (`i64::MAX`: never).
pub(super) fn next_checkpoint(work_from: i64, every_s: Option<u64>, now: i64) -> i64 {
    let Some(every) = every_s
        .and_then(|e| i64::try_from(e).ok())
        .filter(|&e| e > 0)
    else {
        return i64::MAX;
    };
    let ran = now.saturating_sub(work_from);
    let done = if ran >= every { ran / every } else { 0 };
    done.checked_add(1)
        .and_then(|k| k.checked_mul(every))
        .and_then(|d| work_from.checked_add(d))
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::{last_checkpoint, next_checkpoint};

    /// The last checkpoint holds from `now` until just before `next_checkpoint`, and moves
    /// there.
    #[test]
    fn next_checkpoint_is_where_the_last_one_moves() {
        for every in [None, Some(0), Some(1), Some(7), Some(3600)] {
            for work_from in [-50, 0, 13, 1000] {
                for now in -60..200 {
                    let next = next_checkpoint(work_from, every, now);
                    let at_now = last_checkpoint(work_from, every, now);
                    if next == i64::MAX {
                        assert!(every.is_none_or(|e| e == 0));
                        assert_eq!(at_now, None);
                        continue;
                    }
                    assert!(next > now);
                    for t in now..next.min(now + 5000) {
                        assert_eq!(last_checkpoint(work_from, every, t), at_now, "t {t}");
                    }
                    assert_ne!(last_checkpoint(work_from, every, next), at_now);
                }
            }
        }
    }
}
