//! What the autoscaler remembers between cycles (`scale` reads and writes it), carried by
//! the snapshot and returned in the plan as an explicit input and output of the pure
//! decision (so a replay is deterministic), and the start history warm pools read.

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

/// Starts the history keeps at most: the newest, once it has `STARTS_SLACK` (an eighth) more (a
/// ConfigMap holds the controller's; trimming in batches keeps a long replay linear).
pub const MAX_STARTS: usize = 20_000;
const STARTS_SLACK: usize = MAX_STARTS / 8;
/// How far past the usage horizon the oldest start may be before the history is swept.
const EXPIRY_SLACK_S: i64 = 3600;

impl Start {
    /// The start of the job `d` places, at `at` (when its work begins), on `pool`.
    pub fn of(d: &super::plan::Decision, at: i64, pool: Option<String>) -> Start {
        Start {
            at,
            pool,
            team: d.team.clone(),
            tier: d.tier.clone(),
            gpus: d.gpus,
        }
    }
}

/// Adds `start` to the history warm pools size themselves by and forgets what
/// [`forget_starts`] does: the queue controller's memory and the replay keep it through
/// these two, so a replay's warm pools read what the controller's would.
pub fn remember_start(starts: &mut Vec<Start>, start: Start, now: i64) {
    starts.push(start);
    forget_starts(starts, now);
}

/// Forgets starts past the usage horizon (they go with the usage of their time) once the
/// oldest is an hour past it, and the oldest beyond [`MAX_STARTS`] once there are
/// `STARTS_SLACK` more.
pub fn forget_starts(starts: &mut Vec<Start>, now: i64) {
    use crate::decide::usage::HORIZON;
    if starts
        .first()
        .is_some_and(|s| now - s.at > HORIZON + EXPIRY_SLACK_S)
    {
        starts.retain(|s| now - s.at <= HORIZON);
    }
    if starts.len() > MAX_STARTS + STARTS_SLACK {
        let over = starts.len() - MAX_STARTS;
        starts.drain(..over);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::usage::HORIZON;

    fn start(at: i64) -> Start {
        Start {
            at,
            pool: None,
            team: None,
            tier: None,
            gpus: 1.0,
        }
    }

    #[test]
    fn the_start_history_is_bounded_by_count_and_age() {
        let mut starts = Vec::new();
        for i in 0..(MAX_STARTS + STARTS_SLACK) as i64 {
            remember_start(&mut starts, start(i), i);
        }
        assert_eq!(starts.len(), MAX_STARTS + STARTS_SLACK);
        remember_start(&mut starts, start(1_000_000), 1_000_000);
        assert_eq!(
            starts.len(),
            MAX_STARTS,
            "the oldest beyond the cap go at once"
        );
        assert_eq!(starts.last().map(|s| s.at), Some(1_000_000));
        // Past the horizon (and its hour of slack) the old ones go with their usage.
        let oldest = starts.first().map_or(0, |s| s.at);
        forget_starts(&mut starts, oldest + HORIZON + EXPIRY_SLACK_S);
        assert_eq!(
            starts.len(),
            MAX_STARTS,
            "within the slack nothing is swept"
        );
        forget_starts(&mut starts, 1_000_000 + HORIZON);
        assert_eq!(starts.iter().map(|s| s.at).collect::<Vec<_>>(), [1_000_000]);
    }
}
