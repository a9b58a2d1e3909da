//! The cycle's caches, apart from the rules they speed up. Each one remembers what a rule
//! worked out, or keeps an index of it up to date, so that a later question (in this cycle
//! or, through a kept [`super::PlacementDecider`], the next) is answered without working it
//! out again. None may change a plan: each says at its top when what it holds goes stale,
//! and each can be switched off on a thread ([`keep_nothing`],
//! [`memos_off`], [`crate::decide::find_victims_afresh`]) for the tests that
//! compare a cycle through it with one that works everything out afresh.
//!
//! Kept from cycle to cycle by a `PlacementDecider` (off: [`keep_nothing`], every
//! cycle starts as `decide_placement` does):
//! - `core::placer::PlacerState` — the placer's class and topology indexes, for one fleet
//!   and MIG table; stale when either changes (compared, or the fleet's `Arc` shared).
//! - [`job_memo`] — each job state's team and tier indexes, by the caller's revision.
//! - [`typical_memo`] — the typical workload, from each job's remembered shape.
//! - [`running_carry`] — the running batch's quota and fair-share charges.
//! - [`buffers`] — the lists that grow with the running jobs, kept for their room only.
//! - [`seq_memo`] — the by-revision table the three above keep their answers in.
//!
//! Within one cycle (off: [`memos_off`], each answer worked out where asked):
//! - [`shape_memo`] — per queue shape: shapes for which no victim set existed (stale once
//!   the change logs move), shapes that did not fit (stale once a victim is released or,
//!   for a fit that delayed bookings, once the allocation changes), and ETAs (stale once
//!   the allocation changes).
//! - [`walk_memo`] — earliest-start walks, reused while the winning group is unchanged.
//! - `Cycle::room_cache` (`reserve.rs`'s room indexes, which hold the walk memos) — room
//!   per shape for the walks, caught up from the cycle's change log at each use.
//! - `lending_wait::LendingWaits` — when the cohort can lend, stale once holders or
//!   releases change.
//! - `Cycle::gang_ceilings`, `guarantee_blocks`, `quota_words` — per-cycle texts and
//!   limits that depend only on the policy, the fleet and their key.
//!
//! Victim search (off: [`crate::decide::find_victims_afresh`]; [`crate::decide::check_victim_indexes`]
//! compares every index with a fresh one as it catches up): `victim_cost::CostIndex`,
//! each node's cheapest victim set by kind of asker, caught up from the cycle's change log,
//! and `victim_reach.rs`, which logs the nodes a team's changed standing alters.

use super::test_switches::{self, Switch};

/// For tests, on this thread: a [`super::PlacementDecider`] keeps nothing from one cycle
/// for the next (the kept caches above are off), so each of its cycles is
/// `decide_placement`'s.
#[doc(hidden)]
pub fn keep_nothing(on: bool) {
    test_switches::set(Switch::KeepNothing, on);
}

/// For tests, on this thread: the caches within a cycle are off (each lookup misses, and
/// every answer is worked out where it is asked for).
#[doc(hidden)]
pub fn memos_off(on: bool) {
    test_switches::set(Switch::MemosOff, on);
}

pub(super) fn memos_are_off() -> bool {
    test_switches::is_on(Switch::MemosOff)
}

pub(super) fn nothing_is_kept() -> bool {
    test_switches::is_on(Switch::KeepNothing)
}

pub(super) mod buffers;
pub(super) mod job_memo;
pub(super) mod running_carry;
pub(super) mod seq_memo;
pub(super) mod shape_memo;
pub(super) mod typical_memo;
pub(super) mod walk_memo;
