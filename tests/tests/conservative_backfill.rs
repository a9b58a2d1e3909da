//! Conservative backfill keeps its promises: with `backfill = conservative(depth = all)`,
//! a job submitted after the others may start only where it delays none of their
//! reservations. Over random running jobs and queues: a first cycle books the queue, a
//! late job arrives in the second, a third runs with whatever the late job took; no
//! reservation of the first cycle starts later in the second or the third.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Node};
use engine::core::gang::JobShape;
use engine::core::mig::MigTable;
use engine::decide::plan::{Action, Decision, Plan};
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::Job;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::collections::BTreeMap;

const POLICY: &str = "use std.nodes.{dgx_h100}\nuse std.tiers\n\
    pool gpu { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
    team a { guaranteed = 32 gpu }\n\
    placement { backfill = conservative(depth = all); backfill_window = 7d }\n";

const NOW: i64 = 1_000;

/// (members, GPUs per member, runtime in seconds).
type Spec = (u32, u32, u64);

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![4 => Just(1u32), 1 => Just(2u32)],
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        600u64..20_000,
    )
}

fn fleet() -> Fleet {
    Fleet {
        nodes: (0..4)
            .map(|i| {
                let mut n =
                    Node::uniform(&format!("n{i}"), 224_000, 2_097_152, 8, "H100-SXM5-80GB");
                n.pool = Some("gpu".into());
                n
            })
            .collect(),
    }
}

fn job(id: String, (members, gpus, runtime): Spec, submitted: i64) -> Job {
    Job {
        id,
        team: Some("a".into()),
        tier: Some("standard".into()),
        submitted_at: Some(submitted),
        runtime_s: Some(runtime),
        shape: JobShape {
            members,
            member: Request {
                num_gpu: gpus,
                gpu_milli: 1000,
                ..Request::default()
            },
            ..JobShape::default()
        },
        ..Job::default()
    }
}

fn decide(program: &lang::ir::Program, jobs: Vec<Job>) -> Plan {
    let snapshot = Snapshot::build(fleet(), jobs, Vec::new(), &MigTable::default()).unwrap();
    engine::cycle::decide(program, &snapshot, NOW)
}

/// `jobs` with the ones `plan` placed turned into running jobs started now.
fn started(jobs: &[Job], plan: &Plan) -> Vec<Job> {
    let by_id: BTreeMap<&str, &Decision> =
        plan.decisions.iter().map(|d| (d.job.as_str(), d)).collect();
    jobs.iter()
        .map(|j| {
            by_id
                .get(j.id.as_str())
                .and_then(|d| d.started(j, NOW))
                .unwrap_or_else(|| j.clone())
        })
        .collect()
}

/// Reservation starts by job.
fn starts(plan: &Plan) -> BTreeMap<String, i64> {
    plan.reservations
        .iter()
        .map(|b| (b.job.clone(), b.start_at))
        .collect()
}

/// Checks one case; whether the late job started beside reservations.
fn check(running: &[Spec], queue: &[Spec], late: Spec) -> Result<bool, TestCaseError> {
    let program = lang::check(&[("p.gantry".to_string(), POLICY.to_string())])
        .program
        .unwrap();
    // Running jobs: whatever a first cycle on the empty fleet placed, started a while ago.
    let first: Vec<Job> = running
        .iter()
        .enumerate()
        .map(|(i, s)| job(format!("r{i}"), *s, 0))
        .collect();
    let mut base = started(&first, &decide(&program, first.clone()));
    base.retain(|j| !j.placement.is_empty());
    for j in &mut base {
        j.started_at = Some(NOW - 300);
    }
    let pending: Vec<Job> = queue
        .iter()
        .enumerate()
        .map(|(i, s)| job(format!("q{i}"), *s, 10 + i as i64))
        .collect();
    let mut jobs = base;
    jobs.extend(pending);
    // Cycle 1 books the queue; its placements start.
    let first_plan = decide(&program, jobs.clone());
    let promised = starts(&first_plan);
    let mut jobs = started(&jobs, &first_plan);
    // Cycle 2: the late job arrives (at the same time, so no estimate moves).
    jobs.push(job("late".into(), late, 900));
    let second_plan = decide(&program, jobs.clone());
    let jobs = started(&jobs, &second_plan);
    // Cycle 3: whatever the late job took is running.
    let third_plan = decide(&program, jobs);
    for plan in [&second_plan, &third_plan] {
        let again = starts(plan);
        for d in plan.decisions.iter().filter(|d| d.action == Action::Queue) {
            let Some(at) = promised.get(&d.job) else {
                continue;
            };
            prop_assert!(
                again.get(&d.job).is_some_and(|t| t <= at),
                "{}: reserved at {at} before the late job arrived, {:?} after",
                d.job,
                again.get(&d.job)
            );
        }
    }
    let late_started = second_plan
        .decisions
        .iter()
        .any(|d| d.job == "late" && d.action == Action::Place);
    Ok(late_started && !promised.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(tests::cases(96)))]

    #[test]
    fn a_late_job_delays_no_reservation(
        running in prop::collection::vec(spec(), 2..10),
        queue in prop::collection::vec(spec(), 1..8),
        late in spec(),
    ) {
        check(&running, &queue, late)?;
    }
}

#[test]
fn random_cases_backfill_beside_reservations() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (
        prop::collection::vec(spec(), 2..10),
        prop::collection::vec(spec(), 1..8),
        spec(),
    );
    let mut backfilled = 0;
    for _ in 0..64 {
        let (running, queue, late) = strategy.new_tree(&mut runner).unwrap().current();
        backfilled += usize::from(check(&running, &queue, late).unwrap());
    }
    assert!(
        backfilled >= 8,
        "the late job started beside reservations in only {backfilled} of 64 cases"
    );
}
