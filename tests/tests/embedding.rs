//! The decision crate embedded alone (`engine/examples/embed.rs`'s way: text in, a plan
//! out, no shell crate) decides as `gantry plan` does on the same files.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "test code: a broken fixture should fail the test"
)]

use engine::core::mig::MigTable;
use engine::decide::snapshot::Snapshot;
use engine::inventory::{catalog, fleet_file, jobs_file};
use std::path::PathBuf;

fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/plan")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(example(file)).unwrap()
}

#[test]
fn the_engine_alone_decides_as_gantry_plan_does() {
    let checked = lang::check(&[("policy.gantry".to_string(), read("policy.gantry"))]);
    let program = checked.program.unwrap();
    let models = catalog::merged(&program.gpu_models);
    let fleet = fleet_file::parse("fleet.toml", &read("fleet.toml"), &models).unwrap();
    let jobs = jobs_file::parse("jobs.jsonl", &read("jobs.jsonl")).unwrap();
    let now = jobs
        .iter()
        .flat_map(|j| [j.submitted_at, j.started_at, j.last_checkpoint_at])
        .flatten()
        .max()
        .unwrap();
    let mig = MigTable::from_models(&models);
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &mig).unwrap();
    let embedded = serde_json::to_value(engine::cycle::decide(&program, &snapshot, now)).unwrap();

    let path = |f: &str| example(f).display().to_string();
    let (policy, fleet, jobs) = (
        path("policy.gantry"),
        path("fleet.toml"),
        path("jobs.jsonl"),
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut io = cli::Io::captured(&mut out, &mut err);
    let args = [
        "gantry", "plan", "--policy", &policy, "--fleet", &fleet, "--jobs", &jobs, "--format",
        "json",
    ];
    let code = cli::run(args, &mut io);
    drop(io);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let command: serde_json::Value = serde_json::from_slice(&out).unwrap();

    for part in ["now", "decisions", "preemptions", "reservations"] {
        assert_eq!(embedded[part], command[part], "{part} differ");
    }
    // The example's queue has work of every kind, so the comparison compares something.
    let decisions = embedded["decisions"].as_array().unwrap();
    assert!(decisions
        .iter()
        .any(|d| d["action"] == "place" || d["action"] == "preempt"));
    assert!(decisions.iter().any(|d| d["action"] == "queue"));
    assert!(!embedded["preemptions"].as_array().unwrap().is_empty());
}
