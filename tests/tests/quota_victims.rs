//! Quota victim searches over many candidates: a team near its burst with up to 150
//! running jobs of mixed tiers, lost work and checkpoints, asked for more by its own
//! higher tiers. The search reads each team's candidates in a per-cycle order instead of
//! ranking all of them; debug builds (these tests) compare the two at every search, and
//! here the plan must keep the victim rules: victims of the asker's own team, of a lower
//! tier, rule 1's protections, the burst, and the cheapest victims first.

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
use engine::decide::plan::Action;
use engine::decide::snapshot::Snapshot;
use engine::inventory::catalog;
use engine::inventory::jobs_file::{Job, PlacedMember};
use proptest::prelude::*;
use std::collections::BTreeMap;

const NODES: u32 = 24;
const NOW: i64 = 10_000;
const BURST: u64 = 150;
const POLICY: &str = "use std.nodes.{dgx_h100}
use std.tiers
pool gpu { capacity = reserved; node = dgx_h100; nodes = 24 }
cohort c {
  team t0 { guaranteed = 40 gpu; burst = 150 gpu }
  team t1 { guaranteed = 40 gpu }
  team t2 { guaranteed = 40 gpu }
}
";

/// A running one-GPU job of team t0: (tier: 1 standard, 2 best_effort; started, seconds
/// since its last checkpoint if it took one).
type RunningSpec = (usize, i64, Option<i64>);
/// A pending job: (team, tier: 0 critical, 1 standard; GPUs).
type PendingSpec = (usize, usize, u32);

fn tier_name(t: usize) -> &'static str {
    ["critical", "standard", "best_effort"][t]
}

fn priority(tier: &str) -> i64 {
    match tier {
        "critical" => 1000,
        "standard" => 500,
        _ => 100,
    }
}

fn jobs(running: &[RunningSpec], pending: &[PendingSpec]) -> Vec<Job> {
    let one_gpu = |gpus: u32| JobShape {
        members: 1,
        member: Request {
            cpu_milli: 1_000,
            memory_mib: 4_096,
            num_gpu: gpus,
            gpu_milli: 1000,
            ..Request::default()
        },
        ..JobShape::default()
    };
    let mut out: Vec<Job> = running
        .iter()
        .enumerate()
        .map(|(i, (tier, started, since_checkpoint))| Job {
            id: format!("r{i:03}"),
            team: Some("t0".into()),
            tier: Some(tier_name(*tier).into()),
            submitted_at: Some(*started),
            runtime_s: Some(40_000),
            shape: one_gpu(1),
            placement: vec![PlacedMember {
                node: format!("n{}", i / 8),
                gpus: vec![(i % 8) as u32],
                gpu_milli: None,
                mig_starts: Vec::new(),
            }],
            started_at: Some(*started),
            last_checkpoint_at: since_checkpoint.map(|s| (NOW - s).max(*started)),
            ..Job::default()
        })
        .collect();
    out.extend(
        pending
            .iter()
            .enumerate()
            .map(|(i, (team, tier, gpus))| Job {
                id: format!("p{i:02}"),
                team: Some(format!("t{team}")),
                tier: Some(tier_name(*tier).into()),
                submitted_at: Some(NOW - 100 + i as i64),
                runtime_s: Some(3_600),
                shape: one_gpu(*gpus),
                ..Job::default()
            }),
    );
    out
}

fn fleet() -> Fleet {
    Fleet {
        nodes: (0..NODES)
            .map(|i| {
                let mut n =
                    Node::uniform(&format!("n{i}"), 224_000, 2_097_152, 8, "H100-SXM5-80GB");
                n.pool = Some("gpu".into());
                n
            })
            .collect(),
    }
}

fn case_strategy() -> impl Strategy<Value = (Vec<RunningSpec>, Vec<PendingSpec>)> {
    (
        prop::collection::vec(
            (
                prop_oneof![1 => Just(1usize), 2 => Just(2usize)],
                0i64..9_000,
                prop::option::of(0i64..3_000),
            ),
            100..=150,
        ),
        prop::collection::vec(
            (
                prop_oneof![3 => Just(0usize), 1 => Just(1usize)],
                0usize..2,
                prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
            ),
            1..10,
        ),
    )
}

/// Decides one case and checks the victim rules; returns how many jobs were preempted.
fn check(running: &[RunningSpec], pending: &[PendingSpec]) -> Result<usize, TestCaseError> {
    let program = lang::check(&[("p.gantry".to_string(), POLICY.to_string())])
        .program
        .expect("the test policy checks");
    let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
    let jobs = jobs(running, pending);
    let snapshot = Snapshot::build(fleet(), jobs.clone(), Vec::new(), &mig).unwrap();
    let plan = engine::cycle::decide(&program, &snapshot, NOW);
    prop_assert_eq!(&plan, &engine::cycle::decide(&program, &snapshot, NOW));
    let by_id: BTreeMap<&str, &Job> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    let gpus = |j: &Job| u64::from(j.shape.member.num_gpu);
    // Team t0's usage after the plan stays within its burst, unless it started above.
    let running_t0 = running.len() as u64;
    let mut t0 = running_t0;
    for p in &plan.preemptions {
        let victim = by_id[p.job.as_str()];
        let asker = by_id[p.for_job.as_str()];
        prop_assert_eq!(victim.team.as_deref(), Some("t0"));
        let (vt, at) = (
            victim.tier.as_deref().unwrap(),
            asker.tier.as_deref().unwrap(),
        );
        if asker.team.as_deref() == Some("t0") {
            prop_assert!(
                priority(vt) < priority(at),
                "{} ({vt}) for {} ({at})",
                p.job,
                p.for_job
            );
        }
        // Rule 1: a standard job inside its 10-minute minimum, or past 15 minutes of
        // lost work, is never a victim; unless its team borrows (t0 runs more than its
        // 40 GPUs) and it is past max_lost by reclaim_within (default: 15m more).
        if vt == "standard" {
            let started = victim.started_at.unwrap();
            let since = victim.last_checkpoint_at.unwrap_or(started).max(started);
            let borrowing = running_t0 > 40;
            prop_assert!(
                NOW - started >= 600 && (NOW - since <= 900 || (borrowing && NOW - since >= 1800)),
                "{} protected",
                p.job
            );
        }
        t0 -= gpus(victim);
    }
    for d in plan.decisions.iter().filter(|d| d.action == Action::Place) {
        let j = by_id[d.job.as_str()];
        if j.team.as_deref() == Some("t0") {
            t0 += gpus(j);
        }
    }
    prop_assert!(t0 <= BURST.max(running_t0), "t0 uses {t0} GPUs");
    // Rule 4 for a single one-GPU victim: none cheaper of the same team and a lower tier
    // was left running, unless that one was protected or taken by another job.
    for p in &plan.preemptions {
        let asker = by_id[p.for_job.as_str()];
        let victims: Vec<&str> = plan
            .preemptions
            .iter()
            .filter(|q| q.for_job == p.for_job)
            .map(|q| q.job.as_str())
            .collect();
        if victims.len() != 1 || asker.team.as_deref() != Some("t0") || gpus(asker) != 1 {
            continue;
        }
        let lost = |j: &Job| {
            let started = j.started_at.unwrap();
            NOW - j.last_checkpoint_at.unwrap_or(started).max(started)
        };
        let victim = by_id[p.job.as_str()];
        let at = priority(asker.tier.as_deref().unwrap());
        let cheaper = jobs.iter().filter(|j| j.started_at.is_some()).find(|j| {
            j.tier.as_deref() == Some("best_effort")
                && priority("best_effort") < at
                && lost(j) < lost(victim)
                && !plan.preemptions.iter().any(|q| q.job == j.id)
        });
        prop_assert!(
            cheaper.is_none() || victim.tier.as_deref() != Some("best_effort"),
            "{} preempted {} but {:?} lost less",
            p.for_job,
            p.job,
            cheaper.map(|j| &j.id)
        );
    }
    Ok(plan.preemptions.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(24), ..ProptestConfig::default() })]

    #[test]
    fn quota_victims_among_many_candidates_keep_the_rules(case in case_strategy()) {
        check(&case.0, &case.1)?;
    }
}

/// The generator is not vacuous: over a fixed run, the team's own higher tiers preempt.
#[test]
fn many_candidate_cases_preempt() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut preempted = 0;
    for _ in 0..12 {
        let case = case_strategy().new_tree(&mut runner).unwrap().current();
        preempted += check(&case.0, &case.1).unwrap();
    }
    assert!(preempted > 0, "no case preempted");
}
