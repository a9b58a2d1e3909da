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

use common::mix::{policy_with, running_job, snapshots, NOW};
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
    kept_equals_afresh_with(n, backfill, false);
}

/// [`kept_equals_afresh`], the teams guaranteed per pool or `overall`.
fn kept_equals_afresh_with(n: usize, backfill: &str, overall: bool) {
    let program = policy_with(n, backfill, overall);
    let (snapshot, _) = snapshots(n, &program, n * 4);
    compare(
        &program,
        &snapshot,
        &format!("{n} nodes, backfill {backfill}"),
        n / 4,
    );
}

/// Decides `snapshot` with the kept indexes (each catch-up checked node by node, not
/// only the sets a search tries) and afresh, and compares; at least `preemptions` must
/// be made for the case to exercise victim search. The kept plan.
fn compare(
    program: &lang::ir::Program,
    snapshot: &engine::decide::snapshot::Snapshot,
    case: &str,
    preemptions: usize,
) -> Plan {
    engine::decide::check_victim_indexes(true);
    let kept = engine::cycle::decide(program, snapshot, NOW);
    engine::decide::check_victim_indexes(false);
    engine::decide::find_victims_afresh(true);
    let afresh = engine::cycle::decide(program, snapshot, NOW);
    engine::decide::find_victims_afresh(false);
    assert!(
        kept.preemptions.len() > preemptions,
        "{case}: only {} preemptions; the case no longer exercises victim search",
        kept.preemptions.len()
    );
    assert!(
        kept == afresh,
        "{case}: the kept victim indexes change the plan\n{}",
        first_difference(&kept, &afresh)
    );
    kept
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

/// Teams guaranteed one total cross it with nearly every job placed or evicted: each
/// start or stop of borrowing is read narrowly by priority askers (`victim_reach.rs`:
/// only nodes with one of the team's jobs small enough, or whose set held one of its
/// jobs), which must choose what a search afresh chooses.
#[test]
fn teams_guaranteed_one_total_too() {
    for n in [200, 300] {
        kept_equals_afresh_with(n, "on", true);
    }
}

/// The queue benchmark's shape at a smaller scale: five teams of one cohort, each
/// borrowing one GPU past its guarantee (and a sixth holding none of its own, whose jobs
/// reclaim), running 1- and 2-GPU jobs of two tiers that fill
/// about 90% of the fleet, and a queue of three tiers (1–8 GPUs and gangs) whose
/// placements and evictions push each team across its guarantee again and again, so that
/// priority askers read many starts and stops of borrowing.
fn at_guarantee(n: usize, seed: u64) -> (lang::ir::Program, engine::decide::snapshot::Snapshot) {
    use engine::core::rng::Rng;
    use engine::inventory::jobs_file::Job;
    let tiers = ["critical", "standard", "best_effort"];
    let mut rng = Rng::new(seed);
    let mut jobs = Vec::new();
    let mut held = [0u32; 5];
    for node in 0..n {
        let mut used = 0u32;
        let target = 6 + rng.below(3) as u32;
        while used < target {
            let want = [1u32, 1, 2][rng.below(3)].min(target - used);
            let k = jobs.len();
            let tier = tiers[1 + rng.below(2)];
            let j = running_job(
                k,
                Some(format!("t{}", k % 5)),
                tier,
                (node, used..used + want),
                &mut rng,
            );
            used += want;
            held[k % 5] += want;
            jobs.push(j);
        }
    }
    for i in 0..n * 5 {
        let (members, gpus) = match rng.below(10) {
            0 => (2 + rng.below(3) as u32, 8),
            _ => (1, [1u32, 2, 4, 8][rng.below(4)]),
        };
        jobs.push(Job {
            id: format!("pend-{i}"),
            // A sixth team holds nothing of its guarantee: its jobs reclaim.
            team: Some(format!("t{}", rng.below(6))),
            tier: Some(tiers[rng.below(3)].to_string()),
            submitted_at: Some(NOW - 3_600 + i as i64),
            runtime_s: Some(600 + rng.below(86_400) as u64),
            shape: common::shape(members, gpus, 1000, None),
            ..Job::default()
        });
    }
    let mut text = String::from(
        "use std.nodes.{dgx_h100}\nuse std.tiers\nplacement { backfill = on }\ncohort c {\n",
    );
    for (t, held) in held.iter().enumerate() {
        let g = held.saturating_sub(1);
        text.push_str(&format!(
            "  team t{t} {{ guaranteed = {g} gpu; burst = {} gpu; lend = {} gpu }}\n",
            g * 3,
            g / 2
        ));
    }
    text.push_str(&format!("  team t5 {{ guaranteed = {} gpu }}\n", n / 3));
    text.push_str(&format!(
        "}}\npool train {{ capacity = reserved; node = dgx_h100; nodes = {n} }}\n"
    ));
    let checked = lang::check(&[("at_guarantee.gantry".to_string(), text)]);
    let Some(program) = checked.program else {
        panic!("{:?}", checked.diagnostics);
    };
    let snapshot = engine::decide::snapshot::Snapshot::build(
        common::fleet_in_pools(n, |_| "train"),
        jobs,
        Vec::new(),
        &engine::core::mig::MigTable::default(),
    )
    .unwrap_or_else(|e| panic!("{:?}", e.first()));
    (program, snapshot)
}

/// Teams sitting at their guarantee cross it with nearly every job placed or evicted:
/// each start or stop of borrowing is read narrowly by priority askers (`victim_reach.rs`:
/// only nodes where one of the team's jobs is small enough, or whose set held one of its
/// jobs), and the kept indexes must still choose what a search afresh chooses.
#[test]
fn teams_at_their_guarantee_cross_it_many_times() {
    for (n, seed) in [(60, 1), (120, 2), (200, 3)] {
        let (program, snapshot) = at_guarantee(n, seed);
        compare(
            &program,
            &snapshot,
            &format!("{n} nodes, seed {seed}"),
            n / 2,
        );
    }
}
