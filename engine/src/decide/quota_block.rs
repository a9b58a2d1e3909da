//! Why a charge does not fit the quotas, kept as numbers and team indexes and written out
//! only when read. Placement tries are refused by a quota tens of thousands of times in a
//! large cycle, and only the reason of a job left waiting is ever shown; names do not
//! change within a cycle, so the text written later is the text written then.

use super::quota::{Gpus, Ledger, TeamIx};

/// Why a charge does not fit the quotas.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaBlock {
    why: Why,
    /// Milli-GPUs the team's own running jobs must free first, when the block is its
    /// burst (or, for a job that must stay inside it, its guarantee).
    pub own_to_free: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Why {
    /// Written by the caller (rare, and memoised there).
    Written { message: String, unblock: String },
    /// A trial verdict whose reason nobody reads.
    Unsaid,
    /// The team's burst: it uses `used` and asks `need` more.
    OverBurst {
        team: TeamIx,
        used: u64,
        burst: u64,
        need: u64,
    },
    /// The fleet (or the team's cohort) cannot lend `short` more. `within`: the team is
    /// inside its guarantee of `guaranteed`; `lender`: a cohort peer whose withheld idle
    /// guarantee would cover it.
    Short {
        team: TeamIx,
        within: bool,
        guaranteed: u64,
        short: u64,
        lender: Option<TeamIx>,
    },
}

impl QuotaBlock {
    /// The team's own `limit` (its burst, or the guarantee a job must stay inside) holds
    /// the job: its own running jobs must free the difference.
    pub fn own_limit(message: String, team: &str, used: u64, limit: u64, need: u64) -> QuotaBlock {
        let free = (used + need).saturating_sub(limit);
        QuotaBlock {
            why: Why::Written {
                message,
                unblock: own_unblock(team, free),
            },
            own_to_free: Some(free),
        }
    }

    /// A refusal for a trial nobody explains.
    pub fn unsaid() -> QuotaBlock {
        QuotaBlock {
            why: Why::Unsaid,
            own_to_free: None,
        }
    }

    pub(super) fn over_burst(team: TeamIx, used: u64, burst: u64, need: u64) -> QuotaBlock {
        QuotaBlock {
            why: Why::OverBurst {
                team,
                used,
                burst,
                need,
            },
            own_to_free: Some((used + need).saturating_sub(burst)),
        }
    }

    pub(super) fn short(
        team: TeamIx,
        within: bool,
        guaranteed: u64,
        short: u64,
        lender: Option<TeamIx>,
    ) -> QuotaBlock {
        QuotaBlock {
            why: Why::Short {
                team,
                within,
                guaranteed,
                short,
                lender,
            },
            own_to_free: None,
        }
    }

    /// What blocks the job, with the names `ledger` (the cycle's) gives its teams.
    pub fn message(&self, ledger: &Ledger) -> String {
        match &self.why {
            Why::Written { message, .. } => message.clone(),
            Why::Unsaid => String::new(),
            Why::OverBurst {
                team,
                used,
                burst,
                need,
            } => format!(
                "team {} uses {} and may burst to {}; this job needs {} more",
                ledger.name(Some(*team)),
                Gpus(*used),
                Gpus(*burst),
                Gpus(*need)
            ),
            Why::Short {
                team,
                within: true,
                short,
                ..
            } => format!(
                "team {} is within its guarantee, but its idle guarantee is lent out; {} short",
                ledger.name(Some(*team)),
                Gpus(*short)
            ),
            Why::Short {
                team,
                within: false,
                guaranteed,
                short,
                ..
            } => format!(
                "team {} is past its {} guarantee and {} has {} less idle capacity to lend than it needs",
                ledger.name(Some(*team)),
                Gpus(*guaranteed),
                ledger
                    .cohort_name(Some(*team))
                    .map_or_else(|| "the fleet".to_string(), |c| format!("cohort {c}")),
                Gpus(*short)
            ),
        }
    }

    /// What would unblock the job, with the names `ledger` gives its teams.
    pub fn unblock(&self, ledger: &Ledger) -> String {
        match &self.why {
            Why::Written { unblock, .. } => unblock.clone(),
            Why::Unsaid => String::new(),
            Why::OverBurst { team, .. } => {
                own_unblock(ledger.name(Some(*team)), self.own_to_free.unwrap_or(0))
            }
            Why::Short {
                team,
                short,
                lender,
                ..
            } => match (lender, ledger.cohort_name(Some(*team))) {
                (Some(l), _) => format!(
                    "fits if {} lends {} more",
                    ledger.name(Some(*l)),
                    Gpus(*short)
                ),
                (None, Some(c)) => {
                    format!("fits when borrowers in cohort {c} free {}", Gpus(*short))
                }
                (None, None) => format!(
                    "fits when other teams free {} of unguaranteed capacity",
                    Gpus(*short)
                ),
            },
        }
    }
}

fn own_unblock(team: &str, free: u64) -> String {
    format!("fits when {team}'s running jobs free {}", Gpus(free))
}
