//! Nodes grouped into classes of identical static kind and free resources, with each
//! node's class at hand: entering and leaving a class costs a hash of the node's free
//! state and no allocation unless the class is new (placement and preemption trials move
//! nodes between classes hundreds of thousands of times per cycle).

use super::alloc::NodeFree;
use super::packing::{OnNode, Score};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

#[derive(Debug)]
pub(crate) struct Class {
    /// Index of the nodes' static kind (GPU models, memory, islands, MIG mode).
    pub kind: u32,
    pub free: NodeFree,
    pub nodes: BTreeSet<usize>,
    /// The lowest of `nodes` (`usize::MAX` while empty), kept beside the set: `choose`
    /// reads it for every class and the set's first entry costs a walk down its tree.
    first: usize,
    pub before: Option<(f64, f64)>,
    /// By request id: `None` not evaluated yet; `Some(None)` does not fit.
    pub memo: Vec<Option<Option<(Score, OnNode)>>>,
}

impl Class {
    /// The class's lowest node (`usize::MAX` for an empty class).
    #[inline]
    pub fn first(&self) -> usize {
        debug_assert_eq!(
            self.first,
            self.nodes.first().copied().unwrap_or(usize::MAX),
            "a class's lowest node out of step"
        );
        self.first
    }

    pub fn get(&self, id: usize) -> Option<&Option<(Score, OnNode)>> {
        self.memo.get(id).and_then(Option::as_ref)
    }

    pub fn put(&mut self, id: usize, value: Option<(Score, OnNode)>) {
        if self.memo.len() <= id {
            self.memo.resize(id + 1, None);
        }
        if let Some(slot) = self.memo.get_mut(id) {
            *slot = Some(value);
        }
    }
}

/// The classes in a slab (ids are reused once a class empties), found by a hash of their
/// key; nodes point at their class by id.
#[derive(Debug, Default)]
pub(crate) struct ClassIndex {
    slab: Vec<Option<Class>>,
    vacant: Vec<usize>,
    by_hash: HashMap<u64, Vec<usize>>,
    class_of: Vec<Option<usize>>,
    /// Classes that emptied, by key hash, with their evaluations: a trial placement moves
    /// a node out of a class of its own and back, and nearly every class made in a cycle
    /// had been made before (15,169 of 15,675 at 12,500 nodes). A class made again takes
    /// its memo back instead of evaluating every request anew.
    emptied: HashMap<u64, Vec<Class>>,
    emptied_count: usize,
    /// Evaluation slots (`Class::memo` entries) the emptied classes hold.
    emptied_slots: usize,
}

/// Emptied classes kept at most; past it they are all dropped.
const EMPTIED_KEPT: usize = 4096;
/// Evaluation slots they may hold together (a memo is as long as the highest request id
/// evaluated on the class, ~80 bytes a slot): about 20 MB.
const EMPTIED_SLOTS: usize = 1 << 18;

/// FxHash-style mixing of a class key: deterministic and cheap; collisions are resolved by
/// comparing keys.
fn key_hash(kind: u32, free: &NodeFree) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = 0u64;
    let mut add = |v: u64| h = (h.rotate_left(5) ^ v).wrapping_mul(K);
    add(u64::from(kind));
    add(free.cpu_milli);
    add(free.memory_mib);
    for g in &free.gpu_milli {
        add(u64::from(*g));
    }
    for m in &free.mig {
        add(m.map_or(u64::MAX, u64::from));
    }
    for v in &free.vram_mib {
        add(*v);
    }
    h
}

impl ClassIndex {
    pub fn new(nodes: usize) -> ClassIndex {
        ClassIndex {
            class_of: vec![None; nodes],
            ..ClassIndex::default()
        }
    }

    /// Puts `node` in the class of (`kind`, `free`), making the class if it is new.
    pub fn enter(&mut self, node: usize, kind: u32, free: &NodeFree) {
        let hash = key_hash(kind, free);
        let chain = self.by_hash.entry(hash).or_default();
        let found = chain.iter().copied().find(|id| {
            self.slab
                .get(*id)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.kind == kind && c.free == *free)
        });
        let id = match found {
            Some(id) => id,
            None => {
                // A list left empty stays: its key tends to empty again, and its room is
                // reused then (dropping it cost an allocation per class made again).
                let again = self.emptied.get_mut(&hash).and_then(|list| {
                    let at = list
                        .iter()
                        .position(|c| c.kind == kind && c.free == *free)?;
                    Some(list.swap_remove(at))
                });
                let class = match again {
                    Some(class) => {
                        self.emptied_count -= 1;
                        self.emptied_slots -= class.memo.len();
                        class
                    }
                    None => Class {
                        kind,
                        free: free.clone(),
                        nodes: BTreeSet::new(),
                        first: usize::MAX,
                        before: None,
                        memo: Vec::new(),
                    },
                };
                let id = match self.vacant.pop() {
                    Some(id) => {
                        if let Some(slot) = self.slab.get_mut(id) {
                            *slot = Some(class);
                        }
                        id
                    }
                    None => {
                        self.slab.push(Some(class));
                        self.slab.len() - 1
                    }
                };
                chain.push(id);
                id
            }
        };
        if let Some(c) = self.slab.get_mut(id).and_then(Option::as_mut) {
            c.nodes.insert(node);
            c.first = c.first.min(node);
        }
        if let Some(slot) = self.class_of.get_mut(node) {
            *slot = Some(id);
        }
    }

    /// Takes `node` out of its class, dropping the class when it empties.
    pub fn leave(&mut self, node: usize) {
        let Some(id) = self.class_of.get_mut(node).and_then(Option::take) else {
            return;
        };
        let Some(slot) = self.slab.get_mut(id) else {
            return;
        };
        let Some(class) = slot.as_mut() else {
            return;
        };
        class.nodes.remove(&node);
        if let Some(first) = class.nodes.first() {
            if node == class.first {
                class.first = *first;
            }
            return;
        }
        let hash = key_hash(class.kind, &class.free);
        let emptied = slot.take();
        self.vacant.push(id);
        if let Some(chain) = self.by_hash.get_mut(&hash) {
            chain.retain(|c| *c != id);
            if chain.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
        if let Some(mut class) = emptied {
            let slots = class.memo.len();
            if slots > EMPTIED_SLOTS {
                return;
            }
            if self.emptied_count >= EMPTIED_KEPT || self.emptied_slots + slots > EMPTIED_SLOTS {
                self.forget_emptied();
            }
            class.first = usize::MAX;
            self.emptied.entry(hash).or_default().push(class);
            self.emptied_count += 1;
            self.emptied_slots += slots;
        }
    }

    /// Drops the emptied classes (their evaluations are for this cycle's workload).
    pub fn forget_emptied(&mut self) {
        self.emptied.clear();
        self.emptied_count = 0;
        self.emptied_slots = 0;
    }

    /// The class `node` is in.
    pub fn of_mut(&mut self, node: usize) -> Option<&mut Class> {
        let id = self.class_of.get(node).copied().flatten()?;
        self.slab.get_mut(id).and_then(Option::as_mut)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Class> {
        self.slab.iter().flatten()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Class> {
        self.slab.iter_mut().flatten()
    }

    /// [`ClassIndex::iter_mut`] with each class's slot, for [`ClassIndex::slot`].
    pub fn iter_mut_slots(&mut self) -> impl Iterator<Item = (usize, &mut Class)> {
        self.slab
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.as_mut()?)))
    }

    /// The class in `slot`, if any.
    pub fn slot(&self, slot: usize) -> Option<&Class> {
        self.slab.get(slot).and_then(Option::as_ref)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code")]
mod tests {
    use super::*;

    fn free(milli: u32) -> NodeFree {
        NodeFree {
            cpu_milli: 64_000,
            memory_mib: 512_000,
            gpu_milli: vec![milli; 8],
            mig: vec![None; 8],
            vram_mib: vec![81_920; 8],
        }
    }

    #[test]
    fn a_class_made_again_takes_its_evaluations_back() {
        let mut ix = ClassIndex::new(4);
        ix.enter(2, 0, &free(1000));
        ix.enter(0, 0, &free(1000));
        ix.of_mut(0).unwrap().put(3, None);
        assert_eq!(ix.of_mut(2).unwrap().first(), 0);
        ix.leave(0);
        assert_eq!(ix.of_mut(2).unwrap().first(), 2);
        ix.leave(2);
        // The same key again: the evaluation is back, the nodes are the new ones.
        ix.enter(1, 0, &free(1000));
        let again = ix.of_mut(1).unwrap();
        assert_eq!(again.get(3), Some(&None));
        assert_eq!((again.first(), again.nodes.len()), (1, 1));
        // Another key (or kind) starts without evaluations.
        ix.enter(2, 0, &free(500));
        ix.enter(3, 1, &free(1000));
        assert_eq!(ix.of_mut(2).unwrap().get(3), None);
        assert_eq!(ix.of_mut(3).unwrap().get(3), None);
        // Dropped when a kept placer resumes.
        ix.leave(1);
        ix.forget_emptied();
        ix.enter(1, 0, &free(1000));
        assert_eq!(ix.of_mut(1).unwrap().get(3), None);
    }

    #[test]
    fn emptied_classes_hold_a_bounded_number_of_evaluations() {
        let mut ix = ClassIndex::new(1);
        for m in 0..2_000u32 {
            ix.enter(0, 0, &free(m));
            // A late request id makes a long memo.
            ix.of_mut(0).unwrap().put(999, None);
            ix.leave(0);
            assert!(ix.emptied_slots <= EMPTIED_SLOTS);
            assert!(ix.emptied_count <= EMPTIED_KEPT);
        }
        assert!(ix.emptied_count > 0);
        // A memo longer than the bound is not kept at all.
        ix.enter(0, 0, &free(5_000));
        ix.of_mut(0).unwrap().put(EMPTIED_SLOTS, None);
        ix.leave(0);
        ix.enter(0, 0, &free(5_000));
        assert_eq!(ix.of_mut(0).unwrap().get(EMPTIED_SLOTS), None);
    }
}
