//! How long a job that preemption could not place waits for the jobs rule 1 of
//! `preempt.rs` protects now: the earliest time the victims it may take free room for
//! it, counting each from when its protection ends and through its `grace` after that.

use super::preempt::{lost_work, Asker, Protection, Rank};
use super::reserve::Landing;
use super::Cycle;
use crate::core::alloc::{NodeFree, Request};
use crate::core::fleet::MILLI;
use crate::core::gang::{member_slots, JobShape};
use crate::core::placer::give_on;
use crate::decide::snapshot::JobState;
use lang::ir::TopologyLevel;
use rustc_hash::FxHashMap;

/// When a job waiting on protected victims could start.
#[derive(Debug, Clone)]
pub(super) struct ProtectedWait {
    /// When it could start: victims preempted and stopped.
    pub ready: i64,
    /// The node where room comes last.
    pub node: usize,
    /// What frees it then, and when.
    pub why: Wake,
    pub at: i64,
    /// The nodes that hold it then: the members each holds, and its whole free GPUs
    /// then (where a reservation of it lands).
    pub nodes: Vec<Landing>,
}

/// The running jobs that are neither victims nor protected, by node: they free their
/// room when they end. Read from the holders once per cycle, and on from where it was
/// read as the cycle places more (`read`); evicted ones are passed over where used.
#[derive(Debug, Default)]
pub(super) struct OthersOn {
    by_node: FxHashMap<usize, Vec<usize>>,
    read: usize,
}

impl OthersOn {
    pub(super) fn on(&self, n: usize) -> &[usize] {
        self.by_node.get(&n).map_or(&[][..], Vec::as_slice)
    }
}

/// What frees the room that comes last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// Victims whose protection ends.
    Protection(Protection),
    /// A job it may not preempt (holder number) ends, by its runtime estimate.
    End(usize),
    /// A booking on the node (its number) ends: until then it holds the node's room.
    Booked(usize),
    /// Victims preemptible now (a wait from now, [`Cycle::wait_now`]).
    Now,
}

/// A node's state once one more of the jobs on it has gone: from `from` on (a victim's
/// protection over, or a job it may not preempt ended), with it and every earlier one
/// gone, the node holds `slots` members; `grace` is the longest grace among the victims;
/// `why` what happened (`None`: a victim that may be preempted now).
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub from: i64,
    pub slots: u64,
    /// Whole GPUs free then.
    pub whole: u64,
    pub grace: u64,
    pub why: Option<Wake>,
    /// The job that went (none where a booking ended).
    pub holder: Option<usize>,
    /// Whether it went by being preempted (not by ending).
    pub preempted: bool,
}

/// How [`Cycle::timeline`] looks at a node: for `asker` (only its own team's jobs with
/// `own_only`), measuring with `measure` until it gives `enough`, with `ending` the jobs
/// that are neither victims nor protected (counted from their end), up to `before`; on a
/// `booked` node, what the bookings leave a job of `member` and `runtime` starting then.
#[derive(Clone, Copy)]
pub(super) struct Look<'l> {
    pub asker: &'l Asker,
    pub own_only: bool,
    pub measure: &'l dyn Fn(&NodeFree) -> u64,
    pub enough: u64,
    pub ending: Option<&'l [usize]>,
    pub before: i64,
    pub booked: Option<Held>,
    pub member: &'l Request,
    pub runtime: Option<i64>,
}

/// A node bookings hold part of: room there counts what they leave spare, time by time.
#[derive(Clone, Copy)]
pub(super) struct Held;

impl<'a> Cycle<'a> {
    /// Brings [`OthersOn`] up to the holders placed so far.
    pub(super) fn read_others_on(&mut self) {
        let mut others = std::mem::take(&mut self.others_on);
        for (h, x) in self.holders.iter().enumerate().skip(others.read) {
            if x.victim().is_some() || x.protected().is_some() {
                continue;
            }
            for c in x.choices.iter() {
                let on = others.by_node.entry(c.node).or_default();
                if on.last() != Some(&h) {
                    on.push(h);
                }
            }
        }
        others.read = self.holders.len();
        self.others_on = others;
    }

    /// For a job that preemption could not place now: when victims it may preempt (rules
    /// 2 and 3) free room for all of its members, jobs rule 1 protects counted from when
    /// their protection ends and each victim's `grace` after it (all are preempted once
    /// the last may be), jobs it may not preempt from when they end (read by
    /// [`Cycle::read_others_on`] first). With `own_only`, only the job's own team's jobs
    /// count (its own quota holds it; for a gang, [`Cycle::gang_quota_wait`]).
    /// A gang's wait is worked out only where it would be ready before `before` (the
    /// ETA it has without preempting).
    pub(super) fn protected_wait(
        &self,
        js: &JobState,
        shape: &JobShape,
        own_only: bool,
        before: Option<i64>,
    ) -> Option<ProtectedWait> {
        let asker = Asker::new(self.job_team(js), self.priority(js), self.reclaimable(js));
        let runtime = self.runtime(js);
        match shape.members {
            1 => self.member_protected_wait(shape, (&asker, runtime), own_only, before),
            _ if own_only => self.gang_quota_wait(js, shape, &asker, before.unwrap_or(i64::MAX)),
            _ => self.gang_protected_wait(shape, (&asker, runtime), before.unwrap_or(i64::MAX)),
        }
    }

    /// [`Cycle::protected_wait`] from now: where victims preemptible now make room for
    /// every member, chosen as the wait of a booking chooses its nodes, started now
    /// (ready once their grace is over). What a job that starts now by preempting takes
    /// under conservative backfill: the cycles before booked it so.
    pub(super) fn wait_now(&self, js: &JobState, shape: &JobShape) -> Option<ProtectedWait> {
        let asker = Asker::new(self.job_team(js), self.priority(js), self.reclaimable(js));
        let runtime = self.runtime(js);
        let from_now = Some(self.now.saturating_add(1));
        let wait = match shape.members {
            1 => self.member_protected_wait(shape, (&asker, runtime), false, from_now),
            _ => self.gang_protected_wait(shape, (&asker, runtime), self.now.saturating_add(1)),
        }?;
        (wait.at == self.now).then_some(wait)
    }

    /// Whether a member of `shape` may wait for room on node `n` (`None`: no), and whether
    /// bookings hold part of it: room there counts what they leave spare (a booking that
    /// never ends keeps the node).
    pub(super) fn may_wait_on(
        &self,
        shape: &JobShape,
    ) -> impl Fn(usize) -> Option<Option<Held>> + '_ {
        let in_pools = self.placer.in_pools(&shape.pools);
        let member = shape.member.clone();
        move |n| {
            let open = in_pools(n)
                && self
                    .snapshot
                    .fleet
                    .nodes
                    .get(n)
                    .is_some_and(|node| member.accepts_node(node))
                && self.snapshot.takes_new(n);
            if !open {
                return None;
            }
            match self.bookings.last_end_on(n) {
                Some((_, Some(end))) => Some((end > self.now).then_some(Held)),
                Some((_, None)) => None,
                // EASY's reservation is booked too; a hold without nodes booked keeps
                // its nodes.
                None if self
                    .reservation
                    .as_ref()
                    .is_some_and(|r| r.nodes.contains(&n)) =>
                {
                    None
                }
                None => Some(None),
            }
        }
    }

    /// One member on one node: the node whose victims free room first. A wait that ends
    /// with a job it may not preempt ending counts only where it beats `before` (the ETA
    /// without preempting, which already counts jobs ending).
    fn member_protected_wait(
        &self,
        shape: &JobShape,
        (asker, runtime): (&Asker, Option<i64>),
        own_only: bool,
        before: Option<i64>,
    ) -> Option<ProtectedWait> {
        let usable = self.may_wait_on(shape);
        let ctx = self.placer.context();
        let mut best: Option<ProtectedWait> = None;
        // A wait from now (`Cycle::wait_now`) reads victims preemptible now only.
        let from_now = before == Some(self.now.saturating_add(1));
        // The wait is the earliest (ready, node) among the nodes. Each node that could
        // hold it gets a bound no wait there beats (its first step), and nodes are looked
        // at earliest bound first: once a bound is no earlier than the best found, no
        // node left can win. (Looking at every node's timeline in node order gave the
        // same wait at many times the cost.)
        let mut candidates: Vec<(i64, usize)> = Vec::with_capacity(self.holders_on.len());
        // Nodes with protected jobs, and nodes with victims it may take now, where a job
        // it may not preempt ends last: a reservation by preempting behind that end
        // must be found again the next cycles, or it moves.
        let nodes = self.protected_on.iter().zip(self.holders_on.iter());
        for (n, (protected, victims)) in nodes.enumerate() {
            // From now, only victims preemptible now make room.
            if (protected.is_empty() || from_now) && victims.is_empty() {
                continue;
            }
            let bound = if protected.is_empty() && !from_now {
                // Victims preemptible now wait only for a job it may not preempt to end,
                // no sooner than the first such end there (on a booked node, or for what
                // the bookings leave to change). A victim of others it may not take is
                // such a job too (asked only of those that would end sooner).
                let end = |h: usize| {
                    self.holders
                        .get(h)
                        .filter(|x| !x.evicted)?
                        .ends_at
                        .filter(|e| *e > self.now)
                };
                let mut ends = self.others_on.on(n).iter().filter_map(|h| end(*h)).min();
                for &h in self.holders_on.get(n) {
                    let Some(e) = end(h).filter(|e| ends.is_none_or(|m| *e < m)) else {
                        continue;
                    };
                    if self.cause_of(h, asker).is_none() {
                        ends = Some(e);
                    }
                }
                let changes = self
                    .bookings
                    .boundaries_on(n, self.now, runtime)
                    .first()
                    .map(|(t, _)| *t);
                let bound = match (ends, changes) {
                    (Some(e), Some(c)) => Some(e.min(c)),
                    (e, c) => e.or(c),
                };
                // Room that comes no sooner than `before` only by jobs ending (or
                // bookings) is late.
                match bound {
                    Some(b) if before.is_none_or(|before| b < before) => b,
                    _ => continue,
                }
            } else {
                let (bound, protection) = self.first_step_bound(n, asker, own_only, runtime);
                // With no protection to end there, room from `before` on comes only by
                // jobs ending or bookings: late. (The tests' reference looks anyway.)
                if !protection && before.is_some_and(|b| bound >= b) && !self.victims_afresh {
                    continue;
                }
                bound
            };
            candidates.push((bound, n));
        }
        candidates.sort_unstable();
        for (bound, n) in candidates {
            // Tests' reference ([`super::find_victims_afresh`]) looks at every node.
            let beaten = best
                .as_ref()
                .is_some_and(|b| (bound, n) >= (b.ready, b.node));
            if beaten && !self.victims_afresh {
                break;
            }
            // Whether it may wait there is read only for the nodes looked at.
            let Some(booked) = usable(n) else {
                continue;
            };
            let Some(node) = self.snapshot.fleet.nodes.get(n) else {
                continue;
            };
            let fits = |free: &NodeFree| {
                u64::from(crate::core::packing::feasible(
                    &ctx,
                    node,
                    free,
                    &shape.member,
                ))
            };
            let look = Look {
                asker,
                own_only,
                measure: &fits,
                enough: 1,
                ending: Some(self.others_on.on(n)),
                before: if from_now { self.now + 1 } else { i64::MAX },
                booked,
                member: &shape.member,
                runtime,
            };
            let (_, steps) = self.timeline(n, &look);
            let Some(step) = steps.iter().find(|s| s.slots >= 1) else {
                continue;
            };
            let ready = step.from.saturating_add(step.grace as i64);
            let late = |why: &Wake| {
                matches!(why, Wake::End(_) | Wake::Booked(_)) && before.is_some_and(|b| ready >= b)
            };
            // Room from victims preemptible now: something else held preemption back
            // (unless the wait is from now).
            let why = step
                .why
                .or((from_now && step.from == self.now).then_some(Wake::Now));
            let earlier = |b: &ProtectedWait| (ready, n) < (b.ready, b.node);
            if let Some(why) = why.filter(|w| !late(w) && best.as_ref().is_none_or(earlier)) {
                best = Some(ProtectedWait {
                    ready,
                    node: n,
                    why,
                    at: step.from,
                    nodes: vec![Landing {
                        node: n,
                        members: 1,
                        whole_free: step.whole,
                    }],
                });
            }
        }
        best
    }

    /// No step of node `n`'s [`Cycle::timeline`] for `asker` comes before this: the
    /// earliest that any job there it counts could go (victims now, protected ones as
    /// their protection ends or they end, the others as they end) or, on a booked node,
    /// that a booking's hold changes; and whether a protection that may end for the
    /// asker is among them.
    fn first_step_bound(
        &self,
        n: usize,
        asker: &Asker,
        own_only: bool,
        runtime: Option<i64>,
    ) -> (i64, bool) {
        let counted = |h: &usize| {
            self.holders
                .get(*h)
                .filter(|x| !x.evicted && (!own_only || x.team_ix == asker.team))
        };
        let (mut bound, mut protection) = (i64::MAX, false);
        for &h in self.holders_on.get(n) {
            let Some(x) = counted(&h) else { continue };
            // A victim it may take goes now; one it may not (no cause) when it ends.
            let now = x.victim().is_some() && self.cause_of(h, asker).is_some();
            bound = bound.min(if now {
                self.now
            } else {
                x.ends_at.unwrap_or(i64::MAX)
            });
        }
        for x in self.protected_on.get(n).iter().filter_map(counted) {
            let end = x.ends_at.unwrap_or(i64::MAX);
            // Preemptible once its protection ends, if it may make way for the asker.
            let from = x
                .protected()
                .filter(|p| self.may_make_way(x.team_ix, p.priority, asker).is_some())
                .map_or(i64::MAX, |p| p.from);
            protection |= from != i64::MAX;
            bound = bound.min(from.min(end));
        }
        for x in self.others_on.on(n).iter().filter_map(counted) {
            bound = bound.min(x.ends_at.unwrap_or(i64::MAX));
        }
        if self.bookings.is_booked(n) {
            let changes = self.bookings.boundaries_on(n, self.now, runtime);
            if let Some((t, _)) = changes.first() {
                bound = bound.min(*t);
            }
        }
        (bound, protection)
    }

    /// A gang: the earliest time the nodes together (inside one group of the topology
    /// level it requires) hold every member, victims preempted as their protection ends.
    /// Where several nodes could hold a member, those whose victims stop soonest count.
    fn gang_protected_wait(
        &self,
        shape: &JobShape,
        asker: (&Asker, Option<i64>),
        before: i64,
    ) -> Option<ProtectedWait> {
        let level = shape
            .topology_required
            .filter(|l| !matches!(l, TopologyLevel::Any | TopologyLevel::NvlinkIsland));
        let all: Vec<usize>;
        let groups: Vec<&[usize]> = match level {
            Some(level) => self
                .placer
                .groups(level)
                .iter()
                .map(|(_, nodes)| nodes.as_slice())
                .collect(),
            None => {
                all = (0..self.snapshot.fleet.nodes.len()).collect();
                vec![all.as_slice()]
            }
        };
        let mut best: Option<ProtectedWait> = None;
        for group in groups {
            if let Some(found) =
                self.group_protected_wait(shape, asker, group, before, best.as_ref())
            {
                best = Some(found);
            }
        }
        best
    }

    /// [`Cycle::gang_protected_wait`] inside `group`, when earlier than `best`.
    fn group_protected_wait(
        &self,
        shape: &JobShape,
        (asker, runtime): (&Asker, Option<i64>),
        group: &[usize],
        before: i64,
        best: Option<&ProtectedWait>,
    ) -> Option<ProtectedWait> {
        let mut best_ready = best.map(|b| b.ready);
        let members = u64::from(shape.members);
        let usable = self.may_wait_on(shape);
        let ctx = self.placer.context();
        // Per node of the group: members it holds, and its victims' longest grace.
        // Per node: members it holds, its victims' longest grace, its whole free GPUs.
        let mut held: Vec<(u64, u64, u64)> = vec![(0, 0, 0); group.len()];
        let mut steps: Vec<(usize, Step)> = Vec::new();
        for (i, &n) in group.iter().enumerate() {
            let (Some(node), Some(booked)) = (self.snapshot.fleet.nodes.get(n), usable(n)) else {
                continue;
            };
            let slots = |free: &NodeFree| member_slots(&ctx, node, free, &shape.member);
            let ending = self.others_on.on(n);
            let look = Look {
                asker,
                own_only: false,
                measure: &slots,
                enough: members,
                ending: Some(ending),
                before,
                booked,
                member: &shape.member,
                runtime,
            };
            let (now, on_node) = self.timeline(n, &look);
            let whole_now = self.placer.state().nodes.get(n).map_or(0, whole_gpus);
            if let Some(h) = held.get_mut(i) {
                *h = (now.min(members), 0, whole_now);
            }
            steps.extend(on_node.into_iter().map(|s| (i, s)));
        }
        let mut total: u64 = held.iter().map(|(s, _, _)| s).sum();
        if total >= members {
            // It fits without preempting: what holds it back is not protection.
            return None;
        }
        // By time; a node's steps keep their order (a stable sort).
        steps.sort_by_key(|(_, s)| s.from);
        let mut found = None;
        let mut k = 0;
        while let Some(&(_, first)) = steps.get(k) {
            let t = first.from;
            if t >= before || best_ready.is_some_and(|b| t >= b) {
                break;
            }
            let mut binding = None;
            while let Some(&(i, s)) = steps.get(k).filter(|(_, s)| s.from == t) {
                if let Some(h) = held.get_mut(i) {
                    total = total - h.0 + s.slots.min(members);
                    *h = (s.slots.min(members), s.grace, s.whole);
                }
                if let (Some(why), Some(&n)) = (s.why, group.get(i)) {
                    binding = Some((n, why));
                }
                k += 1;
            }
            if total < members {
                continue;
            }
            // Victims preemptible now suffice: something else held preemption back
            // (unless the wait is from now).
            let from_now = before == self.now.saturating_add(1);
            let Some((node, why)) = binding
                .filter(|_| t > self.now)
                .or_else(|| from_now.then(|| (group.first().copied().unwrap_or(0), Wake::Now)))
            else {
                return found;
            };
            // The nodes whose victims stop soonest, until they hold every member.
            let mut by_grace: Vec<(u64, u64, usize, u64)> = held
                .iter()
                .zip(group)
                .filter(|((slots, _, _), _)| *slots > 0)
                .map(|(&(slots, grace, whole), &n)| (grace, slots, n, whole))
                .collect();
            by_grace.sort_unstable();
            let mut counted = 0;
            let mut grace = 0;
            let mut nodes = Vec::new();
            for (g, slots, n, whole) in by_grace {
                nodes.push(Landing {
                    node: n,
                    members: slots.min(members - counted),
                    whole_free: whole,
                });
                counted += slots;
                grace = g;
                if counted >= members {
                    break;
                }
            }
            let ready = t.saturating_add(grace as i64);
            if (ready < before || from_now) && best_ready.is_none_or(|b| ready < b) {
                best_ready = Some(ready);
                found = Some(ProtectedWait {
                    ready,
                    node,
                    why,
                    at: t,
                    nodes,
                });
            }
        }
        found
    }

    /// Node `n` as the victims `asker` may take there go: what `measure` gives of it now
    /// (no victim gone), and after each victim, in the order their protection ends (those
    /// preemptible now first), until it gives `enough` or `before` comes. With `ending`
    /// (the jobs on the node that are neither victims nor protected), jobs it may not
    /// preempt count from when they end. With `own_only`, only the asker's own team's
    /// jobs count. On a node bookings hold part of (`booked`), each count is what they
    /// leave a job starting then, and each time that changes (a booking begins or stops
    /// overlapping it) is a step too.
    pub(super) fn timeline(&self, n: usize, look: &Look<'_>) -> (u64, Vec<Step>) {
        if look.booked.is_none() {
            return self.unbooked_timeline(n, look);
        }
        // Room the bookings take back later may not count: every step, then the cap.
        let every = Look {
            enough: u64::MAX,
            ..*look
        };
        let (raw_now, steps) = self.unbooked_timeline(n, &every);
        // The victims preempted so far (with when they stop) free GPUs the bookings
        // starting after counted busy.
        let mut gone: Vec<(usize, i64)> = Vec::new();
        // A job that preempts at `at` runs from when its victims' grace is over.
        let cap = |slots: u64, whole: u64, (at, grace): (i64, u64), gone: &[(usize, i64)]| {
            let until = look
                .runtime
                .map(|r| at.saturating_add(grace as i64).saturating_add(r));
            let freed = |b: &super::bookings::Booking| self.freed_for_bookings(n, gone, b);
            self.bookings
                .cap_freeing(n, (slots, whole), look.member, (at, until), &freed)
        };
        let whole_now = self.placer.state().nodes.get(n).map_or(0, whole_gpus);
        let now = cap(raw_now, whole_now, (self.now, 0), &gone);
        let changes = self.bookings.boundaries_on(n, self.now, look.runtime);
        let mut changes = changes
            .into_iter()
            .filter(|(t, _)| *t < look.before)
            .peekable();
        let mut steps = steps.into_iter().peekable();
        let (mut slots, mut whole, mut grace) = (raw_now, whole_now, 0);
        let mut out = Vec::new();
        loop {
            // A step and a change at one time: the step's room counts at the change.
            let step_next = match (steps.peek(), changes.peek()) {
                (Some(s), Some((t, _))) => s.from <= *t,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let step = if step_next {
                let Some(s) = steps.next() else { break };
                (slots, whole, grace) = (s.slots, s.whole, s.grace);
                if let Some(h) = s.holder.filter(|_| s.preempted) {
                    gone.push((h, s.from.saturating_add(s.grace as i64)));
                }
                Step {
                    slots: cap(s.slots, s.whole, (s.from, s.grace), &gone),
                    ..s
                }
            } else {
                let Some((t, booking)) = changes.next() else {
                    break;
                };
                Step {
                    from: t,
                    slots: cap(slots, whole, (t, grace), &gone),
                    whole,
                    grace,
                    why: Some(Wake::Booked(booking)),
                    holder: None,
                    preempted: false,
                }
            };
            let enough = step.slots >= look.enough;
            out.push(step);
            if enough {
                break;
            }
        }
        (now, out)
    }

    /// [`Cycle::timeline`] on a node no booking holds.
    fn unbooked_timeline(&self, n: usize, look: &Look<'_>) -> (u64, Vec<Step>) {
        let Look {
            asker,
            own_only,
            measure,
            enough,
            ending,
            before,
            ..
        } = *look;
        let with_ends = ending.is_some();
        let ending = ending.unwrap_or_default();
        let (Some(node), Some(capacity), Some(now_free)) = (
            self.snapshot.fleet.nodes.get(n),
            self.placer.empty_state().nodes.get(n),
            self.placer.state().nodes.get(n),
        ) else {
            return (0, Vec::new());
        };
        let now = measure(now_free);
        // Evicted this cycle: its room is free now already.
        let counts = |h: usize| {
            self.holders
                .get(h)
                .is_some_and(|x| !x.evicted && (!own_only || x.team_ix == asker.team))
        };
        let end = |h: usize| {
            self.holders
                .get(h)
                .and_then(|x| x.ends_at)
                .filter(|e| *e > self.now)
        };
        // Victims now (cheapest first, as preemption takes them), the protected ones as
        // their protection ends (or they end), the jobs it may not preempt as they end.
        // (from, rank among victims now, holder, what frees it then, grace).
        let mut order: Vec<(i64, Rank, Option<Wake>, u64)> = Vec::new();
        let last = |h: usize| (0, 0, 0, h);
        for &h in self.holders_on.get(n) {
            if !counts(h) {
                continue;
            }
            let rank = self.victim_rank(h, asker).map(|(r, _)| r);
            match (self.holders.get(h).and_then(|x| x.victim()), rank) {
                (Some(v), Some(rank)) => {
                    order.push((self.now, rank, None, v.grace_s));
                }
                _ if with_ends => {
                    order.extend(end(h).map(|e| (e, last(h), Some(Wake::End(h)), 0)));
                }
                _ => {}
            }
        }
        for &h in self.protected_on.get(n).iter().filter(|h| counts(**h)) {
            let Some((x, p)) = self.holders.get(h).and_then(|x| Some((x, x.protected()?))) else {
                continue;
            };
            if let Some(e) = end(h).filter(|e| with_ends && *e <= p.from) {
                order.push((e, last(h), Some(Wake::End(h)), 0));
            } else if self.may_make_way(x.team_ix, p.priority, asker).is_some() {
                // Ranked as preemption will rank it then (its team's standing unknown).
                let lost = x
                    .job
                    .running
                    .as_ref()
                    .map_or(0, |r| lost_work(x.job, r, p.grace_s, p.from));
                let rank = (0, p.priority, lost, h);
                order.push((p.from, rank, Some(Wake::Protection(p.why)), p.grace_s));
            } else if with_ends {
                order.extend(end(h).map(|e| (e, last(h), Some(Wake::End(h)), 0)));
            }
        }
        for &h in ending.iter().filter(|h| counts(**h)) {
            order.extend(end(h).map(|e| (e, last(h), Some(Wake::End(h)), 0)));
        }
        // What frees room only from `before` on does not matter.
        order.retain(|(from, ..)| *from < before);
        if order.is_empty() {
            return (now, Vec::new());
        }
        order.sort_unstable_by_key(|(from, rank, _, _)| (*from, *rank));
        let ctx = self.placer.context();
        let mut free = now_free.clone();
        let mut grace = 0u64;
        let mut steps = Vec::with_capacity(order.len());
        for (from, (.., h), why, g) in order {
            let Some(holder) = self.holders.get(h) else {
                continue;
            };
            grace = grace.max(g);
            for c in holder.choices.iter().filter(|c| c.node == n) {
                give_on(&ctx, node, &mut free, holder.member(), &c.on, capacity);
            }
            let slots = measure(&free);
            steps.push(Step {
                from,
                slots,
                whole: whole_gpus(&free),
                grace,
                why,
                holder: Some(h),
                preempted: !matches!(why, Some(Wake::End(_))),
            });
            if slots >= enough {
                break;
            }
        }
        (now, steps)
    }
}

/// Whole GPUs free on a node.
pub(super) fn whole_gpus(free: &NodeFree) -> u64 {
    free.gpu_milli.iter().filter(|m| **m >= MILLI).count() as u64
}
