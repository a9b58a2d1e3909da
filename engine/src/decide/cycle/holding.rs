//! Holding GPUs for the rest of a cycle: the running jobs at its start (in one batch,
//! settled once after it) and each placement, in placer, quota and fair share; a holder's
//! record, and giving a victim's GPUs up or back while preemption searches.

use super::cache::running_carry::Charge;
use super::test_switches::{self, Switch};
use super::{preempt, Cycle, Standing};
use crate::core::alloc::Request;
use crate::core::placer::Choice;
use crate::decide::fairshare::Resources;
use crate::decide::snapshot::JobState;
use lang::ir::Tier;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A job holding GPUs during the cycle: running at the start, or placed in this cycle.
/// Every running job gets one each cycle, so it is kept small (its id, member and
/// member's share are read through the job).
#[derive(Debug, Clone)]
pub(super) struct Holder<'a> {
    pub(super) job: &'a JobState,
    /// The team as an index into the policy's teams (see [`Cycle::team_ix`]).
    pub(super) team_ix: Option<usize>,
    /// Borrowed from the snapshot for running jobs (most holders), owned for placements.
    pub(super) choices: std::borrow::Cow<'a, [Choice]>,
    pub(super) stand: Stand,
    /// When it is expected to end, from its runtime estimate.
    pub(super) ends_at: Option<i64>,
    pub(super) evicted: bool,
    /// The job's `member_milli`, kept here: victim searches read it for thousands of
    /// candidates, and reading it from the job record cost a cache miss each. A `u32`
    /// (one member is on one node) packs it beside `evicted`: the replay writes every
    /// holder each cycle, and a larger holder cost it time.
    member_milli: u32,
}

/// What the per-node victim searches read of a holder for every candidate on each node
/// they look at, packed beside `Cycle::holders`: a holder spans two cache lines, and its
/// member's size is in the job's record, a cache miss further.
#[derive(Debug, Clone, Copy)]
pub(super) struct Brief {
    /// One member's CPU milli, memory MiB and milli-GPUs in all.
    pub size: [u64; 3],
    /// Its tier's priority, when it is a victim candidate.
    pub priority: i64,
    pub team: Option<usize>,
    /// How many members it has (on how many nodes, at most).
    pub members: usize,
    /// It may be preempted ([`Stand::Victim`]) and was not evicted this cycle.
    pub candidate: bool,
}

impl Brief {
    fn of(holder: &Holder<'_>) -> Brief {
        let m = holder.member();
        let priority = holder.victim().map(|v| v.priority);
        Brief {
            size: [m.cpu_milli, m.memory_mib, m.gpu_milli_total()],
            priority: priority.unwrap_or(i64::MAX),
            team: holder.team_ix,
            members: holder.choices.len(),
            candidate: priority.is_some() && !holder.evicted,
        }
    }
}

/// Whether a holder may be preempted now.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stand {
    /// It may (tier, `min_runtime`, `max_lost`).
    Victim(preempt::VictimFacts),
    /// Rule 1 protects it now but not for ever.
    Protected(preempt::Protected),
    /// Never, or it was placed this cycle.
    Neither,
}

impl<'a> Holder<'a> {
    pub(super) fn id(&self) -> &'a str {
        self.job.id()
    }

    pub(super) fn member(&self) -> &'a Request {
        &self.job.job.shape.member
    }

    /// What one member counts for in quotas and fair share.
    pub(super) fn member_milli(&self) -> u64 {
        u64::from(self.member_milli)
    }

    pub(super) fn victim(&self) -> Option<preempt::VictimFacts> {
        match self.stand {
            Stand::Victim(v) => Some(v),
            _ => None,
        }
    }

    pub(super) fn protected(&self) -> Option<preempt::Protected> {
        match self.stand {
            Stand::Protected(p) => Some(p),
            _ => None,
        }
    }
}

/// Holder records the cycle has not written yet: the running jobs' (each cycle writes
/// one per running job, and most replay cycles place their arrivals without reading
/// any) and the placements made before the first read. [`Cycle::record_holders`] writes
/// them in the order they would have been written at once, so indexes are the same.
#[derive(Debug, Default)]
pub(super) struct Unrecorded<'a> {
    /// Whether the records are written (then the lists below stay empty).
    written: bool,
    /// Each running job's team index and tier, in snapshot order (a buffer a `PlacementDecider`
    /// keeps: grown afresh each cycle, it was reallocated a dozen times).
    running: Vec<(Option<usize>, Option<&'a Tier>)>,
    /// Placements so far, in order.
    placed: Vec<Placed<'a>>,
}

impl<'a> Unrecorded<'a> {
    /// None written yet, with `running`'s room.
    pub(super) fn new(running: Vec<(Option<usize>, Option<&'a Tier>)>) -> Self {
        Unrecorded {
            running,
            ..Unrecorded::default()
        }
    }
}

type Placed<'a> = (
    &'a JobState,
    Option<usize>,
    Option<&'a Tier>,
    Cow<'a, [Choice]>,
);

/// For tests, on this thread: write holder records at once instead of on first read, to
/// check that when they are written changes no plan.
#[doc(hidden)]
pub fn record_holders_at_once(on: bool) {
    test_switches::set(Switch::RecordHoldersAtOnce, on);
}

impl<'a> Cycle<'a> {
    /// Counts a victim candidate of team slot `slot` at tier `priority` in or out (see
    /// `victim_tiers`).
    pub(super) fn count_victim_tier(&mut self, slot: usize, priority: i64, add: bool) {
        if self.victim_tiers.len() <= slot {
            self.victim_tiers.resize_with(slot + 1, Vec::new);
        }
        let Some(tiers) = self.victim_tiers.get_mut(slot) else {
            return;
        };
        let at = match tiers.iter().position(|(p, _)| *p == priority) {
            Some(at) => at,
            None => {
                tiers.push((priority, 0));
                tiers.len() - 1
            }
        };
        if let Some((_, count)) = tiers.get_mut(at) {
            *count = if add {
                *count + 1
            } else {
                count.saturating_sub(1)
            };
        }
    }

    /// Whether team slot `slot` has a victim candidate not evicted below `priority`.
    pub(super) fn has_victim_below(&self, slot: usize, priority: i64) -> bool {
        self.victim_tiers
            .get(slot)
            .is_some_and(|tiers| tiers.iter().any(|(p, c)| *p < priority && *c > 0))
    }

    /// Takes a job's GPUs for the rest of the cycle (placer, quota, fair share).
    pub(super) fn hold(&mut self, js: &'a JobState, choices: Vec<Choice>) {
        for c in &choices {
            self.placer.commit(&js.job.shape.member, c);
        }
        self.hold_committed(js, choices.into());
    }

    /// [`Cycle::hold`] for a placement already committed in the placer.
    pub(super) fn hold_committed(&mut self, js: &'a JobState, choices: Cow<'a, [Choice]>) {
        let (team_ix, tier) = self.resolve(js);
        self.charge_holder(js, team_ix, &choices);
        if self.unrecorded.written {
            self.record_holder(js, team_ix, tier, choices);
        } else {
            self.unrecorded.placed.push((js, team_ix, tier, choices));
        }
    }

    /// Holds a running job at the start of the cycle, in the running batch: its charges
    /// now, its holder record when first read ([`Cycle::record_holders`]).
    pub(super) fn hold_running(&mut self, js: &'a JobState, members: &'a [Choice]) {
        debug_assert!(
            self.holding_batch,
            "running jobs are held before any placement"
        );
        // A job carried since the last cycle is charged already (`running_carry`).
        let carry = self.carry.as_mut();
        let known = js.revision.zip(carry).and_then(|(r, c)| c.known(r));
        let (team_ix, tier) = match known {
            Some(resolved) => resolved,
            None => {
                let resolved = self.resolve_ix(js);
                let member = &js.job.shape.member;
                let carried = self.carry.as_mut().is_some_and(|c| {
                    let charge = Charge::of(
                        js.member_milli,
                        member.cpu_milli,
                        member.memory_mib,
                        members.len(),
                    );
                    c.carry(js.revision, resolved, charge)
                });
                if !carried {
                    self.charge_holder(js, resolved.0, members);
                }
                resolved
            }
        };
        // Records are first written after the batch, so every running one waits here.
        let tier = self.tier_at(tier);
        self.unrecorded.running.push((team_ix, tier));
    }

    /// Writes the holder records not written yet, and lays out the running jobs' lists;
    /// called before anything reads them (preemption, explanations, the end index).
    pub(super) fn record_holders(&mut self) {
        if self.unrecorded.written {
            return;
        }
        self.unrecorded.written = true;
        let running = std::mem::take(&mut self.unrecorded.running);
        let snapshot = self.snapshot;
        let running_jobs = snapshot
            .jobs
            .iter()
            .filter_map(|js| Some((js, js.running.as_ref()?.members.as_slice())));
        for ((js, members), &(team_ix, tier)) in running_jobs.zip(&running) {
            self.record_holder(js, team_ix, tier, Cow::Borrowed(members));
        }
        self.unrecorded.running = running;
        self.unrecorded.running.clear();
        self.holders_on.lay_out();
        self.protected_on.lay_out();
        self.holders_of.lay_out();
        for (js, team_ix, tier, choices) in std::mem::take(&mut self.unrecorded.placed) {
            self.record_holder(js, team_ix, tier, choices);
        }
    }

    /// Whether a running job is protected now (rule 1), its record written to tell.
    pub(super) fn any_protected_now(&mut self) -> bool {
        self.record_holders();
        self.any_protected
    }

    /// The running list with its room, for the next cycle (`buffers::recycle` empties
    /// it).
    pub(super) fn take_unrecorded_room(&mut self) -> Vec<(Option<usize>, Option<&'a Tier>)> {
        std::mem::take(&mut self.unrecorded.running)
    }

    /// Debug builds check, where holder records start being read, that they are written.
    #[track_caller]
    pub(super) fn expect_records(&self) {
        debug_assert!(
            self.unrecorded.written,
            "holder records read before they were written"
        );
    }

    /// A holder's charges: quota, fair share, the team's standing and the change log.
    fn charge_holder(&mut self, js: &JobState, team_ix: Option<usize>, choices: &[Choice]) {
        let resources = Self::resources(&js.job.shape.member, js.member_milli, choices.len());
        // Only guarantees per pool read the pool (reading it cost a look at the node).
        let per_pool = self.ledger.is_per_pool(team_ix);
        if self.holding_batch && !per_pool {
            // One bucket takes every member, and no index reads the change log before the
            // batch is settled: the members themselves need not be read here, and a
            // policy team's charges are summed and made once when the batch is settled.
            let milli = js.member_milli.saturating_mul(choices.len() as u64);
            if let Some(sum) = team_ix.and_then(|i| self.batch_sums.get_mut(i)) {
                add_to_batch(sum, milli, resources);
                return;
            }
            self.ledger.charge_unsettled(team_ix, None, milli);
        } else {
            for c in choices {
                let pool = if per_pool { self.pool_of(c.node) } else { None };
                if self.holding_batch {
                    self.ledger.charge_unsettled(team_ix, pool, js.member_milli);
                } else {
                    self.changed.push(c.node);
                    self.ledger.charge(team_ix, pool, js.member_milli);
                }
            }
        }
        self.shares.hold_team(team_ix, resources);
        // The running jobs, held in one batch, note each of their teams' usage once after.
        if self.holding_batch {
            if let Some(seen) = team_ix.and_then(|i| self.usage_deferred.get_mut(i)) {
                *seen = true;
            }
        } else {
            self.note_usage(team_ix);
        }
    }

    /// A holder's record: whether it may be preempted or is protected, its lists, its
    /// expected end.
    fn record_holder(
        &mut self,
        js: &'a JobState,
        team_ix: Option<usize>,
        tier: Option<&'a Tier>,
        choices: Cow<'a, [Choice]>,
    ) {
        let started = js
            .running
            .as_ref()
            .map_or_else(|| self.work_starts(js), |r| r.started_at);
        // Whether its team borrowed at the cycle's start (not now: records are written
        // late, and must not depend on when).
        let borrowing = team_ix.is_some_and(|t| self.borrowing_at_start.get(t) == Some(&true));
        let stand = match &js.running {
            Some(r) => match self.victim_facts(tier, js, r, borrowing) {
                Some(v) => Stand::Victim(v),
                None => self
                    .protection(tier, js, r, borrowing)
                    .map_or(Stand::Neither, Stand::Protected),
            },
            None => Stand::Neither,
        };
        let h = self.holders.len();
        // Each node of the job once (a gang may put several members on one).
        let nodes = choices
            .iter()
            .enumerate()
            .filter(|(i, c)| !choices.iter().take(*i).any(|p| p.node == c.node))
            .map(|(_, c)| c.node);
        match stand {
            Stand::Victim(v) => {
                for n in nodes {
                    self.holders_on.push(n, h);
                }
                if let Some(slot) = self.team_slot(team_ix) {
                    self.holders_of.push(slot, h);
                    self.count_victim_tier(slot, v.priority, true);
                }
                self.lowest_victim_priority = Some(
                    self.lowest_victim_priority
                        .map_or(v.priority, |p| p.min(v.priority)),
                );
            }
            Stand::Protected(_) => {
                self.any_protected = true;
                for n in nodes {
                    self.protected_on.push(n, h);
                }
            }
            Stand::Neither => {}
        }
        let ends_at = self
            .runtime_of(js, team_ix, tier)
            .map(|r| (started + r).max(self.now));
        if self.ends_built {
            if let Some(end) = ends_at {
                self.ends.insert((end, self.holders.len()));
            }
            self.team_ends
                .entry(team_ix)
                .or_default()
                .insert((ends_at.unwrap_or(i64::MAX), self.holders.len()));
        }
        self.holders.push(Holder {
            job: js,
            team_ix,
            choices,
            stand,
            ends_at,
            evicted: false,
            member_milli: u32::try_from(js.member_milli).unwrap_or(u32::MAX),
        });
        if self.ends_built {
            if let Some(holder) = self.holders.get(h) {
                self.end_gives.index(h, holder);
            }
        }
        if let (Some(briefs), Some(holder)) = (self.briefs.as_mut(), self.holders.get(h)) {
            debug_assert_eq!(briefs.len(), h, "briefs beside the holders");
            briefs.push(Brief::of(holder));
        }
    }

    /// Writes every holder's [`Brief`] on first use in a cycle (a cycle that searches no
    /// victims by node writes none: the replay's, mostly).
    pub(super) fn write_briefs(&mut self) {
        if self.briefs.is_none() {
            self.briefs = Some(self.holders.iter().map(Brief::of).collect());
        }
    }

    /// Holder `h`'s brief; `None` before [`Cycle::write_briefs`].
    pub(super) fn brief(&self, h: usize) -> Option<&Brief> {
        debug_assert!(
            self.briefs.is_some(),
            "briefs read before they were written"
        );
        self.briefs.as_ref()?.get(h)
    }

    /// Settles what [`Cycle::hold_committed`] deferred while the running jobs were held
    /// in one batch: the ledger's derived figures and the teams' standing.
    pub(super) fn settle_running(&mut self) {
        self.settle_carry();
        self.holding_batch = false;
        // The lists are laid out with the records (`record_holders`).
        // Fair share sums from zero, so a team's sum added at once is the same number.
        for (ix, sum) in self.batch_sums.iter_mut().enumerate() {
            if let Some((milli, resources)) = sum.take() {
                self.ledger.charge_unsettled(Some(ix), None, milli);
                self.shares.hold_team(Some(ix), resources);
                if let Some(seen) = self.usage_deferred.get_mut(ix) {
                    *seen = true;
                }
            }
        }
        self.ledger.settle();
        for ix in 0..self.usage_deferred.len() {
            if self.usage_deferred.get(ix).copied().unwrap_or(false) {
                self.note_usage(Some(ix));
            }
        }
    }

    /// Puts the carried teams' sums in the batch's (`running_carry`): a team whose running
    /// jobs were all carried takes its carried sums; one with a job that was not is summed
    /// job by job, in snapshot order, as an uncarried batch sums it.
    fn settle_carry(&mut self) {
        let Some(carry) = self.carry.as_mut() else {
            return;
        };
        carry.finish();
        let mut mixed = Vec::new();
        for (team, sum) in self.batch_sums.iter_mut().enumerate() {
            if carry.is_mixed(team) {
                *sum = None;
                mixed.push(team);
            } else if let Some(carried) = carry.team_sum(team) {
                debug_assert!(sum.is_none(), "team {team} both carried and summed");
                *sum = Some(carried);
            }
        }
        if mixed.is_empty() {
            return;
        }
        let running = self
            .snapshot
            .jobs
            .iter()
            .filter_map(|js| Some((js, js.running.as_ref()?.members.len())));
        for ((js, members), &(team, _)) in running.zip(&self.unrecorded.running) {
            let Some(sum) = team
                .filter(|t| mixed.contains(t))
                .and_then(|t| self.batch_sums.get_mut(t))
            else {
                continue;
            };
            let milli = js.member_milli.saturating_mul(members as u64);
            add_to_batch(
                sum,
                milli,
                Self::resources(&js.job.shape.member, js.member_milli, members),
            );
        }
    }

    /// Builds `ends` and `team_ends` from every holder at once (sorted bulk builds, far
    /// cheaper than thousands of inserts) on first use; later holders are inserted as
    /// they come.
    pub(super) fn index_ends(&mut self) {
        if self.ends_built {
            return;
        }
        self.record_holders();
        self.ends_built = true;
        self.ends = self
            .holders
            .iter()
            .enumerate()
            .filter_map(|(h, x)| x.ends_at.map(|e| (e, h)))
            .collect();
        self.end_gives =
            super::walk_free::EndGives::build(&self.holders, self.ends.iter().map(|(_, h)| *h));
        let mut by_team: BTreeMap<Option<usize>, Vec<(i64, usize)>> = BTreeMap::new();
        for (h, x) in self.holders.iter().enumerate() {
            by_team
                .entry(x.team_ix)
                .or_default()
                .push((x.ends_at.unwrap_or(i64::MAX), h));
        }
        self.team_ends = by_team
            .into_iter()
            .map(|(t, ends)| (t, ends.into_iter().collect()))
            .collect();
    }

    /// `victims`, which a reservation preempts to start at `at`, count as ending then: the
    /// walks for later jobs' starts read their GPUs free from then (the reservation's
    /// booking holds what it needs of them). Memos that read the ends are let go.
    pub(super) fn end_victims_at(&mut self, victims: &[usize], at: i64) {
        for &h in victims {
            let Some(holder) = self.holders.get_mut(h) else {
                continue;
            };
            let old = holder.ends_at;
            if old.is_some_and(|e| e <= at) {
                continue;
            }
            holder.ends_at = Some(at);
            let team = holder.team_ix;
            if self.ends_built {
                if let Some(e) = old {
                    self.ends.remove(&(e, h));
                }
                self.ends.insert((at, h));
                if let Some(ends) = self.team_ends.get_mut(&team) {
                    ends.remove(&(old.unwrap_or(i64::MAX), h));
                    ends.insert((at, h));
                }
            }
        }
        // The memos kept by release count (shapes that did not fit, quota and lending
        // walks) are let go with the ends they read.
        self.released += 1;
    }

    pub(super) fn release_holder(&mut self, h: usize) {
        self.move_holder(h, false);
    }

    pub(super) fn restore_holder(&mut self, h: usize) {
        self.move_holder(h, true);
    }

    /// Takes a held job's GPUs back (`take`) or gives them up, in placer and quota.
    pub(super) fn move_holder(&mut self, h: usize, take: bool) {
        self.move_in_placer(h, take);
        self.move_in_ledger(h, take);
    }

    /// [`Cycle::move_holder`]'s half in the placer (and the change log).
    pub(super) fn move_in_placer(&mut self, h: usize, take: bool) {
        let Some(holder) = self.holders.get(h) else {
            return;
        };
        for c in holder.choices.iter() {
            if take {
                self.placer.commit(holder.member(), c);
            } else {
                self.placer.release(holder.member(), c);
            }
            self.changed.push(c.node);
        }
    }

    /// [`Cycle::move_holder`]'s half in the quota ledger (and the team's standing).
    pub(super) fn move_in_ledger(&mut self, h: usize, take: bool) {
        let ix = self.charge_in_ledger(h, take);
        self.note_usage(ix);
    }

    /// [`Cycle::move_in_ledger`] without keeping the team's standing in step, for a run
    /// of moves between which nothing reads it; the caller then notes the usage of each
    /// team returned ([`Cycle::note_usage`]).
    pub(super) fn charge_in_ledger(&mut self, h: usize, take: bool) -> Option<usize> {
        let holder = self.holders.get(h)?;
        let milli = holder.member_milli();
        for c in holder.choices.iter() {
            let pool = self.pool_of(c.node);
            if take {
                self.ledger.charge(holder.team_ix, pool, milli);
            } else {
                self.ledger.uncharge(holder.team_ix, pool, milli);
            }
        }
        holder.team_ix
    }

    /// Keeps `standing` in step with the ledger after team `ix`'s usage changed.
    pub(super) fn note_usage(&mut self, ix: Option<usize>) {
        let (used, guaranteed) = self.ledger.usage(ix).unwrap_or((0, 0));
        let standing = Standing {
            borrowing: self.ledger.is_borrowing(ix),
            used,
            guaranteed,
            per_pool: self.ledger.is_per_pool(ix),
        };
        let Some((i, slot)) = ix.and_then(|i| Some((i, self.standing.get_mut(i)?))) else {
            return;
        };
        let flipped = std::mem::replace(slot, standing).borrowing != standing.borrowing;
        self.log_standing_change(i, flipped);
    }
}

/// Adds one running job's charges to its team's batch sums.
fn add_to_batch(sum: &mut Option<(u64, Resources)>, milli: u64, resources: Resources) {
    let (m, r) = sum.get_or_insert((0, [0.0; 3]));
    // Wrapping, as the carried sums do (`running_carry`).
    *m = m.wrapping_add(milli);
    for (a, b) in r.iter_mut().zip(resources) {
        *a += b;
    }
}
