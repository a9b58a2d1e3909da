//! The decision cycle on realistic mixes as clusters grow (issue 20's generator):
//! N nodes × 8 H100 in two pools (train 3/4, infer 1/4; NVLink domains of 8 nodes, racks
//! of 32), about 60% of the GPUs held by running jobs, and 5N pending jobs — 1-GPU,
//! fractional, 2/4/8-GPU and gangs of 2–8 × 8 GPUs (half of them inside one NVLink
//! domain) — of 23 teams (three cohorts and two standalone teams), three tiers, a third of
//! the jobs pinned to a pool. Seeded: the same N gives the same snapshot.
//!
//! `cargo bench -p engine --bench decide_scale [-- N... [--backfill MODE] [--pending-per-node F] [--digest] [--once] [--victims-afresh]]`
//! prints, per N
//! (with the policy's backfill MODE, `on` unless given), the time of one
//! `decide` (best of three runs, with the allocator the binary ships), what it placed, the time
//! divided by N·log2 N (flat means no worse than N log N), the time of the next cycle
//! through a `Decider` kept from this one when one job has arrived (checked to give
//! `decide`'s plan; the states carry revisions, as the replay's do), and the peak RSS so
//! far. `--digest` also prints, to stderr, a digest of each size's plan (as JSON), so two
//! builds can be checked to decide the same. `--once` runs one `decide` per N and no kept
//! cycle, for instruction counts under callgrind. `--victims-afresh` finds every job's
//! victims without the kept cost indexes and memos (slow): its digests are the reference
//! the kept ones must equal.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

// The allocator `gantry` ships with (engine/gantry/src/main.rs), with transparent huge
// pages as `gantry plan` and `serve` keep them (.cargo/config.toml, engine/gantry/src/pages.rs).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod common;
use common::mix::{policy, snapshots, NOW};
use common::peak_rss_mib;
use engine::decide::plan::Action;
use std::time::Instant;

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
    let afresh = args.iter().any(|a| a == "--victims-afresh");
    engine::decide::find_victims_afresh(afresh);
    let flag_values: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            a.starts_with("--") && !["--digest", "--once", "--victims-afresh"].contains(&a.as_str())
        })
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
            let plan = engine::cycle::decide(&program, &snap, NOW);
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
            let mut decider = engine::cycle::Decider::new();
            decider.decide(&program, &snap, NOW);
            for _ in 0..runs {
                let start = Instant::now();
                let plan = decider.decide(&program, &next, NOW);
                kept = kept.min(start.elapsed().as_secs_f64());
                assert_eq!(plan, engine::cycle::decide(&program, &next, NOW));
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
