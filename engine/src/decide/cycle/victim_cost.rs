//! What preempting on one node costs (rule 4 of `preempt.rs`): each node's cheapest
//! victim set for a kind of asking job, kept as an index of nodes by cost that catches
//! up from the cycle's change log instead of being worked out again for every job.

use super::preempt::{Asker, Cause, Rank, SetCost, NO_OWN_VICTIMS};
use super::test_switches::{self, Switch};
use super::Cycle;
use crate::core::alloc::Request;
use crate::core::gang::JobShape;
use crate::core::placer::{give_on, take_on};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// For tests, on this thread: build every cost index from nothing and remember no shape
/// as victimless, so each job's victims are found as if it were the cycle's first. Nor
/// is any shape remembered as not fitting (`Cycle::unfit`): every job is tried; and a
/// member's wait for protected victims looks at every node, not only those whose bound
/// could beat the best found and could come before its ETA. The kept indexes, memos and bounds must choose the same
/// victims, places and waits; tests compare the two.
#[doc(hidden)]
pub fn find_victims_afresh(on: bool) {
    test_switches::set(Switch::VictimsAfresh, on);
}

/// For tests, on this thread: after each catch-up of a kept cost index, work out every
/// node's cheapest set afresh and panic where the index holds another (the plans of
/// [`find_victims_afresh`] show only the sets a search goes on to try).
#[doc(hidden)]
pub fn check_victim_indexes(on: bool) {
    test_switches::set(Switch::CheckVictimIndexes, on);
}

/// Buffers [`Cycle::node_cost`] reuses from node to node (it runs for every changed node
/// of every cost index).
#[derive(Debug, Default)]
pub(super) struct CostScratch {
    ranked: Vec<(Rank, Cause)>,
    free: Option<crate::core::alloc::NodeFree>,
    chosen: Vec<usize>,
    /// The holders on a node that may make way ([`Cycle::room_with_every_victim`]).
    eligible: Vec<usize>,
}

/// A victim set's cost ([`SetCost`]) and its holders.
pub(super) type Cost = (SetCost, Vec<usize>);

/// Each covered node's cheapest victim set for one kind of job, and the nodes ordered by
/// it. Askers whose own team has no victims share one index per kind of job (`shared`);
/// an asker whose team has lower tiers running gets an overlay that covers just the nodes
/// those jobs are on, where its victims differ (`own`), over the shared index.
///
/// A cache (`cache/mod.rs`) of rule 4's cheapest set per node: stale for a node once its
/// allocation changes (`Cycle::changed`) or a team's standing changes what its victims
/// cost there (`victim_reach.rs` logs those nodes); each use catches up from the logs
/// first. Off with `find_victims_afresh`; `check_victim_indexes` compares every catch-up
/// with a fresh computation.
#[derive(Debug, Default)]
pub(super) struct CostIndex {
    /// Covered nodes; `None` when a covered node has no set that frees room.
    costs: FxHashMap<usize, Option<Cost>>,
    /// The keys of `costs` as bits by node: a catch-up passes over hundreds of nodes
    /// it does not cover for each it does.
    covered: Vec<u64>,
    pub order: BTreeSet<(SetCost, usize)>,
    /// How much of `Cycle::changed` this index has caught up with, and of the standing
    /// log (`TeamReach::log`).
    pub seen: usize,
    pub seen_standing: usize,
}

/// A cost index is kept per (member and pools, asker), by their numbers
/// (`Cycle::member_pools`, `Cycle::asker_numbers`).
pub(super) type CostKey = (u32, u32);

impl CostIndex {
    pub(super) fn set(&mut self, node: usize, cost: Option<Cost>) {
        use std::collections::hash_map::Entry;
        // One lookup: most catch-ups find the node's set unchanged.
        match self.costs.entry(node) {
            Entry::Occupied(mut e) => {
                if e.get() == &cost {
                    return;
                }
                if let Some((old, _)) = e.get() {
                    self.order.remove(&(*old, node));
                }
                if let Some((c, _)) = &cost {
                    self.order.insert((*c, node));
                }
                e.insert(cost);
            }
            Entry::Vacant(e) => {
                if let Some((c, _)) = &cost {
                    self.order.insert((*c, node));
                }
                e.insert(cost);
                let (word, bit) = (node / 64, 1u64 << (node % 64));
                if self.covered.len() <= word {
                    self.covered.resize(word + 1, 0);
                }
                if let Some(w) = self.covered.get_mut(word) {
                    *w |= bit;
                }
            }
        }
    }

    pub(super) fn uncover(&mut self, node: usize) {
        if !self.covers(node) {
            return;
        }
        if let Some(w) = self.covered.get_mut(node / 64) {
            *w &= !(1u64 << (node % 64));
        }
        if let Some(Some((old, _))) = self.costs.remove(&node) {
            self.order.remove(&(old, node));
        }
    }

    pub(super) fn covers(&self, node: usize) -> bool {
        let covered = self
            .covered
            .get(node / 64)
            .is_some_and(|w| w & (1u64 << (node % 64)) != 0);
        debug_assert_eq!(covered, self.costs.contains_key(&node));
        covered
    }

    pub(super) fn cost(&self, node: usize) -> Option<&Cost> {
        self.costs.get(&node).and_then(Option::as_ref)
    }
}

impl<'a> Cycle<'a> {
    /// Rule 4's cost of a victim set; `None` when it takes a team below its guarantee by
    /// another team's priority (rule 3).
    pub(super) fn set_cost(&self, set: &[usize], asker: &Asker) -> Option<SetCost> {
        let team_of = |h: &usize| self.holders.get(*h).map(|x| x.team_ix);
        // A set is a few holders: kept off the heap (this runs for every set tried).
        let mut others: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
        let (mut lost, mut highest) = (0i64, i64::MIN);
        for h in set {
            let v = self.holders.get(*h)?.victim()?;
            lost += v.lost;
            highest = highest.max(v.priority);
            if self.cause_of(*h, asker)? != Cause::OwnTeam {
                others.push(*h);
            }
        }
        // By team, each team's holders in set order (a stable sort; a set is a few
        // holders): one team's cause is the same for all of its holders.
        others.sort_by_key(team_of);
        let mut breach = 0u64;
        for holders in others.chunk_by(|a, b| team_of(a) == team_of(b)) {
            let b = self.breach(holders);
            let team = holders.first().and_then(team_of).flatten();
            if Self::chosen_cause(team, asker) == Cause::Borrowed && b > 0 {
                return None;
            }
            breach += b;
        }
        Some((breach, highest, lost, set.len()))
    }

    /// The cheapest victims on `node` that free room for one member of `member`: eligible
    /// holders in rank order until the member fits, then those it turns out not to need
    /// given back. Memoised per node state; see [`Cycle::victims_by_node`].
    pub(super) fn node_cost(
        &self,
        node: usize,
        member: &Request,
        asker: &Asker,
        scratch: &mut CostScratch,
    ) -> Option<Cost> {
        // Most nodes of a catch-up fail the bound, before victims are ranked (a rank
        // reads the ledger) and sets are costed.
        if !self.room_with_every_victim(node, member, asker, scratch) {
            // Tests check the bound against the ranked search at every node it rules out.
            #[cfg(debug_assertions)]
            debug_assert_eq!(self.ranked_node_cost(node, member, asker, scratch), None);
            return None;
        }
        self.ranked_node_cost(node, member, asker, scratch)
    }

    /// Whether `member` would fit on `node` with every holder there that may make way for
    /// `asker` gone. When not, no victim set of [`Cycle::ranked_node_cost`] frees room:
    /// those are subsets, and fewer victims never free more.
    fn room_with_every_victim(
        &self,
        node: usize,
        member: &Request,
        asker: &Asker,
        scratch: &mut CostScratch,
    ) -> bool {
        let ctx = self.placer.context();
        let (Some(n), Some(capacity), Some(current)) = (
            self.snapshot.fleet.nodes.get(node),
            self.placer.empty_state().nodes.get(node),
            self.placer.state().nodes.get(node),
        ) else {
            return false;
        };
        if !member.accepts_node(n) {
            return false;
        }
        let eligible = &mut scratch.eligible;
        eligible.clear();
        // What the node's free resources could at most add up to with them gone: a
        // member needs at least that much, and most nodes fall short (their state is then
        // not copied). The free state is read only where there are candidates.
        let (mut cpu, mut memory, mut milli) = (0u64, 0u64, 0u64);
        for &h in self.holders_on.get(node) {
            let Some(b) = self
                .brief(h)
                .filter(|b| b.candidate && self.may_make_way(b.team, b.priority, asker).is_some())
            else {
                continue;
            };
            #[cfg(debug_assertions)]
            debug_assert!(self
                .holders
                .get(h)
                .is_some_and(|x| !x.evicted && self.cause_of(h, asker).is_some()));
            eligible.push(h);
            // A single member needs no look at where it is (the list is of its nodes).
            let members = match b.members {
                1 => 1,
                _ => self.holders.get(h).map_or(0, |x| {
                    x.choices.iter().filter(|c| c.node == node).count() as u64
                }),
            };
            let [m_cpu, m_memory, m_milli] = b.size;
            cpu = cpu.saturating_add(m_cpu.saturating_mul(members));
            memory = memory.saturating_add(m_memory.saturating_mul(members));
            milli = milli.saturating_add(m_milli.saturating_mul(members));
        }
        if eligible.is_empty()
            || cpu.saturating_add(current.cpu_milli) < member.cpu_milli
            || memory.saturating_add(current.memory_mib) < member.memory_mib
            || milli.saturating_add(current.gpu_milli_total()) < member.gpu_milli_total()
        {
            return false;
        }
        let free = scratch_free(&mut scratch.free, current);
        for x in eligible.iter().filter_map(|h| self.holders.get(*h)) {
            for c in x.choices.iter().filter(|c| c.node == node) {
                give_on(&ctx, n, free, x.member(), &c.on, capacity);
            }
        }
        crate::core::packing::feasible(&ctx, n, free, member)
    }

    /// [`Cycle::node_cost`] by ranking the eligible holders and trying them in order.
    fn ranked_node_cost(
        &self,
        node: usize,
        member: &Request,
        asker: &Asker,
        scratch: &mut CostScratch,
    ) -> Option<Cost> {
        let CostScratch {
            ranked,
            free,
            chosen,
            ..
        } = scratch;
        ranked.clear();
        ranked.extend(
            self.holders_on
                .get(node)
                .iter()
                .filter_map(|h| self.victim_rank(*h, asker)),
        );
        if ranked.is_empty() {
            return None;
        }
        ranked.sort_unstable_by_key(|(rank, _)| *rank);
        let ctx = self.placer.context();
        let n = self.snapshot.fleet.nodes.get(node)?;
        let capacity = self.placer.empty_state().nodes.get(node)?;
        let current = self.placer.state().nodes.get(node)?;
        let free = scratch_free(free, current);
        chosen.clear();
        let on_node = |h: usize| {
            self.holders.get(h).into_iter().flat_map(move |x| {
                x.choices
                    .iter()
                    .filter(move |c| c.node == node)
                    .map(move |c| (x.member(), c))
            })
        };
        for &((_, _, _, h), cause) in ranked.iter() {
            chosen.push(h);
            // Only another borrowing team's victims can break rule 3 together.
            if cause == Cause::Borrowed && self.set_cost(chosen, asker).is_none() {
                chosen.pop();
                continue;
            }
            for (m, ch) in on_node(h) {
                give_on(&ctx, n, free, m, &ch.on, capacity);
            }
            if !crate::core::packing::feasible(&ctx, n, free, member) {
                continue;
            }
            // Take back each earlier victim the member does not need, latest first.
            let last = chosen.pop()?;
            let mut kept = vec![last];
            for h in chosen.drain(..).rev() {
                for (m, ch) in on_node(h) {
                    take_on(&ctx, n, free, m, &ch.on);
                }
                if !crate::core::packing::feasible(&ctx, n, free, member) {
                    for (m, ch) in on_node(h) {
                        give_on(&ctx, n, free, m, &ch.on, capacity);
                    }
                    kept.push(h);
                }
            }
            kept.reverse();
            let cost = self.set_cost(&kept, asker)?;
            return Some((cost, kept));
        }
        None
    }

    /// Brings the cost index for `shape` and `asker` up to date and returns its number
    /// in `cost_indexes`. For an asker with a team of its own (not [`NO_OWN_VICTIMS`]),
    /// it covers only the nodes where that team has jobs of a lower tier (the overlay
    /// over the shared index); otherwise every usable node.
    pub(super) fn cost_index(
        &mut self,
        (shape_no, shape): (usize, &JobShape),
        usable: &dyn Fn(usize) -> bool,
        asker: &Asker,
    ) -> usize {
        self.expect_records();
        self.watch_standing();
        self.write_briefs();
        let overlay = asker.team != NO_OWN_VICTIMS;
        let key: CostKey = (
            self.member_pools.number(shape_no, shape),
            self.asker_numbers.number(asker),
        );
        let known = self.cost_ids.get(&key).copied();
        let id = known.unwrap_or(self.cost_indexes.len());
        if known.is_none() {
            self.cost_ids.insert(key, id);
            self.cost_indexes.push(CostIndex::default());
        }
        let kept = known.is_some() && !self.victims_afresh;
        let mut index = self
            .cost_indexes
            .get_mut(id)
            .map(std::mem::take)
            .unwrap_or_default();
        if overlay {
            self.mark_victim_teams();
        }
        let (mut nodes, if_held) = if kept {
            self.changed_for(index.seen, Some((index.seen_standing, asker)))
        } else {
            (Vec::new(), Vec::new())
        };
        // A team that stopped borrowing changes a node's set only if the set holds one of
        // its jobs (`victim_reach.rs`).
        let held = nodes.len();
        nodes.extend(if_held.iter().filter_map(|&(node, team)| {
            let (_, victims) = index.cost(node)?;
            victims
                .iter()
                .any(|h| {
                    self.holders
                        .get(*h)
                        .is_some_and(|x| x.team_ix == Some(team))
                })
                .then_some(node)
        }));
        if let Some(added) = nodes.get_mut(held..) {
            // Once each, though two teams that stopped borrowing share the node.
            added.sort_unstable();
        }
        nodes.dedup();
        let nodes: Vec<usize> = if kept {
            nodes
        } else if overlay {
            index = CostIndex::default();
            // In node order, once each (a sort, not a tree: thousands of nodes).
            let mut nodes: Vec<usize> = self
                .holders_of(asker.team)
                .iter()
                .filter_map(|h| self.holders.get(*h))
                .flat_map(|x| x.choices.iter().map(|c| c.node))
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
        } else {
            index = CostIndex::default();
            // Sized up front: thousands of nodes, and growing it copied them again.
            let mut nodes = Vec::with_capacity(self.holders_on.len());
            nodes
                .extend((0..self.holders_on.len()).filter(|n| !self.holders_on.get(*n).is_empty()));
            nodes
        };
        let mut scratch = std::mem::take(&mut self.cost_scratch);
        for node in nodes {
            // The overlay's bit check first: most changed nodes hold none of its team's jobs.
            if (overlay && !self.has_own_victims(node, asker)) || !usable(node) {
                index.uncover(node);
                continue;
            }
            let cost = self.node_cost(node, &shape.member, asker, &mut scratch);
            if overlay || cost.is_some() {
                index.set(node, cost);
            } else {
                index.uncover(node);
            }
        }
        if kept && test_switches::is_on(Switch::CheckVictimIndexes) {
            self.check_index(&index, &shape.member, usable, asker, &mut scratch);
        }
        self.cost_scratch = scratch;
        (index.seen, index.seen_standing) = self.log_mark();
        if let Some(slot) = self.cost_indexes.get_mut(id) {
            *slot = index;
        }
        id
    }

    /// [`check_victim_indexes`]: `index` against every node's set worked out afresh.
    fn check_index(
        &self,
        index: &CostIndex,
        member: &Request,
        usable: &dyn Fn(usize) -> bool,
        asker: &Asker,
        scratch: &mut CostScratch,
    ) {
        let overlay = asker.team != NO_OWN_VICTIMS;
        for node in 0..self.holders_on.len() {
            let fresh = if (overlay && !self.has_own_victims(node, asker)) || !usable(node) {
                None
            } else {
                Some(self.node_cost(node, member, asker, scratch))
                    .filter(|cost| overlay || cost.is_some())
            };
            let held = index
                .covers(node)
                .then(|| index.costs.get(&node).cloned().flatten());
            assert_eq!(
                held, fresh,
                "cost index out of step at node {node} for {asker:?} (outer None: not covered)"
            );
        }
    }

    /// Fills `victim_teams` on first use: the victim candidates on each node do not
    /// change once the running jobs are held.
    fn mark_victim_teams(&mut self) {
        if !self.victim_teams.is_empty() {
            return;
        }
        let marks: Vec<u64> = self
            .holders_on
            .iter()
            .map(|on| {
                on.iter()
                    .filter_map(|h| self.holders.get(*h))
                    .fold(0, |bits, x| bits | team_bit(x.team_ix))
            })
            .collect();
        self.victim_teams = marks;
    }

    /// Whether `node` holds a job of the asker's own team that rule 2 lets it preempt.
    pub(super) fn has_own_victims(&self, node: usize, asker: &Asker) -> bool {
        // Most nodes hold none of the team's jobs: said by one bit, not by reading each
        // holder on the node.
        if self
            .victim_teams
            .get(node)
            .is_some_and(|bits| bits & team_bit(asker.team) == 0)
        {
            return false;
        }
        let own = self.holders_on.get(node).iter().any(|h| {
            self.brief(*h)
                .is_some_and(|b| b.candidate && b.team == asker.team && b.priority < asker.priority)
        });
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            own,
            self.holders_on.get(node).iter().any(|h| {
                self.holders.get(*h).is_some_and(|x| {
                    !x.evicted
                        && x.team_ix == asker.team
                        && x.victim().is_some_and(|v| v.priority < asker.priority)
                })
            }),
            "a holder's brief out of step"
        );
        own
    }

    /// A victim set considered on `node`, for the story.
    pub(super) fn victim_set_line(&self, node: usize, cost: SetCost, victims: &[usize]) -> String {
        let (breach, _, lost, _) = cost;
        let names: Vec<&str> = victims
            .iter()
            .filter_map(|h| self.holders.get(*h).map(|x| x.id()))
            .collect();
        format!(
            "victims on {}: {} ({} GPU-s of work lost, {} below a guarantee)",
            self.node_name(node).unwrap_or_default(),
            names.join(", "),
            lost / 1000,
            crate::decide::quota::gpus(breach)
        )
    }
}

/// The scratch copy of a node's free state, set to `current` (allocated once).
fn scratch_free<'s>(
    slot: &'s mut Option<crate::core::alloc::NodeFree>,
    current: &crate::core::alloc::NodeFree,
) -> &'s mut crate::core::alloc::NodeFree {
    match slot {
        Some(f) => {
            f.copy_from(current);
            f
        }
        None => slot.insert(current.clone()),
    }
}

/// A team's bit in `Cycle::victim_teams`: teams past the 63rd, no team and the policy's
/// unknown teams share the last bit (a bit set means "maybe").
pub(super) fn team_bit(team: Option<usize>) -> u64 {
    match team {
        Some(i) if i < 63 => 1 << i,
        _ => 1 << 63,
    }
}
