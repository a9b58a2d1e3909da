//! The kept cost indexes and victim memos (and the memo of shapes that did not fit)
//! against a search afresh for every job, on
//! issue 20's realistic mix (`benches/common/mix.rs`). The property tests' fleets are too
//! small for a team's standing to change between two reads of one index; here teams cross
//! their guarantees per pool many times a cycle, and debug builds also check each victim
//! set tried against one worked out afresh.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "test code: a broken fixture should fail the test"
)]

#[path = "../benches/common/mod.rs"]
mod common;

use common::mix::{policy, snapshots, NOW};
use engine::decide::plan::Plan;

/// The first decision (or the preemptions, or the reservation) where two plans differ.
fn first_difference(a: &Plan, b: &Plan) -> String {
    if let Some((x, y)) = a.decisions.iter().zip(&b.decisions).find(|(x, y)| x != y) {
        return format!("kept: {x:?}\nafresh: {y:?}");
    }
    format!(
        "{} vs {} decisions, {} vs {} preemptions",
        a.decisions.len(),
        b.decisions.len(),
        a.preemptions.len(),
        b.preemptions.len()
    )
}

/// Decides `n` nodes of the mix with `backfill` both ways and compares.
fn kept_equals_afresh(n: usize, backfill: &str) {
    let program = policy(n, backfill);
    let (snapshot, _) = snapshots(n, &program, n * 4);
    let kept = engine::decide::decide(&program, &snapshot, NOW);
    engine::decide::find_victims_afresh(true);
    let afresh = engine::decide::decide(&program, &snapshot, NOW);
    engine::decide::find_victims_afresh(false);
    assert!(
        kept.preemptions.len() > n / 4,
        "{n} nodes: only {} preemptions; the mix no longer exercises victim search",
        kept.preemptions.len()
    );
    assert!(
        kept == afresh,
        "{n} nodes, backfill {backfill}: the kept victim indexes change the plan\n{}",
        first_difference(&kept, &afresh)
    );
}

#[test]
fn kept_victim_indexes_choose_what_a_search_afresh_chooses() {
    // Sizes at which indexes that missed standing changes chose victims rule 3 forbids
    // (200), and a victimless memo kept past changes turned jobs away (300).
    for n in [200, 300, 400] {
        kept_equals_afresh(n, "on");
    }
}

/// Conservative backfill's bookings change which nodes a job may take as jobs start
/// (`Bookings::started` takes their GPUs from the bookings' spare): the memo of shapes
/// that did not fit must still hold, since that only takes room away.
#[test]
fn with_bookings_too() {
    kept_equals_afresh(200, "conservative(depth = 100)");
}
