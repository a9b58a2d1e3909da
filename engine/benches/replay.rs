//! Replay at steady load (issue 20): a seeded synthetic trace — 500 nodes × 8 H100,
//! jobs arriving at a diurnal rate (±50% over the day) for an offered load of 72% of the
//! GPUs, sizes 1 GPU (40%), 2 (20%), 4 (20%), 8 (15%) and gangs of 2–4 × 8 GPUs (5%),
//! runtimes log-uniform from 5 minutes to 8 hours, six teams in a cohort, three tiers —
//! replayed through the same decision cycle as production.
//!
//! `cargo bench -p engine --bench replay [-- JOBS..] [--load F] [--write DIR]` prints, per trace
//! size, the replay's CPU time, simulated days, jobs and decision cycles per second and
//! the peak RSS; `--write DIR` also writes `trace-JOBS.jsonl`, `fleet.toml` and
//! `policy.gantry` there, for `gantry simulate --policy DIR --fleet DIR/fleet.toml
//! --trace DIR/trace-JOBS.jsonl`.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

// The allocator `gantry` ships with (engine/gantry/src/main.rs), as `gantry simulate` runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod common;

use common::peak_rss_mib;
use engine::core::rng::Rng;
use engine::sim::replay::{self, Config};
use std::fmt::Write;
use std::time::Instant;

const NODES: usize = 500;
const GPUS: f64 = (NODES * 8) as f64;
/// The default offered load; `--load F` sets another.
const LOAD: f64 = 0.72;
const DAY: f64 = 86_400.0;
const TEAMS: [&str; 6] = ["vision", "nlp", "speech", "rl", "infra", "research"];
const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];

const POLICY: &str = r#"use std.nodes.{dgx_h100}
use std.tiers
pool train { capacity = reserved; node = dgx_h100; nodes = 500 }
placement { gang = all_or_nothing; gang_timeout = 2h; backfill = on }
cohort lab {
  fair_share = drf
  half_life = 7d
  team vision { guaranteed = 800 gpu; burst = 2400 gpu; lend = 400 gpu }
  team nlp { guaranteed = 800 gpu; burst = 2400 gpu; lend = 400 gpu }
  team speech { guaranteed = 600 gpu; burst = 2000 gpu; lend = 300 gpu }
  team rl { guaranteed = 600 gpu; burst = 2000 gpu; lend = 300 gpu }
  team infra { guaranteed = 600 gpu; burst = 2000 gpu; lend = 300 gpu }
  team research { guaranteed = 600 gpu; burst = 2000 gpu; lend = 300 gpu }
}
"#;

fn fleet_toml() -> String {
    format!(
        "[[nodes]]\nname = \"h100\"\npool = \"train\"\ncount = {NODES}\ncpu_milli = 224000\nmemory_mib = 2097152\ngpus = {{ count = 8, model = \"H100-SXM5-80GB\" }}\n"
    )
}

/// `jobs` jobs as JSON Lines, seeded.
fn trace(jobs: usize, load: f64) -> String {
    let mut rng = Rng::new(2026);
    let uniform = |rng: &mut Rng| (rng.below(1_000_000) as f64 + 0.5) / 1_000_000.0;
    // Mean GPU-seconds of a job of the mix, to set the arrival rate for the load.
    let (lo, hi) = (300f64, 28_800f64);
    let mean_runtime = (hi - lo) / (hi / lo).ln();
    let mean_gpus = 0.40 * 1.0 + 0.20 * 2.0 + 0.20 * 4.0 + 0.15 * 8.0 + 0.05 * 3.0 * 8.0;
    let rate = load * GPUS / (mean_gpus * mean_runtime);
    let mut out = String::with_capacity(jobs * 160);
    let mut t = 0f64;
    for i in 0..jobs {
        let diurnal = 1.0 + 0.5 * (2.0 * std::f64::consts::PI * t / DAY).sin();
        t += -uniform(&mut rng).ln() / (rate * diurnal);
        let runtime = (lo * (hi / lo).powf(uniform(&mut rng))).round() as u64;
        let (members, gpus) = match rng.below(100) {
            0..=39 => (1, 1),
            40..=59 => (1, 2),
            60..=79 => (1, 4),
            80..=94 => (1, 8),
            _ => (2 + rng.below(3) as u32, 8),
        };
        let _ = writeln!(
            out,
            "{{\"id\": \"j{i}\", \"submitted_at\": {}, \"runtime_s\": {runtime}, \"members\": {members}, \"gpus_per_member\": {gpus}, \"team\": \"{}\", \"tier\": \"{}\", \"checkpoint_interval_s\": 1800}}",
            t as i64,
            TEAMS[rng.below(TEAMS.len())],
            TIERS[rng.below(TIERS.len())]
        );
    }
    out
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, r)| r)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    // As `gantry simulate` runs: without transparent huge pages (engine/gantry/src/pages.rs).
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let write = args
        .iter()
        .position(|a| a == "--write")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let load = args
        .iter()
        .position(|a| a == "--load")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(LOAD);
    // Numbers that are not a flag's value are trace sizes.
    let mut sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || !args[i - 1].starts_with("--"))
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 50_000, 100_000];
    }
    let checked = lang::check(&[("replay.gantry".to_string(), POLICY.to_string())]);
    let Some(program) = checked.program else {
        panic!("bench policy: {:?}", checked.diagnostics)
    };
    let fleet = engine::inventory::fleet_file::parse(
        "fleet.toml",
        &fleet_toml(),
        engine::inventory::catalog::stdlib_models(),
    )
    .unwrap();
    if let Some(dir) = &write {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("fleet.toml"), fleet_toml()).unwrap();
        std::fs::write(dir.join("policy.gantry"), POLICY).unwrap();
    }
    println!("| jobs | simulated | CPU | jobs/s | cycles | cycles/s | utilization | peak RSS |");
    println!("|---|---|---|---|---|---|---|---|");
    for jobs in sizes {
        let text = trace(jobs, load);
        if let Some(dir) = &write {
            std::fs::write(dir.join(format!("trace-{jobs}.jsonl")), &text).unwrap();
        }
        let parsed = engine::sim::trace::parse("trace.jsonl", &text).unwrap();
        // As `gantry simulate` does: the text is gone once parsed, and the trace is
        // moved into the replay.
        drop(text);
        let cpu = cpu_seconds();
        let start = Instant::now();
        let metrics = replay::replay(
            &program,
            fleet.clone(),
            parsed,
            &Config::default(),
            &mut |_| {},
        )
        .unwrap();
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu;
        println!(
            "| {jobs} | {:.1} days | {cpu:.1} s ({wall:.1} s wall) | {:.0} | {} | {:.0} | {} | {:.0} MiB |",
            (metrics.end - metrics.start) as f64 / DAY,
            jobs as f64 / cpu.max(1e-9),
            metrics.cycles,
            metrics.cycles as f64 / cpu.max(1e-9),
            metrics.utilization,
            peak_rss_mib()
        );
    }
}
