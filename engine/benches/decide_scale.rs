//! The decision cycle on realistic mixes as clusters grow (issue 20's generator):
//! N nodes × 8 H100 in two pools (train 3/4, infer 1/4; NVLink domains of 8 nodes, racks
//! of 32), about 60% of the GPUs held by running jobs, and 5N pending jobs — 1-GPU,
//! fractional, 2/4/8-GPU and gangs of 2–8 × 8 GPUs (half of them inside one NVLink
//! domain) — of 23 teams (three cohorts and two standalone teams), three tiers, a third of
//! the jobs pinned to a pool. Seeded: the same N gives the same snapshot.
//!
//! `cargo bench -p engine --bench decide_scale [-- N... [--backfill MODE] [--pending-per-node F] [--digest] [--once]]`
//! prints, per N
//! (with the policy's backfill MODE, `on` unless given), the time of one
//! `decide` (best of three runs, with the allocator the binary ships), what it placed, the time
//! divided by N·log2 N (flat means no worse than N log N), the time of the next cycle
//! through a `Decider` kept from this one when one job has arrived (checked to give
//! `decide`'s plan; the states carry revisions, as the replay's do), and the peak RSS so
//! far. `--digest` also prints, to stderr, a digest of each size's plan (as JSON), so two
//! builds can be checked to decide the same. `--once` runs one `decide` per N and no kept
//! cycle, for instruction counts under callgrind.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

// The allocator `gantry` ships with (engine/gantry/src/main.rs), with transparent huge
// pages as `gantry plan` and `serve` keep them (.cargo/config.toml, engine/src/pages.rs).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod common;
use common::{fleet_in_pools, peak_rss_mib, shape};
use engine::core::mig::MigTable;
use engine::core::rng::Rng;
use engine::decide::plan::Action;
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::{Job, PlacedMember};
use lang::ir::{Program, TopologyLevel};
use std::time::Instant;

const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];
const NOW: i64 = 86_400;

fn pool_of(i: usize) -> &'static str {
    if i % 4 == 3 {
        "infer"
    } else {
        "train"
    }
}

/// 23 teams whose guarantees add up to about the fleet.
fn policy(n: usize, backfill: &str) -> Program {
    let gpus = n * 8;
    let train = gpus * 3 / 4;
    let infer = gpus - train;
    let mut text = format!(
        "use std.nodes.{{dgx_h100}}\nuse std.tiers\n\
         pool train {{ capacity = reserved; node = dgx_h100; nodes = {} }}\n\
         pool infer {{ capacity = reserved; node = dgx_h100; nodes = {} }}\n\
         placement {{ backfill = {backfill}; gang_timeout = 30m }}\n",
        n - n / 4,
        n / 4
    );
    let per_train = train / 24;
    let per_infer = infer / 24;
    for c in 0..3 {
        text.push_str(&format!(
            "cohort c{c} {{\n  fair_share = drf\n  half_life = 7d\n"
        ));
        for t in 0..7 {
            text.push_str(&format!(
                "  team t{c}_{t} {{ guaranteed = [{per_train} gpu in train, {per_infer} gpu in infer]; burst = {} gpu; lend = {} gpu }}\n",
                (per_train + per_infer) * 3,
                per_train / 2
            ));
        }
        text.push_str("}\n");
    }
    text.push_str(&format!(
        "team solo_a {{ guaranteed = {per_train} gpu in train; burst = {} gpu }}\n",
        per_train * 2
    ));
    text.push_str(&format!(
        "team solo_b {{ guaranteed = {per_infer} gpu in infer }}\n"
    ));
    let checked = lang::check(&[("scale.gantry".to_string(), text)]);
    match checked.program {
        Some(p) => p,
        None => panic!("bench policy does not check: {:?}", checked.diagnostics),
    }
}

/// A pending job of the mix.
fn pending(i: usize, teams: &[String], rng: &mut Rng) -> Job {
    let (members, num_gpu, gpu_milli, topology) = match rng.below(100) {
        0..=34 => (1, 1, 1000, None),
        35..=49 => (1, 1, 250 * (1 + rng.below(3) as u32), None),
        50..=84 => (1, 2 << rng.below(3), 1000, None),
        85..=92 => (2 + rng.below(7) as u32, 8, 1000, None),
        _ => (
            2 + rng.below(7) as u32,
            8,
            1000,
            Some(TopologyLevel::NvlinkDomain),
        ),
    };
    let mut s = shape(members, num_gpu, gpu_milli, topology);
    if rng.below(3) == 0 {
        s.pools = vec![if rng.below(4) == 0 { "infer" } else { "train" }.to_string()];
    }
    Job {
        id: format!("pend-{i}"),
        team: teams.get(rng.below(teams.len())).cloned(),
        tier: Some(TIERS[rng.below(3)].to_string()),
        submitted_at: Some(NOW - 3_600 + (i % 3_600) as i64),
        runtime_s: Some(600 + rng.below(86_400) as u64),
        shape: s,
        ..Job::default()
    }
}

/// Running jobs filling each node's GPUs to about 60% (1, 2, 4 or 8 whole GPUs, first
/// fit), with explicit GPU indices.
fn running(n: usize, teams: &[String], rng: &mut Rng) -> Vec<Job> {
    let mut out = Vec::new();
    for node in 0..n {
        let mut used = 0u32;
        let target = if rng.below(2) == 0 {
            8
        } else {
            2 * rng.below(3) as u32
        };
        while used < target {
            let want = [1u32, 2, 4, 8][rng.below(4)].min(target - used);
            let mut j = Job {
                id: format!("run-{}", out.len()),
                team: teams.get(rng.below(teams.len())).cloned(),
                tier: Some(TIERS[rng.below(3)].to_string()),
                submitted_at: Some(NOW - 7_200),
                runtime_s: Some(3_600 + rng.below(86_400) as u64),
                started_at: Some(NOW - 3_600 - rng.below(3_000) as i64),
                last_checkpoint_at: Some(NOW - rng.below(1_800) as i64),
                shape: shape(1, want, 1000, None),
                ..Job::default()
            };
            j.placement = vec![PlacedMember {
                node: format!("h100-{node}"),
                gpus: (used..used + want).collect(),
                gpu_milli: None,
                mig_starts: Vec::new(),
            }];
            used += want;
            out.push(j);
        }
    }
    out
}

/// The snapshot of N nodes, and the same with one more pending job (the next cycle's
/// arrival), sharing the fleet as a controller's consecutive snapshots do.
fn snapshots(n: usize, program: &Program, pending_count: usize) -> (Snapshot, Snapshot) {
    let mut rng = Rng::new(20);
    let teams: Vec<String> = program.teams.iter().map(|t| t.name.clone()).collect();
    let mut jobs = running(n, &teams, &mut rng);
    jobs.extend((0..pending_count).map(|i| pending(i, &teams, &mut rng)));
    let build = |jobs: Vec<Job>| {
        Snapshot::build(
            fleet_in_pools(n, pool_of),
            jobs,
            Vec::new(),
            &MigTable::default(),
        )
        .unwrap_or_else(|e| panic!("{:?}", e.first()))
    };
    let first = build(jobs.clone());
    let mut arrival = pending(pending_count, &teams, &mut rng);
    arrival.submitted_at = Some(NOW);
    jobs.push(arrival);
    let mut first = first;
    let mut next = build(jobs);
    next.fleet = std::sync::Arc::clone(&first.fleet);
    // Each state named by a revision, as a caller that keeps its states names them (the
    // replay does): the arrival is the one new name.
    for (k, js) in first.jobs.iter_mut().enumerate() {
        js.revision = Some(k as u64 + 1);
    }
    for (k, js) in next.jobs.iter_mut().enumerate() {
        assert!(first.jobs.get(k).is_none_or(|f| f.job == js.job));
        js.revision = Some(k as u64 + 1);
    }
    (first, next)
}

/// FNV-1a over bytes: enough to tell two plans apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn main() {
    // `--backfill MODE`: the policy's backfill (default `on`, EASY), e.g.
    // `conservative(depth = 100)`.
    let args: Vec<String> = std::env::args().collect();
    let backfill = args
        .iter()
        .position(|a| a == "--backfill")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "on".to_string());
    // `--pending-per-node F`: pending jobs per node (default 5; issue 20's 12,500-node
    // target has 50,000 pending, 4 per node).
    let per_node: f64 = args
        .iter()
        .position(|a| a == "--pending-per-node")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    let digest = args.iter().any(|a| a == "--digest");
    // `--once`: one `decide` per N and no kept cycle (for instruction counts).
    let once = args.iter().any(|a| a == "--once");
    let flag_values: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| a.starts_with("--") && *a != "--digest" && *a != "--once")
        .map(|(i, _)| i + 1)
        .collect();
    let sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(i, _)| !flag_values.contains(i))
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 2_500, 5_000, 10_000, 12_500, 20_000]
    } else {
        sizes
    };
    println!(
        "| nodes | GPUs held | pending | decide | placed | per N·log2 N (ns) | next cycle, kept (+1 arrival) | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for n in sizes {
        let program = policy(n, &backfill);
        let (snap, next) = snapshots(n, &program, (n as f64 * per_node).round() as usize);
        let held: f64 = snap
            .jobs
            .iter()
            .filter(|j| j.running.is_some())
            .map(|j| j.gpu_milli() as f64 / 1000.0)
            .sum();
        let pending = snap.jobs.iter().filter(|j| j.running.is_none()).count();
        let runs = if once { 1 } else { 3 };
        let mut best = f64::MAX;
        let mut placed = 0;
        let mut last = None;
        for _ in 0..runs {
            let start = Instant::now();
            let plan = engine::decide::decide(&program, &snap, NOW);
            best = best.min(start.elapsed().as_secs_f64());
            placed = plan
                .decisions
                .iter()
                .filter(|d| d.action == Action::Place)
                .count();
            last = Some(plan);
        }
        if let Some(plan) = last.filter(|_| digest) {
            eprintln!(
                "plan digest, {n} nodes: {:016x}",
                fnv1a(&serde_json::to_vec(&plan).unwrap())
            );
        }
        // A Decider kept from the cycle before, given the same cluster plus one arrival:
        // what the queue controller pays per cycle in steady state (`NaN` with `--once`).
        let mut kept = f64::NAN;
        if !once {
            let mut decider = engine::decide::Decider::new();
            decider.decide(&program, &snap, NOW);
            for _ in 0..runs {
                let start = Instant::now();
                let plan = decider.decide(&program, &next, NOW);
                kept = kept.min(start.elapsed().as_secs_f64());
                assert_eq!(plan, engine::decide::decide(&program, &next, NOW));
            }
        }
        let nlogn = n as f64 * (n as f64).log2();
        println!(
            "| {n} | {:.0}% | {pending} | {:.1} ms | {placed} | {:.1} | {:.1} ms | {:.0} MiB |",
            held / (n as f64 * 8.0) * 100.0,
            best * 1000.0,
            best * 1e9 / nlogn,
            kept * 1000.0,
            peak_rss_mib()
        );
    }
}
