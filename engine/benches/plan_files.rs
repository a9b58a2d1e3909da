//! Writes the inputs `gantry plan` is measured on at production shape: `cargo bench -p
//! engine --bench plan_files -- DIR [NODES]` (default 12,500) writes `DIR/policy.gantry`,
//! `DIR/fleet.toml` and `DIR/jobs.jsonl`, the same bytes for the same NODES (a fixed seed).
//!
//! The shape: NODES × 8 H100 in NVLink domains of 8 nodes and racks of 32, one pool; 20
//! teams in 4 cohorts with guarantees, bursts and lending, three tiers; per node up to
//! two running jobs (1-, 2- and 4-GPU, placed on their GPUs, checkpointed) and three
//! pending ones (shares, 1/2/4/8 GPUs, 2×8 gangs in one NVLink domain), 5 jobs per node in
//! all: 62,500 jobs (13.8 MB) at 12,500 nodes. Time it with
//! `/usr/bin/time -f "%e s %U+%S CPU-s %M KB" gantry plan --policy DIR/policy.gantry
//! --fleet DIR/fleet.toml --jobs DIR/jobs.jsonl --now 100000 > plan.json`.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "benchmark setup"
)]

use std::fmt::Write as _;
use std::path::PathBuf;

/// A small deterministic generator (SplitMix64): the same files on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const TEAMS: usize = 20;
const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];

fn policy(nodes: usize) -> String {
    let gpus = nodes * 8;
    let share = gpus / TEAMS;
    let mut out = format!(
        "use std.nodes.{{dgx_h100}}\nuse std.tiers\n\npool train {{ capacity = reserved; node = dgx_h100; nodes = {nodes} }}\n\n\
placement {{\n  gang = all_or_nothing\n  topology = prefer(nvlink_island, node)\n  packing = best_fit\n  backfill = on\n  backfill_window = 24h\n}}\n\n"
    );
    for c in 0..4 {
        let _ = writeln!(
            out,
            "cohort org{c} {{\n  fair_share = drf\n  half_life = 7d"
        );
        for t in 0..TEAMS / 4 {
            let team = c * (TEAMS / 4) + t;
            let _ = writeln!(
                out,
                "  team t{team} {{ guaranteed = {share} gpu; burst = {} gpu; lend = {} gpu }}",
                share * 2,
                share / 2
            );
        }
        let _ = writeln!(out, "}}\n");
    }
    out
}

fn fleet(nodes: usize) -> String {
    let mut out = String::new();
    for d in 0..nodes.div_ceil(8) {
        let count = (nodes - d * 8).min(8);
        let _ = writeln!(
            out,
            "[[nodes]]\nname = \"h100-{d}\"\ncount = {count}\npool = \"train\"\ncpu_milli = 224000\nmemory_mib = 2097152\nlabels = {{ nvlink_domain = \"nvl-{d}\", rack = \"rack-{}\" }}\ngpus = {{ count = 8, model = \"H100-SXM5-80GB\" }}\n",
            d / 4
        );
    }
    out
}

fn jobs(nodes: usize, rng: &mut Rng) -> String {
    let mut out = String::with_capacity(nodes * 5 * 360);
    let mut id = 0;
    let line = |out: &mut String, id: &mut usize, body: String| {
        let team = (*id * 7 + *id / 3) % TEAMS;
        let tier = TIERS[*id % 3];
        let _ = writeln!(
            out,
            "{{\"id\": \"job-{id}\", \"team\": \"t{team}\", \"tier\": \"{tier}\", {body}}}"
        );
        *id += 1;
    };
    for n in 0..nodes {
        let node = format!("h100-{}-{}", n / 8, n % 8);
        // Two running jobs in the node's first GPUs, the rest left free.
        let mut gpu = 0u32;
        for _ in 0..2 {
            let g = [1u32, 2, 4][usize::try_from(rng.below(3)).unwrap()];
            if gpu + g > 8 {
                break;
            }
            let gpus: Vec<String> = (gpu..gpu + g).map(|x| x.to_string()).collect();
            gpu += g;
            let started = 90_000 - i64::try_from(rng.below(80_000)).unwrap();
            let runtime = 3600 * (1 + rng.below(24));
            line(
                &mut out,
                &mut id,
                format!(
                    "\"submitted_at\": {}, \"gpus_per_member\": {g}, \"cpu_milli\": {}, \"memory_mib\": {}, \"runtime_s\": {runtime}, \"checkpoint_interval_s\": 1800, \"placement\": [{{\"node\": \"{node}\", \"gpus\": [{}]}}], \"started_at\": {started}, \"last_checkpoint_at\": {}",
                    started - 60,
                    g * 24_000,
                    g * 200_000,
                    gpus.join(", "),
                    started + 1800
                ),
            );
        }
    }
    let pending = nodes * 5 - id;
    for _ in 0..pending {
        let submitted = 90_000 + rng.below(10_000);
        let runtime = 600 * (1 + rng.below(48));
        let body = match rng.below(10) {
            0 => "\"gpus_per_member\": 1, \"gpu_milli\": 500, \"cpu_milli\": 8000, \"memory_mib\": 65536".to_string(),
            1 => "\"members\": 2, \"gpus_per_member\": 8, \"cpu_milli\": 192000, \"memory_mib\": 1600000, \"topology\": \"nvlink_domain\"".to_string(),
            k => {
                let g = [1u32, 1, 2, 2, 4, 4, 8, 8][usize::try_from(k - 2).unwrap()];
                format!("\"gpus_per_member\": {g}, \"cpu_milli\": {}, \"memory_mib\": {}", g * 24_000, g * 200_000)
            }
        };
        line(
            &mut out,
            &mut id,
            format!("\"submitted_at\": {submitted}, {body}, \"runtime_s\": {runtime}"),
        );
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        panic!("usage: cargo bench -p engine --bench plan_files -- DIR [NODES]");
    };
    let nodes: usize = args.get(1).map_or(12_500, |n| n.parse().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x006a_6e74_7279);
    std::fs::write(dir.join("policy.gantry"), policy(nodes)).unwrap();
    std::fs::write(dir.join("fleet.toml"), fleet(nodes)).unwrap();
    std::fs::write(dir.join("jobs.jsonl"), jobs(nodes, &mut rng)).unwrap();
    eprintln!(
        "wrote {} ({nodes} nodes, {} jobs)",
        dir.display(),
        nodes * 5
    );
}
