//! Placement scenarios: every folder under `tests/placement/` holds a fleet (`fleet.json`
//! or `fleet.toml`) and jobs (`jobs.jsonl` or `jobs.json`). `gantry place --format json`
//! runs on it and its decisions are snapshotted with insta; the scenarios the engine must
//! honour are also asserted outright below.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("placement")
}

fn find(dir: &Path, stem: &str) -> PathBuf {
    ["json", "jsonl", "toml"]
        .iter()
        .map(|e| dir.join(format!("{stem}.{e}")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{} has no {stem} file", dir.display()))
}

fn place(case: &str, extra: &[&str]) -> Value {
    let dir = root().join(case);
    let fleet = find(&dir, "fleet");
    let jobs = find(&dir, "jobs");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut args = vec![
        "gantry".to_string(),
        "place".into(),
        "--fleet".into(),
        fleet.display().to_string(),
        "--jobs".into(),
        jobs.display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        cli::run(args, &mut io)
    };
    assert_eq!(code, 0, "{case}: {}", String::from_utf8_lossy(&err));
    serde_json::from_slice(&out).unwrap()
}

fn decision<'a>(plan: &'a Value, job: &str) -> &'a Value {
    plan["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["job"] == job)
        .unwrap_or_else(|| panic!("no decision for {job}"))
}

fn gpus(d: &Value) -> Vec<Vec<u64>> {
    d["placement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_u64().unwrap())
                .collect()
        })
        .collect()
}

fn nodes(d: &Value) -> Vec<String> {
    d["placement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["node"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_scenario_matches_its_snapshot_and_is_deterministic() {
    let mut cases: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert!(cases.len() >= 7, "scenario folders missing: {cases:?}");
    for case in cases {
        let plan = place(&case, &[]);
        assert_eq!(plan, place(&case, &[]), "{case} is not deterministic");
        let pretty = serde_json::to_string_pretty(&plan).unwrap();
        insta::assert_snapshot!(case.clone(), pretty);
    }
}

#[test]
fn a_4_gpu_job_lands_in_one_nvlink_island() {
    let plan = place("island", &[]);
    assert_eq!(gpus(decision(&plan, "two")), vec![vec![0, 1]]);
    // Island 0 has two GPUs left, island 1 four: the 4-GPU job takes island 1 whole.
    assert_eq!(gpus(decision(&plan, "four")), vec![vec![4, 5, 6, 7]]);
    assert_eq!(gpus(decision(&plan, "two-more")), vec![vec![2, 3]]);
}

#[test]
fn a_16_gpu_gang_lands_on_two_nodes_of_one_nvlink_domain() {
    let plan = place("nvlink_domain_gang", &[]);
    let d = decision(&plan, "train-16");
    assert_eq!(d["action"], "place");
    let n = nodes(d);
    assert_eq!(n.len(), 2);
    assert!(
        n.iter().all(|x| x.starts_with("b-")),
        "{n:?} spans NVLink domains"
    );
    assert_ne!(n[0], n[1]);
    let too_big = decision(&plan, "train-24");
    assert_eq!(too_big["action"], "queue");
    assert_eq!(too_big["reason"]["code"], "no_capacity");
}

#[test]
fn mig_instances_follow_nvidia_start_positions() {
    let plan = place("mig_start_positions", &[]);
    let start = |job: &str| decision(&plan, job)["placement"][0]["mig"][0]["start"].as_u64();
    assert_eq!(start("mig-4g"), Some(0), "4g.40gb may only start at slot 0");
    assert_eq!(
        start("mig-3g"),
        Some(4),
        "a 3g.40gb after a 4g.40gb starts at slot 4"
    );
    // Slots 0–7 are all taken: no 1g.10gb fits, though a width-1 profile needs one slot.
    assert_eq!(decision(&plan, "mig-1g-gpu-full")["action"], "queue");
}

#[test]
fn a_gang_that_does_not_fit_takes_nothing() {
    let plan = place("gang_all_or_nothing", &[]);
    assert_eq!(decision(&plan, "gang-3x8")["action"], "queue");
    // Had the 3-member gang kept two nodes, this would not fit.
    assert_eq!(decision(&plan, "single-8")["action"], "place");
    assert_eq!(decision(&plan, "gang-2x8")["action"], "queue");
    assert_eq!(decision(&plan, "single-8-b")["action"], "place");
}

#[test]
fn shares_pack_onto_one_gpu() {
    let plan = place("fractional_shares", &[]);
    let on = |job: &str| (nodes(decision(&plan, job)), gpus(decision(&plan, job)));
    assert_eq!(on("half-a"), on("half-b"), "two halves share a GPU");
    assert_eq!(on("quarter"), on("three-quarters"));
}

#[test]
fn unplaceable_jobs_say_why() {
    let plan = place("reasons", &[]);
    let code = |job: &str| {
        decision(&plan, job)["reason"]["code"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(code("wants-h100"), "no_such_model");
    assert_eq!(code("too-wide"), "never_fits");
    assert_eq!(code("too-much-vram"), "never_fits");
    assert_eq!(code("wrong-pool"), "never_fits");
    assert_eq!(code("no-rack-labels"), "topology_unsatisfiable");
    assert_eq!(code("waits"), "no_capacity");
    let msg = decision(&plan, "wants-h100")["reason"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("no node has model H100-SXM5-80GB"), "{msg}");
}

#[test]
fn required_same_node_keeps_members_together() {
    let plan = place("toml_fleet_topology_node", &[]);
    let n = nodes(decision(&plan, "pair-on-one-node"));
    assert_eq!(n, vec!["big", "big"]);
    assert_eq!(decision(&plan, "three-on-one-node")["action"], "queue");
}

#[test]
fn every_packing_places_the_scenarios_without_error() {
    for packing in [
        "least_fragmentation",
        "fgd",
        "best_fit",
        "gpu_packing",
        "spread",
        "random",
    ] {
        let plan = place("nvlink_domain_gang", &["--packing", packing]);
        let d = decision(&plan, "train-16");
        assert_eq!(d["action"], "place", "{packing}");
        assert!(nodes(d).iter().all(|x| x.starts_with("b-")), "{packing}");
    }
}
