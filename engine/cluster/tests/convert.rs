//! Real-format Node and Pod objects (as `kubectl get -o json` prints them) through the
//! pure conversion: the fleet, what runs where, closed nodes, notes, and what is free once
//! the running pods are counted.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use engine::core::mig::MigTable;
use engine::inventory::catalog;
use k8s_openapi::api::core::v1::{Node, Pod};
use serve::occupancy::Occupancy;
use std::fmt::Write;

#[derive(serde::Deserialize)]
struct List<T> {
    items: Vec<T>,
}

fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> Vec<T> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let list: List<T> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    list.items
}

/// The fixtures as the view's caches after a first list.
pub fn stores() -> Stores {
    let mut s = Stores::default();
    s.nodes.apply(Change::Init);
    for n in fixture::<Node>("nodes.json") {
        let seen = nodes::node(&n, "gantry.dev/pool").expect("named");
        s.nodes
            .apply(Change::InitApply(seen.node.name.clone(), seen));
    }
    s.nodes.apply(Change::InitDone);
    s.pods.apply(Change::Init);
    for p in fixture::<Pod>("pods.json") {
        s.pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    s.pods.apply(Change::InitDone);
    s
}

#[test]
fn nodes_and_pods_become_a_fleet_and_running_jobs() {
    let seen = stores().seen().expect("synced");
    let mut out = String::new();
    for n in &seen.fleet.nodes {
        let healthy = n
            .gpus
            .iter()
            .filter(|g| g.healthy && g.mig.is_none())
            .count();
        let mig = n.gpus.iter().filter(|g| g.mig.is_some()).count();
        let failed = n.gpus.iter().filter(|g| !g.healthy).count();
        let islands: Vec<String> = n
            .gpus
            .iter()
            .map(|g| g.nvlink_island.map_or("-".into(), |i| i.to_string()))
            .collect();
        writeln!(
            out,
            "node {} pool={} cpu={}m mem={}Mi model={} vram={}Mi gpus: {healthy} whole, {mig} MIG, {failed} unhealthy; islands {} labels {:?}",
            n.name,
            n.pool.as_deref().unwrap_or("-"),
            n.cpu_milli,
            n.memory_mib,
            n.gpu_model().unwrap_or("-"),
            n.gpus.first().map_or(0, |g| g.memory_mib),
            islands.join(","),
            n.labels
        )
        .unwrap();
    }
    for j in &seen.running {
        let m = &j.shape.member;
        writeln!(
            out,
            "running {} on {} team={} tier={} gpus={} mig={} cpu={}m mem={}Mi started={:?} interactive={}",
            j.id,
            j.placement.iter().map(|p| p.node.as_str()).collect::<Vec<_>>().join(","),
            j.team.as_deref().unwrap_or("-"),
            j.tier.as_deref().unwrap_or("-"),
            m.num_gpu,
            m.mig_profile.as_deref().unwrap_or("-"),
            m.cpu_milli,
            m.memory_mib,
            j.started_at,
            j.interactive,
        )
        .unwrap();
    }
    for (n, why) in &seen.closed {
        writeln!(out, "closed {n}: {why}").unwrap();
    }
    for note in &seen.notes {
        writeln!(out, "note: {note}").unwrap();
    }
    insta::assert_snapshot!(out);
}

#[test]
fn running_pods_are_counted_on_their_nodes() {
    let seen = stores().seen().expect("synced");
    let mig = MigTable::from_models(catalog::stdlib_models());
    let occ = Occupancy::build(
        (1, "r".into()),
        &seen.fleet,
        &seen.running,
        &seen.closed,
        &mig,
    );
    assert!(occ.problems.is_empty(), "{:?}", occ.problems);
    let mut out = String::new();
    for (n, free) in seen.fleet.nodes.iter().zip(&occ.free.nodes) {
        let whole = free.gpu_milli.iter().filter(|m| **m == 1000).count();
        let mig: Vec<String> = free
            .mig
            .iter()
            .flatten()
            .map(|used| format!("{used:08b}"))
            .collect();
        writeln!(
            out,
            "{}: {whole} GPUs free, cpu {}m, mem {}Mi, MIG slots used {:?}{}",
            n.name,
            free.cpu_milli,
            free.memory_mib,
            mig,
            occ.closed
                .iter()
                .find(|(i, _)| seen.fleet.nodes.get(**i).is_some_and(|x| x.name == n.name))
                .map_or(String::new(), |(_, why)| format!(" (closed: {why})"))
        )
        .unwrap();
    }
    insta::assert_snapshot!(out);
}

#[test]
fn the_view_waits_for_both_lists() {
    let mut s = Stores::default();
    assert!(s.seen().unwrap_err().contains("nodes and pods"));
    s.nodes.apply(Change::Init);
    s.nodes.apply(Change::InitDone);
    assert!(s.seen().unwrap_err().contains("pods"));
    s.pods.apply(Change::Init);
    s.pods.apply(Change::InitDone);
    assert!(s.seen().is_ok());
}

#[test]
fn a_relist_replaces_the_cache_at_once() {
    let mut s = stores();
    let before = s.seen().unwrap().running.len();
    assert!(before > 0);
    // A relist starts: readers still see the old state until it is complete.
    s.pods.apply(Change::Init);
    assert_eq!(s.seen().unwrap().running.len(), before);
    s.pods.apply(Change::InitDone);
    assert_eq!(s.seen().unwrap().running.len(), 0);
}
