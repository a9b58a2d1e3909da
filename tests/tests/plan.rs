//! Decision-cycle scenarios: every folder under `tests/plan/` holds a policy
//! (`policy.gantry`), a fleet (`fleet.toml`), jobs pending and running (`jobs.jsonl`), the
//! decision time (`now`) and optionally a usage history (`usage.jsonl`). `gantry plan
//! --format json` runs on it and the plan is snapshotted with insta; what each scenario
//! is about is also asserted outright below, so a snapshot update cannot hide a regression.

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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("plan")
}

fn cases() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn plan_text(case: &str) -> String {
    plan_text_with(case, &[])
}

/// `gantry plan --format json` on a case, with extra arguments.
fn plan_text_with(case: &str, extra: &[&str]) -> String {
    let dir = root().join(case);
    let now = std::fs::read_to_string(dir.join("now")).unwrap();
    let mut args: Vec<String> = vec![
        "gantry".into(),
        "plan".into(),
        "--policy".into(),
        dir.join("policy.gantry").display().to_string(),
        "--fleet".into(),
        dir.join("fleet.toml").display().to_string(),
        "--jobs".into(),
        dir.join("jobs.jsonl").display().to_string(),
        "--now".into(),
        now.trim().into(),
        "--format".into(),
        "json".into(),
    ];
    if dir.join("usage.jsonl").exists() {
        args.push("--usage".into());
        args.push(dir.join("usage.jsonl").display().to_string());
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        cli::run(args, &mut io)
    };
    assert_eq!(code, 0, "{case}: {}", String::from_utf8_lossy(&err));
    String::from_utf8(out).unwrap()
}

fn plan(case: &str) -> Value {
    serde_json::from_str(&plan_text(case)).unwrap()
}

fn decision<'a>(plan: &'a Value, job: &str) -> &'a Value {
    plan["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["job"] == job)
        .unwrap_or_else(|| panic!("no decision for {job}"))
}

fn action(plan: &Value, job: &str) -> String {
    decision(plan, job)["action"].as_str().unwrap().to_string()
}

fn code(plan: &Value, job: &str) -> String {
    decision(plan, job)["reason"]["code"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn victims(plan: &Value, job: &str) -> Vec<String> {
    decision(plan, job)["victims"]
        .as_array()
        .map(|v| v.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn order(plan: &Value) -> Vec<String> {
    plan["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["job"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_scenario_matches_its_snapshot_and_is_deterministic() {
    let names = cases();
    assert!(names.len() >= 14, "scenarios: {names:?}");
    for case in names {
        let first = plan_text(&case);
        assert_eq!(first, plan_text(&case), "{case}: plan is not deterministic");
        insta::assert_snapshot!(case.clone(), first);
    }
}

/// The cycle's kept indexes and memos are speed only: with each switched off (victims and
/// fits searched afresh for every job, holder records written at once) every scenario
/// plans the same, reasons included.
#[test]
fn every_scenario_plans_the_same_without_the_cycles_memos() {
    type Switch = (fn(bool), &'static str);
    let switches: [Switch; 2] = [
        (
            engine::decide::find_victims_afresh,
            "victims searched afresh",
        ),
        (
            engine::decide::record_holders_at_once,
            "holder records written at once",
        ),
    ];
    for case in cases() {
        let plain = plan_text(&case);
        for (switch, what) in switches {
            switch(true);
            let switched = plan_text(&case);
            switch(false);
            assert_eq!(switched, plain, "{case}: {what} change the plan");
        }
    }
}

#[test]
fn every_waiting_job_has_a_reason_and_a_position() {
    for case in cases() {
        let p = plan(&case);
        for d in p["decisions"].as_array().unwrap() {
            match d["action"].as_str().unwrap() {
                "place" => assert!(d["reason"].is_null(), "{case}: {d}"),
                "queue" => {
                    assert!(d["reason"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()));
                    assert!(d["reason"]["position"].as_u64().is_some(), "{case}: {d}");
                    assert!(d["reason"]["unblock"].is_string(), "{case}: {d}");
                }
                "deny" => assert!(d["reason"]["code"].is_string(), "{case}: {d}"),
                other => panic!("{case}: action {other}"),
            }
        }
    }
}

#[test]
fn two_half_fitting_gangs_one_is_placed_whole() {
    let p = plan("half_fit_gangs");
    assert_eq!(action(&p, "gang-a"), "place");
    assert_eq!(
        decision(&p, "gang-a")["placement"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(action(&p, "gang-b"), "queue");
    assert!(decision(&p, "gang-b")["placement"].is_null());
}

/// A team's guaranteed pool that can never hold the job is tried first, but the verdict
/// is the whole fleet's: the job preempts in another pool, and never reads "never fits".
#[test]
fn a_guaranteed_pool_too_small_does_not_stop_the_rest_of_the_fleet() {
    let p = plan("guaranteed_pool_too_small");
    assert_eq!(action(&p, "vision-train"), "place");
    assert_eq!(victims(&p, "vision-train"), ["sweep-a"]);
    assert_eq!(decision(&p, "vision-train")["placement"][0]["node"], "b-0");
}

#[test]
fn a_team_borrows_idle_guarantee_and_the_owner_reclaims_it() {
    let p = plan("borrow");
    assert_eq!(action(&p, "vision-b"), "place");
    assert_eq!(decision(&p, "vision-b")["borrowing"], true);
    let p = plan("reclaim");
    assert_eq!(action(&p, "nlp-a"), "place");
    assert_eq!(victims(&p, "nlp-a"), ["vision-borrowed"]);
    assert_eq!(p["preemptions"][0]["cause"], "reclaim");
    assert_eq!(p["preemptions"][0]["grace_s"], 120);
}

/// A reclaim counts a team's borrowing by what ran when the cycle started: a job the
/// same cycle placed does not make its team's running jobs reclaimable.
#[test]
fn a_reclaim_counts_only_running_borrowers() {
    let p = plan("reclaim_counts_running_borrowers_only");
    assert_eq!(action(&p, "vision-new"), "place");
    assert_eq!(decision(&p, "vision-new")["borrowing"], true);
    assert_eq!(action(&p, "nlp-b"), "queue");
    assert!(p["preemptions"].as_array().unwrap().is_empty(), "{p}");
    // Told why no reclaim is looked for yet, and that one may come.
    let message = decision(&p, "nlp-b")["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("vision borrows only by jobs placed this cycle")
            && message.contains("a later cycle may reclaim for this job"),
        "{message}"
    );
}

#[test]
fn a_lender_lends_no_more_than_its_lend() {
    let p = plan("lend_limit");
    assert_eq!(action(&p, "vision-8"), "queue");
    assert_eq!(code(&p, "vision-8"), "quota_exhausted");
    assert_eq!(action(&p, "vision-4"), "place");
    assert_eq!(action(&p, "vision-1"), "queue");
    let unblock = decision(&p, "vision-8")["reason"]["unblock"]
        .as_str()
        .unwrap();
    assert!(unblock.contains("nlp lends 4 gpu"), "{unblock}");
}

#[test]
fn critical_jobs_are_never_victims() {
    let p = plan("critical_never_preempted");
    assert_eq!(victims(&p, "serve-2"), ["batch"]);
    assert_eq!(action(&p, "serve-3"), "queue");
    for pre in p["preemptions"].as_array().unwrap() {
        assert_ne!(pre["job"], "serve-1");
    }
}

#[test]
fn min_runtime_and_max_lost_protect_jobs() {
    let p = plan("min_runtime_and_max_lost");
    assert_eq!(victims(&p, "urgent"), ["fair-game"]);
}

#[test]
fn the_victim_with_least_lost_work_is_chosen() {
    let p = plan("least_lost_work");
    assert_eq!(victims(&p, "urgent"), ["just-checkpointed"]);
    // 8 GPUs × (100 s since the checkpoint + 30 s of grace).
    assert_eq!(p["preemptions"][0]["lost_gpu_s"], 1040.0);
}

/// Issue 53 #3: lower tiers go first; lost work decides only within a tier.
#[test]
fn a_lower_tier_is_preempted_before_a_higher_one_that_would_lose_less() {
    let p = plan("lower_tiers_first");
    assert_eq!(victims(&p, "urgent"), ["sweep-best-effort"]);
    assert_eq!(p["preemptions"][0]["lost_gpu_s"], 24_240.0);
}

/// Issue 53 #7: jobs inside their team's guarantee go before jobs that must borrow; by
/// fair share alone the fill was 8 / 12 / 12 with train 8 GPUs below its guarantee.
#[test]
fn owners_are_placed_before_borrowers_when_capacity_is_short() {
    let p = plan("owners_before_borrowers");
    let placed = |team: &str| {
        p["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["team"] == team && d["action"] == "place")
            .count()
    };
    assert_eq!(
        (placed("train"), placed("infer"), placed("eval")),
        (4, 2, 2)
    );
}

/// Issue 53 #2: a gang larger than every node it may use, even at the pools' maximum
/// nodes, never fits.
#[test]
fn a_gang_wider_than_its_fixed_pool_never_fits() {
    let p = plan("gang_over_fixed_pool");
    for job in ["wide", "wide2"] {
        assert_eq!(code(&p, job), "never_fits");
        assert!(decision(&p, job)["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("holds at most 2"));
    }
}

#[test]
fn backfill_never_delays_the_reservation() {
    let p = plan("backfill");
    assert_eq!(code(&p, "big"), "reserved");
    assert_eq!(p["reservation"]["job"], "big");
    assert_eq!(p["reservation"]["nodes"][0], "n-0");
    assert_eq!(action(&p, "short"), "place", "ends before the reservation");
    assert_eq!(code(&p, "long"), "waiting_for_reservation");
    assert_eq!(code(&p, "no-estimate"), "waiting_for_reservation");
}

#[test]
fn fair_share_orders_teams_within_a_tier() {
    let p = plan("fair_share");
    assert_eq!(
        order(&p),
        ["nlp-late", "vision-early", "nlp-latest", "vision-later"]
    );
    let p = plan("fair_share_history");
    assert_eq!(action(&p, "nlp-second"), "place");
    assert_eq!(action(&p, "vision-first"), "queue");
}

#[test]
fn deny_and_route_rules_are_named_in_the_plan() {
    let p = plan("rules");
    assert_eq!(action(&p, "no-runtime"), "deny");
    assert_eq!(
        decision(&p, "no-runtime")["reason"]["rule"],
        "require_runtime"
    );
    assert_eq!(decision(&p, "huge")["reason"]["rule"], "too_big");
    let nb = decision(&p, "notebook");
    assert_eq!(nb["routed_to"]["rule"], "notebooks");
    assert_eq!(nb["routed_to"]["pool"], "interactive");
    assert_eq!(nb["placement"][0]["node"], "nb-0");
    assert_eq!(
        decision(&p, "week-long")["warnings"][0],
        "checkpoint and resubmit jobs over a day"
    );
}

#[test]
fn quota_and_gang_timeout_reasons() {
    let p = plan("quota_exhausted");
    assert_eq!(code(&p, "vision-8"), "quota_exhausted");
    assert_eq!(action(&p, "vision-4"), "place");
    let p = plan("gang_timeout");
    assert_eq!(
        decision(&p, "old-gang")["reason"]["gang_timeout_exceeded"],
        true
    );
    assert!(decision(&p, "new-gang")["reason"]["gang_timeout_exceeded"].is_null());
    assert_eq!(code(&p, "half-arrived"), "gang_incomplete");
    assert_eq!(
        decision(&p, "half-arrived")["reason"]["gang_timeout_exceeded"],
        true
    );
    let requeued = decision(&p, "half-arrived")["reason"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        requeued.starts_with("requeued: only 1 of its 2 members has arrived"),
        "{requeued}"
    );
    assert_eq!(action(&p, "arriving"), "queue");
    assert_eq!(code(&p, "arriving"), "gang_incomplete");
    assert!(decision(&p, "arriving")["reason"]["gang_timeout_exceeded"].is_null());
}

/// The cycle tells a gang that must share one group how many of its members the freest
/// group holds now (from its own room index; debug builds check it against a scan).
#[test]
fn a_gang_that_must_share_a_group_is_told_the_freest_groups_room() {
    let p = plan("topology_gang_waits");
    for (job, text) in [
        (
            "three-on-one-node",
            "3 members must share one node; the freest node has room for 2 now",
        ),
        (
            "four-in-one-domain",
            "4 members must share one nvlink_domain; the freest nvlink_domain has room for 3 now",
        ),
        (
            "five-in-one-rack",
            "5 members must share one rack; the freest rack has room for 4 now",
        ),
    ] {
        assert_eq!(code(&p, job), "no_capacity", "{job}");
        assert_eq!(decision(&p, job)["reason"]["message"], text, "{job}");
    }
}

#[test]
fn mig_instances_count_for_their_share_of_a_gpu_in_quotas() {
    let p = plan("mig_quota");
    assert_eq!(action(&p, "second-3g"), "place");
    assert_eq!(decision(&p, "second-3g")["gpus"], 0.428);
    assert_eq!(code(&p, "third-3g"), "quota_exhausted");
}

#[test]
fn a_team_inside_its_guarantee_is_never_another_teams_priority_victim() {
    let p = plan("no_priority_over_guarantee");
    assert_eq!(action(&p, "b-retry"), "queue");
    assert_eq!(code(&p, "b-retry"), "no_capacity");
    assert!(p["preemptions"].as_array().unwrap().is_empty());
}

/// Each victim alone leaves the team above its guarantee; the set on two nodes together
/// does not. The set is judged once its victims are released, when the team no longer
/// borrows: it is still the priority's doing (found by `plan_properties` in CI).
#[test]
fn victims_on_several_nodes_together_keep_their_team_at_its_guarantee() {
    let p = plan("priority_victims_together_below_guarantee");
    assert_eq!(action(&p, "train-gang"), "queue");
    assert_eq!(code(&p, "train-gang"), "no_capacity");
    assert!(p["preemptions"].as_array().unwrap().is_empty());
}

#[test]
fn least_lost_work_comes_before_the_number_of_victims() {
    let p = plan("lost_work_before_count");
    assert_eq!(victims(&p, "urgent"), ["small-1", "small-2"]);
    let lost: f64 = p["preemptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["lost_gpu_s"].as_f64().unwrap())
        .sum();
    // Each victim's grace (30 s) counts: its GPUs run for nothing while it stops.
    assert_eq!(lost, 720.0);
}

#[test]
fn reclaim_keeps_the_borrower_at_its_guarantee_when_it_can() {
    let p = plan("reclaim_keeps_borrower_guarantee");
    assert_eq!(victims(&p, "a-job"), ["b-3"]);
    assert_eq!(p["preemptions"][0]["cause"], "reclaim");
}

#[test]
fn a_job_over_its_burst_reserves_its_quota_and_only_the_nodes_it_will_use() {
    let p = plan("over_burst_reserves_its_quota");
    // x's own running job ends at 10800 on n-1; now is 3600. x-next holds x's quota and
    // n-1 from then: the idle GPUs of n-0 stay free for y.
    assert_eq!(p["reservation"]["job"], "x-next");
    assert_eq!(p["reservation"]["start_at"], 10800);
    assert_eq!(p["reservation"]["nodes"], serde_json::json!(["n-1"]));
    assert_eq!(action(&p, "y-next"), "place");
    assert_eq!(code(&p, "x-huge"), "never_fits");
    assert_eq!(
        decision(&p, "x-huge")["reason"]["unblock"],
        "raise x's burst to 16 gpu or split the job"
    );
    assert_eq!(code(&p, "x-next"), "reserved");
    assert_eq!(decision(&p, "x-next")["reason"]["eta_s"], 7200);
    assert_eq!(decision(&p, "x-next")["reason"]["eta_kind"], "reservation");
}

#[test]
fn a_team_at_its_burst_books_its_quota_for_its_reserved_jobs() {
    let p = plan("quota_reservation");
    // Now is 100. a's quota frees 8 at 3600 and 16 at 7200.
    let eta = |job: &str| decision(&p, job)["reason"]["eta_s"].as_i64().unwrap() + 100;
    assert_eq!(code(&p, "a-gang"), "reserved");
    assert_eq!(eta("a-gang"), 7200);
    // a-long would still hold a's quota at 7200: after the gang.
    assert_eq!(eta("a-long"), 10800);
    // a-short returns it by 6600: before both.
    assert_eq!(eta("a-short"), 3600);
    assert_eq!(action(&p, "b-next"), "place");
    for job in ["a-gang", "a-long", "a-short"] {
        assert_eq!(
            decision(&p, job)["reason"]["eta_kind"],
            "reservation",
            "{job}"
        );
    }
}

#[test]
fn a_guarantee_named_by_the_fleets_one_pool_is_booked_like_an_overall_one() {
    let p = plan("guarantee_in_the_one_pool_is_booked");
    let eta = |job: &str| decision(&p, job)["reason"]["eta_s"].as_i64().unwrap() + 840;
    assert_eq!(code(&p, "j1"), "reserved");
    assert_eq!(decision(&p, "j1")["reason"]["eta_kind"], "reservation");
    assert_eq!(eta("j1"), 1200);
    // j3 would hold beta's quota past j1's start: it waits until j1 is done.
    assert_eq!(action(&p, "j3"), "queue");
    assert_eq!(eta("j3"), 3300);
}

/// Each reservation's (start, nodes) by job.
fn booked(p: &Value) -> std::collections::BTreeMap<String, (i64, Vec<String>)> {
    p["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let nodes = r["nodes"].as_array().unwrap();
            let names = nodes
                .iter()
                .map(|n| n["node"].as_str().unwrap().to_string());
            (
                r["job"].as_str().unwrap().to_string(),
                (r["start_at"].as_i64().unwrap(), names.collect()),
            )
        })
        .collect()
}

#[test]
fn a_job_waiting_inside_its_own_guarantee_is_ranked_as_an_owner() {
    let p = plan("owner_past_its_guarantee_is_not_a_borrower");
    let b = booked(&p);
    // j4 keeps n-1 from when beta's own j0 ends; j5, later, waits for alpha's j2.
    assert_eq!(b["j4"], (900, vec!["n-1".to_string()]));
    assert_eq!(action(&p, "j5"), "queue");
    assert_eq!(b["j5"], (600, vec!["n-0".to_string()]));
}

#[test]
fn a_job_booked_again_for_the_same_start_keeps_its_nodes() {
    let p = plan("rebooked_for_the_same_start_keeps_its_nodes");
    let b = booked(&p);
    for (job, start, node) in [
        ("j2", 2400, "n-0"),
        ("j6", 2400, "n-0"),
        ("j8", 2520, "n-1"),
        ("j9", 2400, "n-0"),
    ] {
        assert_eq!(b[job], (start, vec![node.to_string()]), "{job}");
    }
}

#[test]
fn a_guarantee_split_over_pools_is_booked_in_the_pool_a_job_runs_in() {
    let p = plan("guarantee_split_over_pools_is_booked");
    let b = booked(&p);
    assert_eq!(code(&p, "j1"), "reserved");
    assert_eq!(decision(&p, "j1")["reason"]["eta_kind"], "reservation");
    assert_eq!(b["j1"].0, 1200);
    // j3 would hold beta's training quota past j1's start: it waits until j1 is done.
    assert_eq!(action(&p, "j3"), "queue");
    assert_eq!(b["j3"].0, 3300);
    // The serving guarantee is apart.
    assert_eq!(action(&p, "j4"), "place");
    let message = decision(&p, "j1")["reason"]["message"].as_str().unwrap();
    assert!(message.contains("1 gpu of 8 gpu in training"), "{message}");
}

#[test]
fn a_gang_of_a_split_guarantee_is_charged_to_one_pool() {
    let p = plan("gang_of_a_split_guarantee_in_one_pool");
    assert_eq!(code(&p, "beta-gang"), "never_fits");
    let message = decision(&p, "beta-gang")["reason"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("(8 gpu in one pool)"), "{message}");
    assert_eq!(action(&p, "delta-gang"), "place");
    for member in decision(&p, "delta-gang")["placement"].as_array().unwrap() {
        let node = member["node"].as_str().unwrap();
        assert!(
            node.starts_with("t-"),
            "a member of delta-gang in serving: {node}"
        );
    }
}

#[test]
fn a_split_guarantee_too_small_in_the_pools_a_job_may_use_never_fits() {
    let p = plan("split_guarantee_too_small_in_its_pool");
    for (job, words) in [
        ("alpha-serve", "(0 gpu in serving)"),
        ("beta-train-16", "(8 gpu in training)"),
        ("gamma-6", "(4 gpu in one pool)"),
    ] {
        assert_eq!(code(&p, job), "never_fits", "{job}");
        let message = decision(&p, job)["reason"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{job}: {message}");
    }
    assert_eq!(action(&p, "beta-train-4"), "place");
}

#[test]
fn under_easy_a_team_at_its_burst_holds_its_quota_beside_another_teams_reservation() {
    let p = plan("quota_reservation_easy");
    let eta = |job: &str| decision(&p, job)["reason"]["eta_s"].as_i64().unwrap() + 100;
    // y-big holds the GPUs (EASY's one reservation); x-next holds x's quota from when
    // both its quota and GPUs are free.
    assert_eq!(p["reservation"]["job"], "y-big");
    assert_eq!(code(&p, "x-next"), "reserved");
    assert_eq!(eta("x-next"), 10800);
    // x-small's quota frees at 7200, but from 10800 to 14400 x-next holds it.
    assert_eq!(code(&p, "x-small"), "quota_exhausted");
    assert_eq!(eta("x-small"), 14400);
    let unblock = decision(&p, "x-small")["reason"]["unblock"]
        .as_str()
        .unwrap();
    assert!(unblock.contains("(x-next)"), "{unblock}");
}

#[test]
fn jobs_waiting_behind_a_reservation_wait_for_its_end() {
    let p = plan("backfill");
    // `big` starts at 7200 on n-0 and runs an hour; n-1 frees at 21600; now is 3600.
    assert_eq!(decision(&p, "long")["reason"]["eta_s"], 7200);
}

#[test]
fn a_victim_protected_until_its_next_checkpoint_gives_the_eta() {
    let p = plan("checkpoint_wait");
    assert_eq!(action(&p, "urgent"), "queue");
    let reason = &decision(&p, "urgent")["reason"];
    // Its next checkpoint in 28m, then the victims' 2m grace.
    assert_eq!(reason["eta_s"], 1800, "{reason}");
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("preemptible after their next checkpoint in 28m"),
        "{reason}"
    );
    assert_eq!(
        reason["unblock"],
        "preempts them on n-0 after their next checkpoint in 28m"
    );
}

#[test]
fn easy_reservations_book_gpus_not_nodes() {
    let p = plan("easy_books_gpus");
    assert_eq!(code(&p, "big"), "reserved");
    assert_eq!(p["reservations"][0]["nodes"][0]["gpus"], 6);
    let message = decision(&p, "big")["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("no node has that many free now"),
        "{message}"
    );
    // Two of the three free GPUs leave big its six at 3600.
    assert_eq!(action(&p, "two-long"), "place");
    // The last free GPU is one big needs.
    assert_eq!(code(&p, "one-long"), "waiting_for_reservation");
    assert_eq!(decision(&p, "one-long")["reason"]["eta_s"], 6600);
    assert_eq!(action(&p, "one-short"), "place", "ends before big starts");
}

#[test]
fn a_gang_sharing_a_node_preempts_every_victim_it_needs_there() {
    let p = plan("gang_shares_a_node_preempting");
    assert_eq!(action(&p, "urgent"), "place");
    let mut v = victims(&p, "urgent");
    v.sort();
    assert_eq!(v, ["low0", "low1", "low10", "low11", "low12"]);
}

#[test]
fn a_reservation_by_preempting_holds_its_gpus_from_when_it_preempts() {
    let p = plan("backfill_ends_before_preempting");
    assert_eq!(code(&p, "big"), "reserved");
    assert_eq!(decision(&p, "big")["reason"]["eta_s"], 466);
    // short would end at 1454, a second after big preempts at 1453.
    assert_eq!(code(&p, "short"), "waiting_for_reservation");
    let message = decision(&p, "short")["reason"]["message"].as_str().unwrap();
    assert!(message.contains("from 3m10s from now"), "{message}");
    assert_eq!(action(&p, "tiny"), "place", "ends before big preempts");
}

#[test]
fn jobs_behind_a_reservation_by_preempting_count_its_victims_stopped() {
    let p = plan("easy_head_reserves_by_preempting");
    assert_eq!(code(&p, "gang"), "reserved");
    assert_eq!(decision(&p, "gang")["reason"]["eta_s"], 220);
    // v1 and v2 stop for the gang at 4220; small fits once the gang ends at 7820 (as the
    // replay of this scenario starts it), not when v1 and v2 would end (86,400).
    assert_eq!(decision(&p, "small")["reason"]["eta_s"], 3820);
    // It could preempt v1 now but for the gang's reservation, and is told so (it was
    // told no node had room).
    assert_eq!(code(&p, "small"), "waiting_for_reservation");
}

#[test]
fn a_mig_reservation_holds_its_gpu_not_its_node() {
    let p = plan("mig_reservation_holds_its_gpu");
    assert_eq!(code(&p, "big-7g"), "reserved");
    assert_eq!(decision(&p, "big-7g")["reason"]["eta_s"], 500);
    assert_eq!(p["reservations"][0]["nodes"][0]["gpus"], 1);
    // GPU 1's free slots delay nobody.
    assert_eq!(action(&p, "wide-4g"), "place");
    assert_eq!(decision(&p, "wide-4g")["placement"][0]["gpus"][0], 1);
    // Only GPU 0's slots are left, and big-7g needs them from 600 s to 4,200 s.
    assert_eq!(code(&p, "long-1g"), "waiting_for_reservation");
    assert_eq!(decision(&p, "long-1g")["reason"]["eta_s"], 4100);
    assert_eq!(action(&p, "quick-1g"), "place", "ends before big-7g starts");
}

#[test]
fn a_mig_job_goes_beside_a_booking_of_whole_gpus() {
    let p = plan("mig_beside_a_whole_gpu_booking");
    assert_eq!(code(&p, "big-6"), "reserved");
    assert_eq!(decision(&p, "big-6")["reason"]["eta_s"], 900);
    // GPUs 6-7 are in MIG mode: big-6's booking of whole GPUs never takes them.
    assert_eq!(action(&p, "long-1g"), "place");
    assert_eq!(decision(&p, "long-1g")["placement"][0]["gpus"][0], 6);
    // GPUs 4-5 are free now but big-6 needs them from 1,000 s to 4,600 s.
    assert_eq!(code(&p, "long-2"), "reserved");
    assert_eq!(decision(&p, "long-2")["reason"]["eta_s"], 4500);
}

#[test]
fn a_guarantee_comes_back_within_reclaim_within_checkpoints_or_not() {
    let p = plan("guarantee_comes_back");
    // Past max_lost and reclaim_within without a checkpoint: a borrower is reclaimed.
    assert_eq!(action(&p, "nlp-a"), "place");
    assert_eq!(victims(&p, "nlp-a"), ["hostage"]);
    assert_eq!(p["preemptions"][0]["cause"], "reclaim");
    // young passed max_lost at 3900 s; reclaim_within (30m) protects it until 5700 s,
    // and its 2m grace follows.
    let reason = &decision(&p, "nlp-b")["reason"];
    assert_eq!(reason["eta_s"], 1820, "{reason}");
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("reclaim_within"),
        "{reason}"
    );
}

#[test]
fn a_gang_waits_for_the_protection_that_ends_last_not_for_every_job_to_end() {
    let p = plan("gang_waits_for_protected_victims");
    assert_eq!(action(&p, "gang"), "queue");
    assert!(p["preemptions"].as_array().unwrap().is_empty(), "{p}");
    // v2's min_runtime ends at 4100 s; then both stop within their 2m grace.
    let reason = &decision(&p, "gang")["reason"];
    assert_eq!(reason["eta_s"], 220, "{reason}");
    let message = reason["message"].as_str().unwrap();
    assert!(
        message.contains("on n-1 it may preempt are protected now")
            && message.contains("min_runtime"),
        "{reason}"
    );
}

#[test]
fn a_gang_waits_for_a_job_it_may_not_preempt_to_end_and_is_told_which() {
    let p = plan("gang_waits_for_a_job_it_may_not_preempt");
    assert_eq!(action(&p, "gang"), "queue");
    // v2 (never preempted) ends at 10000 s; v1 is preempted then and stops within 2m.
    let reason = &decision(&p, "gang")["reason"];
    assert_eq!(reason["eta_s"], 6120, "{reason}");
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("v2 of team vision on n-1, which it may not preempt, ends"),
        "{reason}"
    );
}

#[test]
fn mig_jobs_get_reservations_and_etas_like_whole_gpus() {
    let p = plan("mig_backfill");
    assert_eq!(code(&p, "big-7g"), "reserved");
    assert_eq!(decision(&p, "big-7g")["reason"]["eta_s"], 500);
    assert_eq!(p["reservation"]["job"], "big-7g");
    assert_eq!(code(&p, "long-1g"), "waiting_for_reservation");
    // The reserved job's 500 s plus its 3,600 s run.
    assert_eq!(decision(&p, "long-1g")["reason"]["eta_s"], 4100);
    assert_eq!(action(&p, "quick-1g"), "place");
}

#[test]
fn jobs_without_team_or_tier_get_the_policy_defaults() {
    let p = plan("defaults");
    assert_eq!(victims(&p, "a-critical"), ["anon-running"]);
    assert_eq!(p["preemptions"][0]["cause"], "priority");
    // A never-preempted tier with `borrow = true` may run beyond its team's guarantee.
    assert_eq!(action(&p, "b-serving"), "place");
    assert_eq!(decision(&p, "b-serving")["borrowing"], true);
}

#[test]
fn jobs_without_team_or_tier_are_denied_when_the_policy_has_no_default() {
    let p = plan("no_defaults");
    assert_eq!(code(&p, "no-team"), "invalid_job");
    assert!(decision(&p, "no-team")["reason"]["unblock"]
        .as_str()
        .unwrap()
        .contains("mark one team `default = true`"));
    assert_eq!(code(&p, "no-tier"), "invalid_job");
    // The policy's own rule speaks first.
    assert_eq!(code(&p, "legacy-1"), "denied_by_rule");
    assert_eq!(action(&p, "fine"), "place");
}

fn story(case: &str, job: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&plan_text_with(case, &["--job", job])).unwrap();
    v["story"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn one_jobs_story_tells_rules_quota_victims_and_outcome() {
    let lines = story("lost_work_before_count", "urgent");
    let text = lines.join("\n");
    assert!(
        lines[0].starts_with("job urgent: team prod, tier standard"),
        "{text}"
    );
    assert!(
        text.contains("quota: team prod uses 16 gpu of its 16 gpu guarantee"),
        "{text}"
    );
    assert!(
        text.contains("placement: needs 8 GPUs on one node; no node has that many free now"),
        "{text}"
    );
    assert!(
        text.contains(
            "victims on n-1: small-1, small-2 (720 GPU-s of work lost, 0 gpu below a guarantee)"
        ),
        "{text}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "outcome: placed on n-1, preempting small-1, small-2"
    );
    // Why preemption was not used: the victim is protected until its next checkpoint.
    let text = story("checkpoint_wait", "urgent").join("\n");
    assert!(
        text.contains("preemptible after their next checkpoint in 28m"),
        "{text}"
    );
    // Rules, and the defaults a job was given.
    let text = story("no_defaults", "legacy-1").join("\n");
    assert!(text.contains("rule named_jobs: matches"), "{text}");
    assert!(text.contains("outcome: denied_by_rule"), "{text}");
    let text = story("defaults", "anon-running").join("\n");
    assert!(text.contains("defaults: team a, tier low"), "{text}");
}

/// `job` of `case` waits with `code`, nothing is preempted, and its story says why no
/// trial was made (`line`).
fn waits_untried(case: &str, job: &str, code_wanted: &str, line: &str) {
    let p = plan(case);
    assert_eq!(action(&p, job), "queue");
    assert_eq!(code(&p, job), code_wanted);
    assert!(p["preemptions"].as_array().unwrap().is_empty());
    let text = story(case, job).join("\n");
    assert!(text.contains(line), "{text}");
}

/// A gang whose victims, all of them gone, would still leave too little room is not
/// tried: no release, placement and restore for each candidate node, and no preemption.
#[test]
fn a_gang_is_not_tried_where_every_victim_gone_frees_too_little() {
    waits_untried(
        "gang_victims_free_too_little",
        "train-gang",
        "no_capacity",
        "even with every victim on 1 node gone, there would be room for at most 1 of its 2 members",
    );
}

/// Likewise a quota victim search: its victims, all of them gone, free no node enough.
#[test]
fn quota_victims_that_free_too_little_are_not_tried() {
    waits_untried(
        "quota_victims_free_too_little",
        "train-pair",
        "quota_exhausted",
        "with its 2 cheapest candidate(s) gone there would be room for at most 0 of its 1 member(s); no placement tried",
    );
}

#[test]
fn a_story_for_a_job_that_is_not_there_is_an_error() {
    let dir = root().join("defaults");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let args: Vec<String> = [
        "gantry",
        "plan",
        "--policy",
        &dir.join("policy.gantry").display().to_string(),
        "--fleet",
        &dir.join("fleet.toml").display().to_string(),
        "--jobs",
        &dir.join("jobs.jsonl").display().to_string(),
        "--job",
        "nope",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        cli::run(args, &mut io)
    };
    assert_eq!(code, 2);
    assert!(String::from_utf8_lossy(&err).contains("no job `nope`"));
}

/// Issue 23: rules read a MIG job's profile (`job.mig`) and its weight in GPUs, which is
/// what it counts for in quotas (a 1g of 7 slices is 0.142 gpu), as `plan` shows it.
#[test]
fn rules_read_a_mig_jobs_profile_and_quota_weight() {
    let p = plan("mig_rules");
    assert_eq!(action(&p, "b-7g"), "deny");
    assert_eq!(code(&p, "b-7g"), "denied_by_rule");
    assert_eq!(action(&p, "a-7g"), "place");
    let small = decision(&p, "b-1g");
    assert_eq!(small["action"], "place");
    assert_eq!(small["gpus"], 0.142);
    assert_eq!(
        small["warnings"][0]
            .as_str()
            .map(|w| w.contains("small MIG slice")),
        Some(true)
    );
    assert!(
        decision(&p, "b-whole")["warnings"].is_null(),
        "a whole-GPU job is not `job.mig != none`"
    );
}

#[test]
fn a_booking_by_preempting_behind_a_job_it_may_not_preempt_counts_its_victims_gone() {
    let p = plan("booked_node_then_preempting");
    // Now is 1000. crit ends at 3000, low stops by 3120; big holds n-0 until 6720.
    let eta = |job: &str| decision(&p, job)["reason"]["eta_s"].as_i64().unwrap() + 1000;
    assert_eq!(code(&p, "big"), "reserved");
    assert_eq!(eta("big"), 3120);
    let message = decision(&p, "big")["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("crit on n-0, which it may not preempt"),
        "{message}"
    );
    assert_eq!(code(&p, "next"), "reserved");
    assert_eq!(eta("next"), 6720);
}

#[test]
fn a_gangs_quota_wait_counts_room_node_by_node() {
    let p = plan("gang_quota_wait_node_by_node");
    // Now is 4000. a's quota is back at 4100, but two nodes hold 8 free GPUs only once
    // b-1 ends on n-0 (20000); a-l1 there stops within its grace (2m).
    assert_eq!(code(&p, "a-gang"), "quota_exhausted");
    let reason = &decision(&p, "a-gang")["reason"];
    assert_eq!(reason["eta_s"].as_i64().unwrap() + 4000, 20120);
    let message = reason["message"].as_str().unwrap();
    assert!(message.contains("b-1 of team b on n-0"), "{message}");
}

#[test]
fn a_job_starting_at_its_booked_time_lands_where_it_was_booked() {
    let case = "booking_stays_where_it_was_made";
    let nodes = |p: &Value, job: &str| -> Vec<String> {
        decision(p, job)["placement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["node"].as_str().unwrap().to_string())
            .collect()
    };
    let p = plan(case);
    for (job, node) in [("a", "n-0"), ("b", "n-1"), ("c", "n-0")] {
        assert_eq!(action(&p, job), "place", "{job}");
        assert_eq!(nodes(&p, job), [node], "{job}");
    }
    // Without the last plan's bookings best fit moves a and b, and c waits until 4200 s.
    let dir = root().join(case);
    let jobs: String = std::fs::read_to_string(dir.join("jobs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("booked");
            format!("{v}\n")
        })
        .collect();
    let tmp = std::env::temp_dir().join(format!("gantry-booked-{}.jsonl", std::process::id()));
    std::fs::write(&tmp, jobs).unwrap();
    let path = |f: &str| dir.join(f).display().to_string();
    let args: Vec<String> = [
        "gantry",
        "plan",
        "--policy",
        &path("policy.gantry"),
        "--fleet",
        &path("fleet.toml"),
        "--jobs",
        &tmp.display().to_string(),
        "--now",
        "600",
        "--format",
        "json",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        cli::run(args, &mut io)
    };
    std::fs::remove_file(&tmp).ok();
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let fresh: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(nodes(&fresh, "a"), ["n-1"]);
    assert_eq!(action(&fresh, "c"), "queue");
    assert_eq!(decision(&fresh, "c")["reason"]["eta_s"], 3600);
}
