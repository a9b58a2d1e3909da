//! Who may be a victim, and which victims a waiting job takes. The rules, all enforced here:
//!
//! 1. A running job whose tier says `preempt = never`, that is inside its tier's
//!    `min_runtime`, or (for `after_checkpoint`) has lost more than `max_lost` since its
//!    last checkpoint, is never a victim. Except that a job of a team borrowing at the
//!    cycle's start is protected by `max_lost` only for its tier's `reclaim_within`
//!    (default: `max_lost` again) past it: a lender's guarantee comes back within a
//!    bound, checkpoints or not.
//! 2. Within a team, a job preempts jobs of lower tiers.
//! 3. Across teams (Kueue's reclaimWithinCohort and borrowWithinCohort), a team's
//!    guaranteed GPUs are its own. A job inside its team's guarantee reclaims from the
//!    teams of its cohort that borrow (at the cycle's start and still), whatever their
//!    tier. A job of a higher tier preempts another team's job only while that team
//!    borrows, and never takes it below its guarantee. So a reclaim is never undone by
//!    priority, and no preemption loops.
//! 4. Among the victim sets that free the room: the one that takes the fewest GPUs below a
//!    guarantee (a reclaim goes below the borrower's guarantee only when no other set
//!    suffices), then the one whose highest victim tier is lowest (lower tiers go first,
//!    as in Kueue, Slurm and KAI: a tier says how much a job's run is worth), then the
//!    least lost work (GPUs × seconds since the last checkpoint, plus the grace period
//!    the victim holds its GPUs while stopping), then the fewest victims.
//!    (Each node's cheapest set by this rule: `victim_cost.rs`.)

use super::preempt_as_booked::AsBooked;
use super::victim_cost::{Cost, CostIndex};
use super::{Blocked, Cycle, Outcome};
use crate::core::gang::{JobShape, UnplacedCode};
use crate::core::placer::Choice;
use crate::decide::plan::Preemption;
use crate::decide::quota::PoolIx;
use crate::decide::snapshot::{JobState, Running};
use lang::ir::{PreemptMode, Tier};
use std::collections::BTreeSet;

/// What a running job would lose if preempted now, when its tier allows it at all.
#[derive(Debug, Clone, Copy)]
pub(super) struct VictimFacts {
    pub priority: i64,
    /// Milli-GPU-seconds of work lost: since the last checkpoint (or start), plus the
    /// grace period it keeps its GPUs while stopping.
    pub lost: i64,
    pub grace_s: u64,
}

/// A running job rule 1 protects now but not for ever: from when, and why.
#[derive(Debug, Clone, Copy)]
pub(super) struct Protected {
    pub priority: i64,
    pub from: i64,
    pub why: Protection,
    /// Its tier's `grace`: preempted then, it holds its GPUs that long more.
    pub grace_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protection {
    /// Inside its tier's `min_runtime`.
    MinRuntime,
    /// It has lost more than `max_lost` since its last checkpoint; its next one is due.
    Checkpoint,
    /// As `Checkpoint`, but its team borrows: the protection ends `reclaim_within` past
    /// `max_lost`, before any checkpoint (or with none declared).
    ReclaimWithin,
}

/// When a borrowing job's `max_lost` protection ends: `reclaim_within` (default:
/// `max_lost`) past the time it passed `max_lost`. `None` for tiers `max_lost` does not
/// apply to.
fn reclaim_bound(tier: &Tier, since_checkpoint: i64) -> Option<i64> {
    if tier.preempt != PreemptMode::AfterCheckpoint {
        return None;
    }
    let max_lost = tier.max_lost_s? as i64;
    let within = tier.reclaim_within_s.map_or(max_lost, |w| w as i64);
    Some(
        since_checkpoint
            .saturating_add(max_lost)
            .saturating_add(within),
    )
}

/// Why a running job may make way for the asking job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// Its team borrows the asker's guarantee (rule 3, reclaim).
    Reclaim,
    /// A lower tier of the asker's own team (rule 2).
    OwnTeam,
    /// A lower tier of a team that borrows (rule 3, priority).
    Borrowed,
}

impl Cause {
    fn label(self) -> &'static str {
        match self {
            Cause::Reclaim => "reclaim",
            Cause::OwnTeam | Cause::Borrowed => "priority",
        }
    }
}

/// The asking job as far as victims are concerned; part of every memo key, since it
/// decides who is eligible.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Asker {
    /// Teams are indexes into the policy's teams (see `Cycle::team_ix`).
    pub team: Option<usize>,
    pub priority: i64,
    /// Borrowing teams of the asker's cohort, when the asker is inside its guarantee.
    pub reclaimable: Vec<usize>,
    /// Borrowing teams left out of rule 3's priority case for this job, because victims
    /// on several nodes together took them below their guarantee.
    spared: Vec<usize>,
}

impl Asker {
    /// An asker that spares no team (what a search starts with).
    pub(super) fn new(team: Option<usize>, priority: i64, reclaimable: Vec<usize>) -> Asker {
        Asker {
            team,
            priority,
            reclaimable,
            spared: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(super) fn for_test(
        team: Option<usize>,
        priority: i64,
        reclaimable: Vec<usize>,
        spared: Vec<usize>,
    ) -> Asker {
        Asker {
            team,
            priority,
            reclaimable,
            spared,
        }
    }

    /// The borrowing teams it may reclaim from and the teams it spares, as bits by
    /// policy team, when every one is below 64; what the rules read of those lists
    /// (whether a team is in them). `None` otherwise.
    pub(super) fn team_bits(&self) -> Option<[u64; 2]> {
        let bits = |teams: &[usize]| {
            teams.iter().try_fold(0u64, |bits, t| {
                u32::try_from(*t)
                    .ok()
                    .and_then(|t| 1u64.checked_shl(t))
                    .map(|b| bits | b)
            })
        };
        Some([bits(&self.reclaimable)?, bits(&self.spared)?])
    }

    /// Below which priority policy team `team`'s jobs are this asker's victims by way of
    /// the team's standing (`i64::MAX`: any, by reclaim); `None` when its standing
    /// bears on none (its own team: rule 2 reads no standing; a team spared).
    /// [`Cycle::may_make_way`]'s rules, read from the other side.
    pub(super) fn takes_by_standing(&self, team: usize) -> Option<i64> {
        if self.team == Some(team) {
            None
        } else if self.reclaimable.contains(&team) {
            Some(i64::MAX)
        } else if self.spared.contains(&team) {
            None
        } else {
            Some(self.priority)
        }
    }
}

/// What a victim search's outcome depends on besides the shape and the cycle's state:
/// the asker, the job's team and tier (its quota check) and how it stands to the
/// reservation and bookings (the nodes it may take).
/// The asker by its number (`Cycle::asker_numbers`).
pub(super) type VictimlessKey = (u32, (Option<usize>, Option<usize>), super::UnfitKey);

/// An asker team no running job belongs to (see `Cycle::own_victims_team`).
pub(super) const NO_OWN_VICTIMS: Option<usize> = Some(usize::MAX - 1);

/// Jobs per cycle that preemption could not place within the bookings and that are
/// looked at again without them ([`Cycle::held_by_booking`]).
pub(super) const BOOKED_LOOK_BUDGET: usize = 64;

/// One holder as a candidate: (GPUs it alone takes below a guarantee, its tier's
/// priority, lost work, holder).
pub(super) type Rank = (u64, i64, i64, usize);

/// A victim set's cost by rule 4: (milli-GPUs below guarantees, the highest priority
/// among its victims, lost work, victims).
pub(super) type SetCost = (u64, i64, i64, usize);

impl<'a> Cycle<'a> {
    /// Rule 1: whether a running job may be preempted at all, and what it would lose.
    pub(super) fn victim_facts(
        &self,
        tier: Option<&Tier>,
        js: &JobState,
        run: &Running,
        borrowing: bool,
    ) -> Option<VictimFacts> {
        let tier = tier?;
        if tier.preempt == PreemptMode::Never
            || self.now - run.started_at < tier.min_runtime_s as i64
        {
            return None;
        }
        let since = last_checkpoint(run);
        let lost_s = (self.now - since).max(0);
        if tier.preempt == PreemptMode::AfterCheckpoint
            && tier.max_lost_s.is_some_and(|m| lost_s > m as i64)
            && !(borrowing && reclaim_bound(tier, since).is_some_and(|b| self.now >= b))
        {
            return None;
        }
        Some(VictimFacts {
            priority: tier.priority,
            lost: lost_work(js, run, tier.grace_s, self.now),
            grace_s: tier.grace_s,
        })
    }

    /// For a job rule 1 protects now: when it stops (its tier's `min_runtime` ends, or,
    /// having lost more than `max_lost`, it takes its next checkpoint, due every
    /// `checkpoint_interval_s`, or, its team `borrowing`, `reclaim_within` has passed).
    /// `None` when it is never a victim or the time is unknown.
    pub(super) fn protection(
        &self,
        tier: Option<&Tier>,
        js: &JobState,
        run: &Running,
        borrowing: bool,
    ) -> Option<Protected> {
        let tier = tier?;
        if tier.preempt == PreemptMode::Never {
            return None;
        }
        let min_end = run.started_at + tier.min_runtime_s as i64;
        let last = run
            .last_checkpoint_at
            .unwrap_or(run.started_at)
            .max(run.started_at);
        let lost_too_much = tier.preempt == PreemptMode::AfterCheckpoint
            && tier.max_lost_s.is_some_and(|m| self.now - last > m as i64);
        let (from, why) = if lost_too_much {
            let next = js
                .job
                .checkpoint_interval_s
                .filter(|i| *i > 0)
                .map(|every| {
                    let every = every as i64;
                    last + ((self.now - last) / every + 1) * every
                });
            let bound = reclaim_bound(tier, last).filter(|_| borrowing);
            let (end, why) = match (next, bound) {
                (Some(n), Some(b)) if b < n => (b, Protection::ReclaimWithin),
                (Some(n), _) => (n, Protection::Checkpoint),
                (None, Some(b)) => (b, Protection::ReclaimWithin),
                (None, None) => return None,
            };
            if end >= min_end {
                (end, why)
            } else {
                (min_end, Protection::MinRuntime)
            }
        } else {
            (min_end, Protection::MinRuntime)
        };
        (from > self.now).then_some(Protected {
            priority: tier.priority,
            from,
            why,
            grace_s: tier.grace_s,
        })
    }

    /// Preempts running jobs to place `js`, if the rules allow a set that works. Capacity:
    /// victims are chosen node by node (see [`Cycle::node_cost`]), cheapest nodes first;
    /// quota: the cohort's borrowers, cheapest first. Victims the placement turns out not
    /// to need are spared.
    pub(super) fn preempt(
        &mut self,
        js: &'a JobState,
        shape_no: usize,
        shape: &JobShape,
        blocked: &Blocked,
        within: &dyn Fn(usize) -> bool,
        within_key: super::UnfitKey,
    ) -> Option<Outcome> {
        self.expect_records();
        let priority = self.priority(js);
        let reclaimable = self.reclaimable(js);
        let may_preempt =
            !reclaimable.is_empty() || self.lowest_victim_priority.is_some_and(|p| p < priority);
        // Under conservative backfill, as a booking of it would (held by a booking too:
        // its own may count on victims beside it).
        let conservative =
            self.program.placement.backfill && self.program.placement.reservation_depth > 1;
        let on_room = match blocked {
            Blocked::Capacity(u) => u.code == UnplacedCode::NoCapacity,
            Blocked::Reservation(_) => true,
            Blocked::Quota(_) => false,
        };
        if conservative && on_room && may_preempt {
            let asker = Asker {
                team: self.own_victims_team(js, priority),
                priority,
                reclaimable: reclaimable.clone(),
                spared: Vec::new(),
            };
            match self.preempt_as_booked(js, shape, within, &asker) {
                AsBooked::Placed(done) => return Some(done),
                AsBooked::Later => return None,
                AsBooked::Search => {}
            }
        }
        match blocked {
            Blocked::Capacity(u) if u.code == UnplacedCode::NoCapacity => {}
            Blocked::Quota(_) => {}
            Blocked::Reservation(_) => {
                self.tell(js, |_| {
                    "preemption: not tried (it fits once the reservation's job is done)".into()
                });
                return None;
            }
            Blocked::Capacity(_) => {
                self.tell(js, |_| {
                    "preemption: not tried (no node could ever hold it)".into()
                });
                return None;
            }
        }
        if !may_preempt {
            self.tell(js, |_| {
                format!("preemption: not tried: no running job of a tier below priority {priority} may be preempted now, and no team of its cohort borrows its guarantee")
            });
            return None;
        }
        self.tell(js, |c| {
            let names: Vec<&str> = reclaimable
                .iter()
                .map(|t| c.ledger.name(Some(*t)))
                .collect();
            if names.is_empty() {
                format!("preemption: looking for victims of a tier below priority {priority}")
            } else {
                format!(
                    "preemption: looking for victims below priority {priority}, and borrowers to reclaim from: {}",
                    names.join(", ")
                )
            }
        });
        let mut asker = Asker {
            team: self.own_victims_team(js, priority),
            priority,
            reclaimable,
            spared: Vec::new(),
        };
        // Rule 3 over the whole set: victims on several nodes may together take a team
        // below its guarantee; such a team is then left out and the search runs again.
        let job = (self.job_team(js), self.tier_ix(js));
        for _ in 0..3 {
            // Any change since (a node's allocation, a team's standing where it matters)
            // is in the log; until one, a search finds what the last one found.
            let key = (self.asker_numbers.number(&asker), job, within_key);
            let log = self.log_mark();
            if !self.victims_afresh
                && !self.memos_off
                && self.no_victims.get(shape_no, &key) == Some(&log)
            {
                self.tell(js, |_| {
                    "preemption: no victim set (none was found for this shape earlier in the cycle)"
                        .into()
                });
                return None;
            }
            let found = match blocked {
                Blocked::Quota(_) => self.victims_for_quota(js, shape, within, &asker),
                _ => self.victims_by_node(js, (shape_no, shape), within, &asker),
            };
            let Some((needed, placed)) = found else {
                self.tell(js, |_| {
                    "preemption: no victim set the rules allow frees room".into()
                });
                let log = self.log_mark();
                self.no_victims.insert(shape_no, key, log);
                return None;
            };
            // Each member passed the bookings; members sharing a booked node together
            // may take more than it leaves spare.
            let runtime = self.runtime(js);
            if let Some(n) = self.violated_preempting(&shape.member, &placed.0, runtime, &needed) {
                self.tell(js, |c| {
                    format!(
                        "preemption: its members together would take GPUs booked on {}",
                        c.node_name(n).unwrap_or_default()
                    )
                });
                self.restore_all(&needed);
                return None;
            }
            let broken = self.teams_taken_below_guarantee(&needed, &asker);
            if broken.is_empty() {
                return Some(self.evict_for(js, &asker, needed, placed));
            }
            self.tell(js, |c| {
                let names: Vec<&str> = broken.iter().map(|t| c.ledger.name(Some(*t))).collect();
                format!(
                    "preemption: that set would take {} below its guarantee by priority; searching again without them",
                    names.join(", ")
                )
            });
            self.restore_all(&needed);
            asker.spared.extend(broken);
        }
        None
    }

    /// A job that preemption could not place within the bookings (`blocked` on
    /// capacity): where it could preempt were no GPUs booked, what holds it is the first
    /// booking it would delay, and it is told so (`waiting_for_reservation`), not that no
    /// room exists. The victims tried are put back. Up to [`BOOKED_LOOK_BUDGET`] jobs a
    /// cycle; past it, the reason stays.
    pub(super) fn held_by_booking(
        &mut self,
        js: &'a JobState,
        (shape_no, shape): (usize, &JobShape),
        blocked: Blocked,
    ) -> Blocked {
        let on_capacity =
            matches!(&blocked, Blocked::Capacity(u) if u.code == UnplacedCode::NoCapacity);
        if !on_capacity
            || self.bookings.is_empty()
            || self.booked_preempt_looks >= BOOKED_LOOK_BUDGET
        {
            return blocked;
        }
        let priority = self.priority(js);
        let reclaimable = self.reclaimable(js);
        if reclaimable.is_empty() && self.lowest_victim_priority.is_none_or(|p| p >= priority) {
            return blocked;
        }
        self.booked_preempt_looks += 1;
        let asker = Asker {
            team: self.own_victims_team(js, priority),
            priority,
            reclaimable,
            spared: Vec::new(),
        };
        let snapshot = self.snapshot;
        let open = |n: usize| snapshot.takes_new(n);
        let mark = self.log_mark();
        let Some((needed, (choices, _))) =
            self.victims_by_node(js, (shape_no, shape), &open, &asker)
        else {
            return blocked;
        };
        let keeps_guarantees = self.teams_taken_below_guarantee(&needed, &asker).is_empty();
        self.restore_all(&needed);
        self.rewind(mark);
        match self.booking_delayed(js, &choices) {
            Some(res) if keeps_guarantees => {
                self.tell(js, |_| {
                    format!(
                        "preemption: it could preempt on nodes {} has booked",
                        res.job
                    )
                });
                Blocked::Reservation(res)
            }
            _ => blocked,
        }
    }

    /// The asker's team for rule 2, or [`NO_OWN_VICTIMS`] when none of its running jobs
    /// is of a lower tier: then rule 2 picks nobody, and askers of every such team share
    /// their victim indexes.
    fn own_victims_team(&self, js: &JobState, priority: i64) -> Option<usize> {
        let team = self.job_team(js);
        let lower = self
            .team_slot(team)
            .is_some_and(|slot| self.has_victim_below(slot, priority));
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            lower,
            self.holders_of(team).iter().any(|h| {
                self.holders.get(*h).is_some_and(|x| {
                    !x.evicted && x.victim().is_some_and(|v| v.priority < priority)
                })
            }),
            "victim tiers counted out of step"
        );
        if lower {
            team
        } else {
            NO_OWN_VICTIMS
        }
    }

    /// Borrowing teams of `js`'s cohort, when `js` fits inside its team's guarantee
    /// (overall or in one of its guaranteed pools). A team borrows for a reclaim only by
    /// what ran at the cycle's start and still does: jobs this cycle placed (which may
    /// not start until pods stop) make no running job of their team reclaimable, as
    /// Kueue skips a preemption that an admission in the same cycle invalidated; the next
    /// cycle reclaims once they run, choosing among them too.
    pub(super) fn reclaimable(&self, js: &JobState) -> Vec<usize> {
        self.cohort_borrowers(js, true)
    }

    /// The teams [`Cycle::reclaimable`] passes over for `js`: they borrow now only by
    /// jobs this cycle placed. A later cycle may reclaim from them once those run.
    pub(super) fn borrowing_since_start(&self, js: &JobState) -> Vec<usize> {
        self.cohort_borrowers(js, false)
    }

    /// Teams of `js`'s cohort that borrow now and did (`at_start`) or did not at the
    /// cycle's start, when `js` fits inside its team's guarantee.
    fn cohort_borrowers(&self, js: &JobState, at_start: bool) -> Vec<usize> {
        // Most cycles no team starts borrowing: then there is none to look for.
        let began = |t: usize| self.borrowing_at_start.get(t) != Some(&true);
        if !at_start
            && !self
                .standing
                .iter()
                .enumerate()
                .any(|(t, st)| st.borrowing && began(t))
        {
            return Vec::new();
        }
        let team = self.job_team(js);
        let Some(cohort) = self.ledger.cohort(team) else {
            return Vec::new();
        };
        let reclaiming = self
            .ledger
            .within_guarantee(team, &[(None, js.gpu_milli())])
            || self.ledger.guarantee_pools(team).iter().any(|p| {
                self.ledger
                    .within_guarantee(team, &[(Some(*p), js.gpu_milli())])
            });
        if !reclaiming {
            return Vec::new();
        }
        (0..self.program.teams.len())
            .filter(|i| Some(*i) != team && self.ledger.cohort(Some(*i)) == Some(cohort))
            .filter(|i| self.standing.get(*i).is_some_and(|st| st.borrowing))
            .filter(|i| (self.borrowing_at_start.get(*i) == Some(&true)) == at_start)
            .collect()
    }

    /// Teams that `victims` leave below their guarantee although only another team's
    /// priority took them (the victims are released in the ledger at this point).
    pub(super) fn teams_taken_below_guarantee(
        &self,
        victims: &[usize],
        asker: &Asker,
    ) -> Vec<usize> {
        let mut broken = Vec::new();
        for h in victims {
            let Some(holder) = self.holders.get(*h) else {
                continue;
            };
            if Self::chosen_cause(holder.team_ix, asker) != Cause::Borrowed {
                continue;
            }
            let pools: Vec<Option<PoolIx>> = holder
                .choices
                .iter()
                .map(|c| self.pool_of(c.node))
                .collect();
            if let Some(t) = holder.team_ix {
                if self.ledger.below_guarantee(Some(t), &pools) && !broken.contains(&t) {
                    broken.push(t);
                }
            }
        }
        broken
    }

    /// Marks `needed` evicted for `js`, records the preemptions and holds `js`'s placement.
    pub(super) fn evict_for(
        &mut self,
        js: &'a JobState,
        asker: &Asker,
        needed: Vec<usize>,
        placed: (Vec<Choice>, bool),
    ) -> Outcome {
        self.released += 1;
        self.free_for_bookings(&needed, None);
        let work_from = needed
            .iter()
            .map(|h| self.stops_if_preempted_now(*h))
            .max()
            .unwrap_or(self.now);
        if work_from > self.now {
            self.work_from.insert(super::job_address(js), work_from);
        }
        let mut victims = Vec::new();
        for h in &needed {
            let Some(holder) = self.holders.get_mut(*h) else {
                continue;
            };
            let cause = Self::chosen_cause(holder.team_ix, asker);
            let was_candidate = !holder.evicted;
            holder.evicted = true;
            if let Some(b) = self.briefs.as_mut().and_then(|b| b.get_mut(*h)) {
                b.candidate = false;
            }
            let holder = holder.clone();
            if let (true, Some(v), Some(slot)) = (
                was_candidate,
                holder.victim(),
                self.team_slot(holder.team_ix),
            ) {
                self.count_victim_tier(slot, v.priority, false);
            }
            self.end_gives.evict(*h);
            let (grace_s, lost) = holder.victim().map_or((0, 0), |v| (v.grace_s, v.lost));
            self.shares.hold_team(
                holder.team_ix,
                Self::resources(holder.member(), holder.member_milli(), holder.choices.len())
                    .map(|x| -x),
            );
            victims.push(holder.id().to_string());
            self.preemptions.push(Preemption {
                job: holder.id().to_string(),
                for_job: js.id().to_string(),
                grace_s,
                lost_gpu_s: lost as f64 / 1000.0,
                cause: cause.label().to_string(),
            });
        }
        victims.sort();
        let (choices, borrowing) = placed;
        self.hold(js, choices.clone());
        Outcome::Placed {
            choices,
            victims,
            borrowing,
        }
    }

    /// Rules 2 and 3 for holder `h` and its rank for rule 4; `None` when it may not make
    /// way for `asker` (or is already evicted).
    pub(super) fn victim_rank(&self, h: usize, asker: &Asker) -> Option<(Rank, Cause)> {
        let holder = self.holders.get(h)?;
        if holder.evicted {
            return None;
        }
        let v = holder.victim()?;
        let cause = self.cause_of(h, asker)?;
        let breach = match cause {
            Cause::OwnTeam => 0,
            _ => self.breach(&[h]),
        };
        if cause == Cause::Borrowed && breach > 0 {
            return None;
        }
        Some(((breach, v.priority, v.lost, h), cause))
    }

    /// Why a holder of `team` already chosen as a victim for `asker` makes way. Not
    /// [`Cycle::cause_of`]: that reads the team's standing, and once the chosen victims
    /// are released a team that borrowed may no longer, which would hide the very
    /// priority victims whose set took it below its guarantee.
    pub(super) fn chosen_cause(team: Option<usize>, asker: &Asker) -> Cause {
        if team == asker.team {
            Cause::OwnTeam
        } else if team.is_some_and(|t| asker.reclaimable.contains(&t)) {
            Cause::Reclaim
        } else {
            Cause::Borrowed
        }
    }

    /// Rules 1 to 3 without the guarantee floor: why holder `h` may make way for `asker`.
    pub(super) fn cause_of(&self, h: usize, asker: &Asker) -> Option<Cause> {
        let holder = self.holders.get(h)?;
        let v = holder.victim()?;
        self.may_make_way(holder.team_ix, v.priority, asker)
    }

    /// Rules 2 and 3 for a holder of `team` at `priority`, the guarantee floor aside.
    pub(super) fn may_make_way(
        &self,
        team: Option<usize>,
        priority: i64,
        asker: &Asker,
    ) -> Option<Cause> {
        let cause = Self::chosen_cause(team, asker);
        if cause == Cause::Borrowed {
            // A team the policy gives no guarantee has nothing of its own to protect.
            let unguarded = team.is_none_or(|t| {
                t >= self.program.teams.len()
                    || (!asker.spared.contains(&t)
                        && self.standing.get(t).is_some_and(|st| st.borrowing))
            });
            if !unguarded {
                return None;
            }
        }
        (cause == Cause::Reclaim || priority < asker.priority).then_some(cause)
    }

    /// Milli-GPUs by which evicting `holders` (all of one team) would take their team
    /// further below its guarantee; from `standing` unless the team's guarantee is per
    /// pool.
    pub(super) fn breach(&self, holders: &[usize]) -> u64 {
        let Some(first) = holders.first().and_then(|h| self.holders.get(*h)) else {
            return 0;
        };
        let Some(st) = first.team_ix.and_then(|i| self.standing.get(i)) else {
            return 0;
        };
        let of = |h: &usize| self.holders.get(*h);
        if !st.per_pool {
            let removed: u64 = holders
                .iter()
                .filter_map(of)
                .map(|x| x.member_milli() * x.choices.len() as u64)
                .sum();
            let short_before = st.guaranteed.saturating_sub(st.used);
            let short_after = st
                .guaranteed
                .saturating_sub(st.used.saturating_sub(removed));
            return short_after - short_before.min(short_after);
        }
        let charges = holders.iter().filter_map(of).flat_map(|x| {
            let milli = x.member_milli();
            x.choices.iter().map(move |c| (self.pool_of(c.node), milli))
        });
        self.ledger.breach(first.team_ix, charges)
    }

    /// Victims chosen node by node: each usable node's cheapest set ([`Cycle::node_cost`]),
    /// kept in an index per member, pools and asker that is updated only for nodes that
    /// changed since it was last read; nodes are then tried cheapest first until the job
    /// fits (one node for a single member, more for a gang).
    #[allow(clippy::type_complexity)]
    fn victims_by_node(
        &mut self,
        js: &'a JobState,
        (shape_no, shape): (usize, &JobShape),
        within: &dyn Fn(usize) -> bool,
        asker: &Asker,
    ) -> Option<(Vec<usize>, (Vec<Choice>, bool))> {
        let fleet = &self.snapshot.fleet;
        // Pools by number: a name compare per changed node read each node's pool string.
        let in_pools = self.placer.in_pools(&shape.pools);
        let usable = |node: usize| {
            in_pools(node)
                && fleet
                    .nodes
                    .get(node)
                    .is_some_and(|n| shape.member.accepts_node(n))
        };
        let shared_asker = Asker {
            team: NO_OWN_VICTIMS,
            ..asker.clone()
        };
        let numbered = (shape_no, shape);
        let shared = self.cost_index(numbered, &usable, &shared_asker);
        let own = (asker.team != NO_OWN_VICTIMS).then(|| self.cost_index(numbered, &usable, asker));
        let attempts = (shape.members as usize).saturating_mul(2).saturating_add(4);
        let mut plans: Vec<(usize, Cost)> = Vec::with_capacity(attempts);
        {
            let (shared_ix, own_ix) = (
                self.cost_indexes.get(shared),
                own.and_then(|id| self.cost_indexes.get(id)),
            );
            let from_shared = shared_ix.into_iter().flat_map(|ix| {
                ix.order
                    .iter()
                    .filter(|(_, n)| !own_ix.is_some_and(|o| o.covers(*n)))
                    .map(move |e| (*e, ix))
            });
            let from_own = own_ix
                .into_iter()
                .flat_map(|ix| ix.order.iter().map(move |e| (*e, ix)));
            let mut merged = merge_by_cost(from_shared, from_own);
            while plans.len() < attempts {
                let Some(((_, node), ix)) = merged.next() else {
                    break;
                };
                if within(node) {
                    if let Some(cost) = ix.cost(node) {
                        plans.push((node, cost.clone()));
                    }
                }
            }
        }
        // Tests check every set to be tried against one worked out afresh.
        #[cfg(debug_assertions)]
        for (node, cost) in &plans {
            let mut scratch = super::victim_cost::CostScratch::default();
            debug_assert_eq!(
                self.node_cost(*node, &shape.member, asker, &mut scratch)
                    .as_ref(),
                Some(cost),
                "the cost index is stale at node {node}"
            );
        }
        if plans.is_empty() {
            self.tell(js, |_| {
                "preemption: no node has victims the rules allow that would free room for a member"
                    .into()
            });
        }
        let nodes: Vec<usize> = if shape.members > 1 {
            plans.iter().map(|(n, _)| *n).collect()
        } else {
            Vec::new()
        };
        if !nodes.is_empty() {
            let most = self.room_with_nodes_emptied(shape, &nodes);
            if most < u64::from(shape.members) {
                // Releasing fewer victims never frees more: no trial could place it.
                self.tell(js, |_| {
                    let n = nodes.len();
                    let noun = if n == 1 { "node" } else { "nodes" };
                    format!(
                        "preemption: even with every victim on {n} {noun} gone, there would be room for at most {most} of its {} members",
                        shape.members
                    )
                });
                return None;
            }
        }
        let mark = self.log_mark();
        let mut taken: Vec<usize> = Vec::with_capacity(plans.iter().map(|(_, c)| c.1.len()).sum());
        let mut placed = None;
        let mut used = 0;
        for (node, (cost, victims)) in plans {
            used += 1;
            self.tell(js, |c| c.victim_set_line(node, cost, &victims));
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
                self.try_place_quiet(js, shape, within)
            };
            if let Some(done) = attempt {
                placed = Some(done);
                break;
            }
        }
        // Members that must share a node need more than one member's set there.
        let placed = match placed {
            None if !nodes.is_empty() => {
                self.gang_on_emptied_nodes(js, shape, within, asker, &nodes, &mut taken)
            }
            placed => placed,
        };
        let Some(placed) = placed else {
            self.restore_all(&taken);
            self.rewind(mark);
            return None;
        };
        if shape.members == 1 && used == 1 {
            // One node's set, already pruned to what the member needs.
            return Some((taken, placed));
        }
        Some(self.spare(js, shape, within, taken, placed))
    }

    /// One member on `node`, if it fits there and the quotas allow it (not committed).
    pub(super) fn try_place_on(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        node: usize,
    ) -> Option<(Vec<Choice>, bool)> {
        let choice = self.placer.choose_among(&[node], &shape.member)?;
        let choices = vec![choice];
        let borrowing = self.quota_allows_quietly(js, &choices)?;
        Some((choices, borrowing))
    }

    /// A gang the cheapest set per node could not place (each frees room for one member,
    /// and members that must share a node need more): every victim the rules allow on
    /// each of `nodes`, node by node in cost order and by rank within a node, is released
    /// (into `taken`) until the gang fits. [`Cycle::spare`] then gives back those it does
    /// not need.
    fn gang_on_emptied_nodes(
        &mut self,
        js: &'a JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        asker: &Asker,
        nodes: &[usize],
        taken: &mut Vec<usize>,
    ) -> Option<(Vec<Choice>, bool)> {
        for &node in nodes {
            let mut ranked: Vec<Rank> = self
                .holders_on
                .get(node)
                .iter()
                .filter(|h| !taken.contains(h))
                .filter_map(|h| self.victim_rank(*h, asker).map(|(rank, _)| rank))
                .collect();
            if ranked.is_empty() {
                continue;
            }
            ranked.sort_unstable();
            for (_, _, _, h) in ranked {
                // A borrower's victims released so far may leave the next one below its
                // guarantee: ranked again as it comes.
                if self.victim_rank(h, asker).is_some() {
                    self.release_holder(h);
                    taken.push(h);
                }
            }
            if let Some(done) = self.try_place_quiet(js, shape, within) {
                self.tell(js, |_| {
                    "preemption: its members share nodes: every victim the rules allow there makes way, then those it does not need are spared".into()
                });
                return Some(done);
            }
        }
        None
    }

    /// Puts back victims tried and not needed, last released first.
    pub(super) fn restore_all(&mut self, taken: &[usize]) {
        for h in taken.iter().rev() {
            self.restore_holder(*h);
        }
    }

    /// After a trial whose victims were all put back, forgets the node changes it logged
    /// since `mark`: the state is as it was, so indexes need not look at those nodes
    /// again. Only when nothing has read the log past `mark` meanwhile.
    pub(super) fn rewind(&mut self, mark: super::LogMark) {
        let (changed, standing) = mark;
        let read_past = self
            .cost_indexes
            .iter()
            .any(|i| i.seen > changed || i.seen_standing > standing)
            || self.room_cache.values().any(|i| i.seen > changed)
            || self.eta_version > changed;
        if !read_past {
            self.changed.truncate(changed);
            self.reach.log.truncate(standing);
        }
    }

    /// A placement once `victims` are released: a single member first on a node they
    /// freed (where the room is), then anywhere.
    pub(super) fn try_place_near(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        victims: &[usize],
    ) -> Option<(Vec<Choice>, bool)> {
        if shape.members == 1 {
            let in_pools = self.placer.in_pools(&shape.pools);
            let nodes: BTreeSet<usize> = victims
                .iter()
                .filter_map(|h| self.holders.get(*h))
                .flat_map(|x| x.choices.iter().map(|c| c.node))
                .filter(|n| within(*n) && in_pools(*n))
                .collect();
            for node in nodes {
                if let Some(done) = self.try_place_on(js, shape, node) {
                    return Some(done);
                }
            }
        }
        self.try_place_quiet(js, shape, within)
    }

    /// Gives back victims the placement does not need (latest added first). `placed`
    /// always matches the current state: a victim given back is kept back only when the
    /// job still fits, and taken again (the state as before) when it does not. A victim
    /// on none of the placement's nodes leaves its room as it is: only the quotas are
    /// asked again then.
    pub(super) fn spare(
        &mut self,
        js: &'a JobState,
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
            let apart = self.holders.get(h).is_some_and(|x| {
                x.choices
                    .iter()
                    .all(|c| placed.0.iter().all(|p| p.node != c.node))
            });
            if apart {
                match self.quota_allows_quietly(js, &placed.0) {
                    Some(borrowing) => placed.1 = borrowing,
                    None => {
                        self.release_holder(h);
                        needed.push(h);
                    }
                }
                continue;
            }
            match self.try_place_quiet(js, shape, within) {
                Some(done) => placed = done,
                None => {
                    self.release_holder(h);
                    needed.push(h);
                }
            }
        }
        needed.extend(last);
        (needed, placed)
    }
}

/// Since when a running job's work is unsaved: its last checkpoint, or its start.
fn last_checkpoint(run: &Running) -> i64 {
    run.last_checkpoint_at
        .unwrap_or(run.started_at)
        .max(run.started_at)
}

/// The work (milli-GPU-seconds) a running job loses if preempted at `at`: its GPUs since
/// its last checkpoint, and through its `grace_s` too (the job is stopping then).
pub(super) fn lost_work(js: &JobState, run: &Running, grace_s: u64, at: i64) -> i64 {
    let lost_s = (at - last_checkpoint(run)).max(0);
    js.gpu_milli() as i64 * lost_s.saturating_add(grace_s as i64)
}

/// Two cost-ordered streams of index entries merged into one, cheapest first.
pub(super) fn merge_by_cost<'i, A, B>(
    a: A,
    b: B,
) -> impl Iterator<Item = ((SetCost, usize), &'i CostIndex)>
where
    A: Iterator<Item = ((SetCost, usize), &'i CostIndex)>,
    B: Iterator<Item = ((SetCost, usize), &'i CostIndex)>,
{
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y.0 < x.0 => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}
