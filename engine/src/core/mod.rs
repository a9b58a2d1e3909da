//! The pure decision core: fleet model, allocation state, placement strategies and gang
//! placement. Nothing here reads files, clocks or the network; randomness comes from a
//! seeded generator, so the same inputs give the same placements.

pub mod alloc;
pub mod buckets;
mod classes;
pub mod declared;
pub mod fleet;
pub mod frag;
pub mod gang;
mod group_free;
pub mod mig;
pub mod natural;
pub mod packing;
pub mod placer;
pub mod rng;
