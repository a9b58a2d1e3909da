//! A loaded year (issue 55): the trace `gantry simulate` is measured on at production
//! shape, with a backlog that lasts for days because teams sit at their quotas.
//!
//! `cargo bench -p engine --bench loaded_year -- DIR [JOBS..] [--load F]` writes
//! `DIR/policy.gantry`, `DIR/fleet.toml` and `DIR/trace-JOBS.jsonl` (default 20,000 jobs),
//! the same bytes for the same arguments (a fixed seed), and prints each trace's span and
//! mix. Time it with `/usr/bin/time -f "%e s %U+%S CPU-s %M KB" gantry simulate --policy
//! DIR/policy.gantry --fleet DIR/fleet.toml --trace DIR/trace-JOBS.jsonl --json out.json`.
//!
//! The shape:
//! - 500 nodes × 8 H100 in two pools: `train` (320 nodes) and `shared` (180), NVLink
//!   domains of 8 nodes, racks of 32.
//! - 23 teams in four cohorts (6, 6, 6, 5) with DRF fair share, each team guaranteed GPUs
//!   in proportion to a weight (guarantees add up to 80% of the fleet), bursting to 2–3×
//!   its guarantee and lending a quarter of it; every fifth team's guarantee is in one
//!   pool. Demand is skewed against the guarantees: a team's share of the arrivals is its
//!   weight squared, so the largest teams ask for more than their burst for days at a
//!   time and queue at their quota, while the smallest lend.
//! - The standard library's three tiers: a quarter of the jobs `critical` (never
//!   preempted), 65% `standard` (after a checkpoint), 10% `best_effort`.
//! - Sizes: a 500m GPU share 8%, 1 GPU 27%, 2 GPUs 15%, 4 GPUs 15%, 8 GPUs 25%, gangs of
//!   2–8 × 8 GPUs 10% (a gang of four or more asks for `rack` topology: all its members
//!   in one rack); a tenth of the jobs name one pool.
//! - Runtimes log-uniform from 5 minutes to 24 hours, checkpoints every 30 minutes;
//!   runtimes are declared as limits, and a fifth of the jobs end at half their limit
//!   (`actual_runtime_s`).
//! - Arrivals: Poisson at an offered load of F (default 0.5) of the fleet's GPUs, with a
//!   diurnal swing (±60% around a 14:00 peak) and weekends at 40% of a weekday's rate.
//!   100,000 jobs span 66 days; 1,000,000 about 22 months.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

use engine::core::rng::Rng;
use std::fmt::Write as _;
use std::path::PathBuf;

const NODES: usize = 500;
const TRAIN_NODES: usize = 320;
const GPUS: f64 = (NODES * 8) as f64;
const DAY: f64 = 86_400.0;
const WEEK: f64 = 7.0 * DAY;
/// Runtimes, log-uniform between these (seconds).
const RUNTIME: (f64, f64) = (300.0, 86_400.0);
/// Teams per cohort.
const COHORTS: [usize; 4] = [6, 6, 6, 5];

/// Each team's weight: 1 to 5, in a fixed pattern so every cohort holds large and small
/// teams.
fn weight(team: usize) -> usize {
    [5, 1, 3, 2, 4, 1, 2][team % 7]
}

fn teams() -> usize {
    COHORTS.iter().sum()
}

fn policy() -> String {
    let total_weight: usize = (0..teams()).map(weight).sum();
    let guaranteeable = GPUS * 0.8;
    let mut out = format!(
        "use std.nodes.{{dgx_h100}}\nuse std.tiers\n\n\
pool train {{ capacity = reserved; node = dgx_h100; nodes = {TRAIN_NODES} }}\n\
pool shared {{ capacity = reserved; node = dgx_h100; nodes = {} }}\n\n\
placement {{\n  gang = all_or_nothing\n  gang_timeout = 2h\n  topology = prefer(nvlink_island, node)\n  packing = best_fit\n  backfill = on\n  backfill_window = 24h\n}}\n\n",
        NODES - TRAIN_NODES
    );
    let mut team = 0;
    for (c, size) in COHORTS.iter().enumerate() {
        let _ = writeln!(
            out,
            "cohort org{c} {{\n  fair_share = drf\n  half_life = 7d"
        );
        for _ in 0..*size {
            let w = weight(team);
            // Whole multiples of 8 GPUs, so a node's worth is always guaranteed.
            let guaranteed =
                ((guaranteeable * w as f64 / total_weight as f64) / 8.0).floor() as usize * 8;
            let burst = guaranteed * (2 + team % 2);
            let lend = guaranteed / 4;
            let pool = if team % 5 == 4 {
                if team % 2 == 0 {
                    " in shared"
                } else {
                    " in train"
                }
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  team t{team} {{ guaranteed = {guaranteed} gpu{pool}; burst = {burst} gpu; lend = {lend} gpu }}"
            );
            team += 1;
        }
        let _ = writeln!(out, "}}\n");
    }
    out
}

fn fleet() -> String {
    let mut out = String::new();
    for d in 0..NODES.div_ceil(8) {
        let first = d * 8;
        let count = (NODES - first).min(8);
        let pool = if first < TRAIN_NODES {
            "train"
        } else {
            "shared"
        };
        let _ = writeln!(
            out,
            "[[nodes]]\nname = \"h100-{d}\"\ncount = {count}\npool = \"{pool}\"\ncpu_milli = 224000\nmemory_mib = 2097152\nlabels = {{ nvlink_domain = \"nvl-{d}\", rack = \"rack-{}\" }}\ngpus = {{ count = 8, model = \"H100-SXM5-80GB\" }}\n",
            d / 4
        );
    }
    out
}

fn uniform(rng: &mut Rng) -> f64 {
    (rng.below(1_000_000) as f64 + 0.5) / 1_000_000.0
}

/// The arrival rate's factor at `t` seconds into the trace (which starts on a Monday at
/// midnight): a diurnal swing peaking at 14:00 and quieter weekends. Its mean over a week
/// is 1.
fn rate_factor(t: f64) -> f64 {
    let hour = (t % DAY) / 3600.0;
    let diurnal = 1.0 + 0.6 * (2.0 * std::f64::consts::PI * (hour - 8.0) / 24.0).sin();
    let weekend = ((t % WEEK) / DAY) >= 5.0;
    let week = if weekend { 0.4 } else { 1.0 };
    // Weekdays 5 × 1.0 and weekend days 2 × 0.4 average 6.8 / 7.
    diurnal * week * 7.0 / 6.8
}

/// `jobs` jobs as JSON Lines, and the simulated days they span.
fn trace(jobs: usize, load: f64) -> (String, f64) {
    let mut rng = Rng::new(0x0000_7965_6172);
    let (lo, hi) = RUNTIME;
    // A log-uniform runtime's mean; a fifth of the jobs run half of it.
    let mean_runtime = (hi - lo) / (hi / lo).ln() * 0.9;
    let mean_gpus = 0.08 * 0.5 + 0.27 + 0.15 * 2.0 + 0.15 * 4.0 + 0.25 * 8.0 + 0.10 * 5.0 * 8.0;
    let rate = load * GPUS / (mean_gpus * mean_runtime);
    // Arrivals by team: weight squared.
    let team_cdf: Vec<usize> = (0..teams())
        .scan(0, |sum, t| {
            *sum += weight(t) * weight(t);
            Some(*sum)
        })
        .collect();
    let total = *team_cdf.last().unwrap();
    let mut out = String::with_capacity(jobs * 200);
    let mut t = 0f64;
    for i in 0..jobs {
        // Thinning of a Poisson process at the peak rate keeps the swing exact.
        let peak = rate * 1.6 * 7.0 / 6.8;
        loop {
            t += -uniform(&mut rng).ln() / peak;
            if uniform(&mut rng) * peak <= rate * rate_factor(t) {
                break;
            }
        }
        let limit = (lo * (hi / lo).powf(uniform(&mut rng))).round() as u64;
        // A fifth end early: the replay runs them to `actual_runtime_s`, planned with the
        // limit.
        let actual = if rng.below(5) == 0 {
            format!(", \"actual_runtime_s\": {}", limit / 2)
        } else {
            String::new()
        };
        let pick = rng.below(total);
        let team = team_cdf.iter().position(|c| pick < *c).unwrap();
        let tier = match rng.below(20) {
            0..=4 => "critical",
            5..=17 => "standard",
            _ => "best_effort",
        };
        let shape = match rng.below(100) {
            0..=7 => "\"gpus_per_member\": 1, \"gpu_milli\": 500, \"cpu_milli\": 8000, \"memory_mib\": 65536".to_string(),
            8..=89 => {
                let g = match rng.below(82) {
                    0..=26 => 1,
                    27..=41 => 2,
                    42..=56 => 4,
                    _ => 8,
                };
                format!(
                    "\"gpus_per_member\": {g}, \"cpu_milli\": {}, \"memory_mib\": {}",
                    g * 24_000,
                    g * 200_000
                )
            }
            _ => {
                let members = 2 + rng.below(7);
                let topology = if members >= 4 { ", \"topology\": \"rack\"" } else { "" };
                format!(
                    "\"members\": {members}, \"gpus_per_member\": 8, \"cpu_milli\": 192000, \"memory_mib\": 1600000{topology}"
                )
            }
        };
        let pools = match rng.below(20) {
            0 => ", \"pools\": [\"train\"]",
            1 => ", \"pools\": [\"shared\"]",
            _ => "",
        };
        let _ = writeln!(
            out,
            "{{\"id\": \"y{i}\", \"team\": \"t{team}\", \"tier\": \"{tier}\", \"submitted_at\": {}, {shape}{pools}, \"runtime_s\": {limit}{actual}, \"checkpoint_interval_s\": 1800}}",
            t as i64
        );
    }
    (out, t / DAY)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let load = args
        .iter()
        .position(|a| a == "--load")
        .and_then(|i| args.get(i + 1))
        .map_or(0.5, |v| v.parse::<f64>().unwrap());
    let positional: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--load"))
        .map(|(_, a)| a)
        .collect();
    let Some(dir) = positional.first().map(PathBuf::from) else {
        panic!("usage: cargo bench -p engine --bench loaded_year -- DIR [JOBS..] [--load F]");
    };
    let mut sizes: Vec<usize> = positional[1..].iter().map(|n| n.parse().unwrap()).collect();
    if sizes.is_empty() {
        sizes.push(20_000);
    }
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.gantry"), policy()).unwrap();
    std::fs::write(dir.join("fleet.toml"), fleet()).unwrap();
    for jobs in sizes {
        let (text, days) = trace(jobs, load);
        let path = dir.join(format!("trace-{jobs}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        eprintln!(
            "wrote {} ({jobs} jobs over {days:.1} days at offered load {load}, {:.1} MB)",
            path.display(),
            text.len() as f64 / 1e6
        );
    }
}
