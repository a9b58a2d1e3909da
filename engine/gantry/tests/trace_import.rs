//! `gantry trace import` as a team runs it in CI: a recorded Slurm accounting export
//! (`tests/slurm/sacct/`, from the real peer Slurm with slurmdbd) and Kubernetes pod
//! listings (`tests/import/kubernetes/`) become traces that `gantry simulate` replays;
//! bad input is a clear error with exit 2.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Output};

fn gantry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

#[test]
fn a_recorded_sacct_export_imports_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let out = gantry(&[
        "trace",
        "import",
        "--from",
        "slurm",
        "tests/slurm/sacct/sacct.txt",
        "--map",
        "tests/slurm/sacct/map.toml",
        "-o",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = text(&out.stderr);
    assert!(summary.contains("imported 40 jobs"), "{summary}");
    assert!(summary.contains("job steps"), "{summary}");
    let jobs: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(jobs.len(), 40);
    let teams: std::collections::BTreeSet<&str> =
        jobs.iter().map(|j| j["team"].as_str().unwrap()).collect();
    assert_eq!(
        teams.into_iter().collect::<Vec<_>>(),
        ["biology", "research"]
    );
    assert!(jobs.iter().any(|j| j["tier"] == "critical"));
    // GPUs from AllocTRES: the workload's 1, 2, 4 and 8-GPU jobs.
    let sizes: std::collections::BTreeSet<u64> = jobs
        .iter()
        .map(|j| j["gpus_per_member"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [1, 2, 4, 8]);
    let metrics = dir.path().join("metrics.json");
    let out = gantry(&[
        "simulate",
        "--policy",
        "tests/slurm/sacct",
        "--fleet",
        "tests/slurm/sacct/fleet.toml",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
        metrics.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&metrics).unwrap()).unwrap();
    assert_eq!(m["jobs"]["submitted"], 40, "{}", m["jobs"]);
    assert_eq!(m["jobs"]["completed"], 40, "{}", m["jobs"]);
}

#[test]
fn pod_listings_import_with_gangs_and_mapped_names() {
    let out = gantry(&[
        "trace",
        "import",
        "--from",
        "kubernetes",
        "tests/import/kubernetes/pods-0900.json",
        "tests/import/kubernetes/pods-1100.json",
        "--map",
        "tests/import/kubernetes/map.toml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let jobs: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ml/train-a", "ml/notebook", "bio/fold"]);
    // Running in the first listing, finished in the second: its real end counts.
    assert_eq!(jobs[0]["runtime_s"], 7200);
    // No labels: the priority class and the namespace through the mapping.
    assert_eq!(jobs[1]["tier"], "critical");
    assert_eq!(jobs[2]["team"], "biology");
    assert_eq!(
        (jobs[2]["members"].clone(), jobs[2]["runtime_s"].clone()),
        (2.into(), 3630.into())
    );
    let summary = text(&out.stderr);
    assert!(
        summary.contains("imported 3 jobs; left out: 1 never started, 1 no GPUs"),
        "{summary}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.txt");
    std::fs::write(&wrong, "JobID|State\n1|COMPLETED\n").unwrap();
    for (args, want) in [
        (
            vec!["--from", "slurm", "no-such-file.txt"],
            "cannot read no-such-file.txt",
        ),
        (
            vec!["--from", "slurm", wrong.to_str().unwrap()],
            "the header lacks Submit",
        ),
        (
            vec!["--from", "kubernetes", wrong.to_str().unwrap()],
            "not JSON",
        ),
        (
            vec![
                "--from",
                "slurm",
                "tests/slurm/sacct/sacct.txt",
                "--map",
                "tests/slurm/sacct/policy.gantry",
            ],
            "policy.gantry",
        ),
    ] {
        let mut full = vec!["trace", "import"];
        full.extend(args.iter().copied());
        let out = gantry(&full);
        assert_eq!(out.status.code(), Some(2), "{full:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{full:?}: {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("panicked"));
    }
}
