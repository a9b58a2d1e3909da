//! An event-driven replay of a trace under a policy. Events: arrivals, completions,
//! preemption grace periods ending, nodes booting, spot interruptions (notice, then the
//! node is gone), node failures and recoveries, and autoscaler ticks. At every instant
//! where something changed and work waits (or the policy autoscales) it calls the same
//! `decide` as production and applies the plan: placements start once the GPUs they take
//! are free (a victim keeps its GPUs through its grace period), victims and jobs on failed
//! nodes go back to the queue from their last checkpoint, scale-ups become nodes after the
//! pool's boot time, scale-downs remove the longest-idle nodes.
//!
//! Work model: a job needs `runtime_s` seconds of running; with `checkpoint_interval_s` it
//! saves progress every interval of running time, and a stop loses what ran since the
//! last save (the plan's `lost_gpu_s`). A job may also give `actual_runtime_s`: it then
//! runs that long (stopped at `runtime_s`, its limit, if longer), while decisions plan
//! with `runtime_s`, or with a prediction from the jobs that finished before it arrived
//! (`Estimates::Predicted`); a run that outlives its prediction is planned with its
//! limit from then on.

mod jobs;
mod nodes;
mod record;
mod running_use;
mod states;
mod stopping;
mod summary;
mod warm;

use super::metrics::{Metrics, Preemptions, ScaleEvent};
use super::predict::{Estimates, Predictor};
use super::trace::{NodeEvent, NodeEventKind, Trace};
use crate::core::fleet::Fleet;
use crate::core::mig::MigTable;
use crate::decide::plan::{Action, Decision, Plan, Preemption};
use crate::decide::scale_memory::Start;
use crate::decide::snapshot::{Snapshot, UsageRecord};
use crate::inventory::catalog;
use crate::inventory::jobs_file::PriorBooking;
use jobs::{Counts, SimJob, Slot, Slots};
use lang::ir::Program;
use nodes::SimNode;
use record::Recorder;
use running_use::RunningUse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use stopping::Stopping;

/// How a replay runs besides the policy, fleet and trace.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seconds between autoscaler ticks while work waits or nodes boot.
    pub tick_s: i64,
    /// Stop at this time (seconds since the epoch); by default when the trace is done and
    /// nothing runs.
    pub until: Option<i64>,
    /// Past job starts, for warm-pool sizes.
    pub history: Vec<Start>,
    /// Team usage before the trace, for fair share.
    pub usage: Vec<UsageRecord>,
    pub policy_revision: String,
    /// What decisions plan runtimes with: the trace's `runtime_s`, or predictions from
    /// the jobs that finished before (`sim::predict`).
    pub estimates: Estimates,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            tick_s: 60,
            until: None,
            history: Vec::new(),
            usage: Vec::new(),
            policy_revision: String::new(),
            estimates: Estimates::Limits,
        }
    }
}

/// Where a replay is, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub arrived: usize,
    pub total: usize,
    pub now: i64,
    pub cycles: u64,
}

/// A trace that cannot be replayed on this fleet, with the trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayError {
    pub line: usize,
    pub message: String,
}

/// Re-deciding at one instant (for jobs preempted by that instant's plan) stops after this.
const MAX_ROUNDS_PER_INSTANT: u32 = 8;
/// Ticks stop this long after the trace's last entry, whatever still waits.
const TICK_HORIZON_S: i64 = 30 * 86_400;

/// Internal events, ordered by time, then class (nodes before completions before trace
/// events before ticks), then insertion.
#[derive(Debug, Clone)]
enum Internal {
    NodesReady {
        pool: String,
        count: u64,
    },
    NodeGone {
        node: usize,
    },
    Finish {
        job: usize,
        generation: u64,
    },
    /// A run has lasted the prediction it was planned with and still runs.
    PredictionOutlived {
        job: usize,
        generation: u64,
    },
    /// A run is stopped as the trace recorded (`interrupted_after_s`).
    Interrupted {
        job: usize,
        generation: u64,
    },
    Tick,
    Redecide,
}

impl Internal {
    fn class(&self) -> u8 {
        match self {
            Internal::NodesReady { .. } | Internal::NodeGone { .. } => 0,
            Internal::Finish { .. } | Internal::Interrupted { .. } => 1,
            Internal::PredictionOutlived { .. } => 2,
            Internal::Tick | Internal::Redecide => 4,
        }
    }
}

/// Replays `trace`, which it takes: its jobs are moved into the replay, not copied (a
/// year's trace is a million job records).
pub fn replay(
    program: &Program,
    fleet: Fleet,
    trace: Trace,
    config: &Config,
    progress: &mut dyn FnMut(Progress),
) -> Result<Metrics, ReplayError> {
    let mut sim = Sim::new(program, fleet, trace, config)?;
    sim.run(progress);
    Ok(sim.into_metrics())
}

struct Sim<'p> {
    program: &'p Program,
    /// The trace's node events, in time order.
    node_events: Vec<NodeEvent>,
    config: &'p Config,
    nodes: Vec<SimNode>,
    node_by_name: HashMap<String, usize>,
    /// `snapshot.fleet` is the up nodes, rebuilt when they change.
    fleet_dirty: bool,
    /// Bumped on each rebuild of the fleet (decision states name nodes by index).
    fleet_epoch: u64,
    /// For each of `snapshot.jobs` (kept between cycles): what it was built from and when
    /// its last checkpoint next moves.
    snapshot_tags: Vec<states::StateTag>,
    /// Decision states built so far: each new one is given the next number as its
    /// revision, so the decider can tell states apart without reading them.
    states_built: u64,
    fleet_index: HashMap<String, usize>,
    snapshot: Snapshot,
    /// Keeps the placer's indexes between cycles (the plans are `decide`'s).
    decider: crate::cycle::Decider,
    jobs: Slots,
    /// The slots touched since the last cycle (a buffer kept between cycles).
    touched: Vec<usize>,
    job_by_id: HashMap<String, usize>,
    /// Pending jobs the last plan booked (their `booked` is set), by slot.
    booked: BTreeSet<usize>,
    /// Jobs placed to start later (once their victims are gone), until they start: a
    /// start is put off while pods stop on their nodes.
    starting_later: BTreeSet<usize>,
    /// Jobs pending or running, in arrival order.
    active: BTreeSet<usize>,
    /// How many of `active` are pending and running, kept at each change of phase (read
    /// at every event; counting them cost a pass over every active job).
    counts: Counts,
    events: BTreeMap<(i64, u8, u64), Internal>,
    seq: u64,
    next_arrival: usize,
    next_trace_event: usize,
    /// When each (node, GPU) is free of a stopping job: every GPU of a node a job stops
    /// on, as the controller releases nothing onto a node until its stopping pods are gone
    /// (`cluster::enact`).
    busy_until: HashMap<(usize, u32), i64>,
    /// Jobs stopping within their grace, as the controller sees their pods.
    stopping: Stopping,
    /// Nodes under a spot notice.
    interrupted: BTreeSet<usize>,
    rec: Recorder,
    now: i64,
    start: i64,
    cycles: u64,
    tick_pending: bool,
    /// Times a plan asked to be decided again at (`Plan::next_decision_at`), scheduled.
    wakes: BTreeSet<i64>,
    /// Whether fair share reads usage: then the replayed jobs' usage is added to
    /// `snapshot.usage` as they run, as the controller adds it, up to `accounted_to`.
    fair_share: bool,
    accounted_to: Option<i64>,
    running_use: running_use::RunningUse,
    /// Under `Estimates::Predicted`: what the finished jobs ran against their limits.
    predictor: Option<Predictor>,
    /// Warm pools' targets, idle nodes and warm starts, for the figures.
    warm: warm::WarmTrack,
    changed: bool,
    autoscales: bool,
    preemptions: Preemptions,
    scale_events: Vec<ScaleEvent>,
    added: BTreeMap<String, u64>,
    removed: BTreeMap<String, u64>,
    notes: Vec<String>,
}

impl<'p> Sim<'p> {
    fn new(
        program: &'p Program,
        fleet: Fleet,
        trace: Trace,
        config: &'p Config,
    ) -> Result<Sim<'p>, ReplayError> {
        let Trace {
            jobs: mut trace_jobs,
            events: node_events,
        } = trace;
        let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
        let mut job_by_id = HashMap::new();
        for (k, job) in trace_jobs.iter().enumerate() {
            if let Some(&first) = job_by_id.get(&job.id) {
                let line = trace_jobs
                    .get(first)
                    .map_or(0, |j: &crate::inventory::jobs_file::Job| j.line);
                return Err(ReplayError {
                    line: job.line,
                    message: format!(
                        "job `{}` is also on line {line}; ids must be unique",
                        job.id
                    ),
                });
            }
            job_by_id.insert(job.id.clone(), k);
        }
        // Each record moves into its slot, and the list gives its memory back as it
        // empties: a year's trace is a million records, and both at once would double
        // the replay's peak.
        let mut jobs: Vec<Slot> = Vec::with_capacity(trace_jobs.len());
        while let Some(job) = trace_jobs.pop() {
            jobs.push(Slot::new(job, &fleet, &mig));
            if trace_jobs.len() < trace_jobs.capacity() / 2 {
                trace_jobs.shrink_to_fit();
            }
        }
        jobs.reverse();
        let autoscaled: BTreeSet<&str> =
            program.autoscale.iter().map(|a| a.pool.as_str()).collect();
        let names: BTreeSet<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).collect();
        for e in &node_events {
            let added_name = e.node.rsplit_once('-').is_some_and(|(pool, k)| {
                autoscaled.contains(pool) && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())
            });
            if !names.contains(e.node.as_str()) && !added_name {
                return Err(ReplayError {
                    line: e.line,
                    message: format!(
                        "node `{}` is not in the fleet (nor a node an autoscaled pool would add, named `<pool>-<n>`)",
                        e.node
                    ),
                });
            }
        }
        let start = jobs
            .first()
            .and_then(Slot::submitted_at)
            .into_iter()
            .chain(node_events.first().map(|e| e.at))
            .min()
            .unwrap_or(0);
        let mut rec = Recorder::new(start);
        let nodes: Vec<SimNode> = fleet
            .nodes
            .iter()
            .map(|n| SimNode::new(n.clone(), program))
            .collect();
        for n in &nodes {
            n.billed(&mut rec, 1.0);
            n.available(&mut rec, 1.0);
        }
        let node_by_name = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.name.clone(), i))
            .collect();
        let snapshot = Snapshot {
            fleet: std::sync::Arc::default(),
            jobs: Vec::new(),
            usage: config.usage.clone(),
            mig: mig.clone(),
            scale_state: Default::default(),
            starts: config.history.clone(),
            interrupted: Default::default(),
            closed: Default::default(),
            wall_clock: false,
        };
        Ok(Sim {
            program,
            node_events,
            config,
            nodes,
            node_by_name,
            fleet_dirty: true,
            fleet_epoch: 0,
            snapshot_tags: Vec::new(),
            states_built: 0,
            fleet_index: HashMap::new(),
            snapshot,
            decider: crate::cycle::Decider::new(),
            jobs: Slots::new(jobs),
            touched: Vec::new(),
            job_by_id,
            booked: BTreeSet::new(),
            starting_later: BTreeSet::new(),
            active: BTreeSet::new(),
            counts: Counts::default(),
            events: BTreeMap::new(),
            seq: 0,
            next_arrival: 0,
            next_trace_event: 0,
            busy_until: HashMap::new(),
            stopping: Stopping::default(),
            interrupted: BTreeSet::new(),
            rec,
            now: start,
            start,
            cycles: 0,
            tick_pending: false,
            wakes: BTreeSet::new(),
            fair_share: program
                .cohorts
                .iter()
                .any(|c| c.fair_share == lang::ir::FairShare::Drf),
            accounted_to: None,
            running_use: running_use::RunningUse::default(),
            predictor: (config.estimates == Estimates::Predicted).then(Predictor::default),
            warm: warm::WarmTrack::new(program),
            changed: false,
            autoscales: !program.autoscale.is_empty() || !program.warm.is_empty(),
            preemptions: Preemptions::default(),
            scale_events: Vec::new(),
            added: BTreeMap::new(),
            removed: BTreeMap::new(),
            notes: Vec::new(),
        })
    }

    fn schedule(&mut self, at: i64, event: Internal) {
        self.seq += 1;
        self.events.insert((at, event.class(), self.seq), event);
    }

    fn next_time(&self) -> Option<i64> {
        let arrival = self
            .jobs
            .get(self.next_arrival)
            .and_then(Slot::submitted_at);
        let node_event = self.node_events.get(self.next_trace_event).map(|e| e.at);
        let internal = self.events.keys().next().map(|(t, _, _)| *t);
        [arrival, node_event, internal].into_iter().flatten().min()
    }

    fn trace_left(&self) -> bool {
        self.next_arrival < self.jobs.len() || self.next_trace_event < self.node_events.len()
    }

    fn run(&mut self, progress: &mut dyn FnMut(Progress)) {
        let total = self.jobs.len();
        let step = (total / 100).max(1);
        let mut rounds = 0;
        // The warm pools' nodes stand idle from the start.
        self.record_warm_idle();
        while let Some(t) = self.next_time() {
            if self.config.until.is_some_and(|u| t > u) {
                break;
            }
            rounds = if t == self.now { rounds + 1 } else { 0 };
            self.rec.advance(t);
            self.account_usage(t);
            self.now = t;
            let happened = self.apply_events(t);
            let waiting = self.counts.pending > 0;
            let decide = happened && (waiting || self.autoscales || !self.interrupted.is_empty());
            if decide && rounds < MAX_ROUNDS_PER_INSTANT {
                self.decide();
            }
            if happened {
                self.record_warm_idle();
            }
            self.update_counts();
            self.schedule_tick();
            let before = self.next_arrival;
            if before > 0 && (before.is_multiple_of(step) || before == total) {
                progress(Progress {
                    arrived: before,
                    total,
                    now: t,
                    cycles: self.cycles,
                });
            }
        }
        let end = self.config.until.unwrap_or(self.now).max(self.start);
        self.rec.advance(end);
        self.now = end;
    }

    /// Applies everything due at `t`; true when something happened that a decision
    /// cycle should see.
    fn apply_events(&mut self, t: i64) -> bool {
        let mut any = false;
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 != t {
                break;
            }
            let event = entry.remove();
            any = true;
            match event {
                Internal::NodesReady { pool, count } => self.nodes_ready(&pool, count),
                Internal::NodeGone { node } => self.node_gone(node),
                Internal::Finish { job, generation } => self.finish(job, generation),
                Internal::Interrupted { job, generation } => {
                    let current = self
                        .jobs
                        .get_mut(job)
                        .and_then(Slot::live_mut)
                        .is_some_and(|j| j.take_interruption(generation));
                    if current && self.stop_from_outside(job) {
                        self.preemptions.interrupted_runs += 1;
                    }
                }
                Internal::PredictionOutlived { job, generation } => {
                    if let Some(j) = self.jobs.get_mut(job).and_then(Slot::live_mut) {
                        j.prediction_outlived(generation);
                    }
                }
                Internal::Tick => self.tick_pending = false,
                Internal::Redecide => {
                    self.wakes.remove(&t);
                }
            }
        }
        while let Some(e) = self.node_events.get(self.next_trace_event) {
            if e.at != t {
                break;
            }
            self.next_trace_event += 1;
            any = true;
            let (kind, name, line) = (e.kind, e.node.clone(), e.line);
            self.node_event(kind, &name, line);
        }
        while let Some(j) = self.jobs.get(self.next_arrival) {
            if j.submitted_at() != Some(t) {
                break;
            }
            let index = self.next_arrival;
            self.next_arrival += 1;
            any = true;
            if let Some(job) = self.jobs.get_mut(index).and_then(|s| s.arrive(t)) {
                predict(self.predictor.as_ref(), job);
                self.counts.moved(Counts::default(), Counts::of(&job.phase));
                self.active.insert(index);
            }
        }
        any
    }

    /// Adds what the running jobs used up to `t` to the teams' usage, through the
    /// controller's own accounting (`decide::usage`), uncapped: a replayed job ran for
    /// the whole step.
    fn account_usage(&mut self, t: i64) {
        if !self.fair_share {
            return;
        }
        #[cfg(debug_assertions)]
        {
            let mut teams: BTreeMap<&str, usize> = BTreeMap::new();
            for job in self
                .active
                .iter()
                .filter_map(|&j| self.jobs.get(j).and_then(Slot::live))
            {
                if let Some(u) = job.usage() {
                    *teams.entry(u.team).or_insert(0) += 1;
                }
            }
            debug_assert_eq!(
                teams,
                self.running_use.jobs_by_team(),
                "running use out of step"
            );
        }
        crate::decide::usage::account(
            &mut self.snapshot.usage,
            &mut self.accounted_to,
            self.running_use.uses(),
            t,
            None,
        );
    }

    fn update_counts(&mut self) {
        let Counts { pending, running } = self.counts;
        #[cfg(debug_assertions)]
        {
            let (mut p, mut r) = (0usize, 0usize);
            for job in self
                .active
                .iter()
                .filter_map(|&j| self.jobs.get(j).and_then(Slot::live))
            {
                match job.phase {
                    jobs::Phase::Pending => p += 1,
                    jobs::Phase::Running(_) => r += 1,
                    _ => {}
                }
            }
            debug_assert_eq!((p, r), (pending, running), "phase counts out of step");
        }
        let q = self.rec.column("queue");
        self.rec.set(q, pending as f64);
        let r = self.rec.column("running");
        self.rec.set(r, running as f64);
    }

    fn schedule_tick(&mut self) {
        if !self.autoscales || self.tick_pending {
            return;
        }
        let last_trace = self
            .jobs
            .last()
            .and_then(Slot::submitted_at)
            .into_iter()
            .chain(self.node_events.last().map(|e| e.at))
            .max()
            .unwrap_or(self.start);
        let running = self.counts.running > 0;
        let booting = self
            .snapshot
            .scale_state
            .pools
            .values()
            .any(|p| !p.booting.is_empty());
        let busy = running || booting || self.changed || !self.active.is_empty();
        if !(self.trace_left() || running || booting || self.changed) {
            return;
        }
        if self.now > last_trace + TICK_HORIZON_S {
            self.notes.push(format!(
                "autoscaler ticks stopped {} days after the trace's last entry",
                TICK_HORIZON_S / 86_400
            ));
            return;
        }
        // An idle cluster is looked at less often; idle scale-down only needs minutes.
        let every = if busy {
            self.config.tick_s
        } else {
            self.config.tick_s * 5
        };
        self.tick_pending = true;
        self.schedule(self.now + every.max(1), Internal::Tick);
    }

    fn refresh_fleet(&mut self) {
        if !self.fleet_dirty {
            return;
        }
        self.fleet_dirty = false;
        self.fleet_epoch += 1;
        let up: Vec<&SimNode> = self.nodes.iter().filter(|n| n.up).collect();
        self.fleet_index = up
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.name.clone(), i))
            .collect();
        self.snapshot.fleet = std::sync::Arc::new(Fleet {
            nodes: up.iter().map(|n| n.node.clone()).collect(),
        });
    }

    fn decide(&mut self) {
        self.refresh_fleet();
        self.cycles += 1;
        // The decision states of the last cycle are kept and reused for jobs that have not
        // changed since (same revision, same fleet): a steady replay rebuilds only the few
        // that arrived, started, stopped or were preempted. Both lists are in job order.
        self.refresh_held_starts();
        let mut touched = std::mem::take(&mut self.touched);
        self.jobs.take_touched(&mut touched);
        if !self.refresh_states_in_place(&touched) {
            self.rebuild_states();
        }
        self.touched = touched;
        #[cfg(debug_assertions)]
        self.check_states();
        self.snapshot.interrupted = self
            .interrupted
            .iter()
            .filter_map(|&n| self.nodes.get(n))
            .filter_map(|n| self.fleet_index.get(&n.node.name).copied())
            .collect();
        // What stopping jobs still hold, for this cycle only.
        let kept = self.snapshot.jobs.len();
        let held = self
            .stopping
            .states(&self.snapshot.fleet, &self.fleet_index, self.now);
        self.snapshot.jobs.extend(held);
        let plan = self.decider.decide(self.program, &self.snapshot, self.now);
        self.snapshot.jobs.truncate(kept);
        self.apply(plan);
    }

    fn apply(&mut self, plan: Plan) {
        // As the controller does (`cluster::controller::run`): a plan whose bookings moved
        // is decided again at once, with them passed on.
        let bookings_moved = self.pass_bookings_on(plan.bookings_made());
        let Plan {
            decisions,
            preemptions,
            scale,
            state,
            next_decision_at,
            warm,
            ..
        } = plan;
        self.warm.targets(&warm, &mut self.rec);
        // As the controller does: decide again when a protection ends, though nothing
        // arrives then.
        if let Some(at) = next_decision_at.filter(|at| *at > self.now) {
            if self.wakes.insert(at) {
                self.schedule(at, Internal::Redecide);
            }
        }
        let mut changed = !preemptions.is_empty() || !scale.is_empty();
        let mut requeued = bookings_moved;
        // A preemptor starts once all its victims have stopped, wherever it lands, as the
        // controller releases it only then (`cluster::nomination`).
        let mut victims_gone_at: HashMap<&str, i64> = HashMap::new();
        self.stopping.plan_begins();
        // Where each preemptor lands: its victims' members there are its own; members
        // elsewhere hold their GPUs until they are gone, unless another preemptor of this
        // plan was placed on those very GPUs (the plan counted them as freed for it; the
        // controller's view lets its nomination take them over).
        let lands_on: HashMap<&str, Vec<&str>> = decisions
            .iter()
            .filter(|d| d.action == Action::Place)
            .map(|d| {
                (
                    d.job.as_str(),
                    d.placement.iter().map(|a| a.node.as_str()).collect(),
                )
            })
            .collect();
        let preemptors_on: BTreeSet<(&str, u32)> = decisions
            .iter()
            .filter(|d| d.action == Action::Place && !d.victims.is_empty())
            .flat_map(|d| {
                d.placement
                    .iter()
                    .flat_map(|a| a.gpus.iter().map(move |g| (a.node.as_str(), *g)))
            })
            .collect();
        for p in &preemptions {
            requeued |= p.cause != "spot_interrupt";
            let own = lands_on
                .get(p.for_job.as_str())
                .map_or(&[][..], Vec::as_slice);
            self.preempt(p, own, &preemptors_on);
            let gone = self
                .now
                .saturating_add(i64::try_from(p.grace_s).unwrap_or(i64::MAX / 4));
            let at = victims_gone_at.entry(p.for_job.as_str()).or_insert(gone);
            *at = (*at).max(gone);
            // The controller decides again when the victim's pods are gone.
            if gone > self.now && self.wakes.insert(gone) {
                self.schedule(gone, Internal::Redecide);
            }
        }
        for d in &decisions {
            if d.action == Action::Place
                && d.victims.is_empty()
                && self.stopping.blocks(self.nodes_of(d), self.now)
            {
                // As the controller holds it (`cluster::enact`): nothing is released onto
                // a node while pods stop there; it is decided again once they are gone.
                let index = self.job_by_id.get(&d.job).copied();
                if let Some(job) = index
                    .and_then(|i| self.jobs.get_mut(i))
                    .and_then(Slot::live_mut)
                {
                    job.wait(d, self.now);
                }
                // Pods stopped with no grace are gone at once; others wake the replay
                // when their grace is over.
                requeued |= !self.stopping.past(self.nodes_of(d), self.now);
                continue;
            }
            changed |= d.action == Action::Place;
            // What is placed changes what the jobs after it may do (a team now borrows,
            // so its jobs may be reclaimed): as the controller's next cycle, at once,
            // decides again.
            requeued |= d.action == Action::Place;
            let not_before = victims_gone_at.get(d.job.as_str()).copied();
            self.decision(d, not_before.unwrap_or(self.now));
        }
        self.put_off_starts_where_pods_stop();
        for s in scale {
            self.scale(s.pool, s.delta_nodes, s.reason);
        }
        if let Some(state) = state {
            changed |= state.pools != self.snapshot.scale_state.pools;
            self.snapshot.scale_state = state;
        }
        self.changed = changed;
        if requeued {
            self.schedule(self.now, Internal::Redecide);
        }
    }

    /// As the controller releases a preemptor only once no pods stop on its nodes
    /// (`cluster::enact`), whoever's they are: a job placed to start later whose nodes a
    /// plan has since stopped jobs on, past its start, starts when they are gone. Checked
    /// after each plan is carried out; a job is released at the first plan at or after
    /// its start that leaves its nodes clear.
    fn put_off_starts_where_pods_stop(&mut self) {
        let now = self.now;
        let waiting: Vec<usize> = self.starting_later.iter().copied().collect();
        for index in waiting {
            let Some(job) = self.jobs.get(index).and_then(Slot::live) else {
                self.starting_later.remove(&index);
                continue;
            };
            let Some(from) = job.run_started().filter(|from| *from >= now) else {
                self.starting_later.remove(&index);
                continue;
            };
            let nodes: Vec<usize> = job
                .nodes()
                .iter()
                .filter_map(|n| self.node_by_name.get(n).copied())
                .collect();
            let until = self.stopping.until_on(nodes.iter()).filter(|u| *u > from);
            let ends = until.and_then(|until| {
                self.jobs
                    .get_mut(index)
                    .and_then(Slot::live_mut)?
                    .put_off_start(until)
            });
            match ends {
                Some(ends) => self.schedule_run(index, ends),
                None if from == now => {
                    self.starting_later.remove(&index);
                }
                None => {}
            }
        }
    }

    /// Jobs whose start was put off are seen as starting now until they start: their
    /// decision states are rebuilt each cycle until then.
    fn refresh_held_starts(&mut self) {
        let now = self.now;
        let held: Vec<usize> = self
            .starting_later
            .iter()
            .copied()
            .filter(|&i| {
                self.jobs
                    .get(i)
                    .and_then(Slot::live)
                    .is_some_and(|j| j.held && j.run_started().is_some_and(|s| s >= now))
            })
            .collect();
        for index in held {
            if let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) {
                job.revision += 1;
            }
        }
    }

    /// The events of job `index`'s current run, which ends at `ends`: its end, when it
    /// outlives its prediction, its interruption.
    fn schedule_run(&mut self, index: usize, ends: i64) {
        let Some(job) = self.jobs.get(index).and_then(Slot::live) else {
            return;
        };
        let generation = job.generation;
        let outlives = job.outlives_prediction(ends);
        let interrupted = job.interrupted_at(ends);
        self.schedule(
            ends,
            Internal::Finish {
                job: index,
                generation,
            },
        );
        if let Some(at) = outlives {
            let event = Internal::PredictionOutlived {
                job: index,
                generation,
            };
            self.schedule(at, event);
        }
        if let Some(at) = interrupted {
            let event = Internal::Interrupted {
                job: index,
                generation,
            };
            self.schedule(at, event);
        }
    }

    /// Each waiting job is booked as the plan booked it, as the controller passes it on
    /// (`booked`): placed at that start, it lands where it was booked. True when a job's
    /// booking moved.
    fn pass_bookings_on(&mut self, mut booked: BTreeMap<String, PriorBooking>) -> bool {
        let mut moved = false;
        let now: BTreeSet<usize> = booked
            .keys()
            .filter_map(|id| self.job_by_id.get(id).copied())
            .collect();
        for &index in self.booked.union(&now) {
            let Some(job) = self.jobs.get(index).and_then(Slot::live) else {
                continue;
            };
            let made = booked.remove(&job.job.id);
            if job.job.booked == made {
                continue;
            }
            if let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) {
                job.job.booked = made;
                job.revision += 1;
                moved = true;
            }
        }
        self.booked = now;
        moved
    }

    /// The nodes `d` places members on.
    fn nodes_of<'d>(&'d self, d: &'d Decision) -> impl Iterator<Item = &'d usize> + 'd {
        d.placement
            .iter()
            .filter_map(|a| self.node_by_name.get(&a.node))
    }

    /// Carries out `d`; a job placed starts at `not_before` at the earliest.
    fn decision(&mut self, d: &Decision, not_before: i64) {
        let Some(&index) = self.job_by_id.get(&d.job) else {
            return;
        };
        match d.action {
            Action::Place => {
                let busy = &self.busy_until;
                let node_by_name = &self.node_by_name;
                let free_at = d
                    .placement
                    .iter()
                    .flat_map(|a| {
                        let node = node_by_name.get(&a.node).copied();
                        a.gpus
                            .iter()
                            .filter_map(move |g| node.and_then(|n| busy.get(&(n, *g))))
                    })
                    .copied()
                    .max()
                    .unwrap_or(self.now)
                    .max(not_before);
                let prices: Vec<(String, f64)> = d
                    .placement
                    .iter()
                    .map(|a| {
                        self.node_by_name
                            .get(&a.node)
                            .and_then(|&n| self.nodes.get(n))
                            .map_or(("-".to_string(), 0.0), |n| {
                                (n.pool.clone(), n.price_per_gpu_hour)
                            })
                    })
                    .collect();
                let warm = !self.program.warm.is_empty();
                let names: Vec<String> = d.placement.iter().map(|a| a.node.clone()).collect();
                let warm_pool = self.warm_start(&names);
                let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) else {
                    return;
                };
                let before = Counts::of(&job.phase);
                let first = job.never_started();
                let started = job.start(d, free_at, &prices, &mut self.rec);
                if let (true, Some(_), Some(pool)) = (first, started, warm_pool) {
                    job.started_warm = Some(pool);
                }
                self.counts.moved(before, Counts::of(&job.phase));
                if started.is_some() {
                    self.running_use.started(job);
                }
                let Some(ends) = started else {
                    return;
                };
                if warm {
                    // Through the controller's own history keeping (`decide::scale_memory`).
                    let start = Start::of(d, free_at, prices.first().map(|(p, _)| p.clone()));
                    crate::decide::scale_memory::remember_start(
                        &mut self.snapshot.starts,
                        start,
                        self.now,
                    );
                }
                if free_at > self.now {
                    self.starting_later.insert(index);
                }
                self.schedule_run(index, ends);
            }
            Action::Deny => {
                if let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) {
                    let before = Counts::of(&job.phase);
                    job.deny(d);
                    self.counts.moved(before, Counts::of(&job.phase));
                }
                self.active.remove(&index);
            }
            Action::Queue => {
                if let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) {
                    job.wait(d, self.now);
                }
            }
        }
    }

    /// Stops `p`'s victim; its members off `preemptor_nodes` hold their GPUs through
    /// its grace, unless a preemptor was placed on them (`preemptors_on`).
    fn preempt(
        &mut self,
        p: &Preemption,
        preemptor_nodes: &[&str],
        preemptors_on: &BTreeSet<(&str, u32)>,
    ) {
        let Some(&index) = self.job_by_id.get(&p.job) else {
            return;
        };
        let now = self.now;
        let Some(job) = self.jobs.get_mut(index).and_then(Slot::live_mut) else {
            return;
        };
        let before = Counts::of(&job.phase);
        let used = RunningUse::of(job);
        let run_started = job.run_started().unwrap_or(now);
        let stopped = job.stop(now, p.lost_gpu_s, &mut self.rec);
        predict(self.predictor.as_ref(), job);
        self.counts.moved(before, Counts::of(&job.phase));
        if stopped.is_some() {
            self.running_use.stopped(used);
        }
        let Some(members) = stopped else {
            return;
        };
        job.job.preemptions += 1;
        job.revision += 1;
        if p.cause == "spot_interrupt" {
            job.job.spot_interruptions += 1;
        }
        let until = now + i64::try_from(p.grace_s).unwrap_or(i64::MAX / 4);
        for m in &members {
            let Some(&n) = self.node_by_name.get(&m.node) else {
                continue;
            };
            self.stopping.stops_on(n, until);
            let taken = m
                .gpus
                .iter()
                .any(|g| preemptors_on.contains(&(m.node.as_str(), *g)));
            if until > now && !preemptor_nodes.contains(&m.node.as_str()) && !taken {
                let held = (job.member_milli(), run_started);
                self.stopping.holds(&job.job, m, held, until);
            }
            let gpus = self
                .nodes
                .get(n)
                .map_or(&[][..], |n| n.node.gpus.as_slice());
            for g in gpus {
                let slot = self.busy_until.entry((n, g.index)).or_insert(until);
                *slot = (*slot).max(until);
            }
        }
        self.preemptions.count += 1;
        *self
            .preemptions
            .by_cause
            .entry(p.cause.clone())
            .or_insert(0) += 1;
        self.preemptions.lost_gpu_hours += p.lost_gpu_s / 3600.0;
    }

    fn finish(&mut self, index: usize, generation: u64) {
        let Some(slot) = self.jobs.get_mut(index) else {
            return;
        };
        if let Some(job) = slot.live_mut() {
            let before = Counts::of(&job.phase);
            let used = RunningUse::of(job);
            let finished = job.finish(generation, self.now, &mut self.rec);
            self.counts.moved(before, Counts::of(&job.phase));
            if finished {
                self.running_use.stopped(used);
                if let (Some(p), Some((limit, ran))) = (&mut self.predictor, job.ran()) {
                    p.observe(job.job.user.as_deref(), job.job.team.as_deref(), limit, ran);
                }
            }
            if finished {
                self.active.remove(&index);
                slot.complete(self.now);
            }
        }
    }

    fn node_event(&mut self, kind: NodeEventKind, name: &str, line: usize) {
        let Some(&n) = self.node_by_name.get(name) else {
            self.notes.push(format!(
                "line {line}: node `{name}` did not exist at {}; event ignored",
                self.now
            ));
            return;
        };
        let (up, gone) = self.nodes.get(n).map_or((false, true), |x| (x.up, x.gone));
        match kind {
            NodeEventKind::NodeDown if up => {
                self.fail_jobs_on(n);
                self.set_up(n, false);
            }
            NodeEventKind::NodeUp if !up && !gone => self.set_up(n, true),
            NodeEventKind::SpotInterrupt if up && !self.interrupted.contains(&n) => {
                self.interrupted.insert(n);
                let notice = self
                    .nodes
                    .get(n)
                    .and_then(|x| x.node.pool.as_deref())
                    .and_then(|p| self.program.pool(p))
                    .and_then(|p| p.notice_s)
                    .unwrap_or(0);
                let at = self.now + i64::try_from(notice).unwrap_or(0);
                self.schedule(at, Internal::NodeGone { node: n });
            }
            _ => {
                let state = if gone {
                    "gone"
                } else if up {
                    "up"
                } else {
                    "down"
                };
                self.notes.push(format!(
                    "line {line}: {} for `{name}`, which is {state} at {}; event ignored",
                    serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    self.now
                ));
            }
        }
    }

    fn set_up(&mut self, n: usize, up: bool) {
        if let Some(node) = self.nodes.get_mut(n) {
            if node.up != up {
                node.up = up;
                node.available(&mut self.rec, if up { 1.0 } else { -1.0 });
                self.fleet_dirty = true;
            }
        }
    }

    /// Jobs on a failed node stop now, losing work since their checkpoint, and wait again.
    fn fail_jobs_on(&mut self, n: usize) {
        let Some(name) = self.nodes.get(n).map(|x| x.node.name.clone()) else {
            return;
        };
        let on: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&j| {
                self.jobs
                    .get(j)
                    .and_then(Slot::live)
                    .is_some_and(|x| x.runs_on(&name))
            })
            .collect();
        for j in on {
            if self.stop_from_outside(j) {
                self.preemptions.node_failures += 1;
            }
        }
    }

    /// Stops running job `j` from outside (its node failed, or the trace recorded the
    /// run stopped), losing its work since its last checkpoint; it waits again. True
    /// when it was running.
    fn stop_from_outside(&mut self, j: usize) -> bool {
        let now = self.now;
        let Some(job) = self.jobs.get_mut(j).and_then(Slot::live_mut) else {
            return false;
        };
        let lost = job.lost_gpu_s(now);
        let before = Counts::of(&job.phase);
        let used = RunningUse::of(job);
        let stopped = job.stop(now, lost, &mut self.rec).is_some();
        predict(self.predictor.as_ref(), job);
        self.counts.moved(before, Counts::of(&job.phase));
        if stopped {
            self.running_use.stopped(used);
            self.preemptions.lost_gpu_hours += lost / 3600.0;
        }
        stopped
    }

    fn node_gone(&mut self, n: usize) {
        self.fail_jobs_on(n);
        self.interrupted.remove(&n);
        let pool = self.nodes.get(n).map(|x| x.pool.clone());
        self.remove_node(n);
        if let Some(pool) = pool {
            *self.removed.entry(pool).or_insert(0) += 1;
        }
    }

    /// Takes a node out for good: no longer up, no longer paid for.
    fn remove_node(&mut self, n: usize) {
        self.set_up(n, false);
        if let Some(node) = self.nodes.get_mut(n) {
            if !node.gone {
                node.gone = true;
                node.billed(&mut self.rec, -1.0);
            }
        }
    }

    fn nodes_ready(&mut self, pool: &str, count: u64) {
        let Some(p) = self.program.pool(pool) else {
            return;
        };
        for _ in 0..count {
            let Some(node) = nodes::from_pool(self.program, p, &self.node_by_name) else {
                self.notes.push(format!(
                    "pool `{pool}` has no node shape the simulator can build; scale-up ignored"
                ));
                return;
            };
            let sim_node = SimNode::new(node, self.program);
            // Paid for since the scale-up; up from now.
            sim_node.available(&mut self.rec, 1.0);
            self.node_by_name
                .insert(sim_node.node.name.clone(), self.nodes.len());
            self.nodes.push(sim_node);
            self.fleet_dirty = true;
        }
    }

    fn scale(&mut self, pool: String, delta: i64, reason: String) {
        if delta == 0 || pool.is_empty() {
            return;
        }
        self.scale_events.push(ScaleEvent {
            at: self.now,
            pool: pool.clone(),
            delta_nodes: delta,
            reason,
        });
        let Some(p) = self.program.pool(&pool) else {
            return;
        };
        if delta > 0 {
            let count = delta.unsigned_abs();
            // Booting nodes are paid for from now.
            let price = p.cost_per_node_hour.unwrap_or(0.0);
            nodes::bill(&mut self.rec, &pool, price, count as f64);
            *self.added.entry(pool.clone()).or_insert(0) += count;
            let at = self.now + i64::try_from(p.boot_s).unwrap_or(0);
            self.schedule(at, Internal::NodesReady { pool, count });
            return;
        }
        let idle_since = &self.snapshot.scale_state.idle_since;
        let mut idle: Vec<(i64, String, usize)> = self
            .idle_nodes(&|p| p == pool.as_str())
            .into_iter()
            .filter_map(|i| {
                let n = self.nodes.get(i)?;
                let since = idle_since.get(&n.node.name).copied().unwrap_or(self.now);
                Some((since, n.node.name.clone(), i))
            })
            .collect();
        idle.sort();
        let want = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
        if idle.len() < want {
            self.notes.push(format!(
                "at {}: pool `{pool}` was to shrink by {want} nodes but only {} were idle",
                self.now,
                idle.len()
            ));
        }
        for (_, _, n) in idle.into_iter().take(want) {
            self.remove_node(n);
            *self.removed.entry(pool.clone()).or_insert(0) += 1;
        }
    }
}

/// Plans a job queued (again) with a prediction from the jobs finished so far, under
/// `Estimates::Predicted`: as the controller predicts each new pod set when it sees it.
fn predict(predictor: Option<&Predictor>, job: &mut SimJob) {
    if !matches!(job.phase, jobs::Phase::Pending) {
        return;
    }
    if let (Some(p), Some(limit)) = (predictor, job.job.runtime_s) {
        let (user, team) = (job.job.user.as_deref(), job.job.team.as_deref());
        if let Some(predicted) = p.predict(user, team, limit) {
            job.plan_with(predicted);
        }
    }
}
