//! The queue's order: tier priority (high first); within a priority, a job that fits
//! inside its team's guarantee goes before one that must borrow (Kueue orders its heads
//! so: work that would be reclaimed is not started in an owner's place); then the team
//! with the lowest fair share goes next (counting the jobs ahead of it as if placed),
//! with its oldest job; ties by submit time and id (numbers in ids as numbers: `job-9`
//! before `job-10`, as Slurm orders job ids).

use super::cache::job_memo::Resolved;
use super::Cycle;
use crate::core::gang::JobShape;
use crate::core::natural::NaturalId;
use crate::decide::admission::Admission;
use crate::decide::fairshare::{FairShares, Resources};
use crate::decide::snapshot::JobState;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::BTreeMap;
use std::hash::BuildHasher;

/// A job that waits, as the queue holds it.
pub(super) struct Queued<'a> {
    /// Its index in the snapshot's jobs.
    pub job: usize,
    /// How admission rules matched it; `None` when none did.
    pub admission: Option<Box<Admission>>,
    /// Its shape as placed (routed to a pool by admission, with the policy's topology):
    /// its number in [`QueueShapes`].
    pub shape: usize,
    /// Its team and tier as indexes ([`Cycle::resolve_ix`]).
    pub resolved: Resolved,
    pub key: OrderKey<'a>,
}

/// What the order reads of a job, taken when it is queued (in snapshot order, while its
/// record is at hand): the order then takes jobs in no memory order and reads no record.
pub(super) struct OrderKey<'a> {
    priority: i64,
    submitted_at: i64,
    id: &'a str,
    /// What it would hold if placed (fair share).
    holds: Resources,
    /// Its milli-GPUs (whether it borrows).
    gpu_milli: u64,
    /// Its tier never borrows: past its team's guarantee it waits for its own team's
    /// jobs to end, as an owner, and is never ranked as a borrower.
    owner_only: bool,
}

/// The shapes of the queue's jobs as placed, each once: most jobs share their shape with
/// many others, and a copy per job (pool and model names) was made and dropped each cycle.
/// Equal shapes have one number, so the cycle's memos may be kept by number.
#[derive(Default)]
pub(super) struct QueueShapes<'a> {
    pub list: Vec<JobShape>,
    /// By the job's own shape, then the pool admission routed it to.
    by_source: FxHashMap<&'a JobShape, Vec<(Option<String>, usize)>>,
    /// The numbers of the shapes in `list` by the shape's hash (two sources may come to
    /// one shape): the list holds the shapes, so none is copied as a key.
    numbers: FxHashMap<u64, Vec<usize>>,
}

impl<'a> QueueShapes<'a> {
    /// The number of `source` routed to `routed` with the policy's topology, made the
    /// first time it is asked for.
    pub fn number(
        &mut self,
        source: &'a JobShape,
        routed: Option<&str>,
        placement: &lang::ir::Placement,
    ) -> usize {
        let made = self.by_source.entry(source).or_default();
        if let Some((_, n)) = made.iter().find(|(pool, _)| pool.as_deref() == routed) {
            return *n;
        }
        let mut shape = source.clone();
        if let Some(pool) = routed {
            shape.pools = vec![pool.to_string()];
        }
        super::apply_policy_topology(&mut shape, placement);
        let same = self
            .numbers
            .entry(FxBuildHasher.hash_one(&shape))
            .or_default();
        let list = &mut self.list;
        let n = match same.iter().find(|n| list.get(**n) == Some(&shape)) {
            Some(n) => *n,
            None => {
                same.push(list.len());
                list.push(shape);
                list.len() - 1
            }
        };
        made.push((routed.map(str::to_string), n));
        n
    }
}

impl<'a> OrderKey<'a> {
    pub fn of(js: &'a JobState, priority: i64, owner_only: bool) -> OrderKey<'a> {
        OrderKey {
            priority,
            submitted_at: js.job.submitted_at.unwrap_or(i64::MIN),
            id: js.id(),
            holds: Cycle::resources(
                &js.job.shape.member,
                js.member_milli,
                js.job.shape.members as usize,
            ),
            gpu_milli: js.gpu_milli(),
            owner_only,
        }
    }
}

impl<'a> Cycle<'a> {
    /// Queue order: tier priority (high first); within a priority, jobs inside their
    /// team's guarantee before jobs that borrow, then the team with the lowest fair share,
    /// with its oldest job; ties by submit time and id. Whether a job borrows counts the
    /// team's running jobs and its jobs ordered ahead of it, against the team's whole
    /// guarantee (by pool, the quota check decides; the order only ranks). A job whose
    /// tier never borrows never borrows: past the guarantee it waits for its own team,
    /// and ranked as a borrower, a later job of another team took the room it was booked
    /// on.
    pub(super) fn order(&mut self, queue: &[Queued<'a>]) -> Vec<usize> {
        // Teams by index, which is one per name: a job naming a team the policy does not
        // define is refused at intake and never queued.
        let mut bands: BTreeMap<std::cmp::Reverse<i64>, BTreeMap<Option<usize>, Vec<usize>>> =
            BTreeMap::new();
        for (q, queued) in queue.iter().enumerate() {
            bands
                .entry(std::cmp::Reverse(queued.key.priority))
                .or_default()
                .entry(queued.resolved.0)
                .or_default()
                .push(q);
        }
        // The sort and the fair-share pass read these in no memory order: side by side,
        // not through the queue's entries.
        let keys: Vec<(i64, NaturalId<'_>)> = queue
            .iter()
            .map(|e| (e.key.submitted_at, NaturalId(e.key.id)))
            .collect();
        let holds: Vec<Resources> = queue.iter().map(|e| e.key.holds).collect();
        let need: Vec<u64> = queue.iter().map(|e| e.key.gpu_milli).collect();
        let owner_only: Vec<bool> = queue.iter().map(|e| e.key.owner_only).collect();
        // Each team's milli-GPUs used and guaranteed, plus what its jobs ordered so far
        // would hold.
        let mut standing: FxHashMap<usize, (u64, u64)> = FxHashMap::default();
        let key = |q: usize| keys.get(q).copied();
        let mut order = Vec::with_capacity(queue.len());
        // The provisional holds, to undo after (by fair-share slot, found once per team).
        let mut held = Vec::with_capacity(queue.len());
        for (_, teams) in bands {
            // Each team's jobs by position: slots and lists, with no lookup by name.
            let slots: Vec<Option<usize>> =
                teams.keys().map(|t| self.shares.slot_of_team(*t)).collect();
            let list_teams: Vec<Option<usize>> = teams.keys().copied().collect();
            let mut lists: Vec<Vec<usize>> = teams.into_values().collect();
            for list in &mut lists {
                list.sort_by_key(|q| key(*q));
                list.reverse(); // pop from the back: oldest first
            }
            // Each team's next job in a heap keyed by (share, submit time, id); a team's
            // share moves only when it gets a job, so only its entry is pushed again.
            // Shares are non-negative, so their bit patterns order like the numbers.
            let share = |shares: &FairShares, t: usize| {
                shares
                    .share_of_slot(slots.get(t).copied().flatten())
                    .max(0.0)
                    .to_bits()
            };
            let ledger = &self.ledger;
            // Whether list `t`'s job `q` would borrow; `take` counts it as held.
            let mut borrows = |t: usize, q: usize, take: bool| {
                let team = list_teams.get(t).copied().flatten();
                let n = need.get(q).copied().unwrap_or(0);
                let Some(ix) = team else { return true };
                let s = standing
                    .entry(ix)
                    .or_insert_with(|| ledger.usage(Some(ix)).unwrap_or((0, 0)));
                let over =
                    s.0.saturating_add(n) > s.1 && !owner_only.get(q).copied().unwrap_or(false);
                if take {
                    s.0 = s.0.saturating_add(n);
                }
                over
            };
            let mut heap = std::collections::BinaryHeap::new();
            for (t, list) in lists.iter().enumerate() {
                if let Some(q) = list.last().copied() {
                    let b = borrows(t, q, false);
                    heap.push(std::cmp::Reverse((b, share(&self.shares, t), key(q), t)));
                }
            }
            while let Some(std::cmp::Reverse((_, _, _, t))) = heap.pop() {
                let Some(list) = lists.get_mut(t) else {
                    continue;
                };
                let Some(q) = list.pop() else {
                    continue;
                };
                let next = list.last().copied();
                order.push(q);
                borrows(t, q, true);
                // Placing happens later; fair share within a band follows what this job
                // would hold if placed, so one team's many jobs do not go first in a row.
                if let Some(r) = holds.get(q).copied() {
                    let slot = slots.get(t).copied().flatten();
                    self.shares.hold_slot(slot, r);
                    held.push((slot, r));
                }
                if let Some(next) = next {
                    let b = borrows(t, next, false);
                    heap.push(std::cmp::Reverse((b, share(&self.shares, t), key(next), t)));
                }
            }
        }
        // Undo the provisional holds: `hold` adds them again for jobs that are placed.
        for (slot, r) in held {
            self.shares.hold_slot(slot, r.map(|x| -x));
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::QueueShapes;
    use crate::core::gang::JobShape;
    use lang::ir::{Placement, TopologyLevel};

    #[test]
    fn one_shape_per_source_and_route_as_the_cycle_would_make_it() {
        let placement = Placement {
            topology_preferred: vec![TopologyLevel::NvlinkIsland, TopologyLevel::Rack],
            ..Placement::default()
        };
        let plain = JobShape {
            members: 2,
            ..JobShape::default()
        };
        let same = plain.clone();
        let own_topology = JobShape {
            topology_required: Some(TopologyLevel::Node),
            ..plain.clone()
        };
        let mut shapes = QueueShapes::default();
        let a = shapes.number(&plain, None, &placement);
        assert_eq!(
            shapes.number(&same, None, &placement),
            a,
            "equal shapes share one"
        );
        let routed = shapes.number(&plain, Some("infer"), &placement);
        assert_ne!(routed, a);
        assert_eq!(shapes.number(&same, Some("infer"), &placement), routed);
        let own = shapes.number(&own_topology, None, &placement);
        assert_eq!(shapes.list.len(), 3);
        // Routed to the pool it names already: the same shape as the routed one.
        let named = JobShape {
            pools: vec!["infer".into()],
            ..plain.clone()
        };
        assert_eq!(shapes.number(&named, None, &placement), routed);
        assert_eq!(shapes.list.len(), 3);
        for (n, source, route) in [
            (a, &plain, None),
            (routed, &plain, Some("infer")),
            (own, &own_topology, None),
        ] {
            let mut made = source.clone();
            if let Some(pool) = route {
                made.pools = vec![pool.to_string()];
            }
            super::super::apply_policy_topology(&mut made, &placement);
            assert_eq!(shapes.list.get(n), Some(&made));
        }
        assert_eq!(
            shapes.list.get(a).and_then(|s| s.topology_preferred),
            Some(TopologyLevel::Rack)
        );
    }
}
