//! Autoscaling and warm pools, decided in the same cycle as placement and as pure: the
//! policy's `autoscale` and `warm` blocks over what the cycle left waiting, the fleet, the
//! start history and the autoscaler's own memory (`ScaleState`, an input and an output).
//!
//! Up triggers count pending demand in the pool's node shape (gangs in whole nodes), hold
//! for their `for` window, respect cooldowns, the pool's maximum, `max_spend` (the pool's
//! hourly cost, booting nodes included) and nodes already booting. When a pool cannot grow
//! and has a `fallback`, the fallback pool takes the demand. Warm pools keep a target of
//! ready nodes while their windows are active, in their IANA zone. Down triggers remove
//! nodes idle long enough, never below the pool's minimum or warm target, most expensive
//! first.

pub mod demand;
mod eval;
pub mod warm;

use crate::decide::plan::{
    human_duration, wall_time, Action, Plan, ReasonCode, ScaleEntry, WarmEntry,
};
use crate::decide::scale_memory::{Booting, PoolState, ScaleState};
use crate::decide::snapshot::{JobState, Snapshot};
use demand::Shape;
use eval::Env;
use lang::ir::{Autoscale, Pool, Program};
use std::collections::{BTreeMap, BTreeSet};

/// What the autoscaler decided, and its memory for the next cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub scale: Vec<ScaleEntry>,
    pub warm: Vec<WarmEntry>,
    pub state: ScaleState,
    /// Waiting jobs the nodes added now will hold: job id → (pool, ready at).
    pub covered: BTreeMap<String, (String, i64)>,
}

/// Jobs the cycle left waiting for capacity that more nodes could give (not those held
/// back by quota, rules or invalid fields), with how long each has waited.
pub(crate) fn waiting<'s>(
    snapshot: &'s Snapshot,
    plan: &Plan,
    now: i64,
) -> Vec<(&'s JobState, i64)> {
    let by_id: BTreeMap<&str, &JobState> = snapshot.jobs.iter().map(|j| (j.id(), j)).collect();
    plan.decisions
        .iter()
        .filter(|d| d.action == Action::Queue)
        .filter(|d| {
            d.reason.as_ref().is_some_and(|r| {
                !r.held_by_quota
                    && !matches!(
                        r.code,
                        ReasonCode::QuotaExhausted
                            | ReasonCode::InvalidJob
                            | ReasonCode::DeniedByRule
                            | ReasonCode::GangIncomplete
                    )
            })
        })
        .filter_map(|d| by_id.get(d.job.as_str()).copied())
        .map(|j| (j, j.job.submitted_at.map_or(0, |s| (now - s).max(0))))
        .collect()
}

/// Adds autoscaling and warm pools to a placement's plan: the pools' scale and warm
/// entries, the autoscaler's memory for the next cycle, and for a waiting job the new
/// nodes will hold, the scale-up as its unblock and ETA. `judged` is the snapshot the
/// placement judged (`decide::Placement::judged`). Nothing when the policy has neither.
pub fn apply(program: &Program, judged: &Snapshot, plan: &mut Plan, now: i64) {
    if program.autoscale.is_empty() && program.warm.is_empty() {
        return;
    }
    let scaling = autoscale(program, judged, plan, now);
    // A job the new nodes will hold says so.
    for d in &mut plan.decisions {
        let (Some(r), Some((pool, ready_at))) = (&mut d.reason, scaling.covered.get(&d.job)) else {
            continue;
        };
        let eta = ready_at - now;
        r.unblock = Some(if judged.wall_clock {
            format!(
                "fits in pool {pool} after scale-up (nodes ready by about {})",
                wall_time(*ready_at)
            )
        } else {
            format!(
                "fits in pool {pool} after scale-up (nodes ready in about {})",
                human_duration(eta)
            )
        });
        r.eta_s = Some(r.eta_s.map_or(eta, |e| e.min(eta)));
    }
    plan.scale = scaling.scale;
    plan.warm = scaling.warm;
    plan.state = Some(scaling.state);
}

pub fn autoscale(program: &Program, snapshot: &Snapshot, plan: &Plan, now: i64) -> Scaling {
    let mut state = snapshot.scale_state.clone();
    let fleet = &snapshot.fleet;
    // Nodes that finished booting are in the fleet now.
    for ps in state.pools.values_mut() {
        ps.booting.retain(|b| b.ready_at > now);
    }
    // Busy nodes: running jobs not preempted, and this cycle's placements.
    let evicted: BTreeSet<&str> = plan.preemptions.iter().map(|p| p.job.as_str()).collect();
    let mut busy: BTreeSet<String> = BTreeSet::new();
    let mut running_milli: BTreeMap<String, u64> = BTreeMap::new();
    let pool_of = |node: &str| {
        fleet
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.pool.clone())
    };
    for js in &snapshot.jobs {
        let Some(r) = &js.running else { continue };
        if evicted.contains(js.id()) {
            continue;
        }
        for c in &r.members {
            if let Some(n) = fleet.nodes.get(c.node) {
                busy.insert(n.name.clone());
                if let Some(p) = &n.pool {
                    *running_milli.entry(p.clone()).or_insert(0) += js.member_milli;
                }
            }
        }
    }
    let milli_of: BTreeMap<&str, u64> = snapshot
        .jobs
        .iter()
        .map(|j| (j.id(), j.member_milli))
        .collect();
    for d in plan.decisions.iter().filter(|d| d.action == Action::Place) {
        for a in &d.placement {
            busy.insert(a.node.clone());
            if let Some(p) = pool_of(&a.node) {
                *running_milli.entry(p).or_insert(0) +=
                    milli_of.get(d.job.as_str()).copied().unwrap_or(0);
            }
        }
    }
    // Idle clocks: a node idles from the first cycle that saw it without work.
    let names: BTreeSet<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).collect();
    state
        .idle_since
        .retain(|n, _| names.contains(n.as_str()) && !busy.contains(n));
    for n in &fleet.nodes {
        if !busy.contains(&n.name) {
            state.idle_since.entry(n.name.clone()).or_insert(now);
        }
    }
    let waiting = waiting(snapshot, plan, now);
    let mut env = Env {
        program,
        snapshot,
        waiting: &waiting,
        running_milli: &running_milli,
        booting: state
            .pools
            .iter()
            .map(|(p, s)| {
                (
                    p.clone(),
                    s.booting.iter().map(|b| u64::from(b.nodes)).sum(),
                )
            })
            .collect(),
        covered: BTreeMap::new(),
        now,
    };

    // Warm targets first: scale-up fills them and scale-down keeps them.
    let mut warm = Vec::new();
    let mut warm_target: BTreeMap<String, u64> = BTreeMap::new();
    for w in &program.warm {
        let tz = warm::zone(&w.zone);
        let on = warm::active(&w.windows, tz, now);
        let (target, why) = if on {
            let raw = env.number(&w.size, &w.pool, tz).unwrap_or(0.0).max(0.0);
            let clamped = match w.clamp {
                Some((lo, hi)) => raw.clamp(lo, hi),
                None => raw,
            };
            let nodes = clamped.ceil() as u64;
            let clamp = w
                .clamp
                .map_or(String::new(), |(lo, hi)| format!(", clamped to {lo}..{hi}"));
            (
                nodes,
                format!(
                    "warm pool {} is active at {}: size evaluates to {raw}{clamp} → {nodes} node{}",
                    w.name,
                    warm::describe(now, tz),
                    if nodes == 1 { "" } else { "s" }
                ),
            )
        } else {
            (
                0,
                format!(
                    "warm pool {} is outside its windows at {}",
                    w.name,
                    warm::describe(now, tz)
                ),
            )
        };
        let t = warm_target.entry(w.pool.clone()).or_insert(0);
        *t = (*t).max(target);
        warm.push(WarmEntry {
            pool: w.pool.clone(),
            target_nodes: target,
            reason: why,
        });
    }

    let mut scale = Vec::new();
    let mut spill: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let blocks: BTreeMap<&str, &Autoscale> = program
        .autoscale
        .iter()
        .map(|a| (a.pool.as_str(), a))
        .collect();
    let mut pools: Vec<&Pool> = program.pools.iter().collect();
    // Fallback pools after the pools that spill into them.
    pools.sort_by_key(|p| {
        program
            .autoscale
            .iter()
            .any(|a| a.fallback.as_deref() == Some(p.name.as_str()))
    });
    for pool in pools {
        let block = blocks.get(pool.name.as_str()).copied();
        let target = warm_target.get(&pool.name).copied().unwrap_or(0);
        if block.is_none() && !warm_target.contains_key(&pool.name) {
            continue;
        }
        let ps = state.pools.entry(pool.name.clone()).or_default();
        let ready = fleet
            .nodes
            .iter()
            .filter(|n| n.pool.as_deref() == Some(pool.name.as_str()))
            .count() as u64;
        let booting: u64 = ps.booting.iter().map(|b| u64::from(b.nodes)).sum();
        let limits = Limits {
            pool,
            block,
            ready,
            booting,
        };
        // (nodes, why, whether for a warm target)
        let mut wanted: Vec<(u64, String, bool)> = Vec::new();
        // Up triggers.
        if let Some(a) = block {
            for (i, t) in a.up.iter().enumerate() {
                let key = format!("up/{i}");
                let holds = env.truthy(&t.condition, &pool.name, None);
                if !holds {
                    ps.trigger_since.remove(&key);
                    continue;
                }
                let since = *ps.trigger_since.entry(key).or_insert(now);
                let step = t
                    .step
                    .as_ref()
                    .and_then(|s| env.number(s, &pool.name, chrono_tz::Tz::UTC))
                    .unwrap_or(0.0)
                    .max(0.0)
                    .ceil() as u64;
                let what = env.describe_demand(&pool.name);
                if now - since < t.hold_s as i64 {
                    scale.push(entry(
                        pool,
                        0,
                        format!(
                            "{what}; waiting for the trigger to hold {}s ({}s so far)",
                            t.hold_s,
                            now - since
                        ),
                    ));
                    continue;
                }
                wanted.push((step, what, false));
            }
        }
        if let Some((n, why)) = spill.remove(&pool.name) {
            wanted.push((n, why, false));
        }
        let min_short = u64::from(pool.min_nodes).saturating_sub(ready + booting);
        if min_short > 0 && block.is_some() {
            wanted.push((
                min_short,
                format!(
                    "pool minimum {} nodes, {ready} ready and {booting} booting",
                    pool.min_nodes
                ),
                false,
            ));
        }
        let warm_short = target.saturating_sub(ready + booting);
        if warm_short > 0 {
            wanted.push((
                warm_short,
                format!("warm target {target} nodes, {ready} ready and {booting} booting"),
                true,
            ));
        }
        // The largest need; on a tie, waiting work's over a warm target's.
        if let Some((step, why, for_warm)) = wanted
            .into_iter()
            .max_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)))
        {
            if step > 0 {
                let cooldown_left = block.and_then(|a| {
                    let last = ps.last_up_at?;
                    let left = last + a.cooldown_up_s as i64 - now;
                    (left > 0).then_some(left)
                });
                match cooldown_left {
                    Some(left) => scale.push(entry(
                        pool,
                        0,
                        format!("{why}; in scale-up cooldown for {left}s more"),
                    )),
                    None => {
                        let (mut add, mut capped) = limits.room(step);
                        // A cap that cuts a step for waiting work buys only what that
                        // work can use: part of a gang's nodes would run nothing (Kueue's
                        // ProvisioningRequest is atomic for this reason).
                        if let (false, Some(c)) = (for_warm, &capped) {
                            let usable = env.usable(&pool.name, add);
                            if usable < add {
                                let need = env.smallest_need(&pool.name).unwrap_or(0);
                                capped = Some(format!(
                                    "{c}; {add} node{} would hold no more than {usable} node{} of waiting work (the smallest waiting job needs {need})",
                                    plural(add),
                                    plural(usable)
                                ));
                                add = usable;
                            }
                        }
                        if add > 0 {
                            env.cover(&pool.name, add, now + pool.boot_s as i64);
                            ps.booting.push(Booting {
                                nodes: add as u32,
                                ready_at: now + pool.boot_s as i64,
                                warm: for_warm,
                            });
                            ps.last_up_at = Some(now);
                            ps.trigger_since.clear();
                            let capped =
                                capped.map_or(String::new(), |c| format!(" (capped: {c})"));
                            scale.push(entry(
                                pool,
                                add as i64,
                                format!(
                                    "{why}; adding {add} node{} to {}{capped}",
                                    plural(add),
                                    pool.name
                                ),
                            ));
                        } else {
                            let c = capped.unwrap_or_default();
                            scale.push(entry(pool, 0, format!("{why}; cannot add nodes: {c}")));
                        }
                        let unmet = step.saturating_sub(add);
                        if let (true, Some(fb)) =
                            (unmet > 0, block.and_then(|a| a.fallback.as_ref()))
                        {
                            let e = spill.entry(fb.clone()).or_insert((0, String::new()));
                            e.0 += unmet;
                            e.1 = format!(
                                "{unmet} node{} of demand {} cannot take; falling back to {fb}",
                                plural(unmet),
                                pool.name
                            );
                        }
                    }
                }
            }
        }
        // Down triggers: idle nodes beyond the floor, most expensive pools first overall.
        if let Some(a) = block {
            let floor = u64::from(pool.min_nodes).max(target);
            let booting_now: u64 = ps.booting.iter().map(|b| u64::from(b.nodes)).sum();
            let cooling = ps
                .last_down_at
                .is_some_and(|l| now - l < a.cooldown_down_s as i64)
                || ps
                    .last_up_at
                    .is_some_and(|l| now - l < a.cooldown_up_s as i64);
            for t in &a.down {
                let mut idle: Vec<(i64, &str)> = fleet
                    .nodes
                    .iter()
                    .filter(|n| n.pool.as_deref() == Some(pool.name.as_str()))
                    .filter_map(|n| Some((*state.idle_since.get(&n.name)?, n.name.as_str())))
                    .filter(|(since, _)| env.truthy(&t.condition, &pool.name, Some(now - since)))
                    .collect();
                idle.sort();
                if idle.is_empty() {
                    continue;
                }
                let keepable = (ready + booting_now).saturating_sub(floor);
                let limit = t
                    .step
                    .as_ref()
                    .and_then(|s| env.number(s, &pool.name, chrono_tz::Tz::UTC))
                    .map_or(u64::MAX, |n| n.max(0.0) as u64);
                let remove = (idle.len() as u64).min(keepable).min(limit);
                let names: Vec<&str> = idle.iter().take(remove as usize).map(|(_, n)| *n).collect();
                if remove == 0 {
                    scale.push(entry(pool, 0, format!(
                        "{} idle node{} kept: the pool keeps at least {floor} (min nodes {}, warm target {target})",
                        idle.len(), plural(idle.len() as u64), pool.min_nodes
                    )));
                } else if cooling {
                    scale.push(entry(
                        pool,
                        0,
                        format!(
                            "{remove} idle node{} to remove, but the pool is in cooldown",
                            plural(remove)
                        ),
                    ));
                } else {
                    ps.last_down_at = Some(now);
                    let mut e = entry(
                        pool,
                        -(remove as i64),
                        format!(
                            "removing {} idle past the down trigger (keeping at least {floor})",
                            names.join(", ")
                        ),
                    );
                    e.nodes = names.iter().map(|n| (*n).to_string()).collect();
                    scale.push(e);
                }
                break;
            }
        }
    }
    // Demand no autoscaled pool's node shape can hold: say so once per job.
    for (js, _) in &waiting {
        let fits_some = program.autoscale.iter().any(|a| {
            let allowed = js.job.shape.pools.is_empty() || js.job.shape.pools.contains(&a.pool);
            allowed && Shape::of(program, &a.pool).is_some_and(|s| s.nodes_for(js).is_some())
        });
        if !fits_some && !program.autoscale.is_empty() {
            let m = &js.job.shape;
            scale.push(ScaleEntry {
                pool: String::new(),
                delta_nodes: 0,
                nodes: Vec::new(),
                reason: format!(
                    "job {} ({} × {}) fits no autoscaled pool's node shape; scaling cannot help it",
                    js.id(),
                    m.members,
                    crate::core::gang::describe(&m.member)
                ),
            });
        }
    }
    // Most expensive capacity first among removals; additions in pool order.
    scale.sort_by(|a, b| {
        let cost = |e: &ScaleEntry| {
            program
                .pool(&e.pool)
                .and_then(|p| p.cost_per_node_hour)
                .unwrap_or(0.0)
        };
        (a.delta_nodes >= 0)
            .cmp(&(b.delta_nodes >= 0))
            .then(cost(b).total_cmp(&cost(a)))
    });
    state.pools.retain(|_, p| *p != PoolState::default());
    Scaling {
        scale,
        warm,
        state,
        covered: env.covered,
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn entry(pool: &Pool, delta: i64, reason: String) -> ScaleEntry {
    ScaleEntry {
        pool: pool.name.clone(),
        delta_nodes: delta,
        reason,
        nodes: Vec::new(),
    }
}

struct Limits<'a> {
    pool: &'a Pool,
    block: Option<&'a Autoscale>,
    ready: u64,
    booting: u64,
}

impl Limits<'_> {
    /// How many of `want` nodes may be added, and what capped it.
    fn room(&self, want: u64) -> (u64, Option<String>) {
        let have = self.ready + self.booting;
        let mut add = want;
        let mut why = None;
        let max = u64::from(self.pool.max_nodes);
        if have + add > max {
            add = max.saturating_sub(have);
            why = Some(format!("pool maximum {max} nodes, {have} ready or booting"));
        }
        if let (Some(cap), Some(rate)) = (
            self.block.and_then(|a| a.max_spend_per_hour),
            self.pool.cost_per_node_hour,
        ) {
            if rate > 0.0 {
                let affordable = (cap / rate).floor().max(0.0) as u64;
                if have + add > affordable {
                    add = affordable.saturating_sub(have);
                    why = Some(format!(
                        "max_spend {cap} $/h allows {affordable} nodes at {rate} $/h, {have} ready or booting"
                    ));
                }
            }
        }
        (add, why)
    }
}
