//! [`RunningCarry`]: the running batch's quota and fair-share charges, carried by a kept
//! [`super::super::PlacementDecider`] from one cycle to the next. Most running jobs are the same from
//! cycle to cycle (same revision, `JobState::revision`); their charges stay in each
//! team's sums, and only the jobs that started or went since are added or taken off.
//!
//! The sums are exact: every charge is a whole number below 2^32 and at most 2^20 jobs
//! are carried, so each team's sum is a whole number below 2^52, the number that adding
//! the same charges as `f64`s in snapshot order gives. A team with a running job that
//! cannot be carried (no revision, a larger charge) is summed job by job that cycle.
//!
//! Stale when: a job's revision is new or it stopped running (its charge comes off and the
//! new one goes on), the policy's names or the teams it carries changed (everything is
//! summed afresh), or a team has a job that cannot be carried (that team is summed job by
//! job this cycle). Off: [`super::keep_nothing`].

use super::job_memo::{pack, unpack, Packed, Resolved};
use super::seq_memo::SeqMemo;

/// What one running job charges its team: milli-GPUs, and the GPUs, CPU and memory
/// fair share weighs (as whole numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(in crate::decide::cycle) struct Charge {
    pub milli: u64,
    pub resources: [u64; 3],
}

/// A charge carried may be no larger than this in any resource.
const MAX_RESOURCE: u64 = 1 << 32;
/// Jobs carried at most.
const MAX_JOBS: usize = 1 << 20;

impl Charge {
    /// `members` members of `member_milli` each asking for `cpu_milli` and `memory_mib`;
    /// `None` where a resource reaches [`MAX_RESOURCE`].
    pub fn of(member_milli: u64, cpu_milli: u64, memory_mib: u64, members: usize) -> Option<Self> {
        let n = u64::try_from(members).ok()?;
        let small = |v: u64| v.checked_mul(n).filter(|&x| x < MAX_RESOURCE);
        Some(Charge {
            // As the batch charges it.
            milli: member_milli.saturating_mul(n),
            resources: [small(member_milli)?, small(cpu_milli)?, small(memory_mib)?],
        })
    }
}

/// A carried job: its team and tier (packed as the job memo packs them) and charge.
#[derive(Debug, Clone, Copy)]
struct Entry {
    resolved: Packed,
    charge: Charge,
}

/// A team's carried jobs, and their charges summed.
#[derive(Debug, Clone, Copy, Default)]
struct TeamSum {
    jobs: u64,
    milli: u64,
    resources: [u64; 3],
}

impl TeamSum {
    fn add(&mut self, c: &Charge) {
        self.jobs += 1;
        // Wrapping, as the batch's own sum does.
        self.milli = self.milli.wrapping_add(c.milli);
        for (s, r) in self.resources.iter_mut().zip(c.resources) {
            *s += r;
        }
    }

    fn take(&mut self, c: &Charge) {
        self.jobs -= 1;
        self.milli = self.milli.wrapping_sub(c.milli);
        for (s, r) in self.resources.iter_mut().zip(c.resources) {
            *s -= r;
        }
    }
}

#[derive(Debug, Default)]
pub(in crate::decide::cycle) struct RunningCarry {
    jobs: SeqMemo<Entry>,
    /// Per policy team, the charges of its carried jobs (those in `jobs`).
    sums: Vec<TeamSum>,
    /// Jobs in the sums.
    in_sums: usize,
    /// Per policy team, whether its jobs are carried (its charges go to one bucket).
    carried_teams: Vec<bool>,
    /// This cycle: teams with a running job that was not carried.
    mixed: Vec<bool>,
}

impl RunningCarry {
    /// Starts a cycle whose policy carries the teams marked in `carried_teams`;
    /// `names_kept`: its team and tier indexes mean what they meant last cycle.
    pub fn begin(&mut self, carried_teams: Vec<bool>, names_kept: bool) {
        if names_kept && carried_teams == self.carried_teams {
            self.jobs.begin();
        } else {
            self.jobs.forget();
            self.sums = vec![TeamSum::default(); carried_teams.len()];
            self.in_sums = 0;
            self.carried_teams = carried_teams;
        }
        self.mixed.clear();
        self.mixed.resize(self.carried_teams.len(), false);
    }

    /// A running job carried since the last cycle: its team and tier (its charge is in
    /// the sums already).
    #[inline]
    pub fn known(&mut self, revision: u64) -> Option<Resolved> {
        self.jobs.take(revision).map(|e| unpack(e.resolved))
    }

    /// Carries a running job new to the carry, when its team's jobs are carried and it
    /// can be; false when the caller charges it (its team is then summed job by job).
    pub fn carry(
        &mut self,
        revision: Option<u64>,
        resolved: Resolved,
        charge: Option<Charge>,
    ) -> bool {
        let carried = |t: &usize| self.carried_teams.get(*t).copied().unwrap_or(false);
        let Some(t) = resolved.0.filter(carried) else {
            return false;
        };
        // Packing keeps the team (`carried_teams` is far shorter than `u32::MAX`).
        let entry = match (revision, charge) {
            (Some(r), Some(charge)) if self.in_sums < MAX_JOBS => Some((
                r,
                Entry {
                    resolved: pack(resolved),
                    charge,
                },
            )),
            _ => None,
        };
        match (entry, self.sums.get_mut(t)) {
            (Some((r, entry)), Some(sum)) => {
                sum.add(&entry.charge);
                self.in_sums += 1;
                self.jobs.insert(r, entry);
                true
            }
            _ => {
                if let Some(m) = self.mixed.get_mut(t) {
                    *m = true;
                }
                false
            }
        }
    }

    /// Ends the batch: the charges of carried jobs not running now come off the sums.
    pub fn finish(&mut self) {
        for e in self.jobs.unfound() {
            let team = unpack(e.resolved).0;
            if let Some(sum) = team.and_then(|t| self.sums.get_mut(t)) {
                sum.take(&e.charge);
                self.in_sums -= 1;
            }
        }
    }

    /// Whether `team` had a running job that was not carried this cycle.
    pub fn is_mixed(&self, team: usize) -> bool {
        self.mixed.get(team).copied().unwrap_or(false)
    }

    /// `team`'s carried charges as the batch sums them, if it has carried jobs running.
    pub fn team_sum(&self, team: usize) -> Option<(u64, [f64; 3])> {
        let s = self.sums.get(team).filter(|s| s.jobs > 0)?;
        Some((s.milli, s.resources.map(|r| r as f64)))
    }
}
