//! Decision-cycle speed: 1,000 nodes × 8 H100, 4,000 running and 5,000 pending jobs of 20
//! teams in 3 cohorts (plus 2 standalone teams), three tiers, backfill on. The running
//! jobs come from a first cycle on the empty fleet (setup, not measured); the measured
//! cycle orders, quota-checks, places, preempts and explains the 5,000 pending jobs.
//! Target: under 50 ms on one core (issue 4).

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

use criterion::{criterion_group, criterion_main, Criterion};

mod common;
use common::{fleet, shape};
use engine::core::mig::MigTable;
use engine::core::rng::Rng;
use engine::decide::plan::Action;
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::Job;
use lang::ir::Program;
use std::hint::black_box;

const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];

fn policy() -> Program {
    let mut text = String::from(
        "use std.nodes.{dgx_h100}\nuse std.tiers\n\
         pool train { capacity = reserved; node = dgx_h100; nodes = 1000 }\n\
         placement { backfill = on; gang_timeout = 30m }\n",
    );
    for c in 0..3 {
        text.push_str(&format!(
            "cohort c{c} {{\n  fair_share = drf\n  half_life = 7d\n"
        ));
        for t in 0..6 {
            text.push_str(&format!(
                "  team t{c}_{t} {{ guaranteed = 360 gpu; burst = 720 gpu; lend = 180 gpu }}\n"
            ));
        }
        text.push_str("}\n");
    }
    text.push_str("team solo_a { guaranteed = 400 gpu; burst = 600 gpu }\n");
    text.push_str("team solo_b { guaranteed = 400 gpu }\n");
    let checked = lang::check(&[("bench.gantry".to_string(), text)]);
    match checked.program {
        Some(p) => p,
        None => panic!("bench policy does not check: {:?}", checked.diagnostics),
    }
}

fn teams(program: &Program) -> Vec<String> {
    program.teams.iter().map(|t| t.name.clone()).collect()
}

/// Job mixes: running jobs are smaller on average so 4,000 of them fit the fleet.
fn jobs(
    n: usize,
    prefix: &str,
    at: i64,
    teams: &[String],
    rng: &mut Rng,
    running: bool,
) -> Vec<Job> {
    (0..n)
        .map(|i| {
            let kind = if running {
                rng.below(75)
            } else {
                rng.below(100)
            };
            let (members, num_gpu, gpu_milli, topology) = match kind {
                0..=39 => (1, 1, 1000, None),
                40..=54 => (1, 1, 250 * (1 + rng.below(3) as u32), None),
                55..=64 if running => (1, 2, 1000, None),
                65..=74 if running => (1, 4, 1000, None),
                55..=74 => (1, 2 << rng.below(2), 1000, None),
                75..=92 => (1, 8, 1000, None),
                _ => (2, 8, 1000, Some(lang::ir::TopologyLevel::NvlinkDomain)),
            };
            Job {
                id: format!("{prefix}{i}"),
                team: teams.get(rng.below(teams.len())).cloned(),
                tier: Some(TIERS[rng.below(3)].to_string()),
                submitted_at: Some(at + i as i64),
                runtime_s: Some(600 + rng.below(86_400) as u64),
                shape: shape(members, num_gpu, gpu_milli, topology),
                ..Job::default()
            }
        })
        .collect()
}

/// 4,000 running jobs (placed by a first cycle) and 5,000 pending ones.
pub fn snapshot(program: &Program) -> Snapshot {
    let mut rng = Rng::new(7);
    let names = teams(program);
    let mig = MigTable::default();
    let first = jobs(4000, "run-", 0, &names, &mut rng, true);
    let empty = Snapshot::build(fleet(1000), first.clone(), Vec::new(), &mig)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let plan = engine::cycle::decide(program, &empty, 3600);
    let mut all = Vec::new();
    for d in &plan.decisions {
        let Some(mut j) = first
            .iter()
            .find(|j| j.id == d.job)
            .and_then(|j| d.started(j, 3600))
        else {
            continue;
        };
        j.last_checkpoint_at = Some(3600 + rng.below(3000) as i64);
        all.push(j);
    }
    all.extend(jobs(5000, "pend-", 4000, &names, &mut rng, false));
    Snapshot::build(fleet(1000), all, Vec::new(), &mig).unwrap_or_else(|e| panic!("{e:?}"))
}

fn bench(c: &mut Criterion) {
    let program = policy();
    let snap = snapshot(&program);
    let running = snap.jobs.iter().filter(|j| j.running.is_some()).count();
    let plan = engine::cycle::decide(&program, &snap, 7200);
    let placed = plan
        .decisions
        .iter()
        .filter(|d| d.action == Action::Place)
        .count();
    eprintln!(
        "decide: {running} running, {} pending: {placed} placed, {} preemptions, reservation {}",
        snap.jobs.len() - running,
        plan.preemptions.len(),
        plan.reservation.is_some()
    );
    let running_only = Snapshot {
        jobs: snap
            .jobs
            .iter()
            .filter(|j| j.running.is_some())
            .cloned()
            .collect(),
        ..snap.clone()
    };
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    group.bench_function("1000x8_4000_running_only", |b| {
        b.iter(|| engine::cycle::decide(black_box(&program), black_box(&running_only), 7200))
    });
    group.sample_size(10);
    group.bench_function("1000x8_4000_running_5000_pending", |b| {
        b.iter(|| engine::cycle::decide(black_box(&program), black_box(&snap), 7200))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
