//! Quota before capacity. A job is judged against its team's quotas before any node is
//! searched, so a job the quotas cannot admit never holds a reservation and never keeps
//! other teams' jobs off idle GPUs:
//! - a job larger than its team's `burst` never fits (fix: raise the burst or split it);
//! - a job of a `preempt = never` tier runs only inside its team's guarantee, since a
//!   lender could never reclaim it (unless the tier says `borrow = true`); one larger
//!   than the guarantee never fits;
//! - a job over its team's burst (or guarantee) now waits as `quota_exhausted`, with an
//!   ETA from its own team's running jobs.
//!
//! What the cohort can lend depends on where the job lands, so that check stays with the
//! placement (`Cycle::quota_allows`).

use super::{Blocked, Cycle};
use crate::core::gang::JobShape;
use crate::decide::plan::{Reason, ReasonCode};
use crate::decide::quota::{gpus, PoolIx, QuotaBlock};
use crate::decide::snapshot::JobState;
use lang::ir::PreemptMode;

impl<'a> Cycle<'a> {
    /// `Ok` when the team's quotas could admit `js` in some pool it may use now; a reason
    /// when they never can; `Blocked::Quota` when not now.
    pub(super) fn quota_gate(&mut self, js: &JobState, shape: &JobShape) -> Result<(), Gate> {
        let ix = self.job_team(js);
        let team = self.ledger.name(ix);
        let need = js.gpu_milli();
        match self.own_limits(js, shape) {
            // It must also keep its team's quota for the jobs that reserved it.
            Limits::Pass => match self.quota_promised_to_another(js, shape) {
                Some(res) => Err(Gate::Later(Blocked::Reservation(res))),
                None => Ok(()),
            },
            Limits::OverBurstEver(burst) => Err(Gate::Never(
                Reason::new(
                    ReasonCode::NeverFits,
                    format!(
                        "it needs {}, more than team {team} may ever use (burst {})",
                        gpus(need),
                        gpus(burst)
                    ),
                )
                .unblock(format!(
                    "raise {team}'s burst to {} or split the job",
                    gpus(need)
                )),
            )),
            Limits::OverGuaranteeEver(guaranteed) => {
                let tier = js.job.tier.as_deref().unwrap_or("-");
                // Where the guarantee is split over pools, the job runs inside one pool's.
                let in_pools = match (self.ledger.is_per_pool(ix), shape.pools.as_slice()) {
                    (false, _) => String::new(),
                    (true, [pool]) => format!(" in {pool}"),
                    (true, _) => " in one pool".to_string(),
                };
                Err(Gate::Never(
                    Reason::new(
                        ReasonCode::NeverFits,
                        format!(
                            "tier {tier} is never preempted, so it runs only inside team {team}'s guarantee ({}{in_pools}); it needs {}",
                            gpus(guaranteed),
                            gpus(need)
                        ),
                    )
                    .unblock(format!(
                        "raise {team}'s guarantee{in_pools} to {} or split the job",
                        gpus(need)
                    )),
                ))
            }
            Limits::OverBurstNow => match self.ledger.over_burst(ix, need) {
                Some(q) => Err(Gate::Later(Blocked::Quota(q))),
                None => Ok(()),
            },
            Limits::OutsideGuaranteeNow => Err(Gate::Later(Blocked::Quota(
                self.guarantee_block(js, shape, need),
            ))),
        }
    }

    /// The team's own limits for `js` now, without messages (victim searches ask this
    /// after every victim they add).
    pub(super) fn own_limits(&self, js: &JobState, shape: &JobShape) -> Limits {
        let ix = self.job_team(js);
        if !self.ledger.has_team(ix) {
            return Limits::Pass;
        }
        let need = js.gpu_milli();
        if let Some(burst) = self.ledger.burst(ix).filter(|b| need > *b) {
            return Limits::OverBurstEver(burst);
        }
        let guarantee_only = self.inside_guarantee_only(js);
        if guarantee_only {
            let guaranteed = self.guarantee_within_reach(ix, shape);
            if need > guaranteed {
                return Limits::OverGuaranteeEver(guaranteed);
            }
        }
        // The team's own limits now; what the cohort can lend depends on where the job
        // lands and is checked with the placement.
        if self.ledger.is_over_burst(ix, need) {
            return Limits::OverBurstNow;
        }
        if guarantee_only {
            let within = |pool: Option<PoolIx>| self.ledger.within_guarantee(ix, &[(pool, need)]);
            let fits = if shape.pools.is_empty() {
                self.fleet_pools.iter().copied().any(within)
            } else {
                shape
                    .pools
                    .iter()
                    .any(|p| within(Some(self.ledger.pool_ix(p))))
            };
            if !fits {
                return Limits::OutsideGuaranteeNow;
            }
        }
        Limits::Pass
    }

    /// The most of its team's guarantee a job of `shape` can ever use: the whole of it,
    /// or, for a guarantee split over pools, the most one pool it may use has. A job is
    /// charged to one pool there, gang and all, as Kueue assigns a pod set one flavor: a
    /// gang split over pools would need a placement that counts each pool's guarantee.
    fn guarantee_within_reach(&self, team: Option<usize>, shape: &JobShape) -> u64 {
        if !self.ledger.is_per_pool(team) {
            return self.ledger.usage(team).map_or(0, |(_, g)| g);
        }
        self.reachable_pools(team, shape)
            .into_iter()
            .map(|p| self.pool_guarantee(team, p).1)
            .max()
            .unwrap_or(0)
    }

    /// The pools of its team's guarantee split over pools a job of `shape` may run in:
    /// those it names, or where it names none, every pool the guarantee names; each once.
    fn reachable_pools(&self, team: Option<usize>, shape: &JobShape) -> Vec<PoolIx> {
        let mut pools: Vec<PoolIx> = if shape.pools.is_empty() {
            self.ledger.named_pools(team).to_vec()
        } else {
            shape.pools.iter().map(|p| self.ledger.pool_ix(p)).collect()
        };
        pools.sort_unstable();
        pools.dedup();
        pools
    }

    /// Whether `js` may only use its team's guarantee: its tier is never preempted and
    /// the policy does not let it borrow (`borrow = true`).
    pub(super) fn inside_guarantee_only(&self, js: &JobState) -> bool {
        self.tier(js)
            .is_some_and(|t| t.preempt == PreemptMode::Never && !t.borrow)
            && self.ledger.has_team(self.job_team(js))
    }

    /// The quota check for `charges` (pool, milli), with the guarantee-only rule; whether
    /// the job borrows.
    pub(super) fn quota_allows_charges(
        &mut self,
        js: &JobState,
        charges: &[(Option<PoolIx>, u64)],
    ) -> Result<bool, QuotaBlock> {
        let team = self.job_team(js);
        let within = self.ledger.within_guarantee(team, charges);
        if !within && self.inside_guarantee_only(js) {
            let need = charges.iter().map(|c| c.1).sum();
            // Where a split guarantee's job landed in one pool, that pool's use is why.
            let landed = charges.first().and_then(|c| c.0);
            let one_pool = self.ledger.is_per_pool(team)
                && landed.is_some()
                && charges.iter().all(|c| c.0 == landed);
            let pool = if one_pool {
                landed
            } else {
                self.own_limit_of(js, &js.job.shape)
                    .and_then(|(pool, _)| pool)
            };
            return Err(self.guarantee_block_in(js, pool, need));
        }
        if self.placer.quiet {
            // A trial nobody explains: the verdict without its reason.
            if !self.ledger.allows(team, charges) {
                return Err(QuotaBlock::unsaid());
            }
        } else {
            self.ledger.check(team, charges)?;
        }
        Ok(!within && self.ledger.has_team(team))
    }

    /// Why `js` (of `shape`) waits outside its team's guarantee: the team's whole use
    /// against its whole guarantee, or, where the job runs in one pool of a guarantee
    /// split over pools, its use there against the guarantee there.
    fn guarantee_block(&mut self, js: &JobState, shape: &JobShape, need: u64) -> QuotaBlock {
        let pool = self.own_limit_of(js, shape).and_then(|(pool, _)| pool);
        self.guarantee_block_in(js, pool, need)
    }

    /// [`Cycle::guarantee_block`] for a job held to `pool`'s guarantee (`None`: the
    /// team's whole guarantee); memoised, since every such job of a team at its
    /// guarantee asks with the same numbers until the team's usage changes.
    fn guarantee_block_in(&mut self, js: &JobState, pool: Option<PoolIx>, need: u64) -> QuotaBlock {
        let ix = self.job_team(js);
        let (used, guaranteed) = match pool {
            Some(p) => self.pool_guarantee(ix, p),
            None => self.ledger.usage(ix).unwrap_or((0, 0)),
        };
        let key = (
            ix,
            self.tier(js).map(|t| t.name.as_str()),
            used,
            guaranteed,
            need,
            pool,
        );
        if let Some(q) = self.guarantee_blocks.get(&key).filter(|_| !self.memos_off) {
            return q.clone();
        }
        let q = self.format_guarantee_block(js, ix, (used, guaranteed, pool), need);
        self.guarantee_blocks.insert(key, q.clone());
        q
    }

    fn format_guarantee_block(
        &self,
        js: &JobState,
        ix: Option<usize>,
        (used, guaranteed, pool): (u64, u64, Option<PoolIx>),
        need: u64,
    ) -> QuotaBlock {
        let name = self.ledger.name(ix);
        let in_pool = pool
            .and_then(|p| self.ledger.pool_name(p))
            .map(|p| format!(" in {p}"))
            .unwrap_or_default();
        let message = format!(
            "tier {} is never preempted, so it runs only inside team {name}'s guarantee: {name} uses {} of {}{in_pool} and this job needs {}",
            js.job.tier.as_deref().unwrap_or("-"),
            gpus(used),
            gpus(guaranteed),
            gpus(need)
        );
        QuotaBlock::own_limit(message, name, used, guaranteed, need)
    }

    /// `q` written out (its message and what unblocks it), memoised.
    pub(super) fn quota_words(&mut self, q: &QuotaBlock) -> (String, String) {
        if let Some(words) = self.quota_words.get(q).filter(|_| !self.memos_off) {
            return words.clone();
        }
        let words = (q.message(&self.ledger), q.unblock(&self.ledger));
        self.quota_words.insert(q.clone(), words.clone());
        words
    }

    /// Seconds until `team`'s own running jobs free `milli`, by their runtime estimates.
    pub(super) fn own_release_eta(&mut self, team: Option<&str>, milli: u64) -> Option<i64> {
        self.index_ends();
        let ends = self.team_ends.get(&self.team_ix(team))?;
        let mut freed = 0u64;
        for (at, h) in ends {
            let Some(holder) = self.holders.get(*h).filter(|x| !x.evicted) else {
                continue;
            };
            if *at == i64::MAX {
                return None;
            }
            freed += holder.member_milli() * holder.choices.len() as u64;
            if freed >= milli {
                return Some(at - self.now);
            }
        }
        None
    }
}

/// How a job stands to its team's own limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limits {
    Pass,
    /// Larger than the team's burst (milli-GPUs).
    OverBurstEver(u64),
    /// A never-preempted tier larger than the team's guarantee (milli-GPUs).
    OverGuaranteeEver(u64),
    OverBurstNow,
    OutsideGuaranteeNow,
}

/// What the quota gate says about a job it does not let through.
pub(super) enum Gate {
    /// The quotas can never admit it.
    Never(Reason),
    /// Not now.
    Later(Blocked),
}
