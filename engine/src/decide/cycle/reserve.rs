//! Reservations for backfill (EASY): the first job blocked on capacity gets a reservation
//! at its earliest start by the running jobs' runtime estimates, on the nodes that will
//! hold it; a later job may use those nodes only if it ends before the reservation starts.
//! Every request shape is estimated alike: whole GPUs, shares and MIG profiles, gangs per
//! required topology group.

use super::bookings::{booked_gpus, Booking, NodeBooking};
use super::cache::walk_memo::{EventKey, Reuse, WalkKey, WalkMemo, Walked};
use super::protected_wait::ProtectedWait;
use super::walk_free::{FlatWalk, NodeFreeWalk, WalkFree};
use super::{Blocked, Cycle};
use crate::core::alloc::Request;
use crate::core::gang::{self, JobShape};
use crate::core::placer::Choice;
use crate::decide::snapshot::JobState;
use lang::ir::TopologyLevel;
use std::collections::{BTreeMap, BTreeSet};

/// Reservations the starvation bound may add past the policy's depth in one cycle: each
/// costs an earliest-start walk over the running jobs.
const STARVING_RESERVATIONS: usize = 256;

/// Earliest-start room is kept per (member, pools, required topology level).
pub(super) type RoomKey = (Request, Vec<String>, Option<TopologyLevel>);

/// Member slots per node on the current state, and their sum per topology group
/// (`None`: a node the shape may not use); updated only for nodes that changed since it
/// was last read.
#[derive(Debug)]
pub(super) struct RoomIndex {
    slots: Vec<u64>,
    group_of: Vec<Option<usize>>,
    room: Vec<u64>,
    /// Per group, its nodes with a slot now (where a walk's landing looks, besides the
    /// nodes it touched).
    roomy: Vec<BTreeSet<usize>>,
    /// Per node, whether the member's models allow it.
    accepts: Vec<bool>,
    /// The freest group's room, once asked and until a node's slots change (bounds
    /// read it for every search, and groups are many).
    freest: Option<u64>,
    /// How much of `Cycle::changed` this index has caught up with.
    pub seen: usize,
    /// The last walks over this index, and the groups changed since.
    memo: WalkMemo,
}

impl RoomIndex {
    fn freest(&mut self) -> u64 {
        let room = &self.room;
        *self
            .freest
            .get_or_insert_with(|| room.iter().copied().max().unwrap_or(0))
    }
}

/// The groups a walk looks at (`None`: all) and the event it stops before.
type Only<'m> = Option<(&'m [bool], Option<EventKey>)>;

/// What an earliest-start walk looks for: room for `members` of `member`, a job of
/// `runtime`, over `only` some groups.
#[derive(Clone, Copy)]
struct WalkFor<'w> {
    member: &'w Request,
    members: u64,
    runtime: Option<i64>,
    only: Only<'w>,
    /// The earliest start it may take (a time its quota frees; now for most walks).
    from: i64,
    /// The nodes it was booked on in the last plan (sorted): its landing's first choice.
    prefer: &'w [usize],
}

/// Where an earliest start puts members: how many on the node, and its whole free GPUs
/// then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Landing {
    pub node: usize,
    pub members: u64,
    pub whole_free: u64,
}

/// The head blocked job's reservation.
#[derive(Debug, Clone)]
pub(super) struct Reserved {
    pub job: String,
    pub start_at: i64,
    /// When the reserved job is expected to end (`None`: no runtime estimate).
    pub ends_at: Option<i64>,
    pub nodes: BTreeSet<usize>,
    /// For a hold on a team's quota (`quota_book.rs`): the team's name.
    pub quota_of: Option<String>,
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
        if !matches!(blocked, Blocked::Capacity(_)) {
            return blocked;
        }
        if !self.bookings.is_empty() {
            return self.booked_for_another(js, shape, blocked);
        }
        blocked
    }

    /// Conservative backfill: a job that would fit now if no GPUs were booked waits for
    /// the first booking its placement would delay.
    fn booked_for_another(&mut self, js: &JobState, shape: &JobShape, blocked: Blocked) -> Blocked {
        // Only room on a booked node can be what bookings keep from it: without any, a
        // placement ignoring them would have been made.
        if !self.room_on_booked(shape) {
            return blocked;
        }
        let snapshot = self.snapshot;
        let Ok((choices, _)) = self.try_place(js, shape, &|n| snapshot.takes_new(n)) else {
            return blocked;
        };
        self.booking_delayed(js, &choices)
            .map_or(blocked, Blocked::Reservation)
    }

    /// The first booking that `js` started now on `choices` would delay.
    pub(super) fn booking_delayed(&self, js: &JobState, choices: &[Choice]) -> Option<Reserved> {
        let until = self.runtime(js).map(|r| self.now + r);
        let delayed = self.bookings.list.iter().find(|b| {
            b.ends_at.is_none_or(|e| self.now < e)
                && until.is_none_or(|u| b.held_from < u)
                && choices.iter().any(|c| b.nodes.contains_key(&c.node))
        })?;
        // Its GPUs are reserved from when they are held.
        Some(Reserved {
            job: delayed.job.clone(),
            start_at: delayed.held_from,
            ends_at: delayed.ends_at,
            nodes: delayed.nodes.keys().copied().collect(),
            quota_of: None,
        })
    }

    /// Makes `js` a reservation holder if backfill is on, the reservations are not all
    /// taken (one for EASY, `reservation_depth` for conservative backfill), and its
    /// earliest start is inside the backfill window; its start time if so, and whether
    /// the starvation bound gave it (past the depth). Where its team has an own limit,
    /// the start is one where its quota is free too, and the reservation books it
    /// (`quota_book.rs`). A job blocked by its own team's quota (`quota_blocked`) is
    /// reserved like one blocked on capacity, except under EASY once another job holds
    /// the one reservation of GPUs: then, if it is the first of its team to wait (the
    /// head of its team's queue), it holds its team's quota only (`quota_blocked` is
    /// given only then).
    pub(super) fn reserve(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        quota_blocked: bool,
    ) -> Option<(i64, bool, Option<ProtectedWait>)> {
        let placement = &self.program.placement;
        let window = placement.backfill_window_s as i64;
        let depth = placement.reservation_depth;
        let conservative = depth > 1;
        if !placement.backfill {
            return None;
        }
        let runtime = self.runtime(js);
        if quota_blocked && !conservative && self.reservation.is_some() {
            let (start, _) = self.joint_start(js, shape, runtime)?;
            if start == self.now || start - self.now > window {
                return None;
            }
            self.book_quota(
                js,
                shape,
                start,
                runtime.map(|r| start + r),
                BTreeSet::new(),
            );
            return Some((start, false, None));
        }
        let within_depth = if conservative {
            self.bookings.len() < depth as usize
        } else {
            self.reservation.is_none()
        };
        // Past the depth, only a starving job gets one (the starvation bound).
        if !within_depth && (self.starving_booked >= STARVING_RESERVATIONS || !self.starving(js)) {
            return None;
        }
        let (start, landing) = self.joint_start(js, shape, runtime)?;
        // Preempting victims once their protection ends may start it sooner: it then
        // holds the nodes it would preempt on, from then, where its team's quota (and
        // the team's quota bookings) let it start then too (the wait counts GPUs only).
        let preempting = if quota_blocked {
            None
        } else {
            self.reserving_protected_wait(js, shape, start)
                .filter(|w| w.ready < start)
                .filter(|w| self.quota_fits_at(js, shape, w.ready, runtime))
        };
        let (start, mut landing) = match &preempting {
            Some(w) => (w.ready, w.nodes.clone()),
            None => (start, landing),
        };
        if start == self.now || start - self.now > window {
            return None;
        }
        // The victims it preempts, counted beside the bookings before its own; its
        // nodes' free GPUs at its start are those these victims leave.
        let victims = preempting.as_ref().map(|w| {
            let (taken, whole_then) = self.reserved_victims(js, shape, w);
            for l in &mut landing {
                if let Some((_, whole)) = whole_then.iter().find(|(n, _)| *n == l.node) {
                    l.whole_free = *whole;
                }
            }
            (taken, w.ready)
        });
        if !within_depth {
            self.starving_booked += 1;
        }
        let ends_at = runtime.map(|r| start + r);
        if let Some((victims, ready)) = &victims {
            self.free_for_bookings(victims, Some(*ready));
        }
        let nodes: BTreeSet<usize> = landing.iter().map(|l| l.node).collect();
        self.book_quota(js, shape, start, ends_at, nodes.clone());
        // Every reservation books the GPUs it needs per node (EASY's one as conservative
        // backfill's): a job that runs past its start may take what it leaves spare.
        {
            let per = booked_gpus(&shape.member);
            let mut booked = BTreeMap::new();
            for l in &landing {
                let mig_slots = match per {
                    Some(_) => Vec::new(),
                    None => self
                        .mig_hold(l.node, (start, ends_at), &shape.member, l.members)
                        .unwrap_or_default(),
                };
                let gpus = match per {
                    Some(p) => p.saturating_mul(l.members),
                    None if mig_slots.is_empty() => u64::MAX,
                    None => mig_slots
                        .iter()
                        .map(|(g, _)| *g)
                        .collect::<BTreeSet<_>>()
                        .len() as u64,
                };
                let nb = NodeBooking {
                    gpus,
                    free_at_start: l.whole_free,
                    mig_slots,
                };
                booked.insert(l.node, nb);
            }
            std::rc::Rc::make_mut(&mut self.bookings).push(Booking {
                job: js.id().to_string(),
                start_at: start,
                held_from: preempting.as_ref().map_or(start, |w| w.at),
                ends_at,
                nodes: booked,
                victims: victims.as_ref().map(|(v, _)| v.clone()).unwrap_or_default(),
            });
        }
        // The victims it preempts stop by its start, for the jobs after it.
        if let Some((victims, ready)) = &victims {
            self.end_victims_at(victims, *ready);
        }
        if conservative || !within_depth {
            return Some((start, !within_depth, preempting));
        }
        self.reservation = Some(std::rc::Rc::new(Reserved {
            job: js.id().to_string(),
            start_at: start,
            ends_at,
            nodes,
            quota_of: None,
        }));
        Some((start, false, preempting))
    }

    /// The starvation bound: whether `js` has waited `reserve_after_wait` since it was
    /// submitted, or `reserve_after_overtaken` jobs of its priority or lower that were
    /// submitted after it are running now.
    fn starving(&mut self, js: &JobState) -> bool {
        let placement = &self.program.placement;
        let Some(submitted) = js.job.submitted_at else {
            return false;
        };
        if self.now - submitted >= placement.reserve_after_wait_s as i64 {
            return true;
        }
        let limit = placement.reserve_after_overtaken as usize;
        let priority = self.priority(js);
        if self.running_submits.is_none() {
            let mut by_priority: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for r in self.snapshot.jobs.iter().filter(|j| j.running.is_some()) {
                if let Some(at) = r.job.submitted_at {
                    by_priority.entry(self.priority(r)).or_default().push(at);
                }
            }
            for v in by_priority.values_mut() {
                v.sort_unstable();
            }
            self.running_submits = Some(by_priority);
        }
        let overtaken: usize = self
            .running_submits
            .iter()
            .flat_map(|m| m.range(..=priority))
            .map(|(_, at)| at.len() - at.partition_point(|t| *t <= submitted))
            .sum();
        overtaken >= limit
    }

    /// Whether any booked node (in the job's pools) has room for a member now.
    fn room_on_booked(&self, shape: &JobShape) -> bool {
        let ctx = self.placer.context();
        self.bookings.booked_nodes().any(|n| {
            match (
                self.snapshot.fleet.nodes.get(n),
                self.placer.state().nodes.get(n),
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

    /// Under conservative backfill, the nodes a booking of `shape` would take now (best
    /// fit; `None` where it could not start now or the mode books nothing). A job placed
    /// now lands there when it can, as its booking of the cycles before said it would:
    /// the room the later bookings counted on stays theirs.
    pub(super) fn landing_now(
        &mut self,
        shape: &JobShape,
        runtime: Option<i64>,
        prefer: &[usize],
    ) -> Option<Vec<Landing>> {
        let placement = &self.program.placement;
        if !placement.backfill || placement.reservation_depth <= 1 {
            return None;
        }
        let (start, landing) = self.earliest_start(shape, runtime, self.now, prefer)?;
        (start == self.now).then_some(landing)
    }

    /// When `shape` could start if running jobs end as estimated, and on which nodes:
    /// jobs are released in order of expected end, on a copy of the free resources, until
    /// the free room (per topology group when the job requires one) holds every member.
    /// Room per node is exact for identical members (whole GPUs, shares and MIG profiles
    /// alike), as in gang placement; bookings (reservations) leave what they spare. No
    /// start before `from`. Quotas are not considered here ([`Cycle::joint_start`] adds
    /// them). The landing takes the nodes of `prefer` (sorted) first, where they have
    /// room then.
    pub(super) fn earliest_start(
        &mut self,
        shape: &JobShape,
        runtime: Option<i64>,
        from: i64,
        prefer: &[usize],
    ) -> Option<(i64, Vec<Landing>)> {
        // Without bookings, room only grows along a walk (jobs end), so the start from a later time is the start from now or that time, on
        // the same nodes: the kept walk from now answers. Conservative backfill's first
        // booking walks from the time itself, for its free GPUs then.
        if from > self.now
            && self.bookings.is_empty()
            && self.program.placement.reservation_depth <= 1
        {
            let (start, landing) = self.earliest_start(shape, runtime, self.now, prefer)?;
            return Some((start.max(from), landing));
        }
        self.index_ends();
        let (key, mut index) = self.current_room(shape, gang::required_grouping(shape));
        let members = u64::from(shape.members);
        // Bookings bring events of their own, out of the walk's order of ends: a walk
        // with bookings is reused only when nothing changed since (same bookings, a
        // runtime they tell apart alike), never cut short over the changed groups.
        let booked = (!self.bookings.is_empty()).then(|| {
            (
                self.bookings.len(),
                self.bookings.runtime_seen(self.now, runtime),
            )
        });
        // A walk with nodes preferred lands apart from the others: not kept.
        let walk_key: Option<WalkKey> =
            (from <= self.now && prefer.is_empty()).then_some((members, booked));
        let reuse = match walk_key.as_ref().map(|k| index.memo.reuse(k)) {
            Some(Reuse::Changed(_)) if booked.is_some() => Reuse::Afresh,
            Some(reuse) => reuse,
            None => Reuse::Afresh,
        };
        let all = WalkFor {
            member: &key.0,
            members,
            runtime,
            only: None,
            from,
            prefer,
        };
        let walked = match reuse {
            Reuse::Afresh => self.walk(&index, all),
            Reuse::Same(k) => index.memo.walked(k).cloned(),
            Reuse::Changed(k) => {
                let last = index.memo.walked(k);
                let cut = last.map(|w| w.key);
                let only = Some((index.memo.mask(), cut));
                match self.walk(&index, WalkFor { only, ..all }) {
                    Some(w) if cut.is_none_or(|c| w.key < c) => Some(w),
                    _ => last.cloned(),
                }
            }
        };
        // Tests check every walk reused or over the changed groups against a full one.
        #[cfg(debug_assertions)]
        if !matches!(reuse, Reuse::Afresh) {
            let full = self.walk(&index, all);
            debug_assert_eq!(walked, full, "a kept walk differs from a full one");
        }
        index.memo.remember(walk_key, walked.clone());
        self.room_cache.insert(key, index);
        walked.map(|w| (w.start, w.landing))
    }

    /// One walk over `index` (all groups, or `only` some up to an event), over flat
    /// copies of the nodes when the request allows.
    fn walk(&mut self, index: &RoomIndex, ask: WalkFor<'_>) -> Option<Walked> {
        let now_free = &self.placer.state().nodes;
        let member = ask.member;
        let flat = member.mig_profile.is_none() && self.end_gives.flat();
        let found = if flat {
            let mut flat = std::mem::take(&mut self.flat_free);
            flat.lay_out(&self.placer.empty_state().nodes);
            let mut walk = FlatWalk {
                flat: &mut flat,
                gives: &self.end_gives,
                now_free,
                member,
                accepts: &index.accepts,
            };
            let found = self.walk_ends(index, ask, &mut walk);
            self.flat_free = flat;
            found
        } else {
            self.walk_general(index, ask)
        };
        // Tests check the flat walk against the general one at every walk.
        #[cfg(debug_assertions)]
        if flat {
            let general = self.walk_general(index, ask);
            debug_assert_eq!(found, general, "flat and general walks differ");
        }
        found
    }

    /// The room index of `shape`'s member and pools per group at `level`, up to date (the
    /// caller puts it back in `room_cache`).
    fn current_room(
        &mut self,
        shape: &JobShape,
        level: Option<TopologyLevel>,
    ) -> (RoomKey, RoomIndex) {
        let key: RoomKey = (shape.member.clone(), shape.pools.clone(), level);
        let kept = self.room_cache.remove(&key).filter(|_| !self.memos_off);
        let mut index = match kept {
            Some(index) => index,
            None => self.room_index(&key),
        };
        self.catch_up(&mut index, &key.0);
        (key, index)
    }

    /// How many of `shape`'s members the freest group at `level` holds now: what a
    /// gang that must share one group and does not fit is told.
    pub(super) fn freest_group_room(&mut self, shape: &JobShape, level: TopologyLevel) -> u64 {
        let (key, mut index) = self.current_room(shape, Some(level));
        let best = index.freest();
        self.room_cache.insert(key, index);
        best
    }

    /// At most how many of gang `shape`'s members one group would hold (the whole fleet
    /// when it needs none) with every running job on `emptied` gone: each group's room
    /// now, plus, for each emptied node, its slots when empty less its slots now. An
    /// upper bound: it ignores the nodes a reservation or a booking keeps from the job.
    pub(super) fn room_with_nodes_emptied(&mut self, shape: &JobShape, emptied: &[usize]) -> u64 {
        let ctx = self.placer.context();
        let slots: Vec<(usize, u64)> = emptied
            .iter()
            .filter_map(|&n| {
                let node = self.snapshot.fleet.nodes.get(n)?;
                let empty = self.placer.empty_state().nodes.get(n)?;
                Some((n, gang::member_slots(&ctx, node, empty, &shape.member)))
            })
            .collect();
        self.room_with_slots(shape, &slots)
    }

    /// At most how many of `shape`'s members one group would hold (the whole fleet when
    /// it needs none) were each node of `slots` to hold the members given there instead
    /// of its slots now (more only: a node given fewer counts as it is). An upper bound
    /// like [`Cycle::room_with_nodes_emptied`].
    pub(super) fn room_with_slots(&mut self, shape: &JobShape, slots: &[(usize, u64)]) -> u64 {
        let (key, mut index) = self.current_room(shape, gang::required_grouping(shape));
        let mut gained: BTreeMap<usize, u64> = BTreeMap::new();
        for &(n, after) in slots {
            let Some(Some(g)) = index.group_of.get(n) else {
                continue;
            };
            let now = index.slots.get(n).copied().unwrap_or(0);
            *gained.entry(*g).or_insert(0) += after.saturating_sub(now);
        }
        let mut best = index.freest();
        for (g, gain) in gained {
            let room = index.room.get(g).copied().unwrap_or(0);
            best = best.max(room.saturating_add(gain));
        }
        self.room_cache.insert(key, index);
        best
    }

    /// [`Cycle::walk_ends`] over `NodeFree` copies (any request).
    fn walk_general(&mut self, index: &RoomIndex, ask: WalkFor<'_>) -> Option<Walked> {
        let mut scratch = std::mem::take(&mut self.walk_scratch);
        let mut walk = NodeFreeWalk {
            scratch: &mut scratch,
            holders: &self.holders,
            ctx: self.placer.context(),
            nodes: &self.snapshot.fleet.nodes,
            now_free: &self.placer.state().nodes,
            empty: &self.placer.empty_state().nodes,
            member: ask.member,
        };
        let found = self.walk_ends(index, ask, &mut walk);
        self.walk_scratch = scratch;
        found
    }

    /// Member slots per usable node and room per group on the current state.
    fn room_index(&self, key: &RoomKey) -> RoomIndex {
        let (member, pools, level) = key;
        let fleet = &self.snapshot.fleet;
        let ctx = self.placer.context();
        let now_free = &self.placer.state().nodes;
        let mut group_of: Vec<Option<usize>> = vec![None; fleet.nodes.len()];
        let mut groups = 1;
        match level {
            Some(l) => {
                groups = 0;
                for (g, (_, nodes)) in self.placer.groups(*l).iter().enumerate() {
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
        for (n, node) in fleet.nodes.iter().enumerate() {
            let usable = pools.is_empty() || node.pool.as_ref().is_some_and(|p| pools.contains(p));
            if !usable {
                if let Some(g) = group_of.get_mut(n) {
                    *g = None;
                }
            }
        }
        let accepts = fleet.nodes.iter().map(|n| member.accepts_node(n)).collect();
        let mut slots = vec![0u64; fleet.nodes.len()];
        let mut room = vec![0u64; groups];
        let mut roomy = vec![BTreeSet::new(); groups];
        for (n, node) in fleet.nodes.iter().enumerate() {
            let (Some(Some(g)), Some(f)) = (group_of.get(n), now_free.get(n)) else {
                continue;
            };
            let s = gang::member_slots(&ctx, node, f, member);
            if let (Some(slot), Some(r), Some(set)) =
                (slots.get_mut(n), room.get_mut(*g), roomy.get_mut(*g))
            {
                *slot = s;
                *r += s;
                if s > 0 {
                    set.insert(n);
                }
            }
        }
        RoomIndex {
            slots,
            group_of,
            room,
            roomy,
            accepts,
            freest: None,
            seen: self.changed.len(),
            memo: WalkMemo::new(groups),
        }
    }

    /// Brings `index` up to the current state: only nodes changed since it was last read.
    fn catch_up(&mut self, index: &mut RoomIndex, member: &Request) {
        let changed = self.changed_since(index.seen);
        let ctx = self.placer.context();
        let fleet = &self.snapshot.fleet;
        let now_free = &self.placer.state().nodes;
        for n in changed {
            let (Some(Some(g)), Some(node), Some(f)) = (
                index.group_of.get(n).copied(),
                fleet.nodes.get(n),
                now_free.get(n),
            ) else {
                continue;
            };
            let s = gang::member_slots(&ctx, node, f, member);
            index.memo.touch(g);
            if index.slots.get(n) != Some(&s) {
                index.freest = None;
            }
            if let (Some(slot), Some(r), Some(set)) = (
                index.slots.get_mut(n),
                index.room.get_mut(g),
                index.roomy.get_mut(g),
            ) {
                *r = (*r + s).saturating_sub(*slot);
                *slot = s;
                if s > 0 {
                    set.insert(n);
                } else {
                    set.remove(&n);
                }
            }
        }
        index.seen = self.changed.len();
    }

    /// The walk over expected ends from the current room in `index`. With conservative
    /// backfill's bookings, a booked node counts only the members its spare GPUs hold for
    /// a job of `runtime` starting then; that changes where a booking starts or stops
    /// overlapping the job, so those times are events too. With `only`, the other
    /// groups are passed over and the walk ends before the given event.
    fn walk_ends<F: WalkFree>(
        &self,
        index: &RoomIndex,
        ask: WalkFor<'_>,
        free: &mut F,
    ) -> Option<Walked> {
        let WalkFor {
            member,
            members,
            runtime,
            only,
            from,
            prefer,
        } = ask;
        let from = from.max(self.now);
        self.snapshot.fleet.nodes.first()?;
        let (mask, cut) = match only {
            Some((mask, cut)) => (Some(mask), cut),
            None => (None, None),
        };
        let looked_at = |g: usize| mask.is_none_or(|m| m.get(g).copied().unwrap_or(false));
        // The node's group, if the walk looks at it.
        let group_of = |n: usize| {
            index
                .group_of
                .get(n)
                .copied()
                .flatten()
                .filter(|g| looked_at(*g))
        };
        let bookings = &self.bookings;
        let gives = &self.end_gives;
        // Nodes whose jobs ended so far (most nodes are never touched), with their
        // member slots then.
        free.begin();
        let raw = |free: &F, n: usize| -> u64 {
            free.slots(n)
                .unwrap_or_else(|| index.slots.get(n).copied().unwrap_or(0))
        };
        // A booked node: what the bookings leave spare.
        let capped = |free: &F, n: usize, at: i64| -> u64 {
            let until = runtime.map(|r| at.saturating_add(r));
            // MIG instances fit around the slots MIG bookings hold, as placement does.
            if member.mig_profile.is_some() {
                if let Some(held) = bookings.held_mig_slots(n, at, until) {
                    return free.slots_around(n, &held);
                }
            }
            bookings.cap(n, (raw(free, n), free.whole_free(n)), member, at, until)
        };
        let mut room = index.room.clone();
        // Adds to the node's group; whether that group now holds every member.
        let add = |room: &mut Vec<u64>, node: usize, grown: u64, shrunk: u64| -> Option<usize> {
            let g = group_of(node)?;
            let r = room.get_mut(g)?;
            *r = (*r + grown).saturating_sub(shrunk);
            (*r >= members).then_some(g)
        };
        // Booked nodes count what their spare holds for a start now.
        let mut counted: BTreeMap<usize, u64> = BTreeMap::new();
        for n in bookings.booked_nodes() {
            if group_of(n).is_none() {
                continue;
            }
            let c = capped(free, n, self.now);
            add(&mut room, n, c, raw(free, n));
            counted.insert(n, c);
        }
        let winner = |room: &[u64]| {
            room.iter()
                .enumerate()
                .position(|(g, r)| *r >= members && looked_at(g))
        };
        let mut ends = self
            .ends
            .iter()
            .copied()
            .filter(|(_, h)| !gives.is_evicted(*h))
            .peekable();
        let mut boundaries = bookings
            .boundaries(self.now, runtime)
            .into_iter()
            .peekable();
        // Booking boundaries come before ends at the same time (`Err` marks them).
        let events = std::iter::from_fn(|| match (boundaries.peek(), ends.peek()) {
            (Some(b), Some(e)) if b.0 <= e.0 => boundaries.next().map(Err),
            (Some(_), None) => boundaries.next().map(Err),
            (_, Some(_)) => ends.next().map(Ok),
            (None, None) => None,
        });
        // With a start not before `from`: the room then, once every event up to it is
        // in (booked nodes' spare counted for a start then).
        let at_from = |free: &F, counted: &mut BTreeMap<usize, u64>, room: &mut Vec<u64>| {
            for (n, c) in counted.iter_mut() {
                let after = capped(free, *n, from);
                add(room, *n, after, *c);
                *c = after;
            }
            winner(room).map(|g| (from, g, (from, usize::MAX - 2, g)))
        };
        let mut from_passed = from <= self.now;
        // (start, group, event) of the first group to hold every member.
        let mut found: Option<(i64, usize, EventKey)> = winner(&room)
            .filter(|_| from_passed)
            .map(|g| (self.now, g, (i64::MIN, 0, g)));
        for event in events {
            let at = match event {
                Ok((end, _)) | Err((end, _)) => end,
            };
            // Once found, the events at the same time still count: the landing and its
            // free GPUs are those after every job that ends then (a booking's free GPUs
            // at its start are what later jobs may use beside it).
            if found.is_some_and(|(t, _, _)| at > t || t == self.now) {
                break;
            }
            if !from_passed && at > from {
                from_passed = true;
                found = at_from(free, &mut counted, &mut room);
                if found.is_some() {
                    break;
                }
            }
            // Room before `from` may not start it.
            let may_start = at >= from;
            let (end, h) = match event {
                Ok(e) => e,
                Err((at, booking)) => {
                    for (i, n) in bookings.nodes_of(booking).enumerate() {
                        let Some(before) = counted.get(&n).copied() else {
                            continue;
                        };
                        let after = capped(free, n, at);
                        counted.insert(n, after);
                        if let Some(g) = add(&mut room, n, after, before).filter(|_| may_start) {
                            found = found.or(Some((at, g, (at, usize::MAX - 1, i))));
                        }
                    }
                    continue;
                }
            };
            // Past the event the walk stops before, nothing found can win.
            if cut.is_some_and(|(t, c, _)| (end, h) > (t, c)) {
                break;
            }
            for (m, (k, node)) in gives.members(h).enumerate() {
                if group_of(node).is_none() {
                    continue;
                }
                let before = match counted.get(&node) {
                    Some(b) => *b,
                    None => raw(free, node),
                };
                free.give(h, m, k, node);
                let after = match counted.get_mut(&node) {
                    Some(slot) => {
                        *slot = capped(free, node, end);
                        *slot
                    }
                    None => raw(free, node),
                };
                if let Some(g) = add(&mut room, node, after, before).filter(|_| may_start) {
                    // Members of one event may grow several groups: the first wins.
                    found = found.or(Some((end, g, (end, h, m))));
                }
            }
        }
        if found.is_none() && !from_passed {
            found = at_from(free, &mut counted, &mut room);
        }
        let (start, g, key) = found.filter(|f| cut.is_none_or(|c| f.2 < c))?;
        // The nodes that hold the members, roomiest first (ties by number). Only a node with a slot now,
        // one the walk touched, or a booked one can have room.
        let mut candidates: Vec<usize> = index
            .roomy
            .get(g)
            .into_iter()
            .flatten()
            .chain(free.touched())
            .chain(counted.keys())
            .copied()
            .filter(|n| group_of(*n) == Some(g))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let mut nodes: Vec<(u64, usize)> = candidates
            .into_iter()
            .map(|n| match counted.get(&n) {
                Some(c) => (*c, n),
                None => (raw(free, n), n),
            })
            .filter(|(s, _)| *s > 0)
            .collect();
        nodes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut need = members;
        let mut chosen = Vec::new();
        // A job booked in the last plan lands where it was booked, where those nodes
        // hold it at this start: jobs placed since beside the bookings (on room they
        // left spare) may have made other nodes a tighter fit, and moving this booking
        // there would take the room the bookings after it were promised.
        if !prefer.is_empty() {
            let (mut booked, others): (Vec<_>, Vec<_>) = nodes
                .into_iter()
                .partition(|(_, n)| prefer.binary_search(n).is_ok());
            best_fit(&mut booked, &mut need, &mut chosen, free);
            nodes = others;
        }
        best_fit(&mut nodes, &mut need, &mut chosen, free);
        Some(Walked {
            start,
            landing: chosen,
            group: g,
            key,
        })
    }
}

/// Best fit: what is left of `need` goes on the tightest of `nodes` (member slots, node;
/// roomiest first) that holds all of it, else the roomiest takes its share. A booking
/// then leaves the nodes with more room (or room sooner) to the jobs after it, as
/// Slurm's best fit does, and a later cycle that sees the same room books the same nodes.
fn best_fit<F: WalkFree>(
    nodes: &mut Vec<(u64, usize)>,
    need: &mut u64,
    chosen: &mut Vec<Landing>,
    free: &F,
) {
    while *need > 0 && !nodes.is_empty() {
        let tightest = nodes.iter().map(|(s, _)| *s).filter(|s| *s >= *need).min();
        let at = nodes
            .iter()
            .position(|(s, _)| Some(*s) == tightest)
            .unwrap_or(0);
        let (s, n) = nodes.remove(at);
        chosen.push(Landing {
            node: n,
            members: s.min(*need),
            whole_free: free.whole_free(n),
        });
        *need = need.saturating_sub(s);
    }
}
