//! Earliest-start walks that are kept and reused within a cycle (`walk_memo.rs`): gangs
//! that must share one NVLink domain wait behind running jobs of known runtimes, and the
//! walks for their ETAs and reservations are asked again after placements change a few
//! domains. Debug builds check every reused walk, and every walk over the changed
//! domains alone, against a full walk (`earliest_start`); these cases make many of them.
//! A plan must also be the same when decided twice.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Node};
use engine::core::gang::JobShape;
use engine::core::mig::MigTable;
use engine::decide::plan::Plan;
use engine::decide::snapshot::Snapshot;
use engine::inventory::catalog;
use engine::inventory::jobs_file::Job;
use lang::ir::TopologyLevel;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

#[derive(Debug, Clone)]
struct Spec {
    tier: usize,
    members: u32,
    gpus: u32,
    /// Must share one NVLink domain (gangs only).
    domain: bool,
    runtime: Option<u64>,
}

const TIERS: [&str; 2] = ["critical", "standard"];

fn spec() -> impl Strategy<Value = Spec> {
    (
        0usize..2,
        prop_oneof![3 => Just(1u32), 2 => 2u32..5],
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        prop::bool::weighted(0.7),
        prop::option::of(600u64..40_000),
    )
        .prop_map(|(tier, members, gpus, domain, runtime)| Spec {
            tier,
            members,
            gpus,
            domain: domain && members > 1,
            runtime,
        })
}

fn job(i: usize, prefix: &str, s: &Spec, at: i64) -> Job {
    Job {
        id: format!("{prefix}{i}"),
        team: Some("t".to_string()),
        tier: Some(TIERS[s.tier].to_string()),
        submitted_at: Some(at + i as i64),
        runtime_s: s.runtime,
        shape: JobShape {
            members: s.members,
            member: Request {
                cpu_milli: 4_000,
                memory_mib: 16_384,
                num_gpu: s.gpus,
                gpu_milli: 1000,
                ..Request::default()
            },
            topology_required: s.domain.then_some(TopologyLevel::NvlinkDomain),
            ..JobShape::default()
        },
        ..Job::default()
    }
}

/// `nodes` nodes in NVLink domains of `per_domain`.
fn fleet(nodes: u32, per_domain: u32) -> Fleet {
    Fleet {
        nodes: (0..nodes)
            .map(|i| {
                let mut n =
                    Node::uniform(&format!("n{i}"), 224_000, 2_097_152, 8, "H100-SXM5-80GB");
                n.pool = Some("gpu".into());
                n.labels
                    .insert("nvlink_domain".into(), format!("d{}", i / per_domain));
                n
            })
            .collect(),
    }
}

fn program(nodes: u32, backfill: &str) -> lang::ir::Program {
    let text = format!(
        "use std.nodes.{{dgx_h100}}\nuse std.tiers\npool gpu {{ capacity = reserved; node = dgx_h100; nodes = {nodes} }}\nplacement {{ backfill = {backfill} }}\nteam t {{ guaranteed = 0 gpu }}\n"
    );
    let checked = lang::check(&[("p.gantry".to_string(), text)]);
    checked.program.expect("the policy checks")
}

fn decide(program: &lang::ir::Program, fleet: Fleet, jobs: Vec<Job>, now: i64) -> Plan {
    let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &mig).unwrap();
    engine::cycle::decide(program, &snapshot, now)
}

type Case = (u32, u32, usize, Vec<Spec>, Vec<Spec>);

fn case() -> impl Strategy<Value = Case> {
    (
        6u32..24,
        2u32..5,
        0usize..3,
        prop::collection::vec(spec(), 4..30),
        prop::collection::vec(spec(), 4..40),
    )
}

/// Cycle 1 fills the empty fleet; its placements run with their runtimes, and cycle 2
/// decides a new queue behind them (with ETAs and reservations for what waits).
fn check(case: &Case) -> Result<usize, TestCaseError> {
    let (nodes, per_domain, mode, first, second) = case;
    let backfill = ["on", "off", "conservative(depth = 8)"][*mode];
    let program = program(*nodes, backfill);
    let fleet = || fleet(*nodes, *per_domain);
    let jobs1: Vec<Job> = first
        .iter()
        .enumerate()
        .map(|(i, s)| job(i, "a", s, 0))
        .collect();
    let plan1 = decide(&program, fleet(), jobs1.clone(), 1000);
    let mut jobs2 = Vec::new();
    for d in &plan1.decisions {
        let job = jobs1.iter().find(|j| j.id == d.job).unwrap();
        jobs2.extend(d.started(job, 1000));
    }
    jobs2.extend(second.iter().enumerate().map(|(i, s)| job(i, "b", s, 1500)));
    let plan = decide(&program, fleet(), jobs2.clone(), 5000);
    let again = decide(&program, fleet(), jobs2, 5000);
    prop_assert_eq!(&plan, &again, "same inputs, same plan");
    Ok(plan
        .decisions
        .iter()
        .filter(|d| d.reason.as_ref().is_some_and(|r| r.eta_s.is_some()))
        .count())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(tests::cases(64)))]

    #[test]
    fn kept_walks_match_full_ones(case in case()) {
        check(&case)?;
    }
}

/// The cases above do wait with estimates: a sample of them gives many ETAs.
#[test]
fn random_cases_wait_with_estimates() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut etas = 0;
    for _ in 0..64 {
        let case = case().new_tree(&mut runner).unwrap().current();
        etas += check(&case).unwrap();
    }
    assert!(etas > 100, "only {etas} waiting jobs had an estimate");
}
