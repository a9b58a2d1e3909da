//! How long a job waits for its cohort to lend: a team past its guarantee borrows only
//! the cohort's idle guarantee (within each lender's `lend`) and unguaranteed capacity,
//! so a job the cohort cannot cover now starts once enough running jobs have ended,
//! whichever team they belong to (a lender's job inside its guarantee frees guarantee it
//! lends, a borrower's job returns what it borrowed, the team's own job what it uses).
//! Quotas only loosen as jobs end, so the first end after which the ledger admits the
//! job is its quota's ETA.
//!
//! Cache: one answer per (team, pools, need) while no holder has come or gone (holders
//! added, evictions): the ledger changes only then.

use super::Cycle;
use crate::core::gang::JobShape;
use crate::decide::plan::Reason;
use crate::decide::quota::PoolIx;
use crate::decide::snapshot::JobState;
use rustc_hash::FxHashMap;

/// (team, the pools it may use, milli-GPUs).
type Key = (Option<usize>, Vec<Option<PoolIx>>, u64);

/// When the cohort can lend: the time, and the holder whose end lets it.
pub(super) type LendingWait = (i64, usize);

/// A cache (`cache/mod.rs`): the waits worked out this cycle, by key. Stale once a job
/// is held or a victim released (`version`); off with `memos_off`.
#[derive(Debug, Default)]
pub(super) struct LendingWaits {
    known: FxHashMap<Key, Option<LendingWait>>,
    /// (holders, releases) when `known` was filled.
    version: (usize, u64),
}

impl Cycle<'_> {
    /// When the quotas admit `js` (its team's burst, and what its cohort and the fleet
    /// can lend) as running jobs end by their estimates, in a pool it may use; `None`
    /// when they never do by the jobs that give a runtime, or past the cycle's budget of
    /// estimates.
    pub(super) fn lending_wait(&mut self, js: &JobState, shape: &JobShape) -> Option<LendingWait> {
        // The memo's version counts the holders: all recorded first.
        self.record_holders();
        let team = self.job_team(js);
        let pools: Vec<Option<PoolIx>> = if shape.pools.is_empty() {
            self.fleet_pools.clone()
        } else {
            shape
                .pools
                .iter()
                .map(|p| Some(self.ledger.pool_ix(p)))
                .collect()
        };
        let key = (team, pools, js.gpu_milli());
        let version = (self.holders.len(), self.released);
        if self.lending_waits.version != version {
            self.lending_waits.known.clear();
            self.lending_waits.version = version;
        }
        // A walk, counted against the cycle's budget of estimates (with the memos off, a
        // known wait is walked again uncounted, as the first walk was counted).
        match self.lending_waits.known.get(&key) {
            Some(known) if !self.memos_off => return *known,
            Some(_) => {}
            None if self.eta_estimates >= super::explain::ETA_BUDGET => return None,
            None => self.eta_estimates += 1,
        }
        // The end index is built only for a walk (a cycle past its budget builds none).
        self.index_ends();
        let wait = self.walk_lending(&key);
        self.lending_waits.known.insert(key, wait);
        wait
    }

    /// Takes the running jobs out of the ledger in the order they end until the charge
    /// `key` describes is admitted in one of its pools, then puts them back. In place:
    /// a copy of the ledger for each wait cost more than the walk (most end at the first
    /// end they read).
    fn walk_lending(&mut self, key: &Key) -> Option<LendingWait> {
        let (team, pools, need) = key;
        #[cfg(debug_assertions)]
        let before = self.ledger_figures();
        let mut taken: Vec<usize> = Vec::new();
        let mut found = None;
        let mut ends = self.ends.iter().peekable();
        while let Some(&(at, h)) = ends.next() {
            // Jobs of no GPUs hold no quota (and charging 0 back would add a bucket).
            if let Some(holder) = self
                .holders
                .get(h)
                .filter(|x| !x.evicted && x.member_milli() > 0)
            {
                let milli = holder.member_milli();
                for c in holder.choices.iter() {
                    let pool = self.node_pools.get(c.node).copied().flatten();
                    self.ledger.uncharge(holder.team_ix, pool, milli);
                }
                taken.push(h);
            }
            // Jobs ending at the same time free together.
            if ends.peek().is_some_and(|(t, _)| *t == at) {
                continue;
            }
            if pools
                .iter()
                .any(|p| self.ledger.allows(*team, &[(*p, *need)]))
            {
                found = Some((at.max(self.now + 1), h));
                break;
            }
        }
        for h in taken.into_iter().rev() {
            if let Some(holder) = self.holders.get(h) {
                let milli = holder.member_milli();
                for c in holder.choices.iter() {
                    let pool = self.node_pools.get(c.node).copied().flatten();
                    self.ledger.charge(holder.team_ix, pool, milli);
                }
            }
        }
        #[cfg(debug_assertions)]
        debug_assert_eq!(before, self.ledger_figures(), "the ledger put back");
        found
    }
}

impl Cycle<'_> {
    /// `r` (a job its cohort cannot lend to now, with `unblock` what would help) with
    /// the ETA of [`Cycle::lending_wait`] and the job whose end binds.
    pub(super) fn lending_reason(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        mut r: Reason,
        unblock: String,
    ) -> Reason {
        let Some((at, h)) = self.lending_wait(js, shape) else {
            return r.unblock(unblock);
        };
        let Some(holder) = self.holders.get(h) else {
            return r.unblock(unblock);
        };
        let team = holder
            .job
            .job
            .team
            .as_deref()
            .map(|t| format!(" of team {t}"))
            .unwrap_or_default();
        let words = format!(
            "{unblock}; by the running jobs' estimates it fits {}, once {}{team} has ended",
            self.about(at),
            holder.id()
        );
        r.eta_s = Some(at - self.now);
        r.unblock(words)
    }

    /// Each team's usage and borrowing, to check the ledger is put back as it was
    /// (a bucket charged and uncharged stays, at 0: compared by figures, not shape).
    #[cfg(debug_assertions)]
    fn ledger_figures(&self) -> Vec<(Option<(u64, u64)>, u64)> {
        (0..self.program.teams.len())
            .map(|t| (self.ledger.usage(Some(t)), self.ledger.borrowed(Some(t))))
            .collect()
    }
}
