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
//!
//! A team that starts or stops borrowing (teams sitting at their guarantee do, with each
//! job placed or evicted) is read narrowly by askers that take its jobs by priority: rule 3
//! lets them take only sets that remove no more than the team borrows, so a start reaches
//! only nodes where one of its jobs is that small, and a stop only nodes whose cheapest set
//! held one of its jobs. A node's cheapest set is found greedily (`victim_cost.rs`), and
//! leaving out candidates its set did not use leaves that set unchanged: each candidate
//! before the last one taken was given back because the set was feasible without it, and
//! with fewer candidates given back earlier it still is.

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
    /// Set when the team started or stopped borrowing (`bucket` none): what it means to
    /// askers that take its jobs by priority. Reclaim askers read all of its nodes.
    flip: Option<Flip>,
}

/// A team started or stopped borrowing, as askers taking its jobs by priority see it.
#[derive(Debug, Clone, Copy)]
enum Flip {
    /// It borrows this many milli-GPUs: a set that removes more of it takes it below its
    /// guarantee, so its jobs larger than that are still no victims of theirs.
    Started(u64),
    /// None of its jobs is a victim of theirs any more.
    Stopped,
}

/// What an asker reads of one team's changes since its index last caught up.
#[derive(Debug)]
struct TeamRead {
    team: usize,
    /// The priority the team's jobs must be below to make way.
    below: i64,
    /// Every node of the team's.
    all: bool,
    /// Nodes where one of its jobs is at most this large (a start).
    started: Option<u64>,
    /// Nodes whose cheapest set holds one of its jobs (a stop).
    stopped: bool,
    /// Per bucket, the longest prefix of its list.
    buckets: Vec<(usize, usize)>,
}

/// The nodes holding a team's victim candidates (the running jobs, fixed for the cycle),
/// each with the lowest priority of those there (an asker above it only can take them by
/// priority) and the smallest of those jobs in milli-GPUs (a whole gang counts).
#[derive(Debug, Default)]
struct TeamNodes {
    all: Vec<(usize, i64, u64)>,
    /// Per guaranteed bucket ([`crate::decide::quota::Ledger::guaranteed_buckets`]), each
    /// of its nodes with the milli-GPUs evicting every candidate there would remove from
    /// the team (whole jobs: a gang's members elsewhere go too), largest first. Evictions
    /// only make the true sums smaller, so these bound them.
    by_bucket: Vec<Vec<(u64, usize, i64)>>,
}

impl TeamReach {
    /// Calls `add` with each node where a standing change logged from position `from`
    /// on may alter `asker`'s victim sets: nodes where the changed team has a candidate
    /// the asker may take (by reclaim, any; by priority, one below the asker's); and
    /// `add_if_held` with a node and a team where the change alters the node's set only
    /// if that set holds one of the team's jobs.
    pub(super) fn nodes_since(
        &self,
        from: usize,
        asker: &Asker,
        mut add: impl FnMut(usize),
        mut add_if_held: impl FnMut(usize, usize),
    ) {
        // A team's changes since are read as one: the longest prefix of each bucket's
        // list, the largest start, or all its nodes (the lists are long; changes of one
        // team come in runs).
        let mut reads: Vec<TeamRead> = Vec::new();
        for change in self.log.get(from..).unwrap_or(&[]) {
            let Some(below) = asker.takes_by_standing(change.team) else {
                continue;
            };
            let read = match reads.iter().position(|r| r.team == change.team) {
                Some(i) => reads.get_mut(i),
                None => {
                    reads.push(TeamRead {
                        team: change.team,
                        below,
                        all: false,
                        started: None,
                        stopped: false,
                        buckets: Vec::new(),
                    });
                    reads.last_mut()
                }
            };
            let Some(read) = read.filter(|r| !r.all) else {
                continue;
            };
            let by_priority = below != i64::MAX;
            match (change.bucket, change.flip) {
                (None, Some(Flip::Started(within))) if by_priority => {
                    read.started = Some(read.started.map_or(within, |s| s.max(within)));
                }
                (None, Some(Flip::Stopped)) if by_priority => read.stopped = true,
                (None, _) => read.all = true,
                (Some(b), _) => match read.buckets.iter_mut().find(|e| e.0 == b) {
                    Some(e) => e.1 = e.1.max(change.count),
                    None => read.buckets.push((b, change.count)),
                },
            }
        }
        for read in &reads {
            let below = read.below;
            let Some(Some(nodes)) = self.teams.get(read.team) else {
                continue;
            };
            let candidates = || nodes.all.iter().filter(|e| e.1 < below);
            if read.all {
                candidates().for_each(|e| add(e.0));
                continue;
            }
            if let Some(within) = read.started {
                candidates()
                    .filter(|e| e.2 <= within)
                    .for_each(|e| add(e.0));
            }
            for &(b, count) in &read.buckets {
                nodes
                    .by_bucket
                    .get(b)
                    .and_then(|list| list.get(..count))
                    .unwrap_or(&[])
                    .iter()
                    .filter(|(_, _, lowest)| *lowest < below)
                    .for_each(|(_, n, _)| add(*n));
            }
            if read.stopped {
                candidates().for_each(|e| add_if_held(e.0, read.team));
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
        let borrowed = self.ledger.borrowed(Some(team));
        debug_assert_eq!(
            borrowing,
            borrowed > 0,
            "standing out of step with the ledger"
        );
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
            flip: None,
        };
        if flipped {
            if !nodes.all.is_empty() {
                let flip = match borrowed {
                    0 => Flip::Stopped,
                    b => Flip::Started(b),
                };
                log.push(StandingChange {
                    flip: Some(flip),
                    ..change(None, nodes.all.len())
                });
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
        // Per node: the sum, the lowest priority, the smallest job.
        let mut sums: Vec<(usize, u64, i64, u64)> = Vec::new();
        for (node, _, milli, priority) in per_node {
            match sums.last_mut() {
                Some((n, sum, lowest, smallest)) if *n == node => {
                    *sum += milli;
                    *lowest = (*lowest).min(priority);
                    *smallest = (*smallest).min(milli);
                }
                _ => sums.push((node, milli, priority, milli)),
            }
        }
        for (node, sum, lowest, smallest) in sums {
            out.all.push((node, lowest, smallest));
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
