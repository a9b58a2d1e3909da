//! The Grafana dashboard and the Prometheus alerts in `deploy/monitoring/` load and ask
//! only for what gantry exports: the dashboard is valid JSON with panels and queries, the
//! PrometheusRule has the alerts operators need, and every `gantry_*` metric a query
//! names is one the server writes (`engine/serve/src/metrics.rs`, `queue.rs`; histograms
//! with their `_bucket`, `_sum` and `_count` series). A renamed metric breaks this test,
//! not a dashboard nobody looks at until the incident.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a broken fixture should fail the test"
)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `gantry_*` words in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("gantry_") {
        let start = i + at;
        let boundary = start == 0 || {
            let b = bytes[start - 1];
            !(b.is_ascii_alphanumeric() || b == b'_')
        };
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| start + e);
        if boundary {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

/// What the server exports: every metric name its renderers write, histograms with their
/// series.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in ["engine/serve/src/metrics.rs", "engine/serve/src/queue.rs"] {
        let source = std::fs::read_to_string(repo().join(file)).unwrap();
        for line in source.lines().filter(|l| l.contains("# TYPE gantry_")) {
            for part in line.split("# TYPE ").skip(1) {
                let mut words = part.split_whitespace();
                let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                    continue;
                };
                let kind: String = kind.chars().take_while(char::is_ascii_alphabetic).collect();
                names.insert(name.to_string());
                if kind == "histogram" {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
            }
        }
        // Counters whose HELP and TYPE lines are written from a table of names.
        names.extend(
            metric_names(&source)
                .into_iter()
                .filter(|n| n.ends_with("_total")),
        );
    }
    names
}

fn dashboard() -> Value {
    let text =
        std::fs::read_to_string(repo().join("deploy/monitoring/gantry-dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn dashboard_queries(d: &Value) -> Vec<String> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

/// (alert, expr) of the PrometheusRule; each `expr` is on one line.
fn alerts() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(repo().join("deploy/monitoring/prometheus-rule.yaml")).unwrap();
    assert!(text.contains("kind: PrometheusRule"));
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("- alert: ") {
            name = Some(n.to_string());
        } else if let Some(e) = line.strip_prefix("expr: ") {
            out.push((name.take().unwrap(), e.to_string()));
        }
    }
    out
}

#[test]
fn the_dashboard_loads_and_covers_what_operators_watch() {
    let d = dashboard();
    assert_eq!(d["uid"], "gantry-overview");
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel ids are unique"
        );
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(
            !p["targets"].as_array().unwrap().is_empty(),
            "{}",
            p["title"]
        );
    }
    let named: BTreeSet<String> = dashboard_queries(&d)
        .iter()
        .flat_map(|q| metric_names(q))
        .collect();
    for family in [
        "gantry_queue_pending_jobs",
        "gantry_gpus_in_use",
        "gantry_team_guaranteed_gpus",
        "gantry_team_burst_gpus",
        "gantry_queue_wait_seconds_bucket",
        "gantry_preemptions_total",
        "gantry_preempted_gpu_seconds_total",
        "gantry_pool_spend_per_hour",
        "gantry_request_duration_seconds_bucket",
    ] {
        assert!(named.contains(family), "no panel shows {family}");
    }
}

#[test]
fn the_alerts_cover_webhook_down_reload_failing_and_queue_stuck() {
    let names: Vec<String> = alerts().into_iter().map(|(n, _)| n).collect();
    for want in [
        "GantryWebhookDown",
        "GantryPolicyReloadFailing",
        "GantryQueueStuck",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
}

#[test]
fn every_query_names_a_metric_the_server_exports() {
    let exported = exported();
    assert!(
        exported.contains("gantry_policy_reloads_total"),
        "{exported:?}"
    );
    assert!(exported.contains("gantry_queue_wait_seconds_bucket"));
    let queries = dashboard_queries(&dashboard())
        .into_iter()
        .chain(alerts().into_iter().map(|(_, e)| e));
    for q in queries {
        let names = metric_names(&q);
        // `up` is Prometheus's own series for the scrape target.
        assert!(!names.is_empty() || q.contains("up{"), "no metric in: {q}");
        for n in names {
            assert!(exported.contains(&n), "{n} (in `{q}`) is not exported");
        }
    }
    // The check can fail: a misspelled metric is caught.
    assert!(!exported.contains("gantry_queue_pending_job"));
}
