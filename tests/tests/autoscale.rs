//! Autoscale and warm-pool scenarios: every folder under `tests/autoscale/` holds a policy,
//! a fleet, jobs, the decision time (`now`) and optionally the autoscaler's state from the
//! previous cycle (`state.json`), a start history (`history.jsonl`) and events such as
//! spot interruption notices (`events.jsonl`). `gantry plan
//! --format json` runs on it; the plan's `scale`, `warm` and next `state` are snapshotted
//! with insta, and what each scenario is about is asserted below.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("autoscale")
}

fn plan(case: &str) -> Value {
    let dir = root().join(case);
    let now = std::fs::read_to_string(dir.join("now")).unwrap();
    let arg = |f: &str| dir.join(f).display().to_string();
    let mut args: Vec<String> = vec![
        "gantry".into(),
        "plan".into(),
        "--policy".into(),
        arg("policy.gantry"),
        "--fleet".into(),
        arg("fleet.toml"),
        "--jobs".into(),
        arg("jobs.jsonl"),
        "--now".into(),
        now.trim().into(),
        "--format".into(),
        "json".into(),
    ];
    for (flag, file) in [
        ("--state", "state.json"),
        ("--history", "history.jsonl"),
        ("--events", "events.jsonl"),
    ] {
        if dir.join(file).exists() {
            args.push(flag.into());
            args.push(arg(file));
        }
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        cli::run(args, &mut io)
    };
    assert_eq!(code, 0, "{case}: {}", String::from_utf8_lossy(&err));
    serde_json::from_slice(&out).unwrap()
}

fn deltas(p: &Value) -> Vec<(String, i64)> {
    p["scale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["pool"].as_str().unwrap().to_string(),
                s["delta_nodes"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn reasons(p: &Value) -> String {
    p["scale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_scenario_matches_its_snapshot_and_is_deterministic() {
    let mut names: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 12, "{names:?}");
    for case in names {
        let p = plan(&case);
        assert_eq!(p, plan(&case), "{case} is not deterministic");
        let shown = json!({
            "scale": p["scale"],
            "warm": p["warm"],
            "state": p["state"],
            "preemptions": p["preemptions"],
        });
        insta::assert_snapshot!(case.clone(), serde_json::to_string_pretty(&shown).unwrap());
    }
}

#[test]
fn a_burst_scales_up_only_after_the_for_window_and_counts_booting_nodes() {
    let within = plan("burst_within_for_window");
    assert_eq!(deltas(&within), [("spot".to_string(), 0)]);
    assert!(reasons(&within).contains("waiting for the trigger to hold 120s"));
    // The next cycle passes the state back: the trigger has held since then.
    assert!(within["state"]["pools"]["spot"]["trigger_since"]["up/0"].is_i64());
    let after = plan("burst_after_for_window");
    assert_eq!(deltas(&after), [("spot".to_string(), 10)]);
    assert_eq!(after["state"]["pools"]["spot"]["booting"][0]["nodes"], 10);
    // Four nodes already booting: six more, not ten.
    assert_eq!(
        deltas(&plan("burst_counts_booting_nodes")),
        [("spot".to_string(), 6)]
    );
}

#[test]
fn the_spend_cap_holds() {
    let p = plan("spend_cap");
    assert_eq!(
        deltas(&p),
        [("spot".to_string(), 5)],
        "200 $/h buys five 39.80 $/h nodes"
    );
    assert!(reasons(&p).contains("max_spend 200 $/h"));
}

/// Issue 53 #4: a cap that leaves a gang short buys nothing for it, and says why.
#[test]
fn a_capped_scale_up_buys_no_part_of_a_gang() {
    let p = plan("gang_spend_cap");
    assert_eq!(deltas(&p), [("spot".to_string(), 0)]);
    let why = reasons(&p);
    assert!(
        why.contains("max_spend 100 $/h") && why.contains("the smallest waiting job needs 4"),
        "{why}"
    );
}

#[test]
fn gangs_count_in_whole_nodes_and_unfittable_shapes_scale_nothing() {
    let p = plan("gang_shapes");
    // A 2 × 8 gang is two nodes; a 2-GPU and a 4-GPU job share a third.
    assert!(
        deltas(&p).contains(&("spot".to_string(), 3)),
        "{:?}",
        deltas(&p)
    );
    assert!(reasons(&p).contains("job too-wide (1 × 16 GPUs) fits no autoscaled pool's node shape"));
}

#[test]
fn idle_nodes_go_after_the_idle_time_but_not_below_the_warm_target() {
    let p = plan("idle_down_keeps_warm");
    assert_eq!(deltas(&p), [("interactive".to_string(), -2)]);
    let why = reasons(&p);
    assert!(why.contains("nb-0, nb-1"), "{why}");
    assert!(!why.contains("nb-2"), "idle for only 10 minutes: {why}");
}

#[test]
fn a_full_spot_pool_falls_back_to_on_demand() {
    let p = plan("spot_full_falls_back");
    let d = deltas(&p);
    assert!(d.contains(&("spot".to_string(), 2)), "{d:?}");
    assert!(d.contains(&("on_demand".to_string(), 3)), "{d:?}");
}

#[test]
fn warm_targets_change_at_window_edges_in_the_zone_across_dst() {
    // 29 March 2026: Berlin moves from UTC+1 to UTC+2.
    let before = plan("warm_before_window_after_dst");
    assert_eq!(before["warm"][0]["target_nodes"], 0);
    for case in [
        "warm_window_opens_after_dst",
        "warm_window_opens_before_dst",
    ] {
        let p = plan(case);
        assert_eq!(p["warm"][0]["target_nodes"], 5, "{case}");
        assert!(p["warm"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("Mon 08:00 Europe/Berlin"));
        assert_eq!(deltas(&p), [("interactive".to_string(), 4)], "{case}");
    }
}

#[test]
fn a_spot_interruption_requeues_from_the_checkpoint_and_falls_back_after_the_count() {
    let p = plan("spot_interruption");
    let pre = p["preemptions"].as_array().unwrap();
    assert_eq!(pre.len(), 2);
    for x in pre {
        assert_eq!(x["cause"], "spot_interrupt");
        assert_eq!(x["grace_s"], 120, "the pool's notice");
    }
    // 4 GPUs × 400 s since the checkpoint at 9600.
    assert_eq!(pre[0]["job"], "first-hit");
    assert_eq!(pre[0]["lost_gpu_s"], 1600.0);
    let find = |id: &str| {
        p["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["job"] == id)
            .unwrap()
            .clone()
    };
    // First interruption: back on spot, not on the noticed node.
    assert_eq!(find("first-hit")["placement"][0]["node"], "spot-1");
    // Second interruption: the policy's rule routes it to on-demand.
    let second = find("second-hit");
    assert_eq!(second["routed_to"]["rule"], "spot_retry");
    assert_eq!(second["placement"][0]["node"], "od");
}

#[test]
fn a_pool_below_its_minimum_is_brought_up() {
    let p = plan("below_minimum");
    assert_eq!(deltas(&p), [("spot".to_string(), 2)]);
    assert!(reasons(&p).contains("pool minimum 2 nodes"));
}

#[test]
fn jobs_the_new_nodes_will_hold_say_so() {
    let p = plan("burst_after_for_window");
    let d = p["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["job"] == "train-0")
        .unwrap();
    assert_eq!(
        d["reason"]["unblock"],
        "fits in pool spot after scale-up (nodes ready in about 7m)"
    );
    // The earlier of the boot and the running jobs' estimates (here a job past its own).
    assert!(d["reason"]["eta_s"].as_i64().unwrap() <= 420);
}
