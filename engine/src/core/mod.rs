//! The pure decision core: fleet model, allocation state and placement strategies. Nothing
//! here reads files, clocks or the network; randomness comes from a seeded generator passed
//! in, so the same inputs give the same placements.

pub mod alloc;
pub mod fleet;
pub mod frag;
pub mod packing;
pub mod rng;
