//! One queue cycle at 1,000 nodes × 8 GPUs with 10,000 pods, 5,000 of them gated: the
//! decision snapshot from the caches, `decide`, and the API actions — and how many API
//! writes a second cycle makes when nothing changed (it must be none), how many writes
//! each placed pod cost until the queue settled, and how many an hour of cycles makes
//! when only the clock moves.
//!
//! `cargo bench -p cluster --bench queue_cycle` prints the median and the peak RSS;
//! `-- --nodes 12500 --pods 100000` runs it at production shape (issue 55): the same
//! proportions, half the pods gated. After the queue settles, one pod arrives and the
//! cycle that sees it is timed too (`--no-hour` leaves out the hour of clock-only cycles).
//! Every cycle after the first goes through one `controller::Kept`, as a leader's do; the
//! settled cycle is also timed cold, and the view alone fresh and kept.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark code"
)]

use cluster::controller;
use cluster::enact::Action;
use cluster::store::{Change, Stores};
use cluster::{nodes, pods};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use serve::state::AppState;
use std::time::Instant;

// The controller runs in the `gantry` binary, which ships with jemalloc.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The fleet and the pods: `--nodes` (default 1,000) and `--pods` (default ten per node),
/// half of them bound.
struct Shape {
    nodes: usize,
    pods: usize,
}

impl Shape {
    fn from_args() -> Shape {
        let args: Vec<String> = std::env::args().collect();
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .map(|v| v.parse::<usize>().expect("a number"))
        };
        let nodes = value("--nodes").unwrap_or(1_000);
        Shape {
            nodes,
            pods: value("--pods").unwrap_or(nodes * 10),
        }
    }
}

/// Five teams in one cohort, each guaranteed a fifth of the fleet's GPUs.
fn policy(nodes: usize) -> String {
    let gpus = nodes * 8;
    let team = |i: usize| {
        format!(
            "  team t{i} {{ guaranteed = {} gpu in training; burst = {} gpu; lend = {} gpu }}\n",
            gpus / 5,
            gpus / 2,
            gpus / 10
        )
    };
    format!(
        r#"
use std.nodes.{{dgx_h100}}
use std.tiers

pool training {{ capacity = reserved; node = dgx_h100; nodes = {nodes} }}

placement {{ gang = all_or_nothing; packing = least_fragmentation; backfill = on }}

cohort research {{
{}}}
"#,
        (0..5).map(team).collect::<String>()
    )
}

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("n{i:04}"), "labels": {"gantry.dev/pool": "training",
            "gantry.dev/rack": format!("r{}", i / 16),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// Half the pods bound — one CPU-only pod per node and GPU pods of 1 or 2 GPUs, first fit
/// (at 1,000 nodes and 10,000 pods: 4,000 of them, 62% of the GPUs held) — and half
/// gated: single pods of 1–8 GPUs and gangs of 2–4 × 8 GPUs, five teams, three tiers.
fn pods(shape: &Shape) -> Vec<Pod> {
    let nodes = shape.nodes;
    let mut out = Vec::new();
    let mut free = vec![8u32; nodes];
    let tiers = ["critical", "standard", "best_effort"];
    for n in 0..nodes {
        let mut p = pod(
            &format!("agent-{n}"),
            "t0",
            "standard",
            0,
            Some(format!("n{n:04}")),
            None,
        );
        if let Some(l) = p.metadata.labels.as_mut() {
            l.remove("gantry.dev/policy-revision");
        }
        out.push(p);
    }
    let mut k = 0usize;
    let mut node = 0usize;
    while out.len() < shape.pods / 2 {
        k += 1;
        let gpus = [1u32, 1, 1, 2][k % 4];
        let mut scanned = 0;
        while free[node % nodes] < gpus && scanned < nodes {
            node += 1;
            scanned += 1;
        }
        let n = node % nodes;
        assert!(free[n] >= gpus, "the fleet is full");
        free[n] -= gpus;
        let team = format!("t{}", k % 5);
        out.push(pod(
            &format!("run-{k}"),
            &team,
            tiers[1 + k % 2],
            gpus,
            Some(format!("n{n:04}")),
            None,
        ));
    }
    let mut g = 0;
    while out.len() < shape.pods {
        k += 1;
        let team = format!("t{}", k % 5);
        let tier = tiers[k % 3];
        if k.is_multiple_of(10) {
            g += 1;
            let size = 2 + (g % 3) as u32;
            for m in 0..size {
                out.push(pod(
                    &format!("gang-{g}-{m}"),
                    &team,
                    tier,
                    8,
                    None,
                    Some((format!("gang-{g}"), size)),
                ));
            }
        } else {
            out.push(pod(
                &format!("job-{k}"),
                &team,
                tier,
                [1u32, 2, 4, 8][k % 4],
                None,
                None,
            ));
        }
    }
    out
}

fn pod(
    name: &str,
    team: &str,
    tier: &str,
    gpus: u32,
    node: Option<String>,
    gang: Option<(String, u32)>,
) -> Pod {
    let mut labels = json!({"gantry.dev/team": team, "gantry.dev/tier": tier,
                            "gantry.dev/policy-revision": "r1"});
    if let Some((g, n)) = &gang {
        labels["gantry.dev/gang"] = json!(g);
        labels["gantry.dev/gang-size"] = json!(n.to_string());
    }
    let mut spec = json!({"containers": [{"name": "main", "image": "x", "resources": {
        "requests": {"cpu": (gpus * 8 + 1).to_string(), "memory": format!("{}Gi", gpus * 64 + 1), "nvidia.com/gpu": gpus.to_string()},
        "limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
    let status = match &node {
        Some(n) => {
            spec["nodeName"] = json!(n);
            json!({"phase": "Running", "startTime": "2026-11-24T06:00:00Z"})
        }
        None => {
            spec["schedulingGates"] = json!([{"name": "gantry.dev/queue"}]);
            json!({"phase": "Pending"})
        }
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}"),
                     "creationTimestamp": "2026-11-24T07:00:00Z", "labels": labels},
        "spec": spec, "status": status
    }))
    .unwrap()
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// What the API server would hold after the actions: applied to the cached pods.
fn applied(stores: &mut Stores, actions: &[Action]) {
    for a in actions {
        let key = format!("{}/{}", a.pod().namespace, a.pod().name);
        let Some(p) = stores.pods.objects().get(&key).cloned() else {
            continue;
        };
        let mut p = p;
        match a {
            Action::Assign { node, seal, .. } => {
                p.assigned = Some(node.clone());
                p.seal.clone_from(seal);
            }
            Action::Unassign { .. } => p.assigned = None,
            Action::Release { told, patch, .. } => {
                p.gated = false;
                // A one-pod job's release carries its sealed assignment; a release ends a
                // nomination.
                let notes = &patch["metadata"]["annotations"];
                if let Some(node) = notes[pods::ASSIGNED_ANNOTATION].as_str() {
                    p.assigned = Some(node.to_string());
                    p.seal = notes[cluster::seal::SEAL_ANNOTATION]
                        .as_str()
                        .map(str::to_string);
                }
                if notes.get(pods::NOMINATED_ANNOTATION).is_some() {
                    p.nominated = None;
                }
                if *told {
                    p.waiting = Some(("Placed".into(), String::new()));
                }
            }
            Action::Placed { .. } => p.waiting = Some(("Placed".into(), String::new())),
            Action::Evict {
                cause,
                for_job,
                mark_seal,
                marked,
                ..
            } => {
                p.terminating = true;
                if !marked {
                    p.preempted = Some(cluster::enact::eviction_mark(cause, for_job));
                    p.preemption_seal.clone_from(mark_seal);
                }
            }
            Action::Nominate {
                text,
                seal,
                reason,
                message,
                ..
            } => {
                p.nominated = seal.as_ref().map(|s| (text.clone(), s.clone()));
                p.waiting = Some((reason.clone(), message.clone()));
            }
            Action::Unnominate { .. } => p.nominated = None,
            Action::Wait {
                reason, message, ..
            } => p.waiting = Some((reason.clone(), message.clone())),
        }
        stores.pods.apply(Change::Apply(key, p));
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 1 } else { 7 };
    let shape = Shape::from_args();
    let nodes = shape.nodes;
    let mut stores = Stores::default();
    stores.nodes.apply(Change::Init);
    for i in 0..nodes {
        let n = nodes::node(&node(i), "gantry.dev/pool").unwrap();
        stores
            .nodes
            .apply(Change::InitApply(n.node.name.clone(), n));
    }
    stores.nodes.apply(Change::InitDone);
    stores.pods.apply(Change::Init);
    for p in pods(&shape) {
        stores
            .pods
            .apply(Change::InitApply(pods::key(&p), pods::pod(&p)));
    }
    stores.pods.apply(Change::InitDone);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), policy(nodes)).unwrap();
    let state = AppState::new(Box::new(|| 1_795_510_000));
    state.reload_policy(dir.path()).unwrap();
    let policy = state.policy().unwrap();
    // As the leader runs: assignments and nominations are sealed, and only sealed ones
    // are believed.
    let memory = cluster::memory::Memory::default();
    stores.seal = Some(cluster::seal::Seal::generate().unwrap());
    let before = rss_mib();
    let mut times = Vec::new();
    let mut last = None;
    // What a leader keeps from cycle to cycle; each round starts cold, the last one's is
    // carried on.
    let mut kept = controller::Kept::default();
    for _ in 0..rounds {
        let t = Instant::now();
        kept = controller::Kept::default();
        let out =
            controller::cycle_kept(&stores, &policy, &memory, 1_795_510_000, &mut kept).unwrap();
        times.push(t.elapsed());
        last = Some(out);
    }
    times.sort();
    let (view, plan, actions) = last.unwrap();
    let placed = plan
        .decisions
        .iter()
        .filter(|d| d.action == engine::decide::plan::Action::Place)
        .count();
    let count = |f: fn(&Action) -> bool| actions.iter().filter(|a| f(a)).count();
    println!(
        "{nodes} nodes x 8 GPUs, {} pods ({} jobs in the cycle); placed {placed}, preempted {}",
        stores.pods.objects().len(),
        view.jobs.len(),
        plan.preemptions.len()
    );
    println!(
        "actions: {} assign, {} release, {} evict, {} wait",
        count(|a| matches!(a, Action::Assign { .. })),
        count(|a| matches!(a, Action::Release { .. })),
        count(|a| matches!(a, Action::Evict { .. })),
        count(|a| matches!(a, Action::Wait { .. })),
    );
    println!(
        "cycle (snapshot + decide + actions): median {:.1} ms, max {:.1} ms over {rounds}; peak RSS {:.0} MiB ({:.0} MiB before the cycles)",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3,
        rss_mib(),
        before
    );
    // What the leader waits for before its next decision, and what it tells beside it
    // (`cluster::teller`).
    let (told, decisive): (Vec<Action>, Vec<Action>) = actions
        .iter()
        .cloned()
        .partition(cluster::teller::only_tells);
    println!(
        "the first cycle's writes: {} carried out before the next decision (assign, nominate, evict, release), {} told beside the cycles (conditions, Events)",
        api_writes(&decisive),
        api_writes(&told)
    );
    // For profiling the cycle alone.
    if std::env::args().any(|a| a == "--cycle-only") {
        return;
    }
    // The cluster carries the actions out (victims gone, released pods bound where they
    // were assigned); cycles then run until nothing more is to be done. A cycle with
    // nothing new must write nothing.
    let mut writes = api_writes(&actions);
    let mut by_kind: std::collections::BTreeMap<&'static str, usize> = Default::default();
    // Writes by the pod they are about, to tell a placed pod's own from its victims'.
    let mut by_pod: std::collections::HashMap<String, usize> = Default::default();
    let mut placed: std::collections::HashSet<String> = Default::default();
    let note_placed = |placed: &mut std::collections::HashSet<String>, actions: &[Action]| {
        for a in actions {
            if let Action::Release { pod, .. } = a {
                placed.insert(format!("{}/{}", pod.namespace, pod.name));
            }
        }
    };
    tally(&mut by_kind, &mut by_pod, &actions);
    note_placed(&mut placed, &actions);
    let mut placed_pods = count(|a| matches!(a, Action::Release { .. }));
    let mut actions = actions;
    let mut cycles = 1;
    while !actions.is_empty() && cycles < 20 {
        applied(&mut stores, &actions);
        let gone: Vec<String> = stores
            .pods
            .objects()
            .iter()
            .filter(|(_, p)| p.terminating)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            stores.pods.apply(Change::Delete(k));
        }
        actions = controller::cycle_kept(&stores, &policy, &memory, 1_795_510_000, &mut kept)
            .unwrap()
            .2;
        writes += api_writes(&actions);
        tally(&mut by_kind, &mut by_pod, &actions);
        note_placed(&mut placed, &actions);
        placed_pods += actions
            .iter()
            .filter(|a| matches!(a, Action::Release { .. }))
            .count();
        cycles += 1;
    }
    let t = Instant::now();
    let again = controller::cycle_kept(&stores, &policy, &memory, 1_795_510_000, &mut kept)
        .unwrap()
        .2;
    let settled_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "after {cycles} cycles the queue is settled; API writes in a cycle with nothing new: {}",
        again.len()
    );
    assert!(again.is_empty(), "{again:?}");
    let t = Instant::now();
    let cold = controller::cycle_with(&stores, &policy, &memory, 1_795_510_000)
        .unwrap()
        .2;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(cold.is_empty(), "{cold:?}");
    println!(
        "a cycle of the settled queue, nothing new: {settled_ms:.1} ms as a leader runs it (kept from the last cycle), {cold_ms:.1} ms cold"
    );
    println!("  kept, by step: {}", phases(&kept.phases));
    // For profiling the settled cycle: `--settled-only N` runs it N times more and stops.
    if let Some(n) = std::env::args()
        .skip_while(|a| a != "--settled-only")
        .nth(1)
        .and_then(|n| n.parse::<usize>().ok())
    {
        // The fastest of each step over the runs: what the code costs, with the VM's
        // slower moments left out (for comparing two builds run one after the other).
        let mut fastest: Option<controller::Phases> = None;
        for _ in 0..n {
            controller::cycle_kept(&stores, &policy, &memory, 1_795_510_000, &mut kept).unwrap();
            let p = kept.phases;
            fastest = Some(fastest.map_or(p, |f| controller::Phases {
                view: f.view.min(p.view),
                snapshot: f.snapshot.min(p.snapshot),
                decide: f.decide.min(p.decide),
                actions: f.actions.min(p.actions),
            }));
        }
        if let Some(f) = fastest {
            println!("  kept, the fastest of {n} by step: {}", phases(&f));
        }
        return;
    }
    view_alone(&mut stores, &policy, rounds, &mut kept.view);
    arrival_to_settled_queue(&mut stores, &policy, &memory, rounds, &mut kept);
    println!(
        "until settled: {writes} API writes for {placed_pods} pods placed: {:.2} per placed pod (the waits of {} pods still queued included)",
        writes as f64 / placed_pods.max(1) as f64,
        stores.pods.objects().values().filter(|p| p.gated).count()
    );
    println!("  of which, by action: {by_kind:?}");
    let own: usize = placed.iter().filter_map(|k| by_pod.get(k)).sum();
    let evictions = by_kind
        .get("evict (mark, eviction, event)")
        .copied()
        .unwrap_or(0);
    println!(
        "  a placed pod's own writes (its waits, nomination, assignment, release, placed condition): {own} for {} pods, {:.2} each; its share of the victims' evictions: {:.2} more",
        placed.len(),
        own as f64 / placed.len().max(1) as f64,
        evictions as f64 / placed.len().max(1) as f64
    );
    // An hour of cycles every 10 s with nothing changing but the clock (360 cycles: left
    // out with `--no-hour`, as at production shape).
    if std::env::args().any(|a| a == "--no-hour") {
        return;
    }
    let mut later = 0;
    for step in 1..=360 {
        let now = 1_795_510_000 + 10 * step;
        let actions = controller::cycle_kept(&stores, &policy, &memory, now, &mut kept)
            .unwrap()
            .2;
        applied(&mut stores, &actions);
        later += api_writes(&actions);
    }
    println!("API writes in 360 cycles over an hour with nothing changing but the clock: {later}");
}

/// The view of the settled queue alone, as each cycle starts: built fresh, kept with
/// nothing new, and kept after one pod's event (the pod applied again).
fn view_alone(
    stores: &mut Stores,
    policy: &serve::state::LoadedPolicy,
    rounds: usize,
    keeper: &mut cluster::queue::ViewKeeper,
) {
    fn trust<'a>(stores: &'a Stores, program: &'a lang::ir::Program) -> cluster::queue::Trust<'a> {
        cluster::queue::Trust {
            seal: stores.seal.as_ref(),
            program: Some(program),
            now: 1_795_510_000,
            predictions: None,
        }
    }
    let program = &policy.program;
    let median = |mut times: Vec<std::time::Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() * 1e3
    };
    let (mut fresh, mut nothing, mut one) = (Vec::new(), Vec::new(), Vec::new());
    let some_pod = stores
        .pods
        .objects()
        .iter()
        .next()
        .map(|(k, p)| (k.clone(), p.clone()));
    for _ in 0..rounds {
        let t = Instant::now();
        drop(cluster::queue::view(stores, trust(stores, program)).unwrap());
        fresh.push(t.elapsed());
        let t = Instant::now();
        drop(keeper.view(stores, trust(stores, program)).unwrap());
        nothing.push(t.elapsed());
        if let Some((k, p)) = some_pod.clone() {
            stores.pods.apply(Change::Apply(k, p));
        }
        let t = Instant::now();
        drop(keeper.view(stores, trust(stores, program)).unwrap());
        one.push(t.elapsed());
    }
    println!(
        "the view alone (median of {rounds}): {:.1} ms fresh, {:.1} ms kept with nothing new, {:.1} ms kept after one pod's event",
        median(fresh),
        median(nothing),
        median(one)
    );
}

/// One gated pod arrives to the settled queue: the cycles that see it, timed (the pod is
/// taken away again after).
fn arrival_to_settled_queue(
    stores: &mut Stores,
    policy: &serve::state::LoadedPolicy,
    memory: &cluster::memory::Memory,
    rounds: usize,
    kept: &mut controller::Kept,
) {
    let p = pod("late-1", "t1", "standard", 1, None, None);
    let key = pods::key(&p);
    let mut times = Vec::new();
    let mut steps = Vec::new();
    let mut actions = Vec::new();
    for _ in 0..rounds {
        // Each round's cycle sees the pod's event (as a leader sees it once).
        stores.pods.apply(Change::Apply(key.clone(), pods::pod(&p)));
        let t = Instant::now();
        actions = controller::cycle_kept(stores, policy, memory, 1_795_510_000, kept)
            .unwrap()
            .2;
        times.push(t.elapsed());
        steps.push(kept.phases);
    }
    steps.sort_by_key(|p| p.view + p.snapshot + p.decide + p.actions);
    times.sort();
    let kinds: Vec<&str> = actions
        .iter()
        .take(5)
        .map(|a| a.pod().name.as_str())
        .collect();
    println!(
        "one pod arrives to the settled queue: the cycle median {:.1} ms, max {:.1} ms over {rounds}; {} actions (the first for {kinds:?})",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3,
        actions.len(),
    );
    println!(
        "  the median cycle, by step: {}",
        phases(&steps[steps.len() / 2])
    );
    stores.pods.apply(Change::Delete(key));
}

/// A cycle's steps as the bench prints them.
fn phases(p: &controller::Phases) -> String {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    format!(
        "view {:.1} ms, snapshot {:.1} ms, decide {:.1} ms, actions {:.1} ms",
        ms(p.view),
        ms(p.snapshot),
        ms(p.decide),
        ms(p.actions)
    )
}

/// Adds each action's writes to its kind's count.
fn tally(
    by_kind: &mut std::collections::BTreeMap<&'static str, usize>,
    by_pod: &mut std::collections::HashMap<String, usize>,
    actions: &[Action],
) {
    for a in actions {
        let key = format!("{}/{}", a.pod().namespace, a.pod().name);
        *by_pod.entry(key).or_insert(0) += api_writes(std::slice::from_ref(a));
        let kind = match a {
            Action::Assign { .. } => "assign",
            Action::Unassign { .. } => "unassign",
            Action::Release { told: false, .. } => "release",
            Action::Release { told: true, .. } => "release + placed condition",
            Action::Placed { .. } => "placed condition",
            Action::Nominate { .. } => "nomination + wait condition",
            Action::Unnominate { .. } => "nomination withdrawn",
            Action::Evict { .. } => "evict (mark, eviction, event)",
            Action::Wait { event: true, .. } => "wait condition + event",
            Action::Wait { event: false, .. } => "wait condition",
        };
        *by_kind.entry(kind).or_insert(0) += api_writes(std::slice::from_ref(a));
    }
}

/// The API writes an action makes (as `controller::apply` does them).
fn api_writes(actions: &[Action]) -> usize {
    actions
        .iter()
        .map(|a| match a {
            Action::Assign { .. }
            | Action::Unassign { .. }
            | Action::Placed { .. }
            | Action::Nominate { .. }
            | Action::Unnominate { .. } => 1,
            Action::Release { told, .. } => 1 + usize::from(*told),
            // Status patch, and an Event when the reason's code is new.
            Action::Wait { event, .. } => 1 + usize::from(*event),
            // Mark (once), eviction, Event.
            Action::Evict { marked, .. } => 3 - usize::from(*marked),
        })
        .sum()
}
