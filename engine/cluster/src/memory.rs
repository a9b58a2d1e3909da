//! What the engine remembers across cycles and restarts, kept in the cluster: the teams'
//! past usage (fair share decays it), the autoscaler's timers and cooldowns, and the start
//! history warm pools size themselves by. It lives in the ConfigMap `gantry-state` (key
//! `memory.json`) in gantry's namespace; the leader writes it at most once a minute when
//! it changed, and every replica reads it when it starts.
//!
//! Usage is kept in hourly buckets per team for the last day and daily ones for 30 days,
//! so the ConfigMap stays far below its 1 MiB limit (50 teams: about 150 KB).

use engine::core::fleet::Fleet;
use engine::decide::plan::{Action, Plan};
use engine::decide::scale_memory::{ScaleState, Start};
use engine::decide::snapshot::UsageRecord;
use engine::inventory::jobs_file::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const CONFIG_MAP: &str = "gantry-state";
pub const KEY: &str = "memory.json";
use engine::decide::usage;
#[cfg(test)]
use engine::decide::usage::DAY;
/// The most one accounting step charges, seconds.
const MAX_STEP: i64 = 300;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    /// Up to when usage is accounted.
    pub accounted_to: Option<i64>,
    pub usage: Vec<UsageRecord>,
    pub scale: ScaleState,
    pub starts: Vec<Start>,
    /// GPU nodes per pool at the last cycle, to tell which nodes arrived since.
    pub pool_nodes: BTreeMap<String, u64>,
    /// Scale-ups given more time once because their nodes were late: (pool, new ready_at).
    pub late: Vec<(String, i64)>,
    /// What the ConfigMap held under [`KEY`] when it did not parse: written back under
    /// [`UNREADABLE_KEY`] at every save, so a person can mend it and nothing is lost.
    #[serde(skip)]
    pub unreadable: Option<String>,
    /// The assignment seals' key as gantry before 2026-11-28 kept it here. It now lives in
    /// a Secret (`crate::seal_secret`); one found here is moved there and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seal_key: Option<String>,
    /// Each waiting job's booking in the last plan, passed back as its `booked` so a
    /// job placed at its booked start lands where it was booked. Kept by the running
    /// leader only: a new leader books afresh.
    #[serde(skip)]
    pub booked: Unsaved<BTreeMap<String, engine::inventory::jobs_file::PriorBooking>>,
    /// The runtimes teams' jobs had against their limits, to predict from
    /// (`crate::predictions`; learned only with `--estimates predicted`).
    #[serde(skip_serializing_if = "crate::predictions::Predictions::is_empty")]
    pub predictions: crate::predictions::Predictions,
}

/// What the memory keeps between cycles but never writes: equal whatever it holds, so a
/// change to it alone writes nothing.
#[derive(Debug, Clone, Default)]
pub struct Unsaved<T>(pub T);

impl<T> PartialEq for Unsaved<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Where a memory that did not parse is kept.
pub const UNREADABLE_KEY: &str = "memory.unreadable.json";

/// How long past the pool's `boot` a node may still arrive before its request is
/// dropped (cluster-autoscaler's default `max-node-provision-time`).
pub const PROVISION_TIMEOUT: i64 = 15 * 60;

/// The autoscaler's state after the nodes that arrived, and what to remember of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrivals {
    pub state: ScaleState,
    pub pool_nodes: BTreeMap<String, u64>,
    pub late: Vec<(String, i64)>,
}

/// Each node's pool, by node name: what [`Memory::remember`] files starts under.
pub fn node_pools(fleet: &Fleet) -> BTreeMap<String, String> {
    fleet
        .nodes
        .iter()
        .filter_map(|n| Some((n.name.clone(), n.pool.clone()?)))
        .collect()
}

/// GPU nodes per pool.
pub fn pool_counts(fleet: &Fleet) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for n in &fleet.nodes {
        if let Some(p) = &n.pool {
            *out.entry(p.clone()).or_default() += 1;
        }
    }
    out
}

impl Memory {
    /// The autoscaler's state for this cycle in a real cluster: nodes that joined a pool
    /// since the last cycle came for its oldest outstanding scale-ups, which stop booting
    /// (a node comes whenever the cloud delivers it, not at the pool's `boot`); a
    /// scale-up whose nodes are late gets [`PROVISION_TIMEOUT`] more, once.
    pub fn arrivals(&self, fleet: &Fleet, now: i64) -> Arrivals {
        let counts = pool_counts(fleet);
        let mut state = self.scale.clone();
        let mut late = self.late.clone();
        for (pool, ps) in &mut state.pools {
            if let Some(&before) = self.pool_nodes.get(pool) {
                let mut arrived = counts
                    .get(pool)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(before);
                ps.booting.sort_by_key(|b| b.ready_at);
                for b in &mut ps.booting {
                    let take = arrived.min(u64::from(b.nodes));
                    b.nodes -= u32::try_from(take).unwrap_or(0);
                    arrived -= take;
                }
                ps.booting.retain(|b| b.nodes > 0);
            }
            for b in &mut ps.booting {
                let extended = late.iter().any(|(p, at)| p == pool && *at == b.ready_at);
                if b.ready_at <= now && !extended {
                    b.ready_at += PROVISION_TIMEOUT;
                    late.push((pool.clone(), b.ready_at));
                }
            }
        }
        late.retain(|(_, at)| *at + PROVISION_TIMEOUT > now);
        // A pool with nodes asked for and none yet is remembered at 0, so its first nodes
        // count as arrivals.
        let mut pool_nodes = counts;
        for pool in state.pools.keys() {
            pool_nodes.entry(pool.clone()).or_insert(0);
        }
        Arrivals {
            state,
            pool_nodes,
            late,
        }
    }

    /// Keeps what [`Memory::arrivals`] worked out for the next cycle.
    pub fn arrived(&mut self, a: Arrivals) {
        self.pool_nodes = a.pool_nodes;
        self.late = a.late;
    }

    /// Adds what the running jobs used since the last call, in GPU-, CPU- and
    /// memory-seconds per team, then compacts old buckets (the same accounting a replay
    /// does: `engine::decide::usage`).
    pub fn account(&mut self, running: &[Job], now: i64) {
        let uses = running
            .iter()
            .filter(|j| !j.placement.is_empty())
            .filter_map(|j| {
                let team = j.team.as_deref().filter(|t| *t != crate::queue::FOREIGN)?;
                Some(usage::Use {
                    team,
                    rate: usage::rate(&j.shape.member, j.placement.len()),
                })
            });
        usage::account(
            &mut self.usage,
            &mut self.accounted_to,
            uses,
            now,
            Some(MAX_STEP),
        );
        // Starts go with the usage of their time, as in a replay.
        engine::decide::scale_memory::forget_starts(&mut self.starts, now);
    }

    /// After a cycle: the autoscaler's next state, and a start for each job placed.
    /// True when the bookings passed on moved: the next cycle may then decide otherwise
    /// with nothing else changed, so the loop decides again at once.
    pub fn remember(&mut self, plan: &Plan, pools: &BTreeMap<String, String>) -> bool {
        if let Some(s) = &plan.state {
            self.scale = s.clone();
        }
        let booked = plan.bookings_made();
        let moved = booked != self.booked.0;
        self.booked = Unsaved(booked);
        self.predictions
            .evicting(plan.preemptions.iter().map(|p| p.job.as_str()));
        // A pool that asked for its first nodes in this cycle has none yet (the counts
        // kept by `arrived` list every pool with nodes).
        for pool in self.scale.pools.keys() {
            self.pool_nodes.entry(pool.clone()).or_insert(0);
        }
        for d in plan
            .decisions
            .iter()
            .filter(|d| d.action == Action::Place && d.victims.is_empty())
        {
            let pool = d
                .placement
                .first()
                .and_then(|a| pools.get(&a.node))
                .cloned();
            let start = Start::of(d, plan.now, pool);
            engine::decide::scale_memory::remember_start(&mut self.starts, start, plan.now);
        }
        moved
    }
}

/// Reads the memory. Empty only when the ConfigMap (or its key) does not exist: any
/// other failure is an `Err`, and the caller writes nothing until a read succeeds. A
/// memory that does not parse is reported and started afresh, its text kept beside it
/// ([`Memory::unreadable`]) rather than stopping the queue for good.
pub async fn load(client: &Client, namespace: &str) -> Result<Memory, String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let found = maps.get_opt(CONFIG_MAP).await.map_err(|e| {
        format!(
            "read configmap {namespace}/{CONFIG_MAP}: {}",
            crate::bounded::brief(&e)
        )
    })?;
    let Some(text) = found.and_then(|c| c.data).and_then(|d| d.get(KEY).cloned()) else {
        return Ok(Memory::default());
    };
    serde_json::from_str(&text).or_else(|e| {
        tracing::warn!(error = %e, "configmap {namespace}/{CONFIG_MAP} does not parse; starting with empty memory, its text kept under {UNREADABLE_KEY}");
        Ok(Memory {
            unreadable: Some(text),
            ..Memory::default()
        })
    })
}

/// Writes the memory (server-side apply: creates the ConfigMap or updates its key).
pub async fn save(client: &Client, namespace: &str, memory: &Memory) -> Result<(), String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let text = serde_json::to_string(memory).map_err(|e| e.to_string())?;
    let mut data = serde_json::Map::new();
    data.insert(KEY.into(), serde_json::Value::String(text));
    if let Some(old) = &memory.unreadable {
        data.insert(
            UNREADABLE_KEY.into(),
            serde_json::Value::String(old.clone()),
        );
    }
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": namespace},
        "data": data
    });
    maps.patch(
        CONFIG_MAP,
        &PatchParams::apply(crate::controller::COMPONENT).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        format!(
            "write configmap {namespace}/{CONFIG_MAP}: {}",
            crate::bounded::brief(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::inventory::jobs_file::PlacedMember;

    fn running(team: &str, gpus: u32) -> Job {
        let mut j = Job {
            id: format!("{team}-job"),
            team: Some(team.into()),
            placement: vec![PlacedMember {
                node: "n0".into(),
                gpus: Vec::new(),
                gpu_milli: None,
                mig_starts: Vec::new(),
            }],
            ..Job::default()
        };
        j.shape.members = 1;
        j.shape.member.num_gpu = gpus;
        j.shape.member.gpu_milli = 1000;
        j
    }

    #[test]
    #[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
    fn the_last_plans_bookings_are_kept_but_never_written() {
        use engine::decide::plan::{Booked, BookedNode, Plan};
        let plan = Plan {
            policy_revision: String::new(),
            now: 100,
            decisions: Vec::new(),
            preemptions: Vec::new(),
            reservation: None,
            reservations: vec![Booked {
                job: "ml/a".into(),
                start_at: 600,
                end_at: Some(4200),
                nodes: vec![BookedNode {
                    node: "n-0".into(),
                    gpus: Some(2),
                }],
            }],
            scale: Vec::new(),
            warm: Vec::new(),
            state: None,
            next_decision_at: None,
        };
        let saved = Memory::default();
        let mut m = saved.clone();
        assert!(m.remember(&plan, &BTreeMap::new()), "a new booking moved");
        assert!(
            !m.remember(&plan, &BTreeMap::new()),
            "the same again did not"
        );
        let mut moved = plan.clone();
        moved.reservations[0].start_at = 900;
        assert!(m.remember(&moved, &BTreeMap::new()), "a later start moved");
        assert!(m.remember(&plan, &BTreeMap::new()));
        let booked = &m.booked.0["ml/a"];
        assert_eq!(
            (booked.start_at, booked.nodes.clone()),
            (600, vec!["n-0".into()])
        );
        // Bookings alone are no reason to write the ConfigMap, and are not in it.
        assert_eq!(m, saved);
        assert!(!serde_json::to_string(&m).unwrap().contains("n-0"));
    }

    #[test]
    fn usage_is_accounted_in_buckets_and_compacted() {
        let mut m = Memory::default();
        let t0 = 1_795_500_000 - 1_795_500_000 % DAY;
        m.account(&[running("a", 8)], t0);
        assert!(m.usage.is_empty(), "the first call only starts the clock");
        m.account(&[running("a", 8), running("b", 2)], t0 + 300);
        let gpu_s = |m: &Memory, t: &str| {
            m.usage
                .iter()
                .filter(|u| u.team == t)
                .map(|u| u.gpu_s)
                .sum::<f64>()
        };
        assert_eq!(gpu_s(&m, "a"), 8.0 * 300.0);
        assert_eq!(gpu_s(&m, "b"), 2.0 * 300.0);
        // Two days of hourly accounting: the first day folds into one daily bucket per
        // team, and nothing is lost.
        for step in 1..=48 * 12 {
            m.account(&[running("a", 8)], t0 + 300 + step * 300);
        }
        assert_eq!(gpu_s(&m, "a"), 8.0 * 300.0 + 8.0 * 48.0 * 3600.0);
        assert!(m.usage.len() < 30, "{} records", m.usage.len());
        // A long gap is charged a few minutes at most; past the horizon usage goes.
        m.account(&[running("b", 1)], t0 + 33 * DAY);
        assert_eq!(gpu_s(&m, "b"), 300.0, "only the new bucket of b is left");
        assert_eq!(gpu_s(&m, "a"), 0.0);
    }
}
