//! Reservations of MIG instances hold the slots they need, not their node: a booking
//! records the GPU slots its instances take at its start, and a MIG job that would run
//! past that start may take the node's other slots, chosen around the held ones.
//!
//! Earliest-start walks of MIG jobs count a node's slots around the held ones alike
//! (`WalkFree::slots_around`), so a booking made by a walk is one placement keeps.
//! Whole-GPU and share jobs count a MIG booking's GPUs as whole GPUs (`bookings.rs`), and
//! MIG jobs stay off a node while a booking of whole GPUs there overlaps them.

use super::Cycle;
use crate::core::alloc::{NodeFree, Request};
use crate::core::mig::{self, SlotMask};
use crate::core::packing::{self, OnNode};
use crate::core::placer::{give_on, take_on, Choice};

impl Cycle<'_> {
    /// The slots `members` instances of `member` take on `node` from `start` to `end`,
    /// by the running jobs' estimates (those ending by then give theirs back), around
    /// the slots other bookings hold then; `None` when they do not fit there.
    pub(super) fn mig_hold(
        &mut self,
        node: usize,
        (start, end): (i64, Option<i64>),
        member: &Request,
        members: u64,
    ) -> Option<Vec<(usize, SlotMask)>> {
        member.mig_profile.as_ref()?;
        self.record_holders();
        let ctx = self.placer.context();
        let snapshot = self.snapshot;
        let fleet = &snapshot.fleet;
        let n = fleet.nodes.get(node)?;
        let capacity = self.placer.empty_state().nodes.get(node)?.clone();
        let mut free = self.placer.state().nodes.get(node)?.clone();
        // Once per MIG reservation: every holder is read.
        for holder in &self.holders {
            if holder.evicted || holder.ends_at.is_none_or(|e| e > start) {
                continue;
            }
            for c in holder.choices.iter().filter(|c| c.node == node) {
                give_on(&ctx, n, &mut free, holder.member(), &c.on, &capacity);
            }
        }
        for (gpu, mask) in self
            .bookings
            .held_mig_slots(node, start, end)
            .unwrap_or_default()
        {
            free.take_mig(gpu, mask);
        }
        let mut slots = Vec::new();
        for _ in 0..members {
            if !packing::feasible(&ctx, n, &free, member) {
                return None;
            }
            let (_, on) = packing::score(&ctx, n, &free, member, (0.0, 0.0));
            slots.extend(self.slots_of(node, member, &on.gpus, &on.mig_starts));
            take_on(&ctx, n, &mut free, member, &on);
        }
        Some(slots)
    }

    /// The slots one member of MIG request `member` takes on `node` at `gpus`/`starts`.
    fn slots_of(
        &self,
        node: usize,
        member: &Request,
        gpus: &[usize],
        starts: &[u32],
    ) -> Vec<(usize, SlotMask)> {
        let ctx = self.placer.context();
        let (Some(n), Some(name)) = (self.snapshot.fleet.nodes.get(node), &member.mig_profile)
        else {
            return Vec::new();
        };
        gpus.iter()
            .zip(starts)
            .filter_map(|(gpu, start)| {
                let model = n.gpus.get(*gpu).map(|g| g.model.as_str()).unwrap_or("");
                Some((*gpu, mig::mask(ctx.mig.profile(model, name)?, *start)))
            })
            .collect()
    }

    /// `node`'s free state now with `held` slots taken.
    fn free_around(&self, node: usize, held: &[(usize, SlotMask)]) -> Option<NodeFree> {
        let mut free = self.placer.state().nodes.get(node)?.clone();
        for (gpu, mask) in held {
            free.take_mig(*gpu, *mask);
        }
        Some(free)
    }

    /// The booked nodes where only MIG bookings overlap a job over [`now`, `until`) and
    /// one member of MIG request `member` does not fit now around their held slots:
    /// closed to it (the others pass [`Bookings::allows`]).
    pub(super) fn mig_blocked_by_holds(
        &self,
        member: &Request,
        until: Option<i64>,
    ) -> std::collections::BTreeSet<usize> {
        let ctx = self.placer.context();
        let snapshot = self.snapshot;
        let fleet = &snapshot.fleet;
        if member.mig_profile.is_none() {
            return std::collections::BTreeSet::new();
        }
        self.bookings
            .booked_nodes()
            .filter(|&node| {
                let Some(held) = self.bookings.held_mig_slots(node, self.now, until) else {
                    return false;
                };
                let (Some(n), Some(free)) = (fleet.nodes.get(node), self.free_around(node, &held))
                else {
                    return true;
                };
                !packing::feasible(&ctx, n, &free, member)
            })
            .collect()
    }

    /// Moves committed members of MIG request `member` that took held slots to free
    /// slots around them on the same node, one at a time; false (nothing moved) when
    /// one does not fit there.
    pub(super) fn steer_off_holds(
        &mut self,
        member: &Request,
        choices: &mut [Choice],
        until: Option<i64>,
    ) -> bool {
        if member.mig_profile.is_none() || self.bookings.is_empty() {
            return true;
        }
        let ctx = self.placer.context();
        let snapshot = self.snapshot;
        let fleet = &snapshot.fleet;
        let mut moved: Vec<(usize, OnNode)> = Vec::new();
        for i in 0..choices.len() {
            let Some(c) = choices.get(i).cloned() else {
                continue;
            };
            let Some(held) = self.bookings.held_mig_slots(c.node, self.now, until) else {
                continue;
            };
            let mine = self.slots_of(c.node, member, &c.on.gpus, &c.on.mig_starts);
            let clash = mine
                .iter()
                .any(|(g, m)| held.iter().any(|(hg, hm)| g == hg && m & hm != 0));
            if !clash {
                continue;
            }
            self.placer.release(member, &c);
            let around = fleet.nodes.get(c.node).and_then(|n| {
                let free = self.free_around(c.node, &held)?;
                packing::feasible(&ctx, n, &free, member)
                    .then(|| packing::score(&ctx, n, &free, member, (0.0, 0.0)).1)
            });
            let Some(on) = around else {
                self.placer.commit(member, &c);
                for (j, old) in moved.into_iter().rev() {
                    if let Some(m) = choices.get_mut(j) {
                        self.placer.release(member, m);
                        m.on = old;
                        self.placer.commit(member, m);
                    }
                }
                return false;
            };
            if let Some(m) = choices.get_mut(i) {
                moved.push((i, std::mem::replace(&mut m.on, on)));
                self.placer.commit(member, m);
            }
        }
        true
    }
}
