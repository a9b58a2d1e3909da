//! The placement part of a decision cycle, `decide_placement(&Program, &Snapshot, now)`:
//! pure and deterministic (`cycle::decide` runs it, then autoscaling). Admission rules, then the queue in order (tier priority, fair share, submit time), each
//! job placed whole or not at all within its quotas, with preemption of lower tiers and
//! reclaim of borrowed capacity where the policy allows, and backfill around the head
//! blocked job's reservation. Every job that is not placed gets a reason.

pub mod admission;
mod bucket_map;
mod cycle;
pub mod fairshare;
pub mod plan;
pub mod quota;
mod quota_block;
pub mod scale_memory;
pub mod snapshot;
pub mod usage;

pub use cycle::{
    apply_policy_topology, decide_placement, default_job, invalid_job, placement_story,
    unassigned_job, Placement, PlacementDecider,
};
#[doc(hidden)]
pub use cycle::{
    check_victim_indexes, find_victims_afresh, keep_nothing, memos_off, record_holders_at_once,
};
