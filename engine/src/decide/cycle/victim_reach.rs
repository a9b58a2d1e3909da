//! Keeps the cost indexes (`victim_cost.rs`) true when a team's standing changes. A node's
//! cheapest victim set depends on more than the node: whether each victim's team borrows
//! (rule 3) and how far below its guarantee evicting the set would take it (rule 4's
//! first cost). Neither shows in the node's state, so each change is logged with the
//! nodes whose sets it can alter, in a log of its own: an index reads of it only the
//! nodes where the team has jobs that can be its asker's victims, and the room indexes
//! and ETAs, which read no standing, do not read it at all.
//!
//! Evicting `r` milli-GPUs from a bucket with guarantee `g` and usage `u` breaches it by
//! `r` while `r ≤ u ≤ g`, by nothing once `u ≥ g + r`, and by an amount that moves with
//! `u` in between (`u < r`, or `g < u < g + r`). So a change of `u` alters only the sets
//! that remove more than a threshold, and most changes log few nodes or none.

use super::preempt::Asker;
use super::Cycle;

/// What the change log needs to know of the teams' standing.
#[derive(Debug, Default)]
pub(super) struct TeamReach {
    /// Per policy team, on first use.
    teams: Vec<Option<TeamNodes>>,
    /// The standing changes, in order; cost indexes remember how far they read.
    pub log: Vec<StandingChange>,
    /// The buckets a usage change altered and the least removal it alters in each
    /// (reused: usage changes with every placement and victim moved).
    altered: Vec<(usize, Option<u64>)>,
    /// Each policy team's usage per guaranteed bucket as the indexes last saw it; filled
    /// when the first index is built (nothing reads the log before).
    seen_used: Vec<Vec<u64>>,
    watching: bool,
}

/// A team's standing change: the nodes whose victim sets it can alter are all of the
/// team's (`bucket` none) or the first `count` of one bucket's.
#[derive(Debug, Clone, Copy)]
pub(super) struct StandingChange {
    /// A policy team's index.
    team: usize,
    bucket: Option<usize>,
    count: usize,
}

/// The nodes holding a team's victim candidates (the running jobs, fixed for the cycle),
/// each with the lowest priority of those there: an asker above it only can take them
/// by priority.
#[derive(Debug, Default)]
struct TeamNodes {
    all: Vec<(usize, i64)>,
    /// Per guaranteed bucket ([`crate::decide::quota::Ledger::guaranteed_buckets`]), each
    /// of its nodes with the milli-GPUs evicting every candidate there would remove from
    /// the team (whole jobs: a gang's members elsewhere go too), largest first. Evictions
    /// only make the true sums smaller, so these bound them.
    by_bucket: Vec<Vec<(u64, usize, i64)>>,
}

impl TeamReach {
    /// Calls `add` with each node where a standing change logged from position `from`
    /// on may alter `asker`'s victim sets: nodes where the changed team has a candidate
    /// the asker may take (by reclaim, any; by priority, one below the asker's).
    pub(super) fn nodes_since(&self, from: usize, asker: &Asker, mut add: impl FnMut(usize)) {
        // A team's changes since are read as one: the longest prefix of each bucket's
        // list, or all its nodes once it flipped (the lists are long; changes of one team
        // come in runs).
        // Each with the priority the team's jobs must be below to make way.
        let mut spans: Vec<(StandingChange, i64)> = Vec::new();
        for change in self.log.get(from..).unwrap_or(&[]) {
            let Some(below) = asker.takes_by_standing(change.team) else {
                continue;
            };
            let same_team = |s: &(StandingChange, i64)| s.0.team == change.team;
            if spans.iter().any(|s| same_team(s) && s.0.bucket.is_none()) {
                continue;
            }
            if change.bucket.is_none() {
                spans.retain(|s| !same_team(s));
                spans.push((*change, below));
            } else if let Some(s) = spans
                .iter_mut()
                .find(|s| same_team(s) && s.0.bucket == change.bucket)
            {
                s.0.count = s.0.count.max(change.count);
            } else {
                spans.push((*change, below));
            }
        }
        for (change, below) in &spans {
            let below = *below;
            let Some(Some(nodes)) = self.teams.get(change.team) else {
                continue;
            };
            match change.bucket {
                None => nodes
                    .all
                    .iter()
                    .filter(|(_, lowest)| *lowest < below)
                    .for_each(|(n, _)| add(*n)),
                Some(b) => nodes
                    .by_bucket
                    .get(b)
                    .and_then(|list| list.get(..change.count))
                    .unwrap_or(&[])
                    .iter()
                    .filter(|(_, _, lowest)| *lowest < below)
                    .for_each(|(_, n, _)| add(*n)),
            }
        }
    }
}

/// The least removal whose breach the usage change `before` → `after` of a bucket with
/// guarantee `g` can alter (`None`: any).
fn least_altered(before: u64, after: u64, g: u64) -> Option<u64> {
    let (lo, hi) = (before.min(after), before.max(after));
    if hi <= g {
        // Below the guarantee a removal of r ≤ u breaches by r whatever u is.
        Some(lo)
    } else if lo >= g {
        Some(lo - g)
    } else {
        None
    }
}

impl Cycle<'_> {
    /// Notes every policy team's usage per bucket as the first cost index sees it.
    pub(super) fn watch_standing(&mut self) {
        if self.reach.watching {
            return;
        }
        self.reach.watching = true;
        self.reach.seen_used = (0..self.program.teams.len())
            .map(|t| {
                self.ledger
                    .guaranteed_buckets(Some(t))
                    .map(|(used, _)| used)
                    .collect()
            })
            .collect();
    }

    /// Logs the nodes whose victim sets `team`'s latest usage change can alter: all of
    /// the team's nodes when it started or stopped borrowing (`flipped`: its jobs become
    /// victims by rule 3, or stop being), else, while it borrows, those of each changed
    /// bucket where a set could remove more than [`least_altered`]. A team that does not
    /// borrow has victims only by rule 2, whose cost reads no standing; a reclaim index
    /// that lists it is read again only once it borrows again, which logs all its nodes.
    pub(super) fn log_standing_change(&mut self, team: usize, flipped: bool) {
        if !self.reach.watching {
            return;
        }
        let borrowing = self.standing.get(team).is_some_and(|s| s.borrowing);
        let altered = &mut self.reach.altered;
        altered.clear();
        if let Some(seen) = self.reach.seen_used.get_mut(team) {
            for (i, (used, g)) in self.ledger.guaranteed_buckets(Some(team)).enumerate() {
                let Some(before) = seen.get_mut(i) else {
                    continue;
                };
                if *before != used {
                    altered.push((i, least_altered(*before, used, g)));
                    *before = used;
                }
            }
        }
        if !flipped && (!borrowing || altered.is_empty()) {
            return;
        }
        if self.reach.teams.len() <= team {
            self.reach.teams.resize_with(team + 1, || None);
        }
        if self.reach.teams.get(team).is_some_and(Option::is_none) {
            let nodes = self.team_nodes(team);
            if let Some(s) = self.reach.teams.get_mut(team) {
                *s = Some(nodes);
            }
        }
        let TeamReach {
            teams,
            log,
            altered,
            ..
        } = &mut self.reach;
        let Some(Some(nodes)) = teams.get(team) else {
            return;
        };
        let change = |bucket, count| StandingChange {
            team,
            bucket,
            count,
        };
        if flipped {
            if !nodes.all.is_empty() {
                log.push(change(None, nodes.all.len()));
            }
            return;
        }
        for &(bucket, least) in altered.iter() {
            let list = nodes.by_bucket.get(bucket).map_or(&[][..], Vec::as_slice);
            let count = least.map_or(list.len(), |l| list.partition_point(|e| e.0 > l));
            if count > 0 {
                log.push(change(Some(bucket), count));
            }
        }
    }

    /// [`TeamNodes`] of policy team `team`.
    fn team_nodes(&self, team: usize) -> TeamNodes {
        let mut per_node: Vec<(usize, usize, u64, i64)> = Vec::new();
        for &h in self.holders_of(Some(team)) {
            let Some((x, v)) = self.holders.get(h).and_then(|x| Some((x, x.victim()?))) else {
                continue;
            };
            let job_milli = x.member_milli() * x.choices.len() as u64;
            per_node.extend(x.choices.iter().map(|c| (c.node, h, job_milli, v.priority)));
        }
        // A holder with several members on one node counts once there.
        per_node.sort_unstable();
        per_node.dedup_by_key(|e| (e.0, e.1));
        let buckets = self.ledger.guaranteed_buckets(Some(team)).count();
        let mut out = TeamNodes {
            all: Vec::new(),
            by_bucket: vec![Vec::new(); buckets],
        };
        let mut sums: Vec<(usize, u64, i64)> = Vec::new();
        for (node, _, milli, priority) in per_node {
            match sums.last_mut() {
                Some((n, sum, lowest)) if *n == node => {
                    *sum += milli;
                    *lowest = (*lowest).min(priority);
                }
                _ => sums.push((node, milli, priority)),
            }
        }
        for (node, sum, lowest) in sums {
            out.all.push((node, lowest));
            let bucket = self
                .ledger
                .guaranteed_bucket_of(Some(team), self.pool_of(node));
            if let Some(list) = bucket.and_then(|b| out.by_bucket.get_mut(b)) {
                list.push((sum, node, lowest));
            }
        }
        for list in &mut out.by_bucket {
            list.sort_unstable_by(|a, b| b.cmp(a));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::least_altered;

    /// The breach of evicting `r` from usage `u` under guarantee `g`, as `Cycle::breach`
    /// and `Ledger::breach` count it.
    fn breach(u: u64, g: u64, r: u64) -> u64 {
        let before = g.saturating_sub(u);
        let after = g.saturating_sub(u.saturating_sub(r));
        after - before.min(after)
    }

    /// Every removal `least_altered` leaves out has the same breach before and after, and
    /// the least it names does change.
    #[test]
    fn the_threshold_leaves_out_only_unaltered_breaches() {
        let g = 12;
        for before in 0..30 {
            for after in 0..30 {
                let least = least_altered(before, after, g);
                for r in 0..30 {
                    let same = breach(before, g, r) == breach(after, g, r);
                    if least.is_none_or(|l| r > l) {
                        continue;
                    }
                    assert!(same, "u {before} -> {after}, g {g}, r {r}: {least:?}");
                }
                // The bound is tight: the removal just above it does change (when any does).
                if let Some(l) = least {
                    let any = (0..30).any(|r| breach(before, g, r) != breach(after, g, r));
                    if any {
                        assert_ne!(breach(before, g, l + 1), breach(after, g, l + 1));
                    }
                }
            }
        }
    }
}
