//! `gantry check` speed: a generated 2,000-line policy of the usual shapes (pools, tiers,
//! cohorts with teams, admission rules, warm pools, autoscale) checked from text to IR,
//! standard-library imports included. Target: under 20 ms (DESIGN.md).

use criterion::{criterion_group, criterion_main, Criterion};

/// A realistic policy of about `lines` lines.
pub fn policy(lines: usize) -> String {
    let mut out = String::from("use std.nodes\nuse std.tiers\n\n");
    let mut i = 0;
    while out.lines().count() < lines {
        out.push_str(&format!(
            "# Pool group {i}.\npool train{i} {{ capacity = reserved; node = dgx_h100; nodes = 4; max_gang = 32 gpu }}\n\
pool spot{i} {{\n  capacity = spot\n  node = p5_48xlarge\n  nodes = 0..8\n  cost = 39.8 $/h\n  boot = 7m\n  notice = 2m\n}}\n\n\
cohort org{i} {{\n  fair_share = drf\n  half_life = 7d\n  team a{i} {{ guaranteed = 8 gpu in train{i}; burst = 24 gpu; lend = 4 gpu; tiers = [standard, best_effort] }}\n\
  team b{i} {{ guaranteed = 8 gpu in train{i}; burst = 16 gpu; tiers = [critical, standard] }}\n}}\n\n\
warm w{i} in spot{i} {{\n  size = p75(concurrent_starts(pool = spot{i}), over = 14d, by = hour_of_week) clamp 0..2 nodes\n  during = weekdays 08:00..19:00 \"Europe/Berlin\"\n}}\n\n\
autoscale spot{i} {{\n  up when pending_nodes(fits = spot{i}) > 0 for 2m => add pending_nodes(fits = spot{i})\n  down when idle > 15m\n  max_spend = 320 $/h\n}}\n\n\
rule vram{i}: deny if job.team == a{i} and job.vram == none \"declare vram\"\n\
rule big{i}: deny if job.team == b{i} and job.gpus > 32 gpu \"too big for team b{i}\"\n\
rule route{i}: route if job.team == a{i} and job.spot_interruptions >= 2 to train{i} \"interrupted twice\"\n\
rule warn{i}: warn if job.team == a{i} and job.checkpoint_interval > 30m \"checkpoint more often\"\n\n"
        ));
        i += 1;
    }
    out
}

fn bench(c: &mut Criterion) {
    let text = policy(2000);
    let files = vec![("bench.gantry".to_string(), text.clone())];
    let checked = lang::check(&files);
    assert!(
        checked.diagnostics.is_empty(),
        "the benchmark policy must check clean: {:?}",
        checked.diagnostics.first()
    );
    let mut group = c.benchmark_group("check");
    group.sample_size(30);
    group.bench_function("2000_line_policy", |b| {
        b.iter(|| lang::check(std::hint::black_box(&files)))
    });
    group.bench_function("parse_only_2000_lines", |b| {
        b.iter(|| lang::syntax::parse(0, std::hint::black_box(&text)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
