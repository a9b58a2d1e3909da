//! Victims for a job its team's quota holds back (rules 2 and 3 of `preempt.rs` for one
//! team's limits): the cheapest candidates by rule 4, released until the limits pass and
//! the job is placed.
//!
//! The candidates of a team are its running jobs, which do not change within a cycle;
//! only whether each is evicted, and each team's standing, do. So each team's candidates
//! are sorted once per cycle by what rule 4 weighs after the guarantee floor (priority,
//! lost work, holder): the cheapest that take nobody below a guarantee are the first
//! eligible ones in that order, and a search reads a few dozen holders, not all of them.

use super::preempt::{Asker, Cause, Rank};
use super::quota_gate::Limits;
use super::Cycle;
use crate::core::alloc::{NodeFree, Request};
use crate::core::gang::{self, JobShape};
use crate::core::placer::{give_on, Choice};
use crate::decide::snapshot::JobState;

/// Placements tried per quota victim search once the team's own limits pass.
const QUOTA_PLACEMENT_TRIES: usize = 4;
/// At most this many victims, cheapest first, are released while looking for quota room.
const QUOTA_VICTIMS: usize = 64;
/// Evicted holders a search steps over in one team's order before the order drops them.
const PRUNE_EVICTED: usize = 8;

/// The nodes of a quota search's victims so far, each as it would be with them all gone
/// and the member slots it would then have (`None` until asked): what bounds the room a
/// try could find, read before the victims are moved in the placer. Kept by the cycle
/// from search to search, so the node copies' buffers are reused.
#[derive(Debug, Default)]
pub(super) struct VictimsGone {
    /// The search's nodes are the first `len`; the rest are buffers to reuse.
    nodes: Vec<(usize, NodeFree, Option<u64>)>,
    len: usize,
    /// How many of the search's victims are in `nodes`.
    added: usize,
}

impl VictimsGone {
    /// Starts a search: no nodes, no victims.
    fn reset(&mut self) {
        self.len = 0;
        self.added = 0;
    }

    fn live(&mut self) -> &mut [(usize, NodeFree, Option<u64>)] {
        let len = self.len.min(self.nodes.len());
        self.nodes.get_mut(..len).unwrap_or_default()
    }

    /// Adds the victims of `taken` not in yet (a node's state first from the placer).
    fn catch_up(&mut self, cycle: &Cycle<'_>, taken: &[usize]) {
        let ctx = cycle.placer.context();
        for &h in taken.get(self.added..).unwrap_or(&[]) {
            let Some(holder) = cycle.holders.get(h) else {
                continue;
            };
            for c in holder.choices.iter() {
                let (Some(node), Some(capacity), Some(now)) = (
                    cycle.snapshot.fleet.nodes.get(c.node),
                    cycle.placer.empty_state().nodes.get(c.node),
                    cycle.placer.state().nodes.get(c.node),
                ) else {
                    continue;
                };
                let at = match self.live().iter().position(|e| e.0 == c.node) {
                    Some(i) => i,
                    None => {
                        match self.nodes.get_mut(self.len) {
                            Some(slot) => {
                                slot.0 = c.node;
                                slot.1.copy_from(now);
                            }
                            None => self.nodes.push((c.node, now.clone(), None)),
                        }
                        self.len += 1;
                        self.len - 1
                    }
                };
                if let Some((_, free, slots)) = self.live().get_mut(at) {
                    give_on(&ctx, node, free, holder.member(), &c.on, capacity);
                    *slots = None;
                }
            }
        }
        self.added = taken.len();
    }

    /// The `usable` nodes' member slots for `member` with the victims gone.
    fn slots(
        &mut self,
        cycle: &Cycle<'_>,
        member: &Request,
        usable: &dyn Fn(usize) -> bool,
    ) -> Vec<(usize, u64)> {
        let ctx = cycle.placer.context();
        let nodes = &cycle.snapshot.fleet.nodes;
        self.live()
            .iter_mut()
            .filter(|e| usable(e.0))
            .filter_map(|(n, free, slots)| {
                let node = nodes.get(*n)?;
                let s = *slots.get_or_insert_with(|| gang::member_slots(&ctx, node, free, member));
                Some((*n, s))
            })
            .collect()
    }
}

/// Each team slot's victim candidates (holders that rule 1 lets go) by (lost work,
/// priority, holder), sorted on first use in a cycle.
#[derive(Debug, Default)]
pub(super) struct QuotaOrder {
    by_slot: Vec<Option<Vec<usize>>>,
}

impl<'a> Cycle<'a> {
    /// The teams whose jobs may make way for `asker`'s quota: its own (rule 2), then the
    /// borrowers it reclaims from (rule 3).
    fn quota_victim_teams(asker: &Asker) -> impl Iterator<Item = Option<usize>> + '_ {
        std::iter::once(asker.team).chain(asker.reclaimable.iter().map(|t| Some(*t)))
    }

    /// Every candidate ranked, the cheapest [`QUOTA_VICTIMS`] of them sorted, and how
    /// many there were.
    fn quota_candidates_by_scan(&self, asker: &Asker) -> (Vec<Rank>, usize) {
        let mut ranked: Vec<Rank> = Self::quota_victim_teams(asker)
            .flat_map(|t| self.holders_of(t))
            .filter_map(|h| match self.victim_rank(*h, asker) {
                Some((r, Cause::Reclaim | Cause::OwnTeam)) => Some(r),
                _ => None,
            })
            .collect();
        let considered = ranked.len();
        if ranked.len() > QUOTA_VICTIMS {
            ranked.select_nth_unstable(QUOTA_VICTIMS);
            ranked.truncate(QUOTA_VICTIMS);
        }
        ranked.sort_unstable();
        (ranked, considered)
    }

    /// [`Cycle::quota_candidates_by_scan`]'s list from each team's sorted candidates,
    /// when at least [`QUOTA_VICTIMS`] of them take nobody below a guarantee (a rank of
    /// breach 0 sorts before every other, and among those the team order is rule 4's);
    /// `None` when fewer do, and the costlier ones must be ranked too.
    fn quota_candidates_by_order(&mut self, asker: &Asker) -> Option<Vec<Rank>> {
        let mut found: Vec<Rank> = Vec::with_capacity(QUOTA_VICTIMS);
        for team in Self::quota_victim_teams(asker) {
            let Some(slot) = self.team_slot(team) else {
                continue;
            };
            self.sort_quota_candidates(slot);
            let Some(mut order) = self
                .quota_order
                .by_slot
                .get_mut(slot)
                .and_then(Option::take)
            else {
                continue;
            };
            let (mut taken, mut evicted) = (0, 0);
            for h in &order {
                if taken == QUOTA_VICTIMS {
                    break;
                }
                match self.victim_rank(*h, asker) {
                    Some((r @ (0, ..), Cause::Reclaim | Cause::OwnTeam)) => {
                        found.push(r);
                        taken += 1;
                    }
                    None if self.holders.get(*h).is_some_and(|x| x.evicted) => evicted += 1,
                    _ => {}
                }
            }
            // The cheapest go first, so evicted holders gather at the head of the order
            // and later searches would step over them again: they are dropped (an
            // evicted holder is never a candidate again) once enough are seen.
            if evicted >= PRUNE_EVICTED {
                order.retain(|h| !self.holders.get(*h).is_some_and(|x| x.evicted));
            }
            if let Some(s) = self.quota_order.by_slot.get_mut(slot) {
                *s = Some(order);
            }
        }
        if found.len() < QUOTA_VICTIMS {
            return None;
        }
        found.sort_unstable();
        found.truncate(QUOTA_VICTIMS);
        Some(found)
    }

    /// Sorts a team slot's victim candidates for [`Cycle::quota_candidates_by_order`],
    /// once per cycle.
    fn sort_quota_candidates(&mut self, slot: usize) {
        let slots = self.holders_of.len();
        if self.quota_order.by_slot.len() < slots {
            self.quota_order.by_slot.resize(slots, None);
        }
        if self
            .quota_order
            .by_slot
            .get(slot)
            .is_none_or(Option::is_some)
        {
            return;
        }
        let mut order: Vec<(i64, i64, usize)> = self
            .holders_of
            .get(slot)
            .iter()
            .filter_map(|h| {
                let v = self.holders.get(*h)?.victim()?;
                Some((v.priority, v.lost, *h))
            })
            .collect();
        order.sort_unstable();
        if let Some(s) = self.quota_order.by_slot.get_mut(slot) {
            *s = Some(order.into_iter().map(|(_, _, h)| h).collect());
        }
    }

    /// Victims when the team's quota holds the job: borrowers in the cohort when its
    /// guarantee is lent out, or its own team's lower tiers when it is at its burst (or,
    /// for a never-preempted tier, its guarantee); cheapest first (rule 4), until the job
    /// is placed.
    #[allow(clippy::type_complexity)]
    pub(super) fn victims_for_quota(
        &mut self,
        js: &'a JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        asker: &Asker,
    ) -> Option<(Vec<usize>, (Vec<Choice>, bool))> {
        self.expect_records();
        // Only the cheapest 64 are tried. The story counts every candidate.
        let ranked = if self.telling(js) {
            None
        } else {
            self.quota_candidates_by_order(asker)
        };
        #[cfg(debug_assertions)]
        if let Some(r) = &ranked {
            debug_assert_eq!(*r, self.quota_candidates_by_scan(asker).0);
        }
        let ranked = match ranked {
            Some(r) => r,
            None => {
                let (ranked, considered) = self.quota_candidates_by_scan(asker);
                self.tell(js, |c| {
                    let names: Vec<String> = ranked
                        .iter()
                        .take(8)
                        .filter_map(|(_, _, _, h)| c.holders.get(*h).map(|x| x.id().to_string()))
                        .collect();
                    format!(
                        "preemption for quota: {} candidate(s) of its own lower tiers or borrowing teams, cheapest first: {}",
                        considered,
                        names.join(", ")
                    )
                });
                ranked
            }
        };
        let mut gone = std::mem::take(&mut self.quota_gone);
        gone.reset();
        let found = self.victims_for_quota_gone(js, shape, within, asker, ranked, &mut gone);
        self.quota_gone = gone;
        found
    }

    /// [`Cycle::victims_for_quota`] over the ranked candidates, with the search's
    /// [`VictimsGone`].
    #[allow(clippy::type_complexity)]
    fn victims_for_quota_gone(
        &mut self,
        js: &'a JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        asker: &Asker,
        ranked: Vec<Rank>,
        gone: &mut VictimsGone,
    ) -> Option<(Vec<usize>, (Vec<Choice>, bool))> {
        let mark = self.log_mark();
        let mut taken = Vec::with_capacity(ranked.len());
        // The team's own limits read only the ledger: victims leave the placer only once
        // the limits pass (`taken[..in_placer]`), as most searches that fail never get
        // that far, and giving GPUs back and taking them again is most of their cost.
        let mut in_placer = 0;
        let mut placed = None;
        let mut tries = 0;
        let in_pools = self.placer.in_pools(&shape.pools);
        // The teams whose usage the ledger moves since changed: their standing (which
        // nothing in the search reads) is noted once before a try and at the end.
        let mut unnoted: Vec<Option<usize>> = Vec::with_capacity(asker.reclaimable.len() + 1);
        for (_, _, _, h) in ranked {
            let team = self.charge_in_ledger(h, false);
            if !unnoted.contains(&team) {
                unnoted.push(team);
            }
            taken.push(h);
            // The team's own limits first: no placement is tried until they pass. Past
            // them, a few more victims at most: room for the job is the node-by-node
            // search's work, not this one's.
            if self.own_limits(js, shape) != Limits::Pass {
                continue;
            }
            if tries == QUOTA_PLACEMENT_TRIES {
                break;
            }
            tries += 1;
            // Nor where, with every victim so far gone, there would not be room for the
            // job: the try would fail (it counts as one all the same), and moving the
            // victims in the placer and back is most of a failing search's cost. Debug
            // builds try it anyway, to check that it does fail.
            let usable = |n: usize| within(n) && in_pools(n);
            let room = if shape.members == 1 {
                // Exactly, where one member goes: a node now, else one of the victims'.
                match self.placer.choose(&shape.member, &usable) {
                    Some(_) => 1,
                    None => {
                        gone.catch_up(self, &taken);
                        let slots = gone.slots(self, &shape.member, &usable);
                        u64::from(slots.iter().any(|(_, s)| *s > 0))
                    }
                }
            } else {
                // At most, for a gang: the room index's room per group.
                gone.catch_up(self, &taken);
                let slots = gone.slots(self, &shape.member, &usable);
                self.room_with_slots(shape, &slots)
            };
            let hopeless = room < u64::from(shape.members);
            if hopeless {
                self.tell(js, |_| {
                    format!(
                        "preemption for quota: with its {} cheapest candidate(s) gone there would be room for at most {room} of its {} member(s); no placement tried",
                        taken.len(),
                        shape.members
                    )
                });
                if !cfg!(debug_assertions) {
                    continue;
                }
            }
            for team in unnoted.drain(..) {
                self.note_usage(team);
            }
            for t in taken.get(in_placer..).unwrap_or(&[]) {
                self.move_in_placer(*t, false);
            }
            in_placer = taken.len();
            let attempt = self.try_place_near(js, shape, within, &taken);
            debug_assert!(
                !(hopeless && attempt.is_some()),
                "a quota try the room bound ruled out placed the job"
            );
            if let Some(done) = attempt {
                placed = Some(done);
                break;
            }
        }
        let Some(placed) = placed else {
            let (moved, charged_only) = taken.split_at(in_placer.min(taken.len()));
            for h in charged_only.iter().rev() {
                let team = self.charge_in_ledger(*h, true);
                if !unnoted.contains(&team) {
                    unnoted.push(team);
                }
            }
            for team in unnoted {
                self.note_usage(team);
            }
            self.restore_all(moved);
            self.rewind(mark);
            return None;
        };
        Some(self.spare(js, shape, within, taken, placed))
    }
}
