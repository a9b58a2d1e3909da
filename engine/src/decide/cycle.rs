//! The decision cycle itself; see the module docs of `decide`.

use super::admission::{admit, Admission};
use super::fairshare::{FairShares, Resources};
use super::plan::{
    Action, Assignment, Decision, Plan, Preemption, Reason, ReasonCode, Reservation, Routed,
};
use super::quota::{Ledger, QuotaBlock};
use super::snapshot::{JobState, Snapshot};
use crate::core::alloc::Request;
use crate::core::frag::Workload;
use crate::core::gang::{self, JobShape, Unplaced, UnplacedCode};
use crate::core::packing::Strategy;
use crate::core::placer::{give_on, take_on, Choice, Placer};
use lang::ir::{PreemptMode, Program, Tier, TopologyLevel};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Distinct job shapes whose start time is estimated per cycle; beyond it `eta_s` is null.
const ETA_SHAPES: usize = 64;

/// A job holding GPUs during the cycle: running at the start, or placed in this cycle.
#[derive(Debug, Clone)]
struct Holder {
    id: String,
    team: Option<String>,
    member: Request,
    /// What one member counts for in quotas and fair share.
    member_milli: u64,
    choices: Vec<Choice>,
    /// Expected end (seconds since the epoch); `None` when the job gave no runtime.
    ends_at: Option<i64>,
    /// Set when the job may be preempted at all (tier, `min_runtime`, `max_lost`).
    victim: Option<VictimFacts>,
    evicted: bool,
}

#[derive(Debug, Clone, Copy)]
struct VictimFacts {
    priority: i64,
    /// Milli-GPU-seconds of work since the last checkpoint (or start).
    lost: i64,
    grace_s: u64,
}

struct Cycle<'a> {
    program: &'a Program,
    snapshot: &'a Snapshot,
    now: i64,
    placer: Placer<'a>,
    ledger: Ledger,
    shares: FairShares,
    holders: Vec<Holder>,
    reservation: Option<Reserved>,
    /// Shapes and priorities for which no victim set exists this cycle.
    no_victims: std::collections::HashSet<(JobShape, i64, Vec<String>)>,
    /// Running jobs (preemption candidates) by node.
    holders_on: Vec<Vec<usize>>,
    /// Per (member, pools, priority, reclaimable teams): each node's cheapest victim set.
    cost_cache: HashMap<(Request, Vec<String>, i64, Vec<String>), CostIndex>,
    /// Nodes whose allocation changed, in order; cost indexes remember how far they read.
    changed: Vec<usize>,
    /// Running jobs released so far (preempted or tried): free capacity grows only then.
    released: u64,
    /// Shapes that did not fit, at which `released` count, and why.
    unfit: HashMap<UnfitKey, (u64, Unplaced)>,
    /// The lowest tier priority among preemptible running jobs: a job at or below it
    /// cannot preempt by priority.
    lowest_victim_priority: Option<i64>,
    eta_memo: HashMap<JobShape, Option<i64>>,
    preemptions: Vec<Preemption>,
}

/// A shape and how it stands to the reservation (its start, whether the job ends first).
type UnfitKey = (JobShape, Option<(i64, bool)>);

/// Cost of a node's victim set (priority victims, lost work, victims) and the holders.
type Cost = ((usize, i64, usize), Vec<usize>);

/// Each node's victim cost for one kind of job, and the nodes ordered by it.
#[derive(Debug)]
struct CostIndex {
    costs: Vec<Option<Cost>>,
    order: BTreeSet<((usize, i64, usize), usize)>,
    /// How much of `Cycle::changed` this index has caught up with.
    seen: usize,
}

impl CostIndex {
    fn new(nodes: usize) -> CostIndex {
        CostIndex {
            costs: vec![None; nodes],
            order: BTreeSet::new(),
            seen: 0,
        }
    }

    fn set(&mut self, node: usize, cost: Option<Cost>) {
        if let Some(slot) = self.costs.get_mut(node) {
            if let Some((old, _)) = slot.take() {
                self.order.remove(&(old, node));
            }
            if let Some((c, _)) = &cost {
                self.order.insert((*c, node));
            }
            *slot = cost;
        }
    }
}

#[derive(Debug, Clone)]
struct Reserved {
    job: String,
    start_at: i64,
    nodes: BTreeSet<usize>,
}

/// What placing one job came to.
enum Outcome {
    Placed {
        choices: Vec<Choice>,
        victims: Vec<String>,
        borrowing: bool,
    },
    Blocked(Reason),
}

pub fn decide(program: &Program, snapshot: &Snapshot, now: i64) -> Plan {
    if snapshot.interrupted.is_empty() {
        return decide_cycle(program, snapshot, now, Vec::new());
    }
    // Spot interruptions: jobs on noticed nodes stop (after the pool's notice) and are
    // queued again from their last checkpoint, one interruption and preemption more, so
    // the policy's rules can route them elsewhere; nothing new goes on those nodes.
    let mut requeued = snapshot.clone();
    let mut stops = Vec::new();
    for js in &mut requeued.jobs {
        let Some(run) = &js.running else { continue };
        let Some(node) = run
            .members
            .iter()
            .map(|c| c.node)
            .find(|n| snapshot.interrupted.contains(n))
        else {
            continue;
        };
        let n = snapshot.fleet.nodes.get(node);
        let notice = n
            .and_then(|n| n.pool.as_deref())
            .and_then(|p| program.pool(p))
            .and_then(|p| p.notice_s)
            .unwrap_or(0);
        let since = run
            .last_checkpoint_at
            .unwrap_or(run.started_at)
            .max(run.started_at);
        stops.push(Preemption {
            job: js.id().to_string(),
            for_job: format!(
                "spot interruption of {}",
                n.map_or("?", |n| n.name.as_str())
            ),
            grace_s: notice,
            lost_gpu_s: js.gpu_milli() as f64 / 1000.0 * (now - since).max(0) as f64,
            cause: "spot_interrupt".to_string(),
        });
        js.running = None;
        js.job.placement.clear();
        js.job.spot_interruptions += 1;
        js.job.preemptions += 1;
    }
    decide_cycle(program, &requeued, now, stops)
}

/// A team or tier the policy does not know, or a tier the team may not use.
pub fn invalid_job(program: &Program, js: &JobState) -> Option<Reason> {
    let names = |v: Vec<&str>| v.join(", ");
    if let Some(team) = &js.job.team {
        match program.team(team) {
            None => {
                return Some(
                    Reason::new(
                        ReasonCode::InvalidJob,
                        format!(
                            "job {}: field `team`: team `{team}` is not defined in the policy",
                            js.id()
                        ),
                    )
                    .unblock(format!(
                        "use one of: {}",
                        names(program.teams.iter().map(|t| t.name.as_str()).collect())
                    )),
                )
            }
            Some(t) => {
                if let (Some(allowed), Some(tier)) = (&t.tiers, &js.job.tier) {
                    if !allowed.contains(tier) && program.tier(tier).is_some() {
                        return Some(
                            Reason::new(
                                ReasonCode::InvalidJob,
                                format!("team {team} may not use tier {tier}"),
                            )
                            .unblock(format!("use one of its tiers: {}", allowed.join(", "))),
                        );
                    }
                }
            }
        }
    }
    if let Some(tier) = &js.job.tier {
        if program.tier(tier).is_none() {
            return Some(
                Reason::new(
                    ReasonCode::InvalidJob,
                    format!(
                        "job {}: field `tier`: tier `{tier}` is not defined in the policy",
                        js.id()
                    ),
                )
                .unblock(format!(
                    "use one of: {}",
                    names(program.tiers.iter().map(|t| t.name.as_str()).collect())
                )),
            );
        }
    }
    None
}

fn decide_cycle(program: &Program, snapshot: &Snapshot, now: i64, stops: Vec<Preemption>) -> Plan {
    let fleet = &snapshot.fleet;
    let workload = Workload::typical_of(snapshot.jobs.iter().map(|j| &j.job.shape.member));
    let strategy = Strategy::from_policy(program.placement.packing);
    let placer = Placer::new(fleet, strategy, &workload, &snapshot.mig, 0);
    let capacity: Resources = [
        fleet.gpu_milli_capacity() as f64,
        fleet.nodes.iter().map(|n| n.cpu_milli as f64).sum(),
        fleet.nodes.iter().map(|n| n.memory_mib as f64).sum(),
    ];
    let mut cycle = Cycle {
        program,
        snapshot,
        now,
        placer,
        ledger: Ledger::new(program, fleet.gpu_milli_capacity()),
        shares: FairShares::new(program, capacity, &snapshot.usage, now),
        holders: Vec::new(),
        reservation: None,
        no_victims: std::collections::HashSet::new(),
        lowest_victim_priority: None,
        holders_on: vec![Vec::new(); fleet.nodes.len()],
        cost_cache: HashMap::new(),
        changed: Vec::new(),
        released: 0,
        unfit: HashMap::new(),
        eta_memo: HashMap::new(),
        preemptions: stops,
    };
    let mut plan = cycle.run();
    if !program.autoscale.is_empty() || !program.warm.is_empty() {
        let scaling = crate::scale::autoscale(program, snapshot, &plan, now);
        // A job the new nodes will hold says so.
        for d in &mut plan.decisions {
            let (Some(r), Some((pool, ready_at))) = (&mut d.reason, scaling.covered.get(&d.job))
            else {
                continue;
            };
            let eta = ready_at - now;
            r.unblock = Some(format!(
                "fits in pool {pool} after scale-up (nodes ready in about {eta}s)"
            ));
            r.eta_s = Some(r.eta_s.map_or(eta, |e| e.min(eta)));
        }
        plan.scale = scaling.scale;
        plan.warm = scaling.warm;
        plan.state = Some(scaling.state);
    }
    plan
}

impl<'a> Cycle<'a> {
    fn run(&mut self) -> Plan {
        let snapshot = self.snapshot;
        // Running jobs first, committed in one batch.
        self.placer.commit_all(snapshot.jobs.iter().flat_map(|js| {
            js.running
                .iter()
                .flat_map(move |r| r.members.iter().map(move |c| (&js.job.shape.member, c)))
        }));
        for js in &snapshot.jobs {
            if let Some(r) = &js.running {
                self.hold_committed(js, r.members.clone());
            }
        }
        let mut denied = Vec::new();
        let mut queue: Vec<(usize, Admission, JobShape)> = Vec::new();
        for (k, js) in snapshot.jobs.iter().enumerate() {
            if js.running.is_some() {
                continue;
            }
            if let Some(reason) = invalid_job(self.program, js) {
                denied.push(self.decision(js, Action::Deny, Some(reason), &Admission::default()));
                continue;
            }
            let admission = admit(self.program, js, self.now);
            if let Some((rule, message)) = &admission.denied {
                let mut reason = Reason::new(
                    ReasonCode::DeniedByRule,
                    format!("denied by rule {rule}: {message}"),
                )
                .unblock(format!("change the job so rule {rule} no longer matches"));
                reason.rule = Some(rule.clone());
                denied.push(self.decision(js, Action::Deny, Some(reason), &admission));
                continue;
            }
            let mut shape = js.job.shape.clone();
            if let Some((_, pool)) = &admission.routed {
                shape.pools = vec![pool.clone()];
            }
            apply_policy_topology(&mut shape, &self.program.placement);
            queue.push((k, admission, shape));
        }
        let order = self.order(&queue);
        let mut decisions = Vec::new();
        for q in order {
            let Some((k, admission, shape)) = queue.get(q) else {
                continue;
            };
            let Some(js) = snapshot.jobs.get(*k) else {
                continue;
            };
            let outcome = self.place(js, shape);
            let decision = match outcome {
                Outcome::Placed {
                    choices,
                    victims,
                    borrowing,
                } => {
                    let mut d = self.decision(js, Action::Place, None, admission);
                    d.placement = self.assignments(&js.job.shape.member, &choices);
                    d.victims = victims;
                    d.borrowing = borrowing;
                    d
                }
                Outcome::Blocked(reason) => {
                    self.decision(js, Action::Queue, Some(reason), admission)
                }
            };
            decisions.push(decision);
        }
        let mut position = 0;
        for d in &mut decisions {
            if let Some(r) = &mut d.reason {
                position += 1;
                r.position = Some(position);
            }
        }
        decisions.extend(denied);
        let reservation = self.reservation.as_ref().map(|r| Reservation {
            job: r.job.clone(),
            start_at: r.start_at,
            nodes: r.nodes.iter().filter_map(|i| self.node_name(*i)).collect(),
        });
        Plan {
            policy_revision: String::new(),
            now: self.now,
            decisions,
            preemptions: std::mem::take(&mut self.preemptions),
            reservation,
            scale: Vec::new(),
            warm: Vec::new(),
            state: None,
        }
    }

    fn node_name(&self, i: usize) -> Option<String> {
        self.snapshot.fleet.nodes.get(i).map(|n| n.name.clone())
    }

    fn pool_of(&self, node: usize) -> Option<&'a str> {
        self.snapshot
            .fleet
            .nodes
            .get(node)
            .and_then(|n| n.pool.as_deref())
    }

    fn tier(&self, js: &JobState) -> Option<&'a Tier> {
        js.job.tier.as_deref().and_then(|t| self.program.tier(t))
    }

    fn priority(&self, js: &JobState) -> i64 {
        self.tier(js).map_or(0, |t| t.priority)
    }

    fn decision(
        &self,
        js: &JobState,
        action: Action,
        reason: Option<Reason>,
        admission: &Admission,
    ) -> Decision {
        Decision {
            job: js.id().to_string(),
            team: js.job.team.clone(),
            tier: js.job.tier.clone(),
            gpus: js.gpu_milli() as f64 / 1000.0,
            action,
            placement: Vec::new(),
            victims: Vec::new(),
            borrowing: false,
            routed_to: admission.routed.as_ref().map(|(rule, pool)| Routed {
                pool: pool.clone(),
                rule: rule.clone(),
            }),
            annotations: admission.annotations.clone(),
            warnings: admission.warnings.clone(),
            reason,
        }
    }

    fn assignments(&self, member: &Request, choices: &[Choice]) -> Vec<Assignment> {
        choices
            .iter()
            .map(|c| Assignment {
                node: self.node_name(c.node).unwrap_or_default(),
                gpus: c
                    .on
                    .gpus
                    .iter()
                    .map(|g| {
                        self.snapshot
                            .fleet
                            .nodes
                            .get(c.node)
                            .and_then(|n| n.gpus.get(*g))
                            .map_or(*g as u32, |x| x.index)
                    })
                    .collect(),
                gpu_milli: member.gpu_milli,
                mig_starts: c.on.mig_starts.clone(),
            })
            .collect()
    }

    /// Charges per pool for a placement.
    fn charges(&self, member_milli: u64, choices: &[Choice]) -> Vec<(Option<&'a str>, u64)> {
        choices
            .iter()
            .map(|c| (self.pool_of(c.node), member_milli))
            .collect()
    }

    fn resources(member: &Request, member_milli: u64, members: usize) -> Resources {
        let n = members as f64;
        [
            member_milli as f64 * n,
            member.cpu_milli as f64 * n,
            member.memory_mib as f64 * n,
        ]
    }

    /// Takes a job's GPUs for the rest of the cycle (placer, quota, fair share).
    fn hold(&mut self, js: &JobState, choices: Vec<Choice>) {
        for c in &choices {
            self.placer.commit(&js.job.shape.member, c);
        }
        self.hold_committed(js, choices);
    }

    /// [`Cycle::hold`] for a placement already committed in the placer.
    fn hold_committed(&mut self, js: &JobState, choices: Vec<Choice>) {
        let member = js.job.shape.member.clone();
        for c in &choices {
            self.changed.push(c.node);
        }
        for (pool, milli) in self.charges(js.member_milli, &choices) {
            self.ledger.charge(js.job.team.as_deref(), pool, milli);
        }
        self.shares.hold(
            js.job.team.as_deref(),
            Self::resources(&member, js.member_milli, choices.len()),
        );
        let started = js.running.as_ref().map_or(self.now, |r| r.started_at);
        let victim = js.running.as_ref().and_then(|r| self.victim_facts(js, r));
        if victim.is_some() {
            let h = self.holders.len();
            let nodes: BTreeSet<usize> = choices.iter().map(|c| c.node).collect();
            for n in nodes {
                if let Some(list) = self.holders_on.get_mut(n) {
                    list.push(h);
                }
            }
        }
        if let Some(v) = victim {
            self.lowest_victim_priority = Some(
                self.lowest_victim_priority
                    .map_or(v.priority, |p| p.min(v.priority)),
            );
        }
        self.holders.push(Holder {
            member_milli: js.member_milli,
            id: js.id().to_string(),
            team: js.job.team.clone(),
            member,
            choices,
            ends_at: js.job.runtime_s.map(|r| (started + r as i64).max(self.now)),
            victim,
            evicted: false,
        });
    }

    /// Whether a running job may be preempted at all, and what it would lose.
    fn victim_facts(&self, js: &JobState, run: &super::snapshot::Running) -> Option<VictimFacts> {
        let tier = self.tier(js)?;
        if tier.preempt == PreemptMode::Never
            || self.now - run.started_at < tier.min_runtime_s as i64
        {
            return None;
        }
        let since = run
            .last_checkpoint_at
            .unwrap_or(run.started_at)
            .max(run.started_at);
        let lost_s = (self.now - since).max(0);
        if tier.preempt == PreemptMode::AfterCheckpoint
            && tier.max_lost_s.is_some_and(|m| lost_s > m as i64)
        {
            return None;
        }
        Some(VictimFacts {
            priority: tier.priority,
            lost: js.gpu_milli() as i64 * lost_s,
            grace_s: tier.grace_s,
        })
    }

    fn release_holder(&mut self, h: usize) {
        self.released += 1;
        self.move_holder(h, false);
    }

    fn restore_holder(&mut self, h: usize) {
        self.move_holder(h, true);
    }

    /// Takes a held job's GPUs back (`take`) or gives them up, in placer and quota.
    fn move_holder(&mut self, h: usize, take: bool) {
        let Some(holder) = self.holders.get(h) else {
            return;
        };
        let fleet = &self.snapshot.fleet;
        let milli = holder.member_milli;
        for c in &holder.choices {
            let pool = fleet.nodes.get(c.node).and_then(|n| n.pool.as_deref());
            if take {
                self.placer.commit(&holder.member, c);
                self.ledger.charge(holder.team.as_deref(), pool, milli);
            } else {
                self.placer.release(&holder.member, c);
                self.ledger.uncharge(holder.team.as_deref(), pool, milli);
            }
            self.changed.push(c.node);
        }
    }

    /// Queue order: tier priority (high first); within a priority, the team with the
    /// lowest fair share goes next, with its oldest job; ties by submit time and id.
    fn order(&mut self, queue: &[(usize, Admission, JobShape)]) -> Vec<usize> {
        let jobs = &self.snapshot.jobs;
        let job = |q: usize| queue.get(q).and_then(|(k, _, _)| jobs.get(*k));
        let mut bands: BTreeMap<std::cmp::Reverse<i64>, BTreeMap<Option<String>, Vec<usize>>> =
            BTreeMap::new();
        for q in 0..queue.len() {
            let Some(js) = job(q) else { continue };
            bands
                .entry(std::cmp::Reverse(self.priority(js)))
                .or_default()
                .entry(js.job.team.clone())
                .or_default()
                .push(q);
        }
        let key = |q: usize| job(q).map(|js| (js.job.submitted_at.unwrap_or(i64::MIN), js.id()));
        let mut order = Vec::with_capacity(queue.len());
        for (_, mut teams) in bands {
            for list in teams.values_mut() {
                list.sort_by_key(|q| key(*q));
                list.reverse(); // pop from the back: oldest first
            }
            // Each team's next job in a heap keyed by (share, submit time, id); a team's
            // share moves only when it gets a job, so only its entry is pushed again.
            // Shares are non-negative, so their bit patterns order like the numbers.
            let names: Vec<Option<String>> = teams.keys().cloned().collect();
            let mut heap = std::collections::BinaryHeap::new();
            for (t, name) in names.iter().enumerate() {
                if let Some(q) = teams.get(name).and_then(|l| l.last().copied()) {
                    let share = self.shares.share(name.as_deref()).max(0.0).to_bits();
                    heap.push(std::cmp::Reverse((share, key(q), t)));
                }
            }
            while let Some(std::cmp::Reverse((_, _, t))) = heap.pop() {
                let Some(name) = names.get(t) else { continue };
                let Some(q) = teams.get_mut(name).and_then(Vec::pop) else {
                    continue;
                };
                order.push(q);
                // Placing happens later; fair share within a band follows what this job
                // would hold if placed, so one team's many jobs do not go first in a row.
                if let Some(js) = job(q) {
                    let r = Self::resources(
                        &js.job.shape.member,
                        js.member_milli,
                        js.job.shape.members as usize,
                    );
                    self.shares.hold(js.job.team.as_deref(), r);
                }
                if let Some(next) = teams.get(name).and_then(|l| l.last().copied()) {
                    let share = self.shares.share(name.as_deref()).max(0.0).to_bits();
                    heap.push(std::cmp::Reverse((share, key(next), t)));
                }
            }
        }
        // Undo the provisional holds: `hold` adds them again for jobs that are placed.
        for q in &order {
            if let Some(js) = job(*q) {
                let r = Self::resources(
                    &js.job.shape.member,
                    js.member_milli,
                    js.job.shape.members as usize,
                );
                self.shares.hold(js.job.team.as_deref(), r.map(|x| -x));
            }
        }
        order
    }

    /// Places one job: directly, or by preempting, or not (with a reason).
    fn place(&mut self, js: &JobState, shape: &JobShape) -> Outcome {
        let ends_at = js.job.runtime_s.map(|r| self.now + r as i64);
        let reservation = self.reservation.clone();
        let interrupted = &self.snapshot.interrupted;
        let respects = |r: &Option<Reserved>, node: usize| {
            !interrupted.contains(&node)
                && match r {
                    Some(res) => {
                        !res.nodes.contains(&node) || ends_at.is_some_and(|e| e <= res.start_at)
                    }
                    None => true,
                }
        };
        // Free capacity only grows when a running job is released; until then a shape
        // that did not fit still does not.
        let memo_key = (
            shape.clone(),
            reservation
                .as_ref()
                .map(|r| (r.start_at, ends_at.is_some_and(|e| e <= r.start_at))),
        );
        let attempt = match self.unfit.get(&memo_key) {
            Some((epoch, why)) if *epoch == self.released => Err(Blocked::Capacity(why.clone())),
            _ => self.try_place_keeping(js, shape, &|i| respects(&reservation, i), true),
        };
        if let Err(Blocked::Capacity(why)) = &attempt {
            self.unfit.insert(memo_key, (self.released, why.clone()));
        }
        let mut blocked = match attempt {
            Ok((choices, borrowing)) => {
                self.hold_committed(js, choices.clone());
                return Outcome::Placed {
                    choices,
                    victims: Vec::new(),
                    borrowing,
                };
            }
            Err(b) => b,
        };
        // Would it fit on the reserved GPUs? Then it waits for the reservation.
        if let (Some(res), Blocked::Capacity(_)) = (&reservation, &blocked) {
            let fits = if self.room_on(&res.nodes, shape) {
                self.try_place(js, shape, &|n| !interrupted.contains(&n))
                    .ok()
            } else {
                None
            };
            if let Some((choices, _)) = fits {
                for c in &choices {
                    self.placer.release(&shape.member, c);
                }
                blocked = Blocked::Reservation(res.clone());
            }
        }
        if let Some(done) = self.preempt(js, shape, &blocked, &|i| respects(&reservation, i)) {
            return done;
        }
        let mut reason = match blocked {
            Blocked::Capacity(u) => {
                let code = match u.code {
                    UnplacedCode::NoSuchModel => ReasonCode::NoSuchModel,
                    UnplacedCode::NeverFits => ReasonCode::NeverFits,
                    UnplacedCode::TopologyUnsatisfiable => ReasonCode::TopologyUnsatisfiable,
                    UnplacedCode::NoCapacity => ReasonCode::NoCapacity,
                };
                let mut r = Reason::new(code, u.message);
                if code == ReasonCode::NoCapacity {
                    r = self.capacity_reason(js, shape, r);
                } else {
                    r.unblock = Some(match code {
                        ReasonCode::NoSuchModel => {
                            "add a node with an allowed model to an allowed pool, or widen `models`/`pools`".to_string()
                        }
                        ReasonCode::TopologyUnsatisfiable => {
                            "relax the topology requirement or label more nodes into one group".to_string()
                        }
                        _ => "shrink the members or add a larger node shape".to_string(),
                    });
                }
                r
            }
            Blocked::Quota(q) => {
                Reason::new(ReasonCode::QuotaExhausted, q.message).unblock(q.unblock)
            }
            Blocked::Reservation(res) => {
                let mut r = Reason::new(
                    ReasonCode::WaitingForReservation,
                    format!(
                        "it fits only on GPUs reserved for {} from {}s from now, and {}",
                        res.job,
                        res.start_at - self.now,
                        match ends_at {
                            Some(e) => format!("it would run until {}s from now", e - self.now),
                            None => "it has no runtime estimate".to_string(),
                        }
                    ),
                )
                .unblock(format!(
                    "fits once {} starts, or now with a runtime under {}s",
                    res.job,
                    res.start_at - self.now
                ));
                // It cannot start before the reservation does.
                r.eta_s = self.eta(shape).map(|e| e.max(res.start_at - self.now));
                r
            }
        };
        if shape.members > 1 {
            if let (Some(timeout), Some(sub)) =
                (self.program.placement.gang_timeout_s, js.job.submitted_at)
            {
                let waited = self.now - sub;
                if waited > timeout as i64 {
                    reason.gang_timeout_exceeded = true;
                    reason.message = format!(
                        "{} (gang waiting {waited}s, past the {timeout}s gang timeout)",
                        reason.message
                    );
                }
            }
        }
        Outcome::Blocked(reason)
    }

    /// Whether any of `nodes` (in the job's pools) has room for a member now.
    fn room_on(&self, nodes: &BTreeSet<usize>, shape: &JobShape) -> bool {
        let ctx = self.placer.context();
        nodes.iter().any(|n| {
            match (
                self.snapshot.fleet.nodes.get(*n),
                self.placer.state().nodes.get(*n),
            ) {
                (Some(node), Some(free)) => {
                    (shape.pools.is_empty()
                        || node.pool.as_ref().is_some_and(|p| shape.pools.contains(p)))
                        && gang::member_slots(&ctx, node, free, &shape.member) > 0
                }
                _ => false,
            }
        })
    }

    /// A no-capacity reason with an ETA, and the reservation if this is the head blocked job.
    fn capacity_reason(&mut self, js: &JobState, shape: &JobShape, mut r: Reason) -> Reason {
        let placement = &self.program.placement;
        if placement.backfill && self.reservation.is_none() {
            if let Some((start, nodes)) = self.earliest_start(shape) {
                if start - self.now <= placement.backfill_window_s as i64 {
                    let names: Vec<String> =
                        nodes.iter().filter_map(|i| self.node_name(*i)).collect();
                    self.reservation = Some(Reserved {
                        job: js.id().to_string(),
                        start_at: start,
                        nodes,
                    });
                    let mut reserved = Reason::new(
                        ReasonCode::Reserved,
                        format!(
                            "{}; it holds the reservation on {}, free in {}s by the running jobs' estimates",
                            r.message,
                            names.join(", "),
                            start - self.now
                        ),
                    )
                    .unblock("starts when the running jobs on the reserved nodes end; smaller jobs backfill around it only if they end first");
                    reserved.eta_s = Some(start - self.now);
                    return reserved;
                }
            }
        }
        r.eta_s = self.eta(shape);
        r.unblock = Some(match r.eta_s {
            Some(eta) => format!("fits in about {eta}s, when running jobs end (by their runtime estimates)"),
            None => "fits when running jobs free capacity of this shape (no runtime estimates to say when)".to_string(),
        });
        r
    }

    /// Places without preemption: the team's guaranteed pools first (per-pool quotas),
    /// then anywhere allowed; each placement must pass the quota check.
    fn try_place(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
    ) -> Result<(Vec<Choice>, bool), Blocked> {
        self.try_place_keeping(js, shape, within, false)
    }

    /// [`Cycle::try_place`]; with `keep`, a placement found stays committed in the placer
    /// (the caller holds it with [`Cycle::hold_committed`]).
    fn try_place_keeping(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        keep: bool,
    ) -> Result<(Vec<Choice>, bool), Blocked> {
        let team = js.job.team.as_deref();
        let mut tries = vec![shape.clone()];
        if shape.pools.is_empty() {
            if let Some(t) = team.and_then(|t| self.program.team(t)) {
                let mut pools: Vec<String> = t.guaranteed.per_pool_milli.keys().cloned().collect();
                pools.retain(|p| {
                    self.ledger
                        .within_guarantee(team, &[(Some(p.as_str()), js.gpu_milli())])
                });
                if !pools.is_empty() {
                    tries.insert(
                        0,
                        JobShape {
                            pools,
                            ..shape.clone()
                        },
                    );
                }
            }
        }
        let mut last: Option<Blocked> = None;
        for s in &tries {
            match gang::place_job_within(&mut self.placer, s, within) {
                Ok(choices) => match self.quota_allows(js, &choices) {
                    Ok(borrowing) => {
                        for c in &choices {
                            if !keep {
                                self.placer.release(&s.member, c);
                            }
                        }
                        return Ok((choices, borrowing));
                    }
                    Err(q) => {
                        for c in &choices {
                            self.placer.release(&s.member, c);
                        }
                        last = Some(Blocked::Quota(q));
                    }
                },
                Err(u) => {
                    if last.is_none() || u.code != UnplacedCode::NoCapacity {
                        last = Some(Blocked::Capacity(u));
                    }
                }
            }
        }
        Err(last.unwrap_or(Blocked::Capacity(Unplaced {
            code: UnplacedCode::NoCapacity,
            message: "no capacity".into(),
        })))
    }

    /// Preempts running jobs to place `js`, if the policy allows a set that works: lower
    /// tiers, or borrowers when `js`'s team reclaims its guarantee. Capacity: victims are
    /// chosen node by node (see [`Cycle::node_cost`]), cheapest nodes first; quota: the
    /// cohort's borrowers, least lost work first. Victims the placement turns out not to
    /// need are spared.
    fn preempt(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        blocked: &Blocked,
        within: &dyn Fn(usize) -> bool,
    ) -> Option<Outcome> {
        match blocked {
            Blocked::Capacity(u) if u.code == UnplacedCode::NoCapacity => {}
            Blocked::Quota(_) => {}
            _ => return None,
        }
        let team = js.job.team.as_deref();
        let priority = self.priority(js);
        let by_priority = self.lowest_victim_priority.is_some_and(|p| p < priority);
        if !by_priority && self.ledger.cohort(team).is_none() {
            return None;
        }
        let reclaiming = self
            .ledger
            .within_guarantee(team, &[(None, js.gpu_milli())])
            || self.program.team(team.unwrap_or("")).is_some_and(|t| {
                t.guaranteed.per_pool_milli.keys().any(|p| {
                    self.ledger
                        .within_guarantee(team, &[(Some(p.as_str()), js.gpu_milli())])
                })
            });
        let cohort = self.ledger.cohort(team).map(str::to_string);
        let reclaimable: Vec<String> = match (&cohort, reclaiming) {
            (Some(c), true) => self
                .program
                .teams
                .iter()
                .filter(|t| t.cohort.as_ref() == Some(c) && Some(t.name.as_str()) != team)
                .filter(|t| self.ledger.is_borrowing(Some(&t.name)))
                .map(|t| t.name.clone())
                .collect(),
            _ => Vec::new(),
        };
        if reclaimable.is_empty() && self.lowest_victim_priority.is_none_or(|p| p >= priority) {
            return None;
        }
        let memo = (shape.clone(), priority, reclaimable.clone());
        if self.no_victims.contains(&memo) {
            return None;
        }
        let found = match blocked {
            Blocked::Quota(_) => self.victims_for_quota(js, shape, within, &reclaimable),
            _ => self.victims_by_node(js, shape, within, priority, &reclaimable),
        };
        let Some((needed, placed)) = found else {
            self.no_victims.insert(memo);
            return None;
        };
        let mut victims = Vec::new();
        for h in &needed {
            let Some(holder) = self.holders.get_mut(*h) else {
                continue;
            };
            holder.evicted = true;
            let holder = holder.clone();
            let reclaim = holder
                .team
                .as_ref()
                .is_some_and(|t| reclaimable.contains(t));
            let (grace_s, lost) = holder.victim.map_or((0, 0), |v| (v.grace_s, v.lost));
            self.shares.hold(
                holder.team.as_deref(),
                Self::resources(&holder.member, holder.member_milli, holder.choices.len())
                    .map(|x| -x),
            );
            victims.push(holder.id.clone());
            self.preemptions.push(Preemption {
                job: holder.id.clone(),
                for_job: js.id().to_string(),
                grace_s,
                lost_gpu_s: lost as f64 / 1000.0,
                cause: if reclaim { "reclaim" } else { "priority" }.to_string(),
            });
        }
        victims.sort();
        let (choices, borrowing) = placed;
        self.hold(js, choices.clone());
        Some(Outcome::Placed {
            choices,
            victims,
            borrowing,
        })
    }

    /// Whether holder `h` may be preempted for a job of `priority` (or as a reclaimed
    /// borrower), and its rank: reclaims first, then least lost work.
    fn victim_rank(
        &self,
        h: usize,
        priority: i64,
        reclaimable: &[String],
    ) -> Option<(bool, i64, i64, usize)> {
        let holder = self.holders.get(h)?;
        let v = holder.victim.as_ref()?;
        if holder.evicted {
            return None;
        }
        let reclaim = holder
            .team
            .as_ref()
            .is_some_and(|t| reclaimable.contains(t));
        (reclaim || v.priority < priority).then_some((!reclaim, v.lost, v.priority, h))
    }

    /// The cheapest victims on `node` that free room for one member of `member`: eligible
    /// holders in rank order until the member fits. Cost: (priority victims, lost work,
    /// victims). Memoised per node state; see `victim_costs`.
    fn node_cost(
        &self,
        node: usize,
        member: &Request,
        priority: i64,
        reclaimable: &[String],
    ) -> Option<Cost> {
        let mut ranked: Vec<(bool, i64, i64, usize)> = self
            .holders_on
            .get(node)?
            .iter()
            .filter_map(|h| self.victim_rank(*h, priority, reclaimable))
            .collect();
        if ranked.is_empty() {
            return None;
        }
        ranked.sort_unstable();
        let ctx = self.placer.context();
        let n = self.snapshot.fleet.nodes.get(node)?;
        let capacity = self.placer.empty_state().nodes.get(node)?;
        let mut free = self.placer.state().nodes.get(node)?.clone();
        let (mut priority_victims, mut lost, mut chosen) = (0usize, 0i64, Vec::new());
        let on_node = |h: usize| {
            self.holders.get(h).into_iter().flat_map(move |x| {
                x.choices
                    .iter()
                    .filter(move |c| c.node == node)
                    .map(move |c| (&x.member, c))
            })
        };
        for (not_reclaim, l, _, h) in ranked {
            for (member, ch) in on_node(h) {
                give_on(&ctx, n, &mut free, member, &ch.on, capacity);
            }
            chosen.push(h);
            priority_victims += usize::from(not_reclaim);
            lost += l;
            if !crate::core::packing::feasible(&ctx, n, &free, member) {
                continue;
            }
            // Spare victims added before the last that the member does not need: take
            // each back and keep the taking if the member still fits.
            let last = chosen.pop()?;
            let mut kept = vec![last];
            for h in chosen.into_iter().rev() {
                for (m, ch) in on_node(h) {
                    take_on(&ctx, n, &mut free, m, &ch.on);
                }
                if crate::core::packing::feasible(&ctx, n, &free, member) {
                    let rank = self.victim_rank(h, priority, reclaimable);
                    lost -= rank.map_or(0, |r| r.1);
                    priority_victims -= usize::from(rank.is_some_and(|r| r.0));
                } else {
                    for (m, ch) in on_node(h) {
                        give_on(&ctx, n, &mut free, m, &ch.on, capacity);
                    }
                    kept.push(h);
                }
            }
            kept.reverse();
            return Some(((priority_victims, lost, kept.len()), kept));
        }
        None
    }

    /// Victims chosen node by node: each usable node's cheapest set ([`Cycle::node_cost`]),
    /// kept in an index per job shape and priority that is updated only for nodes that
    /// changed since it was last read; nodes are then tried cheapest first until the job
    /// fits (one node for a single member, more for a gang).
    #[allow(clippy::type_complexity)]
    fn victims_by_node(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        priority: i64,
        reclaimable: &[String],
    ) -> Option<(Vec<usize>, (Vec<Choice>, bool))> {
        let fleet = &self.snapshot.fleet;
        let usable = |node: usize| {
            fleet.nodes.get(node).is_some_and(|n| {
                (shape.pools.is_empty() || n.pool.as_ref().is_some_and(|p| shape.pools.contains(p)))
                    && shape.member.accepts_model(n.gpu_model())
            })
        };
        let key = (
            shape.member.clone(),
            shape.pools.clone(),
            priority,
            reclaimable.to_vec(),
        );
        let mut index = match self.cost_cache.remove(&key) {
            Some(mut index) => {
                let changed: BTreeSet<usize> = self
                    .changed
                    .get(index.seen..)
                    .unwrap_or(&[])
                    .iter()
                    .copied()
                    .collect();
                for node in changed.into_iter().filter(|n| usable(*n)) {
                    let cost = self.node_cost(node, &shape.member, priority, reclaimable);
                    index.set(node, cost);
                }
                index
            }
            None => {
                let mut index = CostIndex::new(fleet.nodes.len());
                for node in (0..fleet.nodes.len()).filter(|n| usable(*n)) {
                    if self.holders_on.get(node).is_some_and(|h| !h.is_empty()) {
                        let cost = self.node_cost(node, &shape.member, priority, reclaimable);
                        index.set(node, cost);
                    }
                }
                index
            }
        };
        index.seen = self.changed.len();
        let attempts = (shape.members as usize).saturating_mul(2).saturating_add(4);
        let plans: Vec<(usize, Vec<usize>)> = index
            .order
            .iter()
            .filter(|(_, node)| within(*node))
            .take(attempts)
            .filter_map(|(_, node)| {
                let (_, victims) = index.costs.get(*node).cloned().flatten()?;
                Some((*node, victims))
            })
            .collect();
        self.cost_cache.insert(key, index);
        let mut taken: Vec<usize> = Vec::new();
        let mut placed = None;
        let mut used = 0;
        for (node, victims) in plans {
            used += 1;
            for h in victims {
                if !taken.contains(&h) {
                    self.release_holder(h);
                    taken.push(h);
                }
            }
            // A single member goes on the node its victims freed; a gang is placed anew.
            let attempt = if shape.members == 1 {
                self.try_place_on(js, shape, node)
            } else {
                self.try_place(js, shape, within).ok()
            };
            if let Some(done) = attempt {
                placed = Some(done);
                break;
            }
        }
        let Some(placed) = placed else {
            self.restore_all(&taken);
            return None;
        };
        if shape.members == 1 && used == 1 {
            // One node's set, already pruned to what the member needs.
            return Some((taken, placed));
        }
        Some(self.spare(js, shape, within, taken, placed))
    }

    /// One member on `node`, if it fits there and the quotas allow it (not committed).
    fn try_place_on(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        node: usize,
    ) -> Option<(Vec<Choice>, bool)> {
        let choice = self.placer.choose_among(&[node], &shape.member)?;
        let choices = vec![choice];
        let borrowing = self.quota_allows(js, &choices).ok()?;
        Some((choices, borrowing))
    }

    /// Whether the team's quotas allow `js` on `choices`; if so, whether it borrows.
    fn quota_allows(&mut self, js: &JobState, choices: &[Choice]) -> Result<bool, QuotaBlock> {
        let team = js.job.team.as_deref();
        let charges = self.charges(js.member_milli, choices);
        self.ledger.check(team, &charges)?;
        Ok(!self.ledger.within_guarantee(team, &charges)
            && self.ledger.has_team(team.unwrap_or("")))
    }

    /// Puts back victims tried and not needed, last released first.
    fn restore_all(&mut self, taken: &[usize]) {
        for h in taken.iter().rev() {
            self.restore_holder(*h);
        }
    }

    /// Victims when the job fits but its team's guarantee is lent out: borrowers in the
    /// cohort, least lost work first, until the quota check passes.
    #[allow(clippy::type_complexity)]
    fn victims_for_quota(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        reclaimable: &[String],
    ) -> Option<(Vec<usize>, (Vec<Choice>, bool))> {
        let mut ranked: Vec<(bool, i64, i64, usize)> = (0..self.holders.len())
            .filter_map(|h| self.victim_rank(h, i64::MIN, reclaimable))
            .collect();
        ranked.sort();
        let mut taken = Vec::new();
        let mut placed = None;
        for (_, _, _, h) in ranked.into_iter().take(64) {
            self.release_holder(h);
            taken.push(h);
            if let Ok(done) = self.try_place(js, shape, within) {
                placed = Some(done);
                break;
            }
        }
        let Some(placed) = placed else {
            self.restore_all(&taken);
            return None;
        };
        Some(self.spare(js, shape, within, taken, placed))
    }

    /// Gives back victims the placement does not need (latest added first), then places
    /// on the final set so the placement matches it.
    fn spare(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        mut taken: Vec<usize>,
        mut placed: (Vec<Choice>, bool),
    ) -> (Vec<usize>, (Vec<Choice>, bool)) {
        let mut needed: Vec<usize> = Vec::new();
        let last = taken.pop();
        if taken.len() > 16 {
            needed.append(&mut taken);
        }
        for h in taken.into_iter().rev() {
            self.restore_holder(h);
            match self.try_place(js, shape, within) {
                Ok(done) => placed = done,
                Err(_) => {
                    self.release_holder(h);
                    needed.push(h);
                }
            }
        }
        needed.extend(last);
        if let Ok(done) = self.try_place(js, shape, within) {
            placed = done;
        }
        (needed, placed)
    }

    /// When `shape` could start if running jobs end as estimated, and on which nodes:
    /// jobs are released in order of expected end, on a copy of the free resources, until
    /// the free room (per topology group when the job requires one) holds every member.
    /// Room per node is exact for identical members, as in gang placement. Quotas are not
    /// considered: an estimate of capacity, not of turn.
    fn earliest_start(&self, shape: &JobShape) -> Option<(i64, BTreeSet<usize>)> {
        let ctx = self.placer.context();
        let fleet = &self.snapshot.fleet;
        let usable: Vec<bool> = fleet
            .nodes
            .iter()
            .map(|n| {
                shape.pools.is_empty() || n.pool.as_ref().is_some_and(|p| shape.pools.contains(p))
            })
            .collect();
        let level = shape
            .topology_required
            .filter(|l| !matches!(l, TopologyLevel::Any | TopologyLevel::NvlinkIsland));
        // Group of each node (one group for all when no topology is required).
        let mut group_of: Vec<Option<usize>> = vec![None; fleet.nodes.len()];
        let mut groups = 1;
        match level {
            Some(l) => {
                groups = 0;
                for (g, (_, nodes)) in self.placer.groups(l).iter().enumerate() {
                    for n in nodes {
                        if let Some(slot) = group_of.get_mut(*n) {
                            *slot = Some(g);
                        }
                    }
                    groups = g + 1;
                }
            }
            None => group_of.iter_mut().for_each(|g| *g = Some(0)),
        }
        let mut free = self.placer.state().nodes.clone();
        let empty = &self.placer.empty_state().nodes;
        let slots = |free: &[crate::core::alloc::NodeFree], n: usize| -> u64 {
            match (usable.get(n), fleet.nodes.get(n), free.get(n)) {
                (Some(true), Some(node), Some(f)) => {
                    gang::member_slots(&ctx, node, f, &shape.member)
                }
                _ => 0,
            }
        };
        let mut room = vec![0u64; groups];
        for n in 0..fleet.nodes.len() {
            if let Some(Some(g)) = group_of.get(n) {
                if let Some(r) = room.get_mut(*g) {
                    *r = r.saturating_add(slots(&free, n));
                }
            }
        }
        let members = u64::from(shape.members);
        let winner = |room: &[u64]| room.iter().position(|r| *r >= members);
        let mut ends: Vec<(i64, usize)> = self
            .holders
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.evicted)
            .filter_map(|(i, h)| Some((h.ends_at?, i)))
            .collect();
        ends.sort();
        let mut found = winner(&room).map(|g| (self.now, g));
        for (end, h) in ends {
            if found.is_some() {
                break;
            }
            let Some(holder) = self.holders.get(h) else {
                continue;
            };
            for c in &holder.choices {
                let before = slots(&free, c.node);
                if let (Some(f), Some(cap)) = (free.get_mut(c.node), empty.get(c.node)) {
                    f.give(&holder.member, &c.on.gpus, cap);
                }
                let after = slots(&free, c.node);
                if let Some(Some(g)) = group_of.get(c.node) {
                    if let Some(r) = room.get_mut(*g) {
                        *r = r.saturating_add(after.saturating_sub(before));
                    }
                }
            }
            found = winner(&room).map(|g| (end, g));
        }
        let (start, g) = found?;
        // The nodes that hold the members, roomiest first.
        let mut nodes: Vec<(u64, usize)> = (0..fleet.nodes.len())
            .filter(|n| group_of.get(*n).copied().flatten() == Some(g))
            .map(|n| (slots(&free, n), n))
            .filter(|(s, _)| *s > 0)
            .collect();
        nodes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut need = members;
        let mut chosen = BTreeSet::new();
        for (s, n) in nodes {
            if need == 0 {
                break;
            }
            chosen.insert(n);
            need = need.saturating_sub(s);
        }
        Some((start, chosen))
    }

    /// Seconds until `shape` could start by the running jobs' estimates; memoised per
    /// shape and estimated for at most [`ETA_SHAPES`] shapes per cycle.
    fn eta(&mut self, shape: &JobShape) -> Option<i64> {
        if let Some(hit) = self.eta_memo.get(shape) {
            return *hit;
        }
        if self.eta_memo.len() >= ETA_SHAPES {
            return None;
        }
        let eta = self.earliest_start(shape).map(|(t, _)| t - self.now);
        self.eta_memo.insert(shape.clone(), eta);
        eta
    }
}

enum Blocked {
    Capacity(Unplaced),
    Quota(QuotaBlock),
    Reservation(Reserved),
}

/// Jobs without their own topology take the policy's required level, else its first
/// preferred level that groups nodes.
pub fn apply_policy_topology(shape: &mut JobShape, placement: &lang::ir::Placement) {
    use lang::ir::TopologyLevel;
    if shape.topology_required.is_none() && shape.topology_preferred.is_none() {
        shape.topology_required = placement.topology_required;
        shape.topology_preferred = placement
            .topology_preferred
            .iter()
            .copied()
            .find(|l| !matches!(l, TopologyLevel::NvlinkIsland | TopologyLevel::Any));
    }
}
