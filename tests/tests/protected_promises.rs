//! Reservations kept where the victims' protection binds: a low tier inside its
//! `min_runtime` fills the fleet, jobs and gangs of a tier that preempts it arrive over
//! time, and the replay decides at every arrival, end and `next_decision_at` (a
//! protection or a grace ending), as the queue controller and `simulate` do. The urgent
//! jobs are of one tier and team, so nothing may overtake one that holds a reservation:
//! each starts no later than the start it was promised, whether running jobs ending or
//! victims becoming preemptible made it wait.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::inventory::jobs_file::Job;
use proptest::prelude::*;
use replay::{fleet, job, replay_waking, Promises, ReplayStats};

mod replay;

/// (nodes, the low tier's `min_runtime` s, its grace s, the low jobs as (GPUs, runtime
/// s), the urgent jobs as (members, GPUs per member, runtime s, arrival s)).
type Case = (u32, u64, u64, Vec<(u32, u64)>, Vec<(u32, u32, u64, i64)>);

fn case_strategy() -> impl Strategy<Value = Case> {
    let size = || prop_oneof![Just(1u32), Just(2), Just(4), Just(8)];
    (
        1u32..4,
        60u64..3600,
        0u64..300,
        prop::collection::vec((size(), 3600u64..86_400), 1..16),
        prop::collection::vec(
            (
                prop_oneof![3 => Just(1u32), 1 => 2u32..4],
                size(),
                60u64..7200,
                1i64..4000,
            ),
            1..12,
        ),
    )
}

/// One case under `backfill = MODE`, its promises checked as `promises` says.
fn check(case: &Case, mode: &str, promises: Promises) -> Result<ReplayStats, TestCaseError> {
    let (nodes, min_runtime, grace, low, urgent) = case;
    let text = format!(
        "use std.nodes.{{dgx_h100}}\npool gpu {{ capacity = reserved; node = dgx_h100; nodes = {nodes} }}\n\
         tier urgent {{ priority = 900; preempt = never }}\n\
         tier batch {{ priority = 100; preempt = immediately; min_runtime = {min_runtime}s; grace = {grace}s; default = true }}\n\
         placement {{ backfill = {mode} }}\n"
    );
    let program = lang::check(&[("p.gantry".to_string(), text.clone())])
        .program
        .unwrap_or_else(|| panic!("the policy checks:\n{text}"));
    let mut jobs: Vec<Job> = low
        .iter()
        .enumerate()
        .map(|(i, (gpus, runtime))| job(format!("low{i}"), "batch", 1, *gpus, *runtime, 0))
        .collect();
    jobs.extend(
        urgent
            .iter()
            .enumerate()
            .map(|(i, (members, gpus, runtime, at))| {
                job(format!("u{i}"), "urgent", *members, *gpus, *runtime, *at)
            }),
    );
    replay_waking(&program, &fleet(*nodes), jobs, promises)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn reservations_by_preempting_are_kept(case in case_strategy()) {
        check(&case, "on", Promises::StrictFor("u"))?;
    }
}

/// Not vacuous: over a fixed run the urgent jobs preempt, and reservations are checked.
/// Under conservative backfill every waiting job is booked, and every booking of an
/// urgent job holds: those that count on preempting once a job it may not preempt ends,
/// or once another booking on the node ends, too.
#[test]
fn random_cases_preempt_and_check_reservations() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut preemptions, mut promises, mut booked) = (0, 0, 0);
    for _ in 0..40 {
        let case = case_strategy().new_tree(&mut runner).unwrap().current();
        let s = check(&case, "on", Promises::StrictFor("u"))
            .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        preemptions += s.preemptions;
        promises += s.promises_checked;
        let s = check(&case, "conservative(depth = all)", Promises::StrictFor("u"))
            .unwrap_or_else(|e| panic!("conservative {case:?}: {e}"));
        booked += s.promises_checked;
    }
    eprintln!("conservative bookings of urgent jobs: {booked} checked");
    assert!(preemptions > 0, "no urgent job preempted");
    assert!(promises > 0, "no reservation was checked");
    assert!(booked >= 40, "only {booked} bookings checked");
}

/// Conservative backfill over many more random cases, in a fixed run: every booking of
/// an urgent job holds. A job that starts now by preempting takes the victims and nodes
/// its booking would (`preempt_as_booked.rs`); booked nodes count what the bookings
/// leave spare, time by time; victims free GPUs for the bookings that counted them busy.
#[test]
fn conservative_bookings_hold_over_many_random_cases() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig::default(),
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &[7; 32],
        ),
    );
    let mut booked = 0;
    for _ in 0..tests::cases(160) {
        let case = case_strategy().new_tree(&mut runner).unwrap().current();
        let s = check(&case, "conservative(depth = all)", Promises::StrictFor("u"))
            .unwrap_or_else(|e| panic!("conservative {case:?}: {e}"));
        booked += s.promises_checked;
    }
    eprintln!("conservative bookings of urgent jobs: {booked} checked");
    assert!(booked >= 160, "only {booked} bookings checked");
}
