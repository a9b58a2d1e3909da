//! Issue 52's latency target, as far as it can be measured without a real control
//! plane: the queue's leader (watch, cycle, writes, tellings, over HTTP) against the
//! in-process API server at 500 nodes × 8 GPUs with 5,000 pods — 4,000 one-GPU pods
//! running (the cluster full) and 1,000 gated — while running pods finish at 10 a
//! second. Each completion frees one GPU that a waiting pod fits; the time from each
//! completion to a release (the gate removed: kube-scheduler binds in milliseconds) is
//! what a user waits beyond kube-scheduler. The API server answers in microseconds here,
//! so this is gantry's own share of it.
//!
//! `cargo bench -p cluster --bench refill` prints the p50, p95 and max, and the writes
//! made per refill.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark code"
)]

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/harness/mod.rs"]
mod harness;

use harness::{gated, harness_of, waiting, Kind, NOW};
use serde_json::json;
use std::time::{Duration, Instant};

#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const NODES: usize = 500;
const TEAMS: usize = 4;
const RUNNING: usize = NODES * 8;
const WAITING: usize = 1_000;
const COMPLETIONS: usize = 300;
const EVERY: Duration = Duration::from_millis(100);

const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 500 }

placement { gang = all_or_nothing; packing = best_fit; backfill = on }

cohort lab {
  team t0 { guaranteed = 1000 gpu in training; burst = 2000 gpu; lend = 500 gpu }
  team t1 { guaranteed = 1000 gpu in training; burst = 2000 gpu; lend = 500 gpu }
  team t2 { guaranteed = 1000 gpu in training; burst = 2000 gpu; lend = 500 gpu }
  team t3 { guaranteed = 1000 gpu in training; burst = 2000 gpu; lend = 500 gpu }
}
"#;

/// The queue's writes to pods and Events (the Lease's renewals left out).
fn queue_writes(h: &harness::Harness) -> usize {
    h.api
        .writes()
        .iter()
        .filter(|(_, path)| path.starts_with("pods") || path.starts_with("events"))
        .count()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var("REFILL_SHOW").is_ok() {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .init();
    }
    let names: Vec<String> = (0..NODES).map(|i| format!("n{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let h = harness_of(POLICY, None, &refs).await;
    // The cluster full: eight one-GPU pods bound to each node, each team at its guarantee.
    let mut running = Vec::with_capacity(RUNNING);
    for i in 0..RUNNING {
        let name = format!("r{i:04}");
        let mut p = gated(&name, &format!("t{}", i % TEAMS), "standard", 1, None);
        p["spec"]["schedulingGates"] = json!(null);
        p["spec"]["nodeName"] = json!(names[i / 8]);
        p["status"] = json!({"phase": "Running", "startTime": "2026-11-24T08:00:00Z",
            "conditions": [{"type": "PodScheduled", "status": "True"}]});
        h.api.apply(Kind::Pods, p);
        running.push(format!("ml/{name}"));
    }
    for i in 0..WAITING {
        let p = gated(
            &format!("w{i:04}"),
            &format!("t{}", i % TEAMS),
            "standard",
            1,
            None,
        );
        h.api.apply(Kind::Pods, p);
    }
    let start = Instant::now();
    let clock = move || NOW + i64::try_from(start.elapsed().as_secs()).unwrap_or(0);
    let (_state, _dir) = h.lead_with(POLICY, clock, Duration::from_secs(10));
    // Settled: every waiting pod told why, and the writes have stopped.
    let mut last = (usize::MAX, Instant::now());
    loop {
        let told = h
            .api
            .pods()
            .values()
            .filter(|p| waiting(p).is_some())
            .count();
        let writes = queue_writes(&h);
        if told >= WAITING && writes == last.0 && last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        if writes != last.0 {
            last = (writes, Instant::now());
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the queue did not settle: {told} told"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{NODES} nodes x 8 GPUs, {} pods ({RUNNING} running, {WAITING} gated): settled in {:.1} s, {} writes",
        RUNNING + WAITING,
        start.elapsed().as_secs_f64(),
        queue_writes(&h)
    );
    let told_before: std::collections::BTreeMap<String, (String, String)> = h
        .api
        .pods()
        .into_iter()
        .filter_map(|(k, p)| Some((k, waiting(&p)?)))
        .collect();
    let released_before = h.api.releases().len();
    let writes_before = queue_writes(&h);
    // Completions at a steady pace, spread over the nodes; released pods are bound as
    // kube-scheduler would.
    let mut finished = Vec::with_capacity(COMPLETIONS);
    let mut next = Instant::now();
    for k in 0..COMPLETIONS {
        let victim = &running[(k * 37) % RUNNING];
        h.api.delete(Kind::Pods, victim);
        finished.push(Instant::now());
        if k % 5 == 0 {
            h.api.bind_released();
        }
        next += EVERY;
        tokio::time::sleep_until(next.into()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while h.api.releases().len() < released_before + COMPLETIONS && Instant::now() < deadline {
        h.api.bind_released();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let releases: Vec<Instant> = h
        .api
        .releases()
        .into_iter()
        .skip(released_before)
        .map(|(_, at)| at)
        .collect();
    // The k-th release fills the k-th completion's GPU.
    let mut waits: Vec<Duration> = finished
        .iter()
        .zip(&releases)
        .map(|(freed, released)| released.saturating_duration_since(*freed))
        .collect();
    waits.sort();
    let writes = queue_writes(&h) - writes_before;
    println!(
        "{COMPLETIONS} completions, one every {} ms: {} refilled; completion to release p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        EVERY.as_millis(),
        releases.len(),
        percentile(&waits, 0.5).as_secs_f64() * 1e3,
        percentile(&waits, 0.95).as_secs_f64() * 1e3,
        waits.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    let mut by_kind: std::collections::BTreeMap<String, usize> = Default::default();
    let all = h.api.writes();
    let ours = all
        .iter()
        .filter(|(_, path)| path.starts_with("pods") || path.starts_with("events"));
    for (verb, path) in ours.skip(writes_before) {
        let what = if path.starts_with("events") {
            "event"
        } else if path.ends_with("/status") {
            "pod status"
        } else {
            "pod"
        };
        *by_kind.entry(format!("{verb} {what}")).or_insert(0) += 1;
    }
    println!(
        "API writes meanwhile: {writes}, {:.2} per refill: {by_kind:?}",
        writes as f64 / releases.len().max(1) as f64
    );
    if std::env::var("REFILL_SHOW").is_ok() {
        let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
        for (_, path) in all
            .iter()
            .filter(|(_, p)| p.starts_with("pods"))
            .skip(writes_before)
        {
            *per.entry(path.as_str()).or_insert(0) += 1;
        }
        let mut top: Vec<_> = per.into_iter().collect();
        top.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        println!("most written: {:?}", &top[..top.len().min(10)]);
        let hist = top
            .iter()
            .fold(std::collections::BTreeMap::new(), |mut m, (_, n)| {
                *m.entry(*n).or_insert(0) += 1;
                m
            });
        println!("pods by writes: {hist:?}");
        for (k, p) in h.api.pods() {
            if let (Some(now), Some(was)) = (waiting(&p), told_before.get(&k)) {
                if &now != was {
                    println!("{k}: {was:?} -> {now:?}");
                }
            }
        }
    }
    assert_eq!(releases.len(), COMPLETIONS, "every completion is refilled");
}
