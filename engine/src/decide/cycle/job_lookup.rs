//! A job's team, tier, priority and runtime estimate as the policy reads them: teams and
//! tiers as indexes into the policy, remembered by revision when a [`super::PlacementDecider`]
//! keeps them.

use super::Cycle;
use crate::decide::snapshot::JobState;
use lang::ir::Tier;

impl<'a> Cycle<'a> {
    pub(super) fn tier(&self, js: &JobState) -> Option<&'a Tier> {
        self.tier_ix(js).and_then(|i| self.program.tiers.get(i))
    }

    /// The job's tier as an index into the policy's tiers.
    pub(super) fn tier_ix(&self, js: &JobState) -> Option<usize> {
        match self.placing_now(js) {
            Some((_, tier)) => tier,
            None => js.job.tier.as_deref().and_then(|t| self.tier_index.get(t)),
        }
    }

    /// The job's team as an index ([`Cycle::team_ix`] of its name).
    pub(super) fn job_team(&self, js: &JobState) -> Option<usize> {
        match self.placing_now(js) {
            Some((team, _)) => team,
            None => self.team_ix(js.job.team.as_deref()),
        }
    }

    /// The team and tier indexes of the job being placed, when `js` is it: a job of the
    /// snapshot keeps its address for the whole cycle, so the address names it.
    fn placing_now(&self, js: &JobState) -> Option<(Option<usize>, Option<usize>)> {
        let (at, team, tier) = self.placing?;
        if at != super::job_address(js) {
            return None;
        }
        debug_assert_eq!(
            (team, tier),
            (
                self.team_ix(js.job.team.as_deref()),
                js.job.tier.as_deref().and_then(|t| self.tier_index.get(t))
            ),
            "the placed job's lookups"
        );
        Some((team, tier))
    }

    /// The job's team index and tier, remembered by revision when a [`super::PlacementDecider`]
    /// keeps them.
    pub(super) fn resolve(&mut self, js: &JobState) -> (Option<usize>, Option<&'a Tier>) {
        let (team, tier) = self.resolve_ix(js);
        (team, self.tier_at(tier))
    }

    /// [`Cycle::resolve`] as indexes into the policy.
    pub(super) fn resolve_ix(&mut self, js: &JobState) -> (Option<usize>, Option<usize>) {
        let known = js
            .revision
            .and_then(|r| self.memo.as_mut().and_then(|m| m.get(r)));
        known.unwrap_or_else(|| {
            let resolved = (self.job_team(js), self.tier_ix(js));
            if let (Some(r), Some(m)) = (js.revision, self.memo.as_mut()) {
                m.insert(r, resolved);
            }
            resolved
        })
    }

    pub(super) fn tier_at(&self, tier: Option<usize>) -> Option<&'a Tier> {
        let program = self.program;
        tier.and_then(|i| program.tiers.get(i))
    }

    pub(super) fn priority(&self, js: &JobState) -> i64 {
        self.tier(js).map_or(0, |t| t.priority)
    }

    /// A team as an index into the policy's teams: `None` for no team, `usize::MAX` for
    /// a name the policy does not define (it has no quota to protect).
    pub(super) fn team_ix(&self, team: Option<&str>) -> Option<usize> {
        team.map(|t| self.team_index.get(t).unwrap_or(usize::MAX))
    }

    /// A team index's slot in `holders_of`: the policy's teams, then no team, then a
    /// team the policy does not define; `None` for anything else (a sentinel).
    pub(super) fn team_slot(&self, team: Option<usize>) -> Option<usize> {
        let teams = self.program.teams.len();
        match team {
            None => Some(teams),
            Some(usize::MAX) => Some(teams + 1),
            Some(i) => (i < teams).then_some(i),
        }
    }

    /// The job's runtime estimate: its own, else its team's default, else its tier's.
    pub(super) fn runtime(&self, js: &JobState) -> Option<i64> {
        self.runtime_of(js, self.job_team(js), self.tier(js))
    }

    /// [`Cycle::runtime`] with the job's team and tier already looked up: its own
    /// estimate, else its team's default, else its tier's.
    pub(super) fn runtime_of(
        &self,
        js: &JobState,
        team_ix: Option<usize>,
        tier: Option<&Tier>,
    ) -> Option<i64> {
        js.job
            .runtime_s
            .or_else(|| team_ix.and_then(|t| self.program.teams.get(t)?.default_runtime_s))
            .or_else(|| tier?.default_runtime_s)
            // Capped, so a start plus a runtime (plus a grace) never overflows.
            .map(|r| i64::try_from(r).map_or(i64::MAX / 4, |r| r.min(i64::MAX / 4)))
    }
}

impl<'a> Cycle<'a> {
    /// Where `js` starts now as the last plan booked it (`booked`, its start now): the
    /// nodes, as indexes, sorted (names the fleet does not have are passed over). Empty
    /// when it was booked for another time: conditions changed, and it lands by best fit.
    pub(super) fn booked_for_now(&mut self, js: &JobState) -> Vec<usize> {
        match self.last_booking(js) {
            Some((at, nodes)) if at == self.now => nodes,
            _ => Vec::new(),
        }
    }

    /// The last plan's booking of `js`: its start and its nodes as indexes, sorted
    /// (names the fleet does not have are passed over); `None` without one.
    pub(super) fn last_booking(&mut self, js: &JobState) -> Option<(i64, Vec<usize>)> {
        let booked = js.job.booked.as_ref().filter(|b| !b.nodes.is_empty())?;
        let snapshot: &'a crate::decide::snapshot::Snapshot = self.snapshot;
        let names = self.node_names.get_or_insert_with(|| {
            snapshot
                .fleet
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect()
        });
        let mut nodes: Vec<usize> = booked
            .nodes
            .iter()
            .filter_map(|n| names.get(n.as_str()).copied())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        Some((booked.start_at, nodes))
    }
}
