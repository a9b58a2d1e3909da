//! `gantry simulate`, `gantry diff` and `gantry test` end to end. Every folder under
//! `tests/simulate/` is a small policy, fleet and trace whose metrics were worked out by
//! hand (the numbers asserted below); the job outcomes and summary are also snapshotted.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

mod cli_run;
use cli_run::{gantry, simulate_json, simulate_json_with};

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn repo() -> PathBuf {
    tests_dir().join("..")
}

fn simulate(case: &str) -> Value {
    let dir = tests_dir().join("simulate").join(case);
    simulate_json(&dir, &dir.join("trace.jsonl").display().to_string())
}

fn outcome<'v>(m: &'v Value, id: &str) -> &'v Value {
    m["job_outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap()
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-9
}

/// The parts of the metrics worth a snapshot: no timeline (its buckets are covered by
/// unit tests) and no policy revision (it changes with comments).
fn snapshot_view(m: &Value) -> Value {
    json!({
        "span": [m["start"], m["end"]],
        "jobs": m["jobs"],
        "utilization": m["utilization"],
        "cost": m["cost"],
        "pools": m["pools"],
        "all": m["all"],
        "preemptions": m["preemptions"],
        "scale_events": m["scale_events"],
        "job_outcomes": m["job_outcomes"],
        "notes": m["notes"],
    })
}

fn snap(name: &str, m: &Value) {
    insta::assert_snapshot!(
        name,
        serde_json::to_string_pretty(&snapshot_view(m)).unwrap()
    );
}

/// `gantry simulate` on the autoscale example with `extra` arguments.
fn simulate_example(extra: &[&str]) -> (u8, String, String) {
    let dir = repo().join("examples/autoscale");
    let p = |f: &str| dir.join(f).display().to_string();
    let mut args: Vec<String> = vec!["simulate".into(), "--policy".into(), p("policy.gantry")];
    for (flag, file) in [
        ("--fleet", "fleet.toml"),
        ("--trace", "trace.jsonl"),
        ("--history", "history.jsonl"),
    ] {
        args.push(flag.into());
        args.push(p(file));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    gantry(&refs)
}

/// `gantry simulate` on the `sequential` case's policy and fleet with another trace.
fn simulate_trace(trace: &Path, extra: &[&str]) -> (u8, String, String) {
    let dir = tests_dir().join("simulate/sequential");
    let (policy, fleet, trace) = (
        dir.join("policy.gantry").display().to_string(),
        dir.join("fleet.toml").display().to_string(),
        trace.display().to_string(),
    );
    let mut args = vec![
        "simulate", "--policy", &policy, "--fleet", &fleet, "--trace", &trace,
    ];
    args.extend_from_slice(extra);
    gantry(&args)
}

#[test]
fn sequential_jobs_wait_for_each_other() {
    let m = simulate("sequential");
    // b arrives at 10 and starts when a ends at 100.
    assert_eq!(outcome(&m, "b")["first_start"], 100);
    assert_eq!(outcome(&m, "b")["queue_wait_s"], 90);
    assert_eq!(m["end"], 150);
    assert!(close(&m["utilization"], 1.0));
    // One node at 8 $/h for 150 s.
    assert!(close(&m["cost"], 8.0 * 150.0 / 3600.0));
    assert_eq!(m["all"]["time_to_first_gpu_s"]["p50"], 0.0);
    assert_eq!(m["all"]["time_to_first_gpu_s"]["p95"], 90.0);
    snap("simulate_sequential", &m);
}

#[test]
fn preempted_job_resumes_from_its_checkpoint() {
    let m = simulate("preemption");
    // crit arrives at 100 and preempts be (grace 30s): it starts at 130, ends at 180.
    assert_eq!(outcome(&m, "crit")["first_start"], 130);
    // be checkpointed at 90: 10 s and its 30 s of grace × 8 GPUs lost; it waits 100..180
    // and resumes with 910 s of work left, ending at 1090.
    let be = outcome(&m, "be");
    assert!(close(&be["lost_gpu_s"], 320.0), "{}", be["lost_gpu_s"]);
    assert_eq!(be["queue_wait_s"], 80);
    assert_eq!(be["preemptions"], 1);
    // The main reason it waited is kept after it ran again: it held the reservation.
    assert_eq!(be["main_wait"], "reserved (1m20s of 1m20s waited)");
    assert!(outcome(&m, "crit")["main_wait"].is_null());
    assert_eq!(m["end"], 1090);
    assert_eq!(m["preemptions"]["by_cause"]["priority"], 1);
    assert!(close(&m["preemptions"]["lost_gpu_hours"], 320.0 / 3600.0));
    assert!(close(&m["utilization"], 1.0));
    snap("simulate_preemption", &m);
}

#[test]
fn the_replay_decides_again_when_a_protection_ends() {
    // long lost more than max_lost when urgent arrived: protected until its checkpoint at
    // 3600 s, then preempted, stopping within its 2m grace. Nothing arrives or ends at
    // 3600 s; before the plan said when to decide again, urgent started at 7200 s.
    let m = simulate("protection_ends");
    assert_eq!(outcome(&m, "urgent")["first_start"], 3720);
    let long = outcome(&m, "long");
    assert_eq!(long["preemptions"], 1);
    // Checkpointed at 3600 s: only its grace is lost.
    assert!(
        close(&long["lost_gpu_s"], 8.0 * 120.0),
        "{}",
        long["lost_gpu_s"]
    );
    // It resumes when urgent ends (4320 s) with an hour of work left.
    assert_eq!(m["end"], 7920);
}

#[test]
fn a_gang_starts_when_its_plan_said_it_would() {
    // The plan scenario gang_waits_for_protected_victims gives the gang 220 s at 4000 s.
    let m = simulate("gang_protection_ends");
    assert_eq!(outcome(&m, "gang")["first_start"], 4220);
    assert_eq!(outcome(&m, "v1")["preemptions"], 1);
    assert_eq!(outcome(&m, "v2")["preemptions"], 1);
}

#[test]
fn an_easy_head_that_preempts_is_not_overtaken() {
    // The plan scenario easy_head_reserves_by_preempting, replayed: the gang's EASY
    // reservation holds both nodes from 4220 (v2 past its min_runtime, then the grace),
    // so nlp's later 8-GPU job does not preempt v1 in front of it and starts after it.
    let m = simulate("easy_head_preempts_on_time");
    let gang = outcome(&m, "gang");
    assert_eq!(gang["first_start"], 4220);
    assert_eq!(gang["first_eta"], 4220);
    assert_eq!(outcome(&m, "small")["first_start"], 7820);
    // Told so when it came: v1 and v2 counted as stopping for the gang (was 86,400).
    assert_eq!(outcome(&m, "small")["first_eta"], 7820);
}

#[test]
fn a_reservation_by_preempting_is_not_delayed_by_backfill() {
    // The plan scenario backfill_ends_before_preempting, replayed: big's booking holds
    // its GPUs from when it preempts low (1453), so short, which would end a second
    // later, waits; big starts when it was told, and short when it was told.
    let m = simulate("backfill_ends_before_preempting");
    let big = outcome(&m, "big");
    assert_eq!(big["first_start"], 1729);
    assert_eq!(big["first_eta"], 1729);
    assert_eq!(outcome(&m, "short")["first_start"], 1789);
    assert_eq!(outcome(&m, "short")["first_eta"], 1789);
    assert_eq!(outcome(&m, "tiny")["first_start"], 1263);
    assert_eq!(outcome(&m, "low")["preemptions"], 1);
}

#[test]
fn a_booking_behind_a_job_it_may_not_preempt_stays_put() {
    // Conservative backfill: big is booked where crit (never preempted) ends and low,
    // preemptible already, stops within its grace: 3120, not low's runtime end. Each
    // cycle books it there again, so small, which would run past 3000, waits behind it.
    let m = simulate("booking_behind_a_job_it_may_not_preempt");
    let big = outcome(&m, "big");
    assert_eq!(big["first_eta"], 3120);
    assert_eq!(big["first_start"], 3120);
    let small = outcome(&m, "small");
    assert_eq!(small["first_eta"], 6720);
    assert_eq!(small["first_start"], 6720);
    assert_eq!(outcome(&m, "low")["preemptions"], 1);
}

#[test]
fn jobs_starting_at_their_booked_time_keep_the_bookings_behind_them() {
    // Every job that waits starts at the first ETA it was told, j11 included (placed by
    // best fit at their booked time, j2, j4 and j6 took its GPU: it started at 25189).
    let m = simulate("booking_kept_where_the_quota_binds");
    let mut waited = 0;
    for o in m["job_outcomes"].as_array().unwrap() {
        if !o["first_eta"].is_null() {
            assert_eq!(o["first_start"], o["first_eta"], "{}", o["id"]);
            waited += 1;
        }
    }
    assert_eq!(waited, 9);
    assert_eq!(outcome(&m, "j11")["first_start"], 18305);
}

#[test]
fn a_gang_booked_beside_a_booking_by_preempting_starts_then() {
    // Conservative backfill: a's booking at 1000 takes 2 of the node's 8 GPUs, so g is
    // booked beside it at 1000 (not at 1200, when a ends), and s after g, at 1060. Every
    // job starts when it was first told: before, g was told 1200 and started at 1000 by
    // preempting, in front of s, which had been told 1000.
    let m = simulate("gang_booked_beside_a_booking");
    for (job, at) in [("a", 1000), ("g", 1000), ("s", 1060)] {
        let o = outcome(&m, job);
        assert_eq!(o["first_eta"], at, "{job}");
        assert_eq!(o["first_start"], at, "{job}");
    }
    assert_eq!(outcome(&m, "low0")["preemptions"], 1);
    assert_eq!(outcome(&m, "low1")["preemptions"], 1);
}

#[test]
fn a_victim_that_ends_before_its_grace_is_over_is_not_preempted() {
    // Preempting low at 1000 frees the node at 1300 (its grace); low ends at 1100.
    let m = simulate("victim_ends_before_its_grace");
    let u = outcome(&m, "u");
    assert_eq!(u["first_eta"], 1100);
    assert_eq!(u["first_start"], 1100);
    assert_eq!(outcome(&m, "low")["preemptions"], 0);
}

#[test]
fn a_gang_its_quota_holds_starts_when_its_plan_said_it_would() {
    // The plan scenario gang_held_by_own_quota_waits_for_protection gives 220 s at 4000.
    let m = simulate("gang_held_by_own_quota");
    let gang = outcome(&m, "a-gang");
    assert_eq!(gang["first_start"], 4220);
    assert_eq!(gang["first_eta"], 4220);
    assert_eq!(outcome(&m, "a-l2")["preemptions"], 1);
}

/// GPU-hours per team in the first day of `tests/simulate/fair_share_accrues` under
/// `policy` (relative to the case).
fn first_day_by_team(policy: &str) -> (f64, f64) {
    let dir = tests_dir().join("simulate/fair_share_accrues");
    let p = |f: &str| dir.join(f).display().to_string();
    let (code, out, err) = gantry(&[
        "simulate",
        "--policy",
        &p(policy),
        "--fleet",
        &p("fleet.toml"),
        "--trace",
        &p("trace.jsonl"),
        "--until",
        "86400",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    let hours = |t: &str| m["teams"][t]["gpu_hours"].as_f64().unwrap();
    (hours("a"), hours("b"))
}

#[test]
fn fair_share_counts_what_the_replayed_jobs_use() {
    // Usage frozen at the trace's start gave a 320 and b 256: every hourly tie went to a.
    assert_eq!(first_day_by_team("policy.gantry"), (288.0, 288.0));
    // A 2h half-life forgets most of it: a, first to submit, keeps an edge.
    let (a, b) = first_day_by_team("half-life-2h/policy.gantry");
    assert!(a > b && a + b == 576.0, "{a} {b}");
    // So a half-life change is visible in a diff (before: "0 jobs decided differently").
    let dir = tests_dir().join("simulate/fair_share_accrues");
    let p = |f: &str| dir.join(f).display().to_string();
    let (code, out, err) = gantry(&[
        "diff",
        "--old",
        &p("half-life-2h/policy.gantry"),
        "--new",
        &p("policy.gantry"),
        "--fleet",
        &p("fleet.toml"),
        "--trace",
        &p("trace.jsonl"),
        "--until",
        "86400",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("gpu_hours(team=b)"), "{out}");
    assert!(!out.contains("0 jobs decided differently"), "{out}");
}

#[test]
fn decisions_plan_with_limits_and_jobs_end_when_they_really_end() {
    let m = simulate("limits");
    // a says 2000 s, really ends at 1000 s: head, reserved from a's limit, starts then.
    assert_eq!(outcome(&m, "head")["first_start"], 1000);
    // small's 3000 s limit would run past head's reservation: no backfill, though it
    // really takes 500 s (a clairvoyant replay started it at 2 s).
    assert_eq!(outcome(&m, "small")["first_start"], 2000);
    assert!(outcome(&m, "small")["timed_out"].is_null());
    // late would run 500 s past its 100 s limit: stopped there.
    assert_eq!(outcome(&m, "late")["timed_out"], true);
    assert_eq!(m["end"], 3100);
    // The first ETAs were made from limits: head was promised a's limit (2000 s) and
    // small head's (3000 s); both started 1000 s early.
    assert_eq!(outcome(&m, "head")["first_eta"], 2000);
    assert_eq!(outcome(&m, "small")["first_eta"], 3000);
    let e = &m["first_eta_error"];
    assert_eq!(
        (e["jobs"].as_u64(), e["early"].as_u64()),
        (Some(2), Some(2)),
        "{e}"
    );
    assert!(close(&e["abs_error_s"]["max"], 1000.0), "{e}");
}

/// `gantry simulate --estimates predicted` on `case`.
fn simulate_predicted(case: &str) -> Value {
    let dir = tests_dir().join("simulate").join(case);
    let trace = dir.join("trace.jsonl").display().to_string();
    simulate_json_with(&dir, &trace, &["--estimates", "predicted"])
}

#[test]
fn runtimes_predicted_from_history_backfill_and_are_corrected_when_outlived() {
    let limits = simulate("predicted_runtimes");
    let predicted = simulate_predicted("predicted_runtimes");
    let start = |m: &Value, id: &str| outcome(m, id)["first_start"].as_i64();
    let eta = |m: &Value, id: &str| outcome(m, id)["first_eta"].as_i64();
    // Planned from limits: small (2000 s) would run past big's reservation at 1500 s.
    assert_eq!(start(&limits, "small"), Some(2000));
    assert_eq!(eta(&limits, "small"), Some(2500));
    assert!(limits.get("estimates").is_none(), "limits are the default");
    // Predicted: ana ran 400 of 1000 s, so small is planned at 800 s and backfills.
    assert_eq!(predicted["estimates"], "predicted");
    assert_eq!(outcome(&predicted, "small")["predicted_runtime_s"], 800);
    assert_eq!(start(&predicted, "small"), Some(520));
    // Nothing to go by for a1 (first of its user) and carl's filler: their limits.
    assert!(outcome(&predicted, "a1")["predicted_runtime_s"].is_null());
    assert!(outcome(&predicted, "filler")["predicted_runtime_s"].is_null());
    // under: mean of ana's 0.4 and 0.35 times 3000 s; it really runs 2000 s.
    assert_eq!(outcome(&predicted, "under")["predicted_runtime_s"], 1125);
    // next is first told the prediction's end (late: under outlived it) ...
    assert_eq!(eta(&predicted, "next"), Some(3225));
    // ... and once under outlives it, it is planned with its limit again: next keeps
    // its reservation, filler does not take the room (without the correction next
    // started at 5800 s, after filler).
    assert_eq!(start(&predicted, "next"), Some(4100));
    assert_eq!(start(&predicted, "filler"), Some(4600));
    assert_eq!(start(&limits, "next"), Some(4100));
    let (l, p) = (&limits["first_eta_error"], &predicted["first_eta_error"]);
    assert_eq!(
        (l["jobs"].as_u64(), l["late"].as_u64()),
        (Some(4), Some(0)),
        "{l}"
    );
    assert_eq!(
        (p["jobs"].as_u64(), p["late"].as_u64()),
        (Some(3), Some(1)),
        "{p}"
    );
}

#[test]
fn runs_the_trace_recorded_as_interrupted_are_stopped_and_queued_again() {
    let m = simulate("interrupted_runs");
    let start = |id: &str| outcome(&m, id)["first_start"].as_i64();
    // req is stopped at 200 s and queued again from then, as its replacement pods would
    // be: other (waiting since 10 s) goes first, req after it, at 300 s.
    assert_eq!(start("req"), Some(0));
    assert_eq!(start("other"), Some(200));
    assert_eq!(outcome(&m, "req")["queue_wait_s"], 100);
    assert!(close(&outcome(&m, "req")["lost_gpu_s"], 8.0 * 200.0));
    // ck keeps its two checkpoints (200 s) and loses 50 s on 4 GPUs.
    assert!(close(&outcome(&m, "ck")["lost_gpu_s"], 4.0 * 50.0));
    // short ended before its interruption would have come.
    assert!(close(&outcome(&m, "short")["lost_gpu_s"], 0.0));
    assert_eq!(m["preemptions"]["interrupted_runs"], 2);
    assert_eq!(m["preemptions"]["count"], 0);
    assert!(close(&m["preemptions"]["lost_gpu_hours"], 0.5));
    assert_eq!(m["jobs"]["completed"], 5);
    assert_eq!(m["end"], 2050);
    // ck, stopped at 1250 s, queues behind after (8 GPUs, waiting since 1010 s): after
    // starts then, and ck's last run (200 s left) after it.
    assert_eq!(start("after"), Some(1250));
    assert_eq!(outcome(&m, "ck")["queue_wait_s"], 100);
}

#[test]
fn an_estimate_nobody_enforces_is_run_past_and_a_deadline_stops_the_job() {
    let m = simulate("estimates_run_past");
    let o = |id: &str| outcome(&m, id).clone();
    // a ran its 1200 s past its 600 s estimate: b, told 600 s, starts when a ends.
    assert_eq!(o("a")["timed_out"], Value::Null);
    assert_eq!(o("b")["first_eta"].as_i64(), Some(600));
    assert_eq!(o("b")["first_start"].as_i64(), Some(1200));
    // c is stopped at its 500 s deadline, not at its 300 s estimate or its 1000 s.
    assert_eq!(o("c")["first_start"].as_i64(), Some(1500));
    assert_eq!(o("c")["timed_out"], true);
    assert_eq!(m["end"], 2000);
}

#[test]
fn a_warm_pools_target_idle_nodes_and_warm_starts_are_in_the_figures() {
    let m = simulate("warm_pool");
    let started_warm = |id: &str| outcome(&m, id)["started_warm"].clone();
    assert_eq!(started_warm("a"), "p");
    assert_eq!(started_warm("b"), "p");
    // c took a node freed at the same instant: not one standing warm.
    assert!(started_warm("c").is_null());
    assert_eq!(outcome(&m, "c")["first_start"], 700);
    let w = &m["warm"]["p"];
    assert!(close(&w["mean_target_nodes"], 1.0), "{w}");
    assert!(close(&w["mean_idle_nodes"], 440.0 / 1020.0), "{w}");
    assert!(close(&w["idle_node_hours"], 440.0 / 3600.0), "{w}");
    assert_eq!(w["warm_starts"], 2);
    assert!(close(&w["warm_time_to_first_gpu_s"]["max"], 0.0), "{w}");
    let series = &m["timeline"]["series"];
    assert!(series["warm.target.p"].is_array() && series["warm.idle.p"].is_array());
    // Without a warm pool, none of it is written.
    let plain = simulate("sequential");
    assert!(plain.get("warm").is_none());
    assert!(plain["job_outcomes"][0].get("started_warm").is_none());
}

#[test]
fn reclaim_is_not_undone_by_priority() {
    // Before issue 15: 6 preemptions (4 reclaims, 2 priority), 1.2 GPU-hours lost, as b's
    // standard jobs took back by priority what a had reclaimed inside its guarantee.
    let m = simulate("preemption_loop");
    assert_eq!(
        m["preemptions"]["by_cause"],
        serde_json::json!({"reclaim": 2})
    );
    assert_eq!(outcome(&m, "a-sweep-1")["preemptions"], 0);
    assert_eq!(outcome(&m, "a-sweep-2")["preemptions"], 0);
    assert_eq!(m["jobs"]["completed"], 5);
}

#[test]
fn node_failure_requeues_from_checkpoint() {
    let m = simulate("node_failure");
    let a = outcome(&m, "a");
    // Fails at 50 on n (checkpoint at 40), restarts on m with 60 s left.
    assert!(close(&a["lost_gpu_s"], 80.0));
    assert_eq!(m["end"], 110);
    assert_eq!(m["preemptions"]["node_failures"], 1);
    // Allocated 8×50 + 8×60; available n 0..50 and m 10..110.
    assert!(close(&m["utilization"], 880.0 / 1200.0));
    // Failed nodes are still paid for.
    assert!(close(&m["cost"], 2.0 * 8.0 * 110.0 / 3600.0));
    assert_eq!(
        m["notes"],
        json!(["line 5: node_down for `n`, which is down at 60; event ignored"])
    );
    snap("simulate_node_failure", &m);
}

#[test]
fn spot_interruption_routes_to_on_demand() {
    let m = simulate("spot");
    let j = outcome(&m, "j");
    assert_eq!(j["routed_to"], "od");
    assert_eq!(j["rule"], "spot_retry");
    assert!(close(&j["lost_gpu_s"], 160.0));
    assert_eq!(m["end"], 120);
    // The spot node is gone after its 60 s notice: paid and available 0..80.
    assert!(close(&m["pools"]["spot"]["cost"], 4.0 * 80.0 / 3600.0));
    assert!(close(&m["pools"]["spot"]["utilization"], 0.25));
    assert_eq!(m["pools"]["spot"]["nodes_removed"], 1);
    snap("simulate_spot", &m);
}

#[test]
fn autoscaled_node_boots_before_the_gang_starts() {
    let m = simulate("autoscale");
    // Waits from 0; the `for 1m` window ends at the 60 s tick; boot 2 m: starts at 180.
    assert_eq!(outcome(&m, "g")["first_start"], 180);
    assert_eq!(m["scale_events"][0]["at"], 60);
    assert_eq!(m["scale_events"][0]["delta_nodes"], 1);
    // The burst node is paid from the scale-up (60) to the end (480).
    assert!(close(&m["pools"]["burst"]["cost"], 10.0 * 420.0 / 3600.0));
    assert!(close(&m["utilization"], 2400.0 / (480.0 + 2400.0)));
    snap("simulate_autoscale", &m);
}

#[test]
fn identical_inputs_give_byte_identical_json() {
    let (a, b) = (
        simulate_example(&["--json", "-"]),
        simulate_example(&["--json", "-"]),
    );
    assert_eq!(a.0, 0, "{}", a.2);
    assert!(a.1.len() > 1000);
    assert_eq!(a.1, b.1);
}

#[test]
fn report_is_self_contained_with_its_charts() {
    let out = std::env::temp_dir().join(format!("gantry-report-{}.html", std::process::id()));
    let (code, _, err) = simulate_example(&["--report", &out.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    assert!(html.starts_with("<!doctype html>"));
    for forbidden in [
        "http://", "https://", "<script", " src=", "<link", "@import",
    ] {
        assert!(
            !html.contains(forbidden),
            "the report must not load `{forbidden}`"
        );
    }
    for chart in [
        "GPUs allocated by tier",
        "GPUs allocated by team",
        "Jobs waiting and running",
        "Nodes per pool",
        "Spend per pool",
        "Time to first GPU, cumulative share",
        "Warm pools: the plans' target and the nodes standing idle",
    ] {
        assert!(
            html.contains(&format!("<figcaption>{chart}")),
            "missing chart {chart}"
        );
    }
    assert_eq!(html.matches("<svg").count(), 7);
    // The warm pool's table: its pool and warm starts.
    assert!(html.contains("<th>warm starts</th>") && html.contains("<td>interactive</td>"));
    assert!(
        html.matches("<polygon").count() >= 4,
        "stacked areas are drawn"
    );
    assert!(html.contains("<td>best_effort</td>") && html.contains("<td>spot</td>"));
}

#[test]
fn bad_traces_fail_with_the_line() {
    let tmp = std::env::temp_dir().join(format!("gantry-bad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let cases = [
        (
            "{\"id\": \"a\", \"submitted_at\": 5, \"runtime_s\": 1, \"gpus_per_member\": 1}\n{\"id\": \"b\", \"submitted_at\": 1, \"runtime_s\": 1}\n",
            "trace.jsonl:2: time 1 is before line 1's 5",
        ),
        (
            "{\"id\": \"a\", \"submitted_at\": 5, \"runtime_s\": 1, \"gpu\": 1}\n",
            "trace.jsonl:1: field `gpu`: unknown field",
        ),
        (
            "{\"at\": 3, \"event\": \"node_down\", \"node\": \"nope\"}\n",
            "trace.jsonl:1: node `nope` is not in the fleet",
        ),
        (
            "{\"id\": \"a\", \"submitted_at\": 1, \"runtime_s\": 1}\n{\"id\": \"a\", \"submitted_at\": 2, \"runtime_s\": 1}\n",
            "trace.jsonl:2: job `a` is also on line 1",
        ),
    ];
    for (text, want) in cases {
        let trace = tmp.join("trace.jsonl");
        std::fs::write(&trace, text).unwrap();
        let (code, _, err) = simulate_trace(&trace, &[]);
        assert_eq!(code, 2, "{want}");
        assert!(err.contains(want), "{err:?} should contain {want:?}");
    }
    // A job larger than the fleet is not an error: it waits, with its reason recorded.
    let trace = tmp.join("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"id\": \"huge\", \"submitted_at\": 0, \"runtime_s\": 10, \"members\": 2, \"gpus_per_member\": 8}\n{\"id\": \"ok\", \"submitted_at\": 1, \"runtime_s\": 10, \"gpus_per_member\": 8}\n",
    )
    .unwrap();
    let (code, out, err) = simulate_trace(&trace, &["--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(m["jobs"]["waiting_at_end"], 1);
    assert_eq!(m["jobs"]["completed"], 1);
    // Issue 53 #2: a gang wider than every node it may use never fits.
    assert_eq!(
        outcome(&m, "huge")["reason"],
        "never_fits: needs 2 members at once; every node it may use, empty and at each pool's maximum nodes, holds at most 1"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

fn autoscale_diff(format: &str, extra: &[&str]) -> (u8, String, String) {
    let dir = repo().join("examples/autoscale");
    let p = |f: &str| dir.join(f).display().to_string();
    let mut args = vec![
        "diff".to_string(),
        "--old".into(),
        p("on-demand"),
        "--new".into(),
        dir.display().to_string(),
        "--fleet".into(),
        p("fleet.toml"),
        "--trace".into(),
        p("trace.jsonl"),
        "--history".into(),
        p("history.jsonl"),
        "--format".into(),
        format.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    gantry(&refs)
}

/// Paths in the output depend on where the checkout is; the snapshot keeps the tail.
fn relative(text: &str) -> String {
    text.replace(&repo().display().to_string(), "<repo>")
}

#[test]
fn diff_markdown_snapshot_and_fail_if() {
    let (code, out, err) = autoscale_diff("markdown", &["--max-jobs", "10"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("| `cost` | $26661.51 | $18500.71 | -30.6% |"),
        "{out}"
    );
    insta::assert_snapshot!("diff_autoscale_markdown", relative(&out));
    // The warm pool costs 1.1% more in the interactive pool: a 1% gate fails, 2% passes.
    let (code, out, _) = autoscale_diff("table", &["--fail-if", "cost(pool=interactive) > 1%"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL `cost(pool=interactive) > 1%`"));
    let (code, _, _) = autoscale_diff("table", &["--fail-if", "cost(pool=interactive) > 2%"]);
    assert_eq!(code, 0);
    let (code, _, err) = autoscale_diff("table", &["--fail-if", "p95 > 5%"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown metric `p95`"), "{err}");
    let (code, out, _) = autoscale_diff("json", &[]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(!v["jobs"].as_array().unwrap().is_empty());
}

#[test]
fn policy_tests_pass_and_fail_with_locations() {
    let (code, out, err) = gantry(&[
        "test",
        &repo().join("policies").display().to_string(),
        &repo().join("examples").display().to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 failed"), "{out}");
    let failing = tests_dir().join("policy-tests");
    let (code, out, _) = gantry(&["test", &failing.display().to_string()]);
    assert_eq!(code, 1);
    let out = relative(&out);
    for want in [
        "ok    passes",
        "FAIL  wrong action and rule",
        "policy.test.toml:19: job `big`: expected action `place`, got `deny (denied_by_rule:",
        "policy.test.toml:20: job `big`: expected rule `some_other_rule`, got `no_huge`",
        "job `ghost` has no decision",
        "expected scale {\"p\": 1}, got {}",
        "ERROR bad job",
        "4 tests: 1 passed, 3 failed",
    ] {
        assert!(out.contains(want), "{out}\nshould contain {want:?}");
    }
    let (code, junit, _) = gantry(&["test", "--format", "junit", &failing.display().to_string()]);
    assert_eq!(code, 1);
    assert!(
        junit.contains("<testsuites name=\"gantry test\" tests=\"4\" failures=\"2\" errors=\"1\">"),
        "{junit}"
    );
    assert!(junit.contains("<failure message=\""));
    let (_, json, _) = gantry(&["test", "--format", "json", &failing.display().to_string()]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 3);
}
