//! The queue's order: tier priority (high first); within a priority, the team with the
//! lowest fair share goes next (counting the jobs ahead of it as if placed), with its
//! oldest job; ties by submit time and id.

use super::Cycle;
use crate::core::gang::JobShape;
use crate::decide::admission::Admission;
use crate::decide::fairshare::FairShares;
use std::collections::BTreeMap;

impl<'a> Cycle<'a> {
    /// Queue order: tier priority (high first); within a priority, the team with the
    /// lowest fair share goes next, with its oldest job; ties by submit time and id.
    pub(super) fn order(&mut self, queue: &[(usize, Admission, JobShape)]) -> Vec<usize> {
        let jobs = &self.snapshot.jobs;
        let job = |q: usize| queue.get(q).and_then(|(k, _, _)| jobs.get(*k));
        let mut bands: BTreeMap<std::cmp::Reverse<i64>, BTreeMap<Option<&str>, Vec<usize>>> =
            BTreeMap::new();
        for q in 0..queue.len() {
            let Some(js) = job(q) else { continue };
            bands
                .entry(std::cmp::Reverse(self.priority(js)))
                .or_default()
                .entry(js.job.team.as_deref())
                .or_default()
                .push(q);
        }
        // Sort keys side by side, not read through each job record at every comparison.
        let keys: Vec<Option<(i64, &str)>> = (0..queue.len())
            .map(|q| job(q).map(|js| (js.job.submitted_at.unwrap_or(i64::MIN), js.id())))
            .collect();
        let key = |q: usize| keys.get(q).copied().flatten();
        let mut order = Vec::with_capacity(queue.len());
        // The provisional holds, to undo after (by fair-share slot, found once per team).
        let mut held = Vec::with_capacity(queue.len());
        for (_, teams) in bands {
            // Each team's jobs by position: slots and lists, with no lookup by name.
            let slots: Vec<Option<usize>> = teams.keys().map(|n| self.shares.slot(*n)).collect();
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
            let mut heap = std::collections::BinaryHeap::new();
            for (t, list) in lists.iter().enumerate() {
                if let Some(q) = list.last().copied() {
                    heap.push(std::cmp::Reverse((share(&self.shares, t), key(q), t)));
                }
            }
            while let Some(std::cmp::Reverse((_, _, t))) = heap.pop() {
                let Some(list) = lists.get_mut(t) else {
                    continue;
                };
                let Some(q) = list.pop() else {
                    continue;
                };
                let next = list.last().copied();
                order.push(q);
                // Placing happens later; fair share within a band follows what this job
                // would hold if placed, so one team's many jobs do not go first in a row.
                if let Some(js) = job(q) {
                    let r = Self::resources(
                        &js.job.shape.member,
                        js.member_milli,
                        js.job.shape.members as usize,
                    );
                    let slot = slots.get(t).copied().flatten();
                    self.shares.hold_slot(slot, r);
                    held.push((slot, r));
                }
                if let Some(next) = next {
                    heap.push(std::cmp::Reverse((share(&self.shares, t), key(next), t)));
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
