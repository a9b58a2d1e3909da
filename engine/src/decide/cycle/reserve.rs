//! Reservations for backfill (EASY): the first job blocked on capacity gets a reservation
//! at its earliest start by the running jobs' runtime estimates, on the nodes that will
//! hold it; a later job may use those nodes only if it ends before the reservation starts.
//! Every request shape is estimated alike: whole GPUs, shares and MIG profiles, gangs per
//! required topology group.

use super::{Blocked, Cycle};
use crate::core::alloc::NodeFree;
use crate::core::gang::{self, JobShape};
use crate::core::placer::give_on;
use crate::decide::snapshot::JobState;
use lang::ir::TopologyLevel;
use std::collections::{BTreeMap, BTreeSet};

/// The head blocked job's reservation.
#[derive(Debug, Clone)]
pub(super) struct Reserved {
    pub job: String,
    pub start_at: i64,
    /// When the reserved job is expected to end (`None`: no runtime estimate).
    pub ends_at: Option<i64>,
    pub nodes: BTreeSet<usize>,
}

impl Cycle<'_> {
    /// A job blocked on capacity that would fit on the reserved nodes now waits for the
    /// reservation instead.
    pub(super) fn reserved_for_another(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        blocked: Blocked,
    ) -> Blocked {
        let (Some(res), Blocked::Capacity(_)) = (self.reservation.clone(), &blocked) else {
            return blocked;
        };
        if !self.room_on(&res.nodes, shape) {
            return blocked;
        }
        let interrupted = &self.snapshot.interrupted;
        match self.try_place(js, shape, &|n| !interrupted.contains(&n)) {
            Ok(_) => Blocked::Reservation(res),
            Err(_) => blocked,
        }
    }

    /// Makes `js` the reservation holder if backfill is on, none is held yet, and its
    /// earliest start is inside the backfill window; its start time if so.
    pub(super) fn reserve(&mut self, js: &JobState, shape: &JobShape) -> Option<i64> {
        let placement = &self.program.placement;
        if !placement.backfill || self.reservation.is_some() {
            return None;
        }
        let (start, nodes) = self.earliest_start(shape, None)?;
        if start == self.now || start - self.now > placement.backfill_window_s as i64 {
            return None;
        }
        self.reservation = Some(Reserved {
            job: js.id().to_string(),
            start_at: start,
            ends_at: js.job.runtime_s.map(|r| start + r as i64),
            nodes,
        });
        Some(start)
    }

    /// Whether any of `nodes` (in the job's pools) has room for a member now.
    pub(super) fn room_on(&self, nodes: &BTreeSet<usize>, shape: &JobShape) -> bool {
        let ctx = self.placer.context();
        nodes.iter().any(|n| {
            match (
                self.snapshot.fleet.nodes.get(*n),
                self.placer.state().nodes.get(*n),
            ) {
                (Some(node), Some(free)) => {
                    (shape.pools.is_empty()
                        || node.pool.as_ref().is_some_and(|p| shape.pools.contains(p)))
                        && gang::member_slots(&ctx, node, free, &shape.member) > 0
                }
                _ => false,
            }
        })
    }

    /// When `shape` could start if running jobs end as estimated, and on which nodes:
    /// jobs are released in order of expected end, on a copy of the free resources, until
    /// the free room (per topology group when the job requires one) holds every member.
    /// Room per node is exact for identical members (whole GPUs, shares and MIG profiles
    /// alike), as in gang placement. `held` nodes count only from the given time (a
    /// reservation's end). Quotas are not considered: the gate judged them already.
    pub(super) fn earliest_start(
        &self,
        shape: &JobShape,
        held: Option<(&BTreeSet<usize>, i64)>,
    ) -> Option<(i64, BTreeSet<usize>)> {
        let ctx = self.placer.context();
        let fleet = &self.snapshot.fleet;
        let usable: Vec<bool> = fleet
            .nodes
            .iter()
            .map(|n| {
                shape.pools.is_empty() || n.pool.as_ref().is_some_and(|p| shape.pools.contains(p))
            })
            .collect();
        let level = shape
            .topology_required
            .filter(|l| !matches!(l, TopologyLevel::Any | TopologyLevel::NvlinkIsland));
        // Group of each node (one group for all when no topology is required).
        let mut group_of: Vec<Option<usize>> = vec![None; fleet.nodes.len()];
        let mut groups = 1;
        match level {
            Some(l) => {
                groups = 0;
                for (g, (_, nodes)) in self.placer.groups(l).iter().enumerate() {
                    for n in nodes {
                        if let Some(slot) = group_of.get_mut(*n) {
                            *slot = Some(g);
                        }
                    }
                    groups = g + 1;
                }
            }
            None => group_of.iter_mut().for_each(|g| *g = Some(0)),
        }
        // Free resources as running jobs end: the current state, with the nodes whose
        // jobs ended so far copied into `free` (most nodes are never touched).
        let now_free = &self.placer.state().nodes;
        let mut free: BTreeMap<usize, NodeFree> = BTreeMap::new();
        let empty = &self.placer.empty_state().nodes;
        let held_until = held.map_or(i64::MIN, |(_, t)| t);
        let is_held = |n: usize| held.is_some_and(|(nodes, _)| nodes.contains(&n));
        let slots = |free: &BTreeMap<usize, NodeFree>, n: usize, at: i64| -> u64 {
            if at < held_until && is_held(n) {
                return 0;
            }
            let f = free.get(&n).or_else(|| now_free.get(n));
            match (usable.get(n), fleet.nodes.get(n), f) {
                (Some(true), Some(node), Some(f)) => {
                    gang::member_slots(&ctx, node, f, &shape.member)
                }
                _ => 0,
            }
        };
        let mut room = vec![0u64; groups];
        for n in 0..fleet.nodes.len() {
            if let Some(Some(g)) = group_of.get(n) {
                if let Some(r) = room.get_mut(*g) {
                    *r = r.saturating_add(slots(&free, n, self.now));
                }
            }
        }
        let members = u64::from(shape.members);
        let winner = |room: &[u64]| room.iter().position(|r| *r >= members);
        // The held nodes come free at `held_until` (`usize::MAX` marks that event).
        let held_event = held
            .map(|(_, until)| (until.max(self.now), usize::MAX))
            .filter(|(until, _)| *until < i64::MAX);
        let mut ends = self
            .ends
            .iter()
            .copied()
            .filter(|(_, h)| self.holders.get(*h).is_some_and(|x| !x.evicted))
            .peekable();
        let mut held_event = held_event.into_iter().peekable();
        let events = std::iter::from_fn(|| match (ends.peek(), held_event.peek()) {
            (Some(e), Some(h)) if h < e => held_event.next(),
            (Some(_), _) => ends.next(),
            (None, _) => held_event.next(),
        });
        let mut found = winner(&room).map(|g| (self.now, g));
        let add = |room: &mut Vec<u64>, node: usize, grown: u64| {
            if let Some(Some(g)) = group_of.get(node) {
                if let Some(r) = room.get_mut(*g) {
                    *r = r.saturating_add(grown);
                }
            }
        };
        for (end, h) in events {
            if found.is_some() {
                break;
            }
            if h == usize::MAX {
                for n in held.iter().flat_map(|(nodes, _)| nodes.iter()) {
                    add(&mut room, *n, slots(&free, *n, end));
                }
            }
            let Some(holder) = self.holders.get(h) else {
                found = winner(&room).map(|g| (end, g));
                continue;
            };
            for c in &holder.choices {
                let before = slots(&free, c.node, end);
                if let (Some(node), Some(cap), Some(current)) = (
                    fleet.nodes.get(c.node),
                    empty.get(c.node),
                    now_free.get(c.node),
                ) {
                    let f = free.entry(c.node).or_insert_with(|| current.clone());
                    give_on(&ctx, node, f, &holder.member, &c.on, cap);
                }
                let after = slots(&free, c.node, end);
                add(&mut room, c.node, after.saturating_sub(before));
            }
            found = winner(&room).map(|g| (end, g));
        }
        let (start, g) = found?;
        // The nodes that hold the members, roomiest first.
        let mut nodes: Vec<(u64, usize)> = (0..fleet.nodes.len())
            .filter(|n| group_of.get(*n).copied().flatten() == Some(g))
            .map(|n| (slots(&free, n, start), n))
            .filter(|(s, _)| *s > 0)
            .collect();
        nodes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut need = members;
        let mut chosen = BTreeSet::new();
        for (s, n) in nodes {
            if need == 0 {
                break;
            }
            chosen.insert(n);
            need = need.saturating_sub(s);
        }
        Some((start, chosen))
    }
}
