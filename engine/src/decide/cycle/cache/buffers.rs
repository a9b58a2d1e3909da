//! [`Buffers`]: the cycle's lists that grow with the running jobs, handed by a kept
//! [`super::super::PlacementDecider`] from one cycle to the next so they keep their room. Grown afresh
//! each cycle, their entries were written to cold memory: a quarter of the time spent
//! holding a running job went to storing its holder.
//!
//! Stale when: never; they hold room, not answers (each cycle clears them before use).
//! Off: [`super::keep_nothing`].

use super::super::holder_lists::HolderLists;
use super::super::holding::Holder;
use crate::core::placer::RunningMember;

/// Empty lists with the room the last cycle grew. They hold no borrowed data between
/// cycles (see [`recycle`]), hence the `'static` item types.
#[derive(Debug, Default)]
pub(in crate::decide::cycle) struct Buffers {
    pub holders: Vec<Holder<'static>>,
    pub running: Vec<RunningMember<'static>>,
    pub holders_on: HolderLists,
    pub protected_on: HolderLists,
    pub holders_of: HolderLists,
    /// Running jobs' teams and tiers until their holder records are written.
    pub unrecorded: Vec<(Option<usize>, Option<&'static lang::ir::Tier>)>,
}

/// An empty vector with `v`'s room, for items of another type of the same size and
/// alignment (here: the same type borrowing for another lifetime). The standard library
/// collects a consumed vector's iterator into its own allocation when the layouts
/// match; nothing is converted, as no item is left. Otherwise it allocates afresh.
pub(in crate::decide::cycle) fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

#[cfg(test)]
mod tests {
    use super::recycle;

    #[test]
    fn a_recycled_vector_is_empty_and_keeps_its_room_across_lifetimes() {
        let text = String::from("borrowed");
        let mut v: Vec<&str> = Vec::with_capacity(100);
        v.push(&text);
        let kept: Vec<&'static str> = recycle(v);
        assert!(kept.is_empty());
        assert!(kept.capacity() >= 100, "room kept: {}", kept.capacity());
        drop(text);
        let again: Vec<&str> = recycle(kept);
        assert!(again.is_empty() && again.capacity() >= 100);
    }
}
