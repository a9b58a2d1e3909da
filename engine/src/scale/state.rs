//! What the autoscaler remembers between cycles, as an explicit input and output of the
//! pure decision (so a replay is deterministic), and the start history warm pools read.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Autoscaler memory across cycles. Empty at first; each cycle returns the next one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScaleState {
    pub pools: BTreeMap<String, PoolState>,
    /// When each node became idle (no job on it), seconds since the epoch.
    pub idle_since: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolState {
    /// Nodes asked for and not yet in the fleet.
    pub booting: Vec<Booting>,
    /// Since when each trigger's condition has held (`up/0`, `down/0`, ...).
    pub trigger_since: BTreeMap<String, i64>,
    pub last_up_at: Option<i64>,
    pub last_down_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Booting {
    pub nodes: u32,
    /// When they are expected up (request time + the pool's `boot`).
    pub ready_at: i64,
    /// Asked for to reach a warm pool's target, not for waiting work (the cluster keeps
    /// warm capacity with placeholders of its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
}

/// One job start, for `concurrent_starts` and `gpu_demand` histories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    pub at: i64,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub team: Option<String>,
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default = "one")]
    pub gpus: f64,
}

fn one() -> f64 {
    1.0
}
