//! Conservative backfill against a real Slurm. Each folder of `tests/slurm/` holds a
//! workload (`workload.tsv`: name, nodes, GPUs per node, time limit in minutes, in submit
//! order) and the plan a real Slurm 22.05 with backfill made for it (`squeue.txt`, recorded
//! once with `tests/slurm/submit.sh` on the peer of `../shared/peers/slurm/`; the command
//! is on its first line). The same workload goes through one `decide` with
//! `backfill = conservative(depth = all)`. Every job must start when Slurm plans it
//! (within Slurm's `bf_resolution` of a minute), except the jobs that `differences.tsv`
//! lists with both start times and the reason they differ. A listed job that matches
//! fails too, so the list stays exact.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a broken fixture should fail the test"
)]

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Node};
use engine::core::gang::JobShape;
use engine::core::mig::MigTable;
use engine::decide::plan::Action;
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::Job;
use std::collections::BTreeMap;
use std::path::Path;

const POLICY: &str = "use std.nodes.{dgx_h100}\nuse std.tiers\n\
    pool gpu { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
    team a { guaranteed = 32 gpu }\n\
    placement { backfill = conservative(depth = all); backfill_window = 24h }\n";

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect())
}

fn workload(dir: &Path) -> Vec<Job> {
    let text = std::fs::read_to_string(dir.join("workload.tsv")).unwrap();
    rows(&text)
        .enumerate()
        .map(|(i, f)| Job {
            id: f[0].to_string(),
            team: Some("a".into()),
            tier: Some("standard".into()),
            submitted_at: Some(i as i64),
            runtime_s: Some(f[3].parse::<u64>().unwrap() * 60),
            shape: JobShape {
                members: f[1].parse().unwrap(),
                member: Request {
                    num_gpu: f[2].parse().unwrap(),
                    gpu_milli: 1000,
                    ..Request::default()
                },
                ..JobShape::default()
            },
            ..Job::default()
        })
        .collect()
}

/// Seconds since the epoch of an `squeue` time (`2026-11-24T14:10:42`, UTC here).
fn seconds(t: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
        .unwrap()
        .and_utc()
        .timestamp()
}

/// Slurm's planned start of each job, in seconds after the running jobs started.
fn slurm_starts(dir: &Path) -> BTreeMap<String, i64> {
    starts_in(&std::fs::read_to_string(dir.join("squeue.txt")).unwrap())
}

/// [`slurm_starts`] of `squeue` output: a comment line, the header, then one job a line.
fn starts_in(text: &str) -> BTreeMap<String, i64> {
    let jobs: Vec<(String, String, i64)> = text
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1].to_string(), f[2].to_string(), seconds(f[4]))
        })
        .collect();
    let t0 = jobs
        .iter()
        .filter(|j| j.1 == "RUNNING")
        .map(|j| j.2)
        .min()
        .unwrap();
    jobs.into_iter().map(|(n, _, t)| (n, t - t0)).collect()
}

/// Gantry's start of each job: now if placed, else its reservation's start.
fn gantry_starts(jobs: Vec<Job>) -> BTreeMap<String, Option<i64>> {
    let program = lang::check(&[("p.gantry".to_string(), POLICY.to_string())])
        .program
        .unwrap();
    let fleet = Fleet {
        nodes: (1..=4)
            .map(|i| {
                let mut n = Node::uniform(&format!("gpu{i}"), 64_000, 512_000, 8, "H100-SXM5-80GB");
                n.pool = Some("gpu".into());
                n
            })
            .collect(),
    };
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &MigTable::default()).unwrap();
    let plan = engine::cycle::decide(&program, &snapshot, 0);
    let booked: BTreeMap<&str, i64> = plan
        .reservations
        .iter()
        .map(|b| (b.job.as_str(), b.start_at))
        .collect();
    plan.decisions
        .iter()
        .map(|d| {
            let start = if d.action == Action::Place {
                Some(0)
            } else {
                booked.get(d.job.as_str()).copied()
            };
            (d.job.clone(), start)
        })
        .collect()
}

fn minutes(s: Option<i64>) -> String {
    s.map_or("-".to_string(), |s| format!("{}", (s + 30).div_euclid(60)))
}

fn compare(case: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("slurm")
        .join(case);
    let slurm = slurm_starts(&dir);
    let gantry = gantry_starts(workload(&dir));
    let listed: BTreeMap<String, (String, String)> =
        match std::fs::read_to_string(dir.join("differences.tsv")) {
            Ok(text) => rows(&text)
                .map(|f| (f[0].to_string(), (f[1].to_string(), f[2].to_string())))
                .collect(),
            Err(_) => BTreeMap::new(),
        };
    let mut problems = Vec::new();
    let mut matched = 0;
    for (job, at) in &slurm {
        let ours = gantry.get(job).copied().flatten();
        let same = ours.is_some_and(|o| (o - at).abs() <= 60);
        let (g, s) = (minutes(ours), minutes(Some(*at)));
        match (same, listed.get(job)) {
            (true, None) => matched += 1,
            (true, Some(_)) => problems.push(format!(
                "{job} matches now ({g} min); drop it from differences.tsv"
            )),
            (false, Some((lg, ls))) if *lg == g && *ls == s => {}
            (false, _) => problems.push(format!(
                "{job}\t{g}\t{s}\t(gantry, Slurm start in minutes; explain or fix)"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{case}: {matched} jobs match Slurm; differences:\n{}",
        problems.join("\n")
    );
    assert_eq!(
        slurm.len(),
        gantry.len(),
        "{case}: every job is in both plans"
    );
}

#[test]
fn the_sample_workload_starts_as_slurm_plans_it() {
    compare("sample");
}

#[test]
fn forty_jobs_start_as_slurm_plans_them_or_say_why_not() {
    compare("forty");
}

/// The same comparison against a live Slurm, where one is installed: the peer of
/// `../shared/peers/slurm/` is started in a temporary directory, the sample workload
/// submitted, and Slurm's plan compared with gantry's, job by job. Skipped, saying why,
/// without `slurm-wlm` (`apt-get install slurm-wlm`) or the peer's scripts.
#[test]
fn a_live_slurm_plans_the_sample_as_gantry_does() {
    let peer = repo().join("../shared/peers/slurm/start.sh");
    let have = |cmd: &str| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {cmd}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !peer.exists()
        || !["slurmctld", "slurmd", "sbatch", "squeue"]
            .iter()
            .all(|c| have(c))
    {
        eprintln!(
            "skipped: no live Slurm here (needs slurm-wlm: apt-get install slurm-wlm, and {})",
            peer.display()
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("gantry-slurm-{}", std::process::id()));
    let conf = dir.join("slurm.conf");
    let run = |args: &[&str]| {
        std::process::Command::new(args[0])
            .args(&args[1..])
            .env("SLURM_CONF", &conf)
            .current_dir(repo().join("tests/slurm"))
            .output()
            .unwrap()
    };
    let dir_s = dir.to_str().unwrap().to_string();
    let peer_s = peer.to_str().unwrap().to_string();
    let started = run(&["bash", &peer_s, &dir_s]);
    let up = String::from_utf8_lossy(&started.stdout)
        .matches("idle")
        .count()
        == 4;
    let outcome = std::panic::catch_unwind(|| {
        assert!(
            up,
            "the peer did not come up: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        let submitted = run(&["sh", "submit.sh", "sample/workload.tsv"]);
        assert!(
            submitted.status.success(),
            "{}",
            String::from_utf8_lossy(&submitted.stderr)
        );
        // Two backfill passes (bf_interval=5).
        std::thread::sleep(std::time::Duration::from_secs(12));
        let listed = run(&["squeue", "-o", "%.4i %.12j %.8T %.12r %.20S %.20e %N %b"]);
        let text = format!("# live\n{}", String::from_utf8_lossy(&listed.stdout));
        let slurm = starts_in(&text);
        let gantry = gantry_starts(workload(&repo().join("tests/slurm/sample")));
        assert_eq!(slurm.len(), 7, "{text}");
        for (job, at) in &slurm {
            let ours = gantry.get(job).copied().flatten();
            assert!(
                ours.is_some_and(|o| (o - at).abs() <= 60),
                "{job}: Slurm plans {at} s, gantry {ours:?}\n{text}"
            );
        }
    });
    let _ = run(&["bash", &peer_s, &dir_s, "stop"]);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}
