//! Time limits above runtimes, TIMEOUT and CANCELLED against a real Slurm, start by
//! start. `tests/slurm/limits/` holds a workload (`workload.tsv`) that a real Slurm 22.05
//! ran to the end with accounting (slurmdbd on MariaDB): 36 jobs in three waves, limits
//! of 3 to 8 minutes that most jobs end well before, three jobs that run past their limit
//! (TIMEOUT), two that cancel themselves after a start and one cancelled while pending.
//! `sacct.txt` is the accounting export of that run.
//!
//! The export is imported as users import one (`gantry trace import --from slurm`:
//! decisions plan with the limit, the replay ends a job when it really ended, a TIMEOUT at
//! its limit) and replayed with `gantry simulate` under `policy.gantry` (the same cluster,
//! FIFO, conservative backfill). Every job must start when Slurm started it (within
//! Slurm's `bf_resolution` of a minute) or be listed in `differences.tsv` with both
//! starts and why, and the why is checked against Slurm's own record (`NodeList`):
//! - `held`: when Gantry started it, Slurm had the GPUs free on enough of its nodes and
//!   held them (Slurm's backfill books whole nodes for the jobs it plans);
//! - a job's name: that job held the room in Slurm then, and Slurm had started it later
//!   than Gantry did (for a job that starts later in Gantry: the named job held the room
//!   in Gantry at Slurm's start and started later in Gantry than in Slurm).
//!
//! The replay is also run with runtimes predicted from history (`--estimates
//! predicted`), and the first-ETA error of both is reported: with limits no job starts
//! after its first ETA (limits bound runtimes, the queue is FIFO); with predictions the
//! promises are closer but some break.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a broken fixture should fail the test"
)]

mod cli_run;
use cli_run::{gantry, simulate_json, simulate_json_with};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Slurm's `bf_resolution`: starts this close count as the same.
const SAME_S: i64 = 60;
const GPUS_PER_NODE: u64 = 8;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/limits")
}

/// Seconds since the epoch of an `sacct` time (`2026-12-01T18:17:15`, UTC here).
fn seconds(t: &str) -> Option<i64> {
    chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| t.and_utc().timestamp())
}

/// One job of the export that started.
#[derive(Debug)]
struct SlurmJob {
    id: String,
    submit: i64,
    start: i64,
    end: i64,
    state: String,
    limit_s: i64,
    nodes: Vec<String>,
    gpus_per_node: u64,
}

/// `gpu[1-2,4]` or `gpu3` → node names.
fn node_list(s: &str) -> Vec<String> {
    let Some((prefix, rest)) = s.split_once('[') else {
        return vec![s.to_string()];
    };
    rest.trim_end_matches(']')
        .split(',')
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
            (a..=b).map(move |i| format!("{prefix}{i}"))
        })
        .collect()
}

/// The jobs that started, by name (each name is one job in this workload).
fn slurm_jobs() -> BTreeMap<String, SlurmJob> {
    let text = std::fs::read_to_string(dir().join("sacct.txt")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('|').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (id, name, submit, start, end) = (
        col("JobID"),
        col("JobName"),
        col("Submit"),
        col("Start"),
        col("End"),
    );
    let (state, limit, nodes, tres) = (
        col("State"),
        col("Timelimit"),
        col("NodeList"),
        col("AllocTRES"),
    );
    lines
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|f| !f[id].contains('.'))
        .filter_map(|f| {
            let start = seconds(f[start])?;
            let nodes = node_list(f[nodes]);
            let gpus: u64 = f[tres]
                .split(',')
                .find_map(|kv| kv.strip_prefix("gres/gpu="))
                .unwrap()
                .parse()
                .unwrap();
            let (h, rest) = f[limit].split_once(':').unwrap();
            let (m, s) = rest.split_once(':').unwrap();
            let limit_s = h.parse::<i64>().unwrap() * 3600
                + m.parse::<i64>().unwrap() * 60
                + s.parse::<i64>().unwrap();
            let job = SlurmJob {
                id: f[id].to_string(),
                submit: seconds(f[submit]).unwrap(),
                start,
                end: seconds(f[end]).unwrap(),
                state: f[state].split_whitespace().next().unwrap().to_string(),
                limit_s,
                gpus_per_node: gpus / nodes.len() as u64,
                nodes,
            };
            Some((f[name].to_string(), job))
        })
        .collect()
}

/// The imported export's replay (`--estimates` as given): the metrics.
fn replay(estimates: &str) -> Value {
    let d = dir();
    let p = |f: &str| d.join(f).display().to_string();
    let trace = std::env::temp_dir().join(format!(
        "gantry-slurm-limits-{estimates}-{}.jsonl",
        std::process::id()
    ));
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
    assert!(
        err.contains("2 CANCELLED, 3 TIMEOUT") && err.contains("1 never started"),
        "the import says what it did with each state: {err}"
    );
    let m = if estimates == "limits" {
        simulate_json(&d, &trace_s)
    } else {
        simulate_json_with(&d, &trace_s, &["--estimates", estimates])
    };
    std::fs::remove_file(&trace).ok();
    m
}

/// Each job's (start, end) in a replay, by JobID.
fn runs(m: &Value, slurm: &BTreeMap<String, SlurmJob>) -> BTreeMap<String, (i64, i64)> {
    let by_id: BTreeMap<&str, &SlurmJob> = slurm.values().map(|j| (j.id.as_str(), j)).collect();
    m["job_outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let id = o["id"].as_str().unwrap();
            let start = o["first_start"].as_i64().unwrap();
            // What it ran in the replay: its real runtime, a TIMEOUT its limit.
            let j = by_id[id];
            let ran = if j.state == "TIMEOUT" {
                j.limit_s
            } else {
                j.end - j.start
            };
            (id.to_string(), (start, start + ran))
        })
        .collect()
}

/// `differences.tsv`: name → (Gantry's start, Slurm's start, why).
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

/// GPUs free on each of Slurm's nodes at `t`, by its record.
fn slurm_free_at(slurm: &BTreeMap<String, SlurmJob>, t: i64) -> BTreeMap<String, u64> {
    let mut free: BTreeMap<String, u64> = (1..=4)
        .map(|i| (format!("gpu{i}"), GPUS_PER_NODE))
        .collect();
    for j in slurm.values().filter(|j| j.start <= t && t < j.end) {
        for n in &j.nodes {
            let f = free.get_mut(n).unwrap();
            *f = f.saturating_sub(j.gpus_per_node);
        }
    }
    free
}

#[test]
fn limits_timeouts_and_cancels_start_as_slurm_did_or_say_why_not() {
    let slurm = slurm_jobs();
    // What the run was recorded for: limits above runtimes, real TIMEOUTs and cancels.
    assert_eq!(
        slurm.len(),
        35,
        "35 of the 36 jobs started (j14 was cancelled pending)"
    );
    let state = |s: &str| slurm.values().filter(|j| j.state == s).count();
    assert_eq!((state("TIMEOUT"), state("CANCELLED")), (3, 2));
    let completed: Vec<&SlurmJob> = slurm.values().filter(|j| j.state == "COMPLETED").collect();
    assert!(completed.iter().all(|j| j.end - j.start < j.limit_s));
    let early = completed
        .iter()
        .filter(|j| j.end - j.start < j.limit_s * 3 / 4)
        .count();
    assert!(early >= 10, "many end well before their limit: {early}");

    let m = replay("limits");
    let ours = runs(&m, &slurm);
    assert_eq!(ours.len(), slurm.len(), "every job replayed");
    for o in m["job_outcomes"].as_array().unwrap() {
        let j = slurm.values().find(|j| j.id == o["id"]).unwrap();
        assert_eq!(
            o["timed_out"].as_bool().unwrap_or(false),
            j.state == "TIMEOUT",
            "a TIMEOUT is stopped at its limit, nothing else is: {o}"
        );
    }
    let t0 = slurm.values().map(|j| j.submit).min().unwrap();
    // By name: (Gantry's start, Gantry's end, Slurm's start, Slurm's end), after t0.
    let both: BTreeMap<&str, (i64, i64, i64, i64)> = slurm
        .iter()
        .map(|(name, j)| {
            let (s, e) = ours[&j.id];
            (name.as_str(), (s - t0, e - t0, j.start - t0, j.end - t0))
        })
        .collect();
    let listed = listed();
    let mut problems = Vec::new();
    let (mut matched, mut earlier, mut later) = (0, 0, 0);
    for (name, &(g, _, s, _)) in &both {
        let same = (g - s).abs() <= SAME_S;
        match (same, listed.get(*name)) {
            (true, None) => matched += 1,
            (true, Some(_)) => {
                problems.push(format!("{name} matches now; drop it from differences.tsv"))
            }
            (false, Some((lg, ls, why))) if *lg == g && *ls == s => {
                let job = &slurm[*name];
                let ok = if g < s {
                    earlier += 1;
                    if why == "held" {
                        // Slurm had the room free then, on enough nodes.
                        let free = slurm_free_at(&slurm, t0 + g);
                        let nodes = free.values().filter(|f| **f >= job.gpus_per_node).count();
                        nodes >= job.nodes.len()
                    } else {
                        // The named job held room in Slurm then, started later there.
                        both.get(why.as_str())
                            .is_some_and(|&(og, _, os, oe)| os <= g && g < oe && os - og > SAME_S)
                    }
                } else {
                    later += 1;
                    both.get(why.as_str())
                        .is_some_and(|&(og, oe, os, _)| og <= s && s < oe && og - os > SAME_S)
                };
                if !ok {
                    problems.push(format!(
                        "{name} (Gantry {g} s, Slurm {s} s): `{why}` does not explain it"
                    ));
                }
            }
            (false, _) => problems.push(format!(
                "{name}\t{g}\t{s}\t(Gantry, Slurm start in seconds; explain or fix)"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{matched} jobs start as in Slurm; differences:\n{}",
        problems.join("\n")
    );
    eprintln!("{matched} jobs start as Slurm started them, {earlier} earlier, {later} later");

    // First ETAs: planned from limits, no promise breaks; predictions are closer.
    let predicted = replay("predicted");
    let (l, p) = (&m["first_eta_error"], &predicted["first_eta_error"]);
    eprintln!("first ETAs with limits: {l}\nfirst ETAs with predictions: {p}");
    assert!(l["jobs"].as_u64().unwrap() >= 20, "{l}");
    assert_eq!(l["late"], 0, "limits bound runtimes in a FIFO queue: {l}");
    assert!(
        p["abs_error_s"]["p50"].as_f64() < l["abs_error_s"]["p50"].as_f64(),
        "predictions bring the typical first ETA closer: {p} vs {l}"
    );
    assert!(
        predicted["job_outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["predicted_runtime_s"].is_u64()),
        "some jobs were planned with a prediction"
    );
}
