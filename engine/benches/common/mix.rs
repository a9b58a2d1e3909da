//! Issue 20's realistic mix (`decide_scale`): N nodes × 8 H100 in two pools, about 60%
//! of the GPUs held by running jobs, and pending 1-GPU, fractional, 2/4/8-GPU and gang
//! jobs of 23 teams with guarantees per pool, three cohorts and three tiers. Seeded: the
//! same N gives the same snapshot. The engine's victim-search test decides it too.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    reason = "benchmark and test fixture: a broken fixture should stop the run"
)]

use super::{fleet_in_pools, shape};
use engine::core::mig::MigTable;
use engine::core::rng::Rng;
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::{Job, PlacedMember};
use lang::ir::{Program, TopologyLevel};

const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];
pub const NOW: i64 = 86_400;

fn pool_of(i: usize) -> &'static str {
    if i % 4 == 3 {
        "infer"
    } else {
        "train"
    }
}

/// 23 teams whose guarantees add up to about the fleet.
pub fn policy(n: usize, backfill: &str) -> Program {
    policy_with(n, backfill, false)
}

/// [`policy`], with the cohorts' teams guaranteed one total instead of a share of each
/// pool when `overall` (a team's standing is then one figure, read without the ledger).
pub fn policy_with(n: usize, backfill: &str, overall: bool) -> Program {
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
        let guaranteed = if overall {
            format!("{} gpu", per_train + per_infer)
        } else {
            format!("[{per_train} gpu in train, {per_infer} gpu in infer]")
        };
        for t in 0..7 {
            text.push_str(&format!(
                "  team t{c}_{t} {{ guaranteed = {guaranteed}; burst = {} gpu; lend = {} gpu }}\n",
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
            let team = teams.get(rng.below(teams.len())).cloned();
            let tier = TIERS[rng.below(3)];
            let j = running_job(out.len(), team, tier, (node, used..used + want), rng);
            used += want;
            out.push(j);
        }
    }
    out
}

/// Running job `k` of `team` and `tier` on `node`'s GPUs `gpus` (whole GPUs), started
/// in the hour before the last and checkpointed in the last half hour.
pub fn running_job(
    k: usize,
    team: Option<String>,
    tier: &str,
    (node, gpus): (usize, std::ops::Range<u32>),
    rng: &mut Rng,
) -> Job {
    Job {
        id: format!("run-{k}"),
        team,
        tier: Some(tier.to_string()),
        submitted_at: Some(NOW - 7_200),
        runtime_s: Some(3_600 + rng.below(86_400) as u64),
        started_at: Some(NOW - 3_600 - rng.below(3_000) as i64),
        last_checkpoint_at: Some(NOW - rng.below(1_800) as i64),
        shape: shape(1, gpus.len() as u32, 1000, None),
        placement: vec![PlacedMember {
            node: format!("h100-{node}"),
            gpus: gpus.collect(),
            gpu_milli: None,
            mig_starts: Vec::new(),
        }],
        ..Job::default()
    }
}

/// The snapshot of N nodes, and the same with one more pending job (the next cycle's
/// arrival), sharing the fleet as a controller's consecutive snapshots do.
pub fn snapshots(n: usize, program: &Program, pending_count: usize) -> (Snapshot, Snapshot) {
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
