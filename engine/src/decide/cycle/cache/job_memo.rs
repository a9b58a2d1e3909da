//! [`JobMemo`]: what a kept [`super::super::PlacementDecider`] remembers of the job states it was given
//! with a revision (`JobState::revision`): each one's team and tier as indexes into the
//! policy. A cycle holds every running job again; reading each one's names cost more
//! than anything else it did for the job (the strings lie all over the heap).
//!
//! Stale when: a job state's revision is new (the caller gives a changed job a new one),
//! or the policy's team or tier names changed (`JobMemo::begin` then forgets all).
//! Off: [`super::keep_nothing`].

use super::seq_memo::SeqMemo;
use lang::ir::Program;

/// A job's team (as `Cycle::team_ix` gives it) and tier (an index into the policy's
/// tiers).
pub(in crate::decide::cycle) type Resolved = (Option<usize>, Option<usize>);

/// [`Resolved`] as stored: two indexes, `u32::MAX` for none, so an entry is 16 bytes, not
/// 40 (every running job's is read each cycle).
pub(in crate::decide::cycle) type Packed = [u32; 2];

pub(in crate::decide::cycle) fn pack((team, tier): Resolved) -> Packed {
    let one = |i: Option<usize>| i.and_then(|i| u32::try_from(i).ok()).unwrap_or(u32::MAX);
    [one(team), one(tier)]
}

pub(in crate::decide::cycle) fn unpack([team, tier]: Packed) -> Resolved {
    let one = |i: u32| (i != u32::MAX).then_some(i as usize);
    (one(team), one(tier))
}

#[derive(Debug, Default)]
pub(in crate::decide::cycle) struct JobMemo {
    /// The policy names the indexes were taken for.
    names: Names,
    resolved: SeqMemo<Packed>,
}

/// The policy's team and tier names and its default ones: all a job's indexes depend on
/// (defaults fill in jobs that name none before they are resolved).
#[derive(Debug, Default, PartialEq)]
struct Names {
    teams: Vec<String>,
    tiers: Vec<String>,
    default_team: Option<String>,
    default_tier: Option<String>,
}

impl Names {
    fn matches(&self, program: &Program) -> bool {
        self.teams.len() == program.teams.len()
            && self.tiers.len() == program.tiers.len()
            && self
                .teams
                .iter()
                .zip(&program.teams)
                .all(|(a, b)| *a == b.name)
            && self
                .tiers
                .iter()
                .zip(&program.tiers)
                .all(|(a, b)| *a == b.name)
            && self.default_team.as_deref() == program.default_team().map(|t| t.name.as_str())
            && self.default_tier.as_deref() == program.default_tier().map(|t| t.name.as_str())
    }

    fn of(program: &Program) -> Names {
        Names {
            teams: program.teams.iter().map(|t| t.name.clone()).collect(),
            tiers: program.tiers.iter().map(|t| t.name.clone()).collect(),
            default_team: program.default_team().map(|t| t.name.clone()),
            default_tier: program.default_tier().map(|t| t.name.clone()),
        }
    }
}

impl JobMemo {
    /// Starts a cycle under `program`: forgets everything if its names changed. True
    /// when they did not (the indexes mean what they meant last cycle).
    pub fn begin(&mut self, program: &Program) -> bool {
        if self.names.matches(program) {
            self.resolved.begin();
            true
        } else {
            self.names = Names::of(program);
            self.resolved.forget();
            false
        }
    }

    /// What `revision` resolved to last cycle (remembered for the next one).
    #[inline]
    pub fn get(&mut self, revision: u64) -> Option<Resolved> {
        self.resolved.get(revision).map(unpack)
    }

    pub fn insert(&mut self, revision: u64, resolved: Resolved) {
        self.resolved.insert(revision, pack(resolved));
    }
}

#[cfg(test)]
mod tests {
    use super::JobMemo;

    fn program(source: &str) -> lang::ir::Program {
        let checked = lang::check(&[("p.gantry".to_string(), source.to_string())]);
        checked.program.unwrap_or_default()
    }

    fn resolved(r: u64) -> super::Resolved {
        (Some(r as usize), None)
    }

    #[test]
    fn remembers_by_revision_until_the_policy_names_change() {
        let a = program("use std.tiers\nteam a { guaranteed = 1 gpu }\n");
        let b = program("use std.tiers\nteam b { guaranteed = 1 gpu }\n");
        assert_eq!(
            (a.teams.len(), b.teams.len()),
            (1, 1),
            "the policies compile"
        );
        let mut memo = JobMemo::default();
        memo.begin(&a);
        memo.insert(7, (Some(0), Some(0)));
        memo.begin(&a);
        assert_eq!(memo.get(8), None);
        assert_eq!(memo.get(7), Some((Some(0), Some(0))));
        // Remembered again for the next cycle, as asked.
        memo.begin(&a);
        assert_eq!(memo.get(7), Some((Some(0), Some(0))));
        // Other team names: the indexes may mean other teams now.
        memo.begin(&b);
        assert_eq!(memo.get(7), None);
    }

    #[test]
    fn finds_states_that_went_changed_or_moved_and_forgets_the_unasked() {
        let a = program("use std.tiers\nteam a { guaranteed = 1 gpu }\n");
        let mut memo = JobMemo::default();
        memo.begin(&a);
        for r in 0..100 {
            memo.insert(r, resolved(r));
        }
        memo.begin(&a);
        // In order, with some gone (1..=3), one changed (50 -> 1000) and one new at the
        // end; then all of them backwards (past the misses that index the rest).
        let mut asked: Vec<u64> = std::iter::once(0).chain(4..100).collect();
        if let Some(r) = asked.iter_mut().find(|r| **r == 50) {
            *r = 1000;
        }
        asked.push(1001);
        for r in &asked {
            let want = (*r < 100).then(|| resolved(*r));
            assert_eq!(memo.get(*r), want, "revision {r}");
        }
        // Backwards, the first few misses are left to the caller (it resolves them by
        // name); past them the rest are indexed and found.
        memo.begin(&a);
        let mut first = None;
        for (k, r) in asked.iter().rev().enumerate() {
            let got = memo.get(*r);
            if got.is_some() {
                first = first.or(Some(*r));
            }
            if *r >= 100 {
                assert_eq!(got, None, "revision {r}");
            } else if k > super::super::seq_memo::MISSES_BEFORE_INDEX {
                assert_eq!(got, Some(resolved(*r)), "revision {r} backwards");
            }
        }
        // Only what was found this cycle is remembered for the next.
        let kept = memo.resolved.remembered();
        assert!(kept < 95 && kept > 95 - super::super::seq_memo::MISSES_BEFORE_INDEX);
        memo.begin(&a);
        assert_eq!(memo.get(2), None);
        let first = first.unwrap_or_default();
        assert_eq!(memo.get(first), Some(resolved(first)));
    }
}
