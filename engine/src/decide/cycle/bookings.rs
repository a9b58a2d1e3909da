//! Conservative backfill's reservations (`backfill = conservative(depth = K)`): the first
//! K jobs blocked on capacity each book GPUs on the nodes that will hold them, from their
//! earliest start (given the running jobs' estimates and the bookings before them) to
//! their expected end. A job may start now, or be booked later, only where it delays none:
//! on a booked node it may use only the whole GPUs that every overlapping booking leaves
//! spare at its start. Bookings count whole GPUs per node, not whole nodes (Slurm books
//! whole nodes); a GPU share counts as one whole GPU on both sides (a share may take a
//! free GPU). A booking of MIG instances holds the slots they take at its start
//! (`mig_hold.rs`), counted as their GPUs by whole-GPU jobs. EASY's one reservation is
//! booked the same way.

use crate::core::alloc::Request;
use crate::core::fleet::MILLI;
use crate::core::mig::SlotMask;
use crate::core::placer::Choice;
use std::collections::BTreeMap;

/// What one booking holds on one node.
#[derive(Debug, Clone)]
pub(super) struct NodeBooking {
    /// Whole GPUs it takes there (`u64::MAX`: the whole node).
    pub gpus: u64,
    /// Whole GPUs free on the node at the booking's start by the running jobs' estimates,
    /// less those of jobs started since that run past it.
    pub free_at_start: u64,
    /// A booking of MIG instances: the GPU slots they take at its start (`gpus` counts
    /// their GPUs). Empty otherwise.
    pub mig_slots: Vec<(usize, SlotMask)>,
}

#[derive(Debug, Clone)]
pub(super) struct Booking {
    pub job: String,
    pub start_at: i64,
    /// From when it holds its GPUs: its start, or for a job that starts by preempting,
    /// when it preempts (its victims stop within their grace on GPUs it then holds, and
    /// a job there that ends later would keep it from preempting).
    pub held_from: i64,
    /// `None`: the job gives no runtime, so the booking never ends.
    pub ends_at: Option<i64>,
    pub nodes: BTreeMap<usize, NodeBooking>,
    /// The holders it preempts (by number): their GPUs count free at its start.
    pub victims: Vec<usize>,
}

impl Booking {
    fn overlaps(&self, from: i64, until: Option<i64>) -> bool {
        until.is_none_or(|u| self.held_from < u) && self.ends_at.is_none_or(|e| from < e)
    }

    /// Pushes the times after `now` where a job of `runtime` starting then begins or
    /// stops overlapping this booking (number `i`).
    fn boundaries(&self, i: usize, now: i64, runtime: Option<i64>, out: &mut Vec<(i64, usize)>) {
        // A start at t overlaps from t > start - runtime (never later, without one).
        if let Some(rt) = runtime {
            let begins = self.held_from.saturating_sub(rt);
            if begins >= now {
                out.push((begins.saturating_add(1), i));
            }
        }
        if let Some(e) = self.ends_at.filter(|e| *e > now) {
            out.push((e, i));
        }
    }
}

/// The whole GPUs a member of `r` counts for in bookings: its GPUs, or one for a share
/// (it may take a whole free GPU); `None` for MIG instances and CPU only.
pub(super) fn booked_gpus(r: &Request) -> Option<u64> {
    if r.mig_profile.is_some() || r.num_gpu == 0 {
        return None;
    }
    Some(if r.gpu_milli >= MILLI {
        u64::from(r.num_gpu)
    } else {
        1
    })
}

#[derive(Debug, Default, Clone)]
pub(super) struct Bookings {
    pub list: Vec<Booking>,
    /// Bookings by node, for the checks of one node.
    by_node: BTreeMap<usize, Vec<usize>>,
}

impl Bookings {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_booked(&self, node: usize) -> bool {
        self.by_node.contains_key(&node)
    }

    /// The booking on `node` that ends last, with its end (`None`: it never ends);
    /// `None` when nothing is booked there.
    pub fn last_end_on(&self, node: usize) -> Option<(usize, Option<i64>)> {
        self.by_node
            .get(&node)?
            .iter()
            .filter_map(|i| Some((*i, self.list.get(*i)?.ends_at)))
            .max_by_key(|(i, end)| (end.unwrap_or(i64::MAX), *i))
    }

    pub fn booked_nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_node.keys().copied()
    }

    pub fn push(&mut self, booking: Booking) {
        let ix = self.list.len();
        for n in booking.nodes.keys() {
            self.by_node.entry(*n).or_default().push(ix);
        }
        self.list.push(booking);
    }

    /// Whole GPUs booked on `node` at time `at`.
    fn booked_at(&self, on_node: &[usize], node: usize, at: i64) -> u64 {
        on_node
            .iter()
            .filter_map(|i| self.list.get(*i))
            .filter(|o| o.held_from <= at && o.ends_at.is_none_or(|e| at < e))
            .filter_map(|o| o.nodes.get(&node))
            .fold(0u64, |sum, nb| sum.saturating_add(nb.gpus))
    }

    /// Whole GPUs of `node` a job running over [`from`, `until`) may take without
    /// delaying a booking, given `free_from` whole GPUs free there at `from`: `None` when
    /// no booking there overlaps it (no limit). Free GPUs only grow over a walk, so the
    /// tight points are `from` itself and the starts of the bookings inside the interval.
    /// A job that itself frees `freed(t)` more whole GPUs there by a booking's start `t`
    /// than that booking counted free (its victims, preempted before then, which would
    /// have run past it) may take them too.
    pub fn spare_freeing(
        &self,
        node: usize,
        (from, until): (i64, Option<i64>),
        free_from: u64,
        freed: &dyn Fn(&Booking) -> u64,
    ) -> Option<u64> {
        let on_node = self.by_node.get(&node)?;
        let now_booked = self.booked_at(on_node, node, from);
        let mut spare = (now_booked > 0).then(|| free_from.saturating_sub(now_booked));
        for b in on_node.iter().filter_map(|i| self.list.get(*i)) {
            let inside = b.held_from > from && until.is_none_or(|u| b.held_from < u);
            let Some(mine) = b.nodes.get(&node).filter(|_| inside) else {
                continue;
            };
            let left = mine
                .free_at_start
                .saturating_add(freed(b))
                .saturating_sub(self.booked_at(on_node, node, b.held_from));
            spare = Some(spare.map_or(left, |s| s.min(left)));
        }
        spare
    }

    /// Member slots of `r` on `node` given `raw` slots and `free_from` whole free GPUs on
    /// its free resources, for a job over [`from`, `until`): capped by the spare whole
    /// GPUs; none for MIG instances where a booking overlaps.
    pub fn cap(
        &self,
        node: usize,
        (raw, free_from): (u64, u64),
        r: &Request,
        from: i64,
        until: Option<i64>,
    ) -> u64 {
        self.cap_freeing(node, (raw, free_from), r, (from, until), &|_| 0)
    }

    /// [`Bookings::cap`] for a job that frees `freed(t)` more whole GPUs by a booking's
    /// start `t` (see [`Bookings::spare_freeing`]).
    pub fn cap_freeing(
        &self,
        node: usize,
        (raw, free_from): (u64, u64),
        r: &Request,
        (from, until): (i64, Option<i64>),
        freed: &dyn Fn(&Booking) -> u64,
    ) -> u64 {
        if r.num_gpu == 0 {
            return raw;
        }
        // A MIG member is held by bookings of MIG instances (it goes around their slots,
        // see `held_mig_slots`) and of whole nodes, not by bookings of whole GPUs.
        if r.mig_profile.is_some() {
            let held = self.by_node.get(&node).into_iter().flatten().any(|i| {
                self.list.get(*i).is_some_and(|b| {
                    b.overlaps(from, until)
                        && b.nodes
                            .get(&node)
                            .is_some_and(|nb| !nb.mig_slots.is_empty() || nb.gpus == u64::MAX)
                })
            });
            return if held { 0 } else { raw };
        }
        let spare = self.spare_freeing(node, (from, until), free_from, freed);
        match (spare, booked_gpus(r)) {
            (None, _) => raw,
            (Some(spare), Some(per)) => raw.min(spare / per),
            (Some(_), None) => 0,
        }
    }

    /// Whether one member of `r` may start on `node` now and run until `until`. A MIG
    /// member where only MIG bookings overlap it may: it must fit around their slots
    /// (the caller checks that on the node's state).
    pub fn allows(&self, node: usize, r: &Request, now: i64, until: Option<i64>) -> bool {
        if r.mig_profile.is_some() && self.held_mig_slots(node, now, until).is_some() {
            return true;
        }
        // Nothing is booked before its start, and every start is later than now.
        self.cap(node, (1, u64::MAX), r, now, until) > 0
    }

    /// The slots held on `node` by the bookings of MIG instances that overlap [`from`,
    /// `until`); `None` when none does, or a booking that holds the whole node does.
    /// Bookings of whole GPUs are passed over: GPUs in MIG mode serve MIG instances only,
    /// so the GPUs they book are never a MIG member's.
    pub fn held_mig_slots(
        &self,
        node: usize,
        from: i64,
        until: Option<i64>,
    ) -> Option<Vec<(usize, SlotMask)>> {
        let mut held = Vec::new();
        for b in self
            .by_node
            .get(&node)?
            .iter()
            .filter_map(|i| self.list.get(*i))
        {
            let Some(nb) = b.nodes.get(&node).filter(|_| b.overlaps(from, until)) else {
                continue;
            };
            if !nb.mig_slots.is_empty() {
                held.extend(nb.mig_slots.iter().copied());
            } else if nb.gpus == u64::MAX {
                return None;
            }
        }
        (!held.is_empty()).then_some(held)
    }

    /// The first node where `choices` take more than the bookings leave spare.
    pub fn violated(
        &self,
        r: &Request,
        choices: &[Choice],
        now: i64,
        until: Option<i64>,
    ) -> Option<usize> {
        self.violated_freeing(r, choices, (now, until), &|_, _| 0)
    }

    /// [`Bookings::violated`] for a job whose victims free `freed(node, booking)` more
    /// whole GPUs by a booking's start than it counted (see [`Bookings::spare_freeing`]).
    pub fn violated_freeing(
        &self,
        r: &Request,
        choices: &[Choice],
        (now, until): (i64, Option<i64>),
        freed: &dyn Fn(usize, &Booking) -> u64,
    ) -> Option<usize> {
        // Called for every placement: nothing to count without bookings (EASY).
        if self.by_node.is_empty() {
            return None;
        }
        let mut per_node: BTreeMap<usize, u64> = BTreeMap::new();
        for c in choices {
            *per_node.entry(c.node).or_default() += 1;
        }
        // MIG members around MIG bookings' slots are steered by the caller.
        per_node
            .into_iter()
            .filter(|(n, _)| {
                r.mig_profile.is_none() || self.held_mig_slots(*n, now, until).is_none()
            })
            .find(|(n, members)| {
                let freed = |b: &Booking| freed(*n, b);
                self.cap_freeing(*n, (*members, u64::MAX), r, (now, until), &freed) < *members
            })
            .map(|(n, _)| n)
    }

    /// Victim `h`'s `gpus` whole GPUs on `node` free from `at` (it was to run until
    /// `until`): the bookings there that start from then on, and counted them busy (not
    /// their own victim), have that many more free at their start.
    pub fn freed(&mut self, node: usize, (h, gpus): (usize, u64), at: i64, until: Option<i64>) {
        let Some(on_node) = self.by_node.get(&node) else {
            return;
        };
        for i in on_node {
            let Some(b) = self.list.get_mut(*i) else {
                continue;
            };
            let busy = until.is_none_or(|u| u > b.held_from) && !b.victims.contains(&h);
            if b.held_from >= at && busy {
                if let Some(nb) = b.nodes.get_mut(&node) {
                    nb.free_at_start = nb.free_at_start.saturating_add(gpus);
                }
            }
        }
    }

    /// A job started now over [`now`, `until`) on `choices`: the bookings it overlaps
    /// have that many fewer free GPUs at their start.
    pub fn started(&mut self, r: &Request, choices: &[Choice], now: i64, until: Option<i64>) {
        let Some(per) = booked_gpus(r) else {
            return;
        };
        for c in choices {
            let Some(on_node) = self.by_node.get(&c.node) else {
                continue;
            };
            for i in on_node {
                let Some(b) = self.list.get_mut(*i) else {
                    continue;
                };
                if !b.overlaps(now, until) {
                    continue;
                }
                if let Some(nb) = b.nodes.get_mut(&c.node) {
                    nb.free_at_start = nb.free_at_start.saturating_sub(per);
                }
            }
        }
    }

    /// Times in a walk over [`now`, …) at which a job of runtime `runtime` (`None`: no
    /// estimate) starts or stops overlapping a booking, with that booking's nodes: its
    /// spare changes there.
    pub fn boundaries(&self, now: i64, runtime: Option<i64>) -> Vec<(i64, usize)> {
        let mut out = Vec::new();
        for (i, b) in self.list.iter().enumerate() {
            b.boundaries(i, now, runtime, &mut out);
        }
        out.sort_unstable();
        out
    }

    /// [`Bookings::boundaries`] of the bookings on `node` only.
    pub fn boundaries_on(&self, node: usize, now: i64, runtime: Option<i64>) -> Vec<(i64, usize)> {
        let mut out = Vec::new();
        for &i in self.by_node.get(&node).into_iter().flatten() {
            if let Some(b) = self.list.get(i) {
                b.boundaries(i, now, runtime, &mut out);
            }
        }
        out.sort_unstable();
        out
    }

    /// `runtime` as far as walks from `now` can tell it apart: a job that runs past every
    /// booking's start overlaps each of them wherever it starts, as one without an
    /// estimate does, so all such runtimes walk alike (`None`).
    pub fn runtime_seen(&self, now: i64, runtime: Option<i64>) -> Option<i64> {
        let latest = self.list.iter().map(|b| b.held_from).max()?;
        runtime.filter(|r| now.saturating_add(*r) <= latest)
    }

    /// What the bookings make of a job started now with `runtime`, as a key: which of
    /// them start before it ends (their count; with how many there are, since the list
    /// only grows). A start now checks a booking only by that, so jobs of one key may
    /// take the same GPUs now.
    pub fn start_now_key(&self, now: i64, runtime: Option<i64>) -> (usize, usize) {
        let ends = runtime.map_or(i64::MAX, |r| now.saturating_add(r));
        let before = self.list.iter().filter(|b| b.held_from < ends).count();
        (self.list.len(), before)
    }

    pub fn nodes_of(&self, booking: usize) -> impl Iterator<Item = usize> + '_ {
        self.list
            .get(booking)
            .into_iter()
            .flat_map(|b| b.nodes.keys().copied())
    }
}
