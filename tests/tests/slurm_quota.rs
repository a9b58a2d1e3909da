//! A binding quota against a real Slurm, start by start. `tests/slurm/quota/` holds a
//! workload with gangs (`workload.tsv`) that a real Slurm 22.05 ran to the end with an
//! association limit of 16 GPUs per account (`GrpTRES=gres/gpu=16`), and the accounting
//! export of that run (`sacct.txt`). Slurm plans no start for a job its association limit
//! holds, so its plan cannot be read off `squeue`; what it did is the comparison.
//!
//! The export is imported as users import one (`gantry trace import --from slurm`: the
//! time limit is what decisions plan with, the real runtime when a job ends) and replayed
//! with `gantry simulate` under `policy.gantry` (the same quota, conservative backfill).
//! Every job must start when Slurm started it (within Slurm's `bf_resolution` of a minute)
//! or be listed in `differences.tsv` with both starts and the job whose reservation
//! explains it:
//! - a job that starts **later** in Gantry names a job of its own team, submitted before
//!   it, that starts earlier in Gantry than in Slurm: the team's quota was kept for that
//!   job's reservation (Slurm reserves nothing for a job its association limit holds, so
//!   the team's later jobs take each GPU of quota as it frees);
//! - a job that starts **earlier** in Gantry names itself (`-`).
//!
//! The test checks those claims, and fails on an unlisted difference or a listed job
//! that matches.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a broken fixture should fail the test"
)]

mod cli_run;
use cli_run::{gantry, simulate_json};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Slurm's `bf_resolution`: starts this close count as the same.
const SAME_S: i64 = 60;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/quota")
}

/// Seconds since the epoch of an `sacct` time (`2026-11-29T17:00:56`, UTC here).
fn seconds(t: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
        .unwrap()
        .and_utc()
        .timestamp()
}

/// One job of the export: its name, account and Slurm's start, by JobID.
struct SlurmJob {
    name: String,
    account: String,
    submit: i64,
    start: i64,
}

fn slurm_jobs() -> BTreeMap<String, SlurmJob> {
    let text = std::fs::read_to_string(dir().join("sacct.txt")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('|').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (id, name, account) = (col("JobID"), col("JobName"), col("Account"));
    let (submit, start) = (col("Submit"), col("Start"));
    lines
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|f| !f[id].contains('.'))
        .map(|f| {
            let job = SlurmJob {
                name: f[name].to_string(),
                account: f[account].to_string(),
                submit: seconds(f[submit]),
                start: seconds(f[start]),
            };
            (f[id].to_string(), job)
        })
        .collect()
}

/// Gantry's first start of each job, by JobID, from the imported export's replay.
fn gantry_starts() -> BTreeMap<String, i64> {
    let d = dir();
    let p = |f: &str| d.join(f).display().to_string();
    let trace =
        std::env::temp_dir().join(format!("gantry-slurm-quota-{}.jsonl", std::process::id()));
    let trace_s = trace.display().to_string();
    let (code, _, err) = gantry(&[
        "trace",
        "import",
        "--from",
        "slurm",
        &p("sacct.txt"),
        "--map",
        &p("map.toml"),
        "-o",
        &trace_s,
    ]);
    assert_eq!(code, 0, "import: {err}");
    let m = simulate_json(&d, &trace_s);
    std::fs::remove_file(&trace).ok();

    m["job_outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let id = o["id"].as_str().unwrap().to_string();
            (id, o["first_start"].as_i64().unwrap())
        })
        .collect()
}

/// `differences.tsv`: name → (Gantry's start, Slurm's start, the job that explains it).
fn listed() -> BTreeMap<String, (i64, i64, String)> {
    let text = std::fs::read_to_string(dir().join("differences.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let n = |s: &str| s.parse::<i64>().unwrap();
            (f[0].to_string(), (n(f[1]), n(f[2]), f[3].to_string()))
        })
        .collect()
}

#[test]
fn a_binding_quota_starts_jobs_as_slurm_did_or_says_why_not() {
    let slurm = slurm_jobs();
    let gantry = gantry_starts();
    assert_eq!(
        slurm.len(),
        26,
        "the export holds the 26 jobs of workload.tsv"
    );
    assert_eq!(gantry.len(), slurm.len(), "every job replayed: {gantry:?}");
    let t0 = slurm.values().map(|j| j.submit).min().unwrap();
    // Both starts by name, in seconds after the first submit.
    let starts: BTreeMap<&str, (i64, i64, &SlurmJob)> = slurm
        .iter()
        .map(|(id, j)| (j.name.as_str(), (gantry[id] - t0, j.start - t0, j)))
        .collect();
    let listed = listed();
    let mut problems = Vec::new();
    let (mut matched, mut later, mut earlier) = (0, 0, 0);
    for (name, (ours, theirs, job)) in &starts {
        let same = (ours - theirs).abs() <= SAME_S;
        match (same, listed.get(*name)) {
            (true, None) => matched += 1,
            (true, Some(_)) => {
                problems.push(format!("{name} matches now; drop it from differences.tsv"))
            }
            (false, Some((lo, lt, why))) if lo == ours && lt == theirs => {
                if ours > theirs {
                    later += 1;
                    // Held for a job of its own team, submitted before it, that Gantry
                    // starts sooner than Slurm did.
                    match starts.get(why.as_str()) {
                        Some((o, t, other))
                            if other.account == job.account
                                && other.submit <= job.submit
                                && *o < *t - SAME_S => {}
                        _ => problems.push(format!(
                            "{name} starts later ({ours} s, Slurm {theirs} s) but {why} does \
                             not explain it: it must be of the same team, submitted before, \
                             and start earlier than in Slurm"
                        )),
                    }
                } else {
                    earlier += 1;
                    if why != "-" {
                        problems.push(format!("{name} starts earlier: its reason is `-`"));
                    }
                }
            }
            (false, _) => problems.push(format!(
                "{name}\t{ours}\t{theirs}\t(gantry, Slurm start in seconds; explain or fix)"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{matched} jobs start as in Slurm; differences:\n{}",
        problems.join("\n")
    );
    eprintln!("{matched} jobs start as Slurm started them, {earlier} earlier, {later} later");
}
