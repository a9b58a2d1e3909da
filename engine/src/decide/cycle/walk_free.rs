//! The nodes' free state during an earliest-start walk, as running jobs end.
//!
//! A walk visits thousands of ends in time order, so reading each holder's choices and
//! job record and each node's `NodeFree` (all on the heap) cost several cache misses per
//! end. [`EndGives`] keeps what each holder gives back, flat and in end order, and
//! [`FlatFree`] keeps the walked nodes' free CPU, memory and milli-GPUs in flat arrays.
//! A request with a MIG profile (or a fleet with nodes of over 64 GPUs) walks the
//! `NodeFree` copies instead ([`NodeFreeWalk`]); both count member slots alike.

use super::holding::Holder;
use crate::core::alloc::{NodeFree, Request};
use crate::core::fleet::{Node, MILLI};
use crate::core::gang;
use crate::core::mig::SlotMask;
use crate::core::packing::Context;
use crate::core::placer::give_on;

/// What one member of a holder gives back to its node when the holder ends.
#[derive(Debug, Clone, Copy)]
struct Give {
    node: u32,
    /// Milli-GPUs per GPU in `gpus` (0 for MIG members: they give CPU and memory only).
    milli: u32,
    /// The GPUs, as bits by index.
    gpus: u64,
    cpu_milli: u64,
    memory_mib: u64,
}

/// Every holder's members as gives, built with the cycle's end index: holders in end
/// order first (a walk then reads them in sequence), later holders as they come.
#[derive(Debug, Default)]
pub(super) struct EndGives {
    /// Per holder, its range in `gives` (empty until indexed).
    span: Vec<(u32, u32)>,
    gives: Vec<Give>,
    /// Per holder, whether it was evicted this cycle (a copy of the holder's flag the
    /// walk reads without touching the holder).
    evicted: Vec<bool>,
    /// Every give's GPUs fit a bit set and none repeats: [`FlatFree`] may be used.
    flat: bool,
}

impl EndGives {
    /// Indexes the holders in `order` (those with an expected end), in that order.
    pub(super) fn build(holders: &[Holder<'_>], order: impl Iterator<Item = usize>) -> Self {
        let members: usize = holders.iter().map(|h| h.choices.len()).sum();
        let mut gives = EndGives {
            span: vec![(0, 0); holders.len()],
            gives: Vec::with_capacity(members),
            evicted: holders.iter().map(|h| h.evicted).collect(),
            flat: true,
        };
        for h in order {
            if let Some(holder) = holders.get(h) {
                gives.index(h, holder);
            }
        }
        gives
    }

    /// Indexes holder `h` (a new one, or one not yet indexed).
    pub(super) fn index(&mut self, h: usize, holder: &Holder<'_>) {
        if self.span.len() <= h {
            self.span.resize(h + 1, (0, 0));
            self.evicted.resize(h + 1, false);
        }
        let r = holder.member();
        let from = self.gives.len() as u32;
        for c in holder.choices.iter() {
            let mut gpus = 0u64;
            for g in &c.on.gpus {
                let bit = u32::try_from(*g).ok().and_then(|g| 1u64.checked_shl(g));
                match bit {
                    Some(b) if gpus & b == 0 => gpus |= b,
                    _ => self.flat = false,
                }
            }
            self.gives.push(Give {
                node: u32::try_from(c.node).unwrap_or(u32::MAX),
                milli: if r.mig_profile.is_some() {
                    0
                } else {
                    r.gpu_milli
                },
                gpus: if r.mig_profile.is_some() { 0 } else { gpus },
                cpu_milli: r.cpu_milli,
                memory_mib: r.memory_mib,
            });
        }
        if let (Some(s), Some(e)) = (self.span.get_mut(h), self.evicted.get_mut(h)) {
            *s = (from, self.gives.len() as u32);
            *e = holder.evicted;
        }
    }

    pub(super) fn evict(&mut self, h: usize) {
        if let Some(e) = self.evicted.get_mut(h) {
            *e = true;
        }
    }

    pub(super) fn is_evicted(&self, h: usize) -> bool {
        self.evicted.get(h).copied().unwrap_or(true)
    }

    /// Holder `h`'s members: their positions here and their nodes.
    pub(super) fn members(&self, h: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (from, to) = self.span.get(h).copied().unwrap_or((0, 0));
        let gives = self.gives.get(from as usize..to as usize).unwrap_or(&[]);
        gives
            .iter()
            .enumerate()
            .map(move |(k, g)| (from as usize + k, g.node as usize))
    }

    pub(super) fn flat(&self) -> bool {
        self.flat
    }
}

/// The free state a walk reads and changes.
pub(super) trait WalkFree {
    /// Starts a walk: every node as it is now.
    fn begin(&mut self);
    /// Member slots of node `n` once the walk changed it; `None` while it is as now.
    fn slots(&self, n: usize) -> Option<u64>;
    /// Whole free GPUs of node `n` at this point of the walk.
    fn whole_free(&self, n: usize) -> u64;
    /// Gives back member `k` of [`EndGives`] (member `m` of holder `h`) on node `n`.
    fn give(&mut self, h: usize, m: usize, k: usize, n: usize);
    /// The nodes the walk changed.
    fn touched(&self) -> &[usize];
    /// Member slots of node `n` at this point of the walk around MIG slots `held` (by
    /// bookings of MIG instances): only MIG requests ask, and they walk `NodeFree`s.
    fn slots_around(&self, _n: usize, _held: &[(usize, SlotMask)]) -> u64 {
        0
    }
}

/// Copies of the nodes an earliest-start walk has touched, kept between walks so their
/// buffers are reused: an entry is current only when its mark is the walk's.
#[derive(Debug, Default)]
pub(super) struct WalkScratch {
    walk: u32,
    nodes: Vec<(u32, NodeFree, u64)>,
    /// The nodes this walk has copied.
    touched: Vec<usize>,
}

/// A walk over `NodeFree` copies: any request, MIG profiles included.
pub(super) struct NodeFreeWalk<'w, 'a> {
    pub scratch: &'w mut WalkScratch,
    pub holders: &'w [Holder<'a>],
    pub ctx: Context<'a>,
    pub nodes: &'a [Node],
    pub now_free: &'w [NodeFree],
    pub empty: &'w [NodeFree],
    pub member: &'w Request,
}

impl WalkFree for NodeFreeWalk<'_, '_> {
    fn begin(&mut self) {
        let s = &mut *self.scratch;
        s.walk = s.walk.wrapping_add(1);
        s.touched.clear();
        if s.walk == 0 || s.nodes.len() != self.empty.len() {
            s.walk = 1;
            s.nodes = match self.empty.first() {
                Some(blank) => vec![(0, blank.clone(), 0); self.empty.len()],
                None => Vec::new(),
            };
        }
    }

    fn slots(&self, n: usize) -> Option<u64> {
        let s = &self.scratch;
        s.nodes.get(n).filter(|e| e.0 == s.walk).map(|e| e.2)
    }

    fn whole_free(&self, n: usize) -> u64 {
        let s = &self.scratch;
        let f = match s.nodes.get(n).filter(|e| e.0 == s.walk) {
            Some((_, f, _)) => Some(f),
            None => self.now_free.get(n),
        };
        f.map_or(0, |f| {
            f.gpu_milli.iter().filter(|m| **m >= MILLI).count() as u64
        })
    }

    fn give(&mut self, h: usize, m: usize, _k: usize, n: usize) {
        let Some(holder) = self.holders.get(h) else {
            return;
        };
        let Some(c) = holder.choices.get(m) else {
            return;
        };
        let s = &mut *self.scratch;
        let walk = s.walk;
        if let (Some(node), Some(cap), Some(current), Some(entry)) = (
            self.nodes.get(n),
            self.empty.get(n),
            self.now_free.get(n),
            s.nodes.get_mut(n),
        ) {
            if entry.0 != walk {
                entry.0 = walk;
                entry.1.copy_from(current);
                s.touched.push(n);
            }
            give_on(&self.ctx, node, &mut entry.1, holder.member(), &c.on, cap);
            entry.2 = gang::member_slots(&self.ctx, node, &entry.1, self.member);
        }
    }

    fn touched(&self) -> &[usize] {
        &self.scratch.touched
    }

    fn slots_around(&self, n: usize, held: &[(usize, SlotMask)]) -> u64 {
        let s = &self.scratch;
        let (Some(node), Some(f)) = (
            self.nodes.get(n),
            match s.nodes.get(n).filter(|e| e.0 == s.walk) {
                Some((_, f, _)) => Some(f),
                None => self.now_free.get(n),
            },
        ) else {
            return 0;
        };
        let mut f = f.clone();
        for (gpu, mask) in held {
            f.take_mig(*gpu, *mask);
        }
        gang::member_slots(&self.ctx, node, &f, self.member)
    }
}

/// The walked nodes' free CPU, memory and milli-GPUs in flat arrays, and the fleet's
/// capacities alike (built on a cycle's first walk).
#[derive(Debug, Default)]
pub(super) struct FlatFree {
    /// Per node, where its GPUs start in the per-GPU arrays (one past the last node's
    /// end at the end).
    first_gpu: Vec<u32>,
    cap_cpu: Vec<u64>,
    cap_memory: Vec<u64>,
    cap_milli: Vec<u32>,
    vram_mib: Vec<u64>,
    walk: u32,
    mark: Vec<u32>,
    cpu: Vec<u64>,
    memory: Vec<u64>,
    milli: Vec<u32>,
    slots: Vec<u64>,
    touched: Vec<usize>,
}

impl FlatFree {
    /// Lays out the fleet's capacities, once per cycle.
    pub(super) fn lay_out(&mut self, empty: &[NodeFree]) {
        if self.first_gpu.len() == empty.len() + 1 {
            return;
        }
        let mut first = 0u32;
        for e in empty {
            self.first_gpu.push(first);
            first += e.gpu_milli.len() as u32;
            self.cap_cpu.push(e.cpu_milli);
            self.cap_memory.push(e.memory_mib);
            self.cap_milli.extend_from_slice(&e.gpu_milli);
            self.vram_mib
                .extend((0..e.gpu_milli.len()).map(|g| e.vram_mib.get(g).copied().unwrap_or(0)));
        }
        self.first_gpu.push(first);
        self.mark = vec![0; empty.len()];
        self.cpu = vec![0; empty.len()];
        self.memory = vec![0; empty.len()];
        self.slots = vec![0; empty.len()];
        self.milli = vec![0; first as usize];
    }

    fn gpus(&self, n: usize) -> std::ops::Range<usize> {
        let from = self.first_gpu.get(n).copied().unwrap_or(0) as usize;
        let to = self.first_gpu.get(n + 1).copied().unwrap_or(0) as usize;
        from..to.max(from)
    }
}

/// A walk over [`FlatFree`]: requests without a MIG profile.
pub(super) struct FlatWalk<'w> {
    pub flat: &'w mut FlatFree,
    pub gives: &'w EndGives,
    pub now_free: &'w [NodeFree],
    pub member: &'w Request,
    /// Per node, whether the member's models allow it.
    pub accepts: &'w [bool],
}

impl FlatWalk<'_> {
    /// [`gang::member_slots`] on node `n`'s flat state (no MIG profile).
    fn member_slots(&self, n: usize) -> u64 {
        let f = &self.flat;
        let r = self.member;
        if !self.accepts.get(n).copied().unwrap_or(false) {
            return 0;
        }
        let per = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
        let range = f.gpus(n);
        let milli = f.milli.get(range.clone()).unwrap_or(&[]);
        let vram = f.vram_mib.get(range).unwrap_or(&[]);
        let serving = milli
            .iter()
            .zip(vram)
            .filter(|(m, v)| **m >= r.gpu_milli && (**v == 0 || **v >= r.vram_mib))
            .map(|(m, _)| *m);
        let by_gpu = if r.num_gpu == 0 {
            u64::MAX
        } else if r.is_share() {
            serving.map(|m| u64::from(m / r.gpu_milli.max(1))).sum()
        } else {
            serving.count() as u64 / u64::from(r.num_gpu)
        };
        let cpu = f.cpu.get(n).copied().unwrap_or(0);
        let memory = f.memory.get(n).copied().unwrap_or(0);
        by_gpu
            .min(per(cpu, r.cpu_milli))
            .min(per(memory, r.memory_mib))
    }
}

impl WalkFree for FlatWalk<'_> {
    fn begin(&mut self) {
        let f = &mut *self.flat;
        f.walk = f.walk.wrapping_add(1);
        f.touched.clear();
        if f.walk == 0 {
            f.walk = 1;
            f.mark.iter_mut().for_each(|m| *m = 0);
        }
    }

    fn slots(&self, n: usize) -> Option<u64> {
        let f = &self.flat;
        (f.mark.get(n) == Some(&f.walk))
            .then(|| f.slots.get(n).copied())
            .flatten()
    }

    fn whole_free(&self, n: usize) -> u64 {
        let f = &self.flat;
        if f.mark.get(n) == Some(&f.walk) {
            let milli = f.milli.get(f.gpus(n)).unwrap_or(&[]);
            return milli.iter().filter(|m| **m >= MILLI).count() as u64;
        }
        self.now_free.get(n).map_or(0, |f| {
            f.gpu_milli.iter().filter(|m| **m >= MILLI).count() as u64
        })
    }

    fn give(&mut self, _h: usize, _m: usize, k: usize, n: usize) {
        let Some(give) = self.gives.gives.get(k).copied() else {
            return;
        };
        let f = &mut *self.flat;
        let range = f.gpus(n);
        if f.mark.get(n) != Some(&f.walk) {
            let Some(current) = self.now_free.get(n) else {
                return;
            };
            if let (Some(mark), Some(cpu), Some(memory), Some(milli)) = (
                f.mark.get_mut(n),
                f.cpu.get_mut(n),
                f.memory.get_mut(n),
                f.milli.get_mut(range.clone()),
            ) {
                *mark = f.walk;
                *cpu = current.cpu_milli;
                *memory = current.memory_mib;
                for (to, from) in milli.iter_mut().zip(&current.gpu_milli) {
                    *to = *from;
                }
            }
            f.touched.push(n);
        }
        if let (Some(cpu), Some(memory), Some(cap_cpu), Some(cap_memory)) = (
            f.cpu.get_mut(n),
            f.memory.get_mut(n),
            f.cap_cpu.get(n),
            f.cap_memory.get(n),
        ) {
            *cpu = (*cpu + give.cpu_milli).min(*cap_cpu);
            *memory = (*memory + give.memory_mib).min(*cap_memory);
        }
        if give.gpus != 0 {
            if let (Some(milli), Some(cap)) =
                (f.milli.get_mut(range.clone()), f.cap_milli.get(range))
            {
                for (g, (m, c)) in milli.iter_mut().zip(cap).enumerate().take(64) {
                    if give.gpus & (1u64 << g) != 0 {
                        *m = (*m + give.milli).min(*c);
                    }
                }
            }
        }
        let s = self.member_slots(n);
        if let Some(slot) = self.flat.slots.get_mut(n) {
            *slot = s;
        }
    }

    fn touched(&self) -> &[usize] {
        &self.flat.touched
    }
}
