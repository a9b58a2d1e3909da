//! What a replay measured, in the shape `gantry simulate --json` writes: utilization,
//! waits per tier and team, preemptions, cost, scale events, a timeline and every job's
//! outcome. Maps are ordered and nothing depends on the wall clock, so identical inputs
//! give byte-identical JSON.

use super::predict::Estimates;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub policy_revision: String,
    /// First and last simulated instants, seconds since the epoch.
    pub start: i64,
    pub end: i64,
    /// Decision cycles run (one per instant with something to decide).
    pub cycles: u64,
    pub jobs: JobCounts,
    /// Allocated GPU-hours / available GPU-hours over the whole fleet, 0..1.
    pub utilization: f64,
    pub gpu_hours: f64,
    pub gpu_hours_available: f64,
    /// Node cost over the run, all pools, in dollars.
    pub cost: f64,
    /// Pools by name; nodes without a pool are under `-`.
    pub pools: BTreeMap<String, PoolMetrics>,
    /// Per pool a warm pool keeps nodes in: its target against its idle nodes, and the
    /// jobs that started on an idle node (the timeline has `warm.target.<pool>` and
    /// `warm.idle.<pool>`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub warm: BTreeMap<String, WarmMetrics>,
    /// All jobs, then per tier and per team; jobs without one are under `-`.
    pub all: Waits,
    pub tiers: BTreeMap<String, Waits>,
    pub teams: BTreeMap<String, TeamMetrics>,
    pub preemptions: Preemptions,
    pub denied_by_rule: BTreeMap<String, u64>,
    /// Jobs still waiting at the end, by the last reason code they were given.
    pub waiting_by_reason: BTreeMap<String, u64>,
    pub scale_events: Vec<ScaleEvent>,
    pub timeline: Timeline,
    pub job_outcomes: Vec<JobOutcome>,
    /// What decisions planned runtimes with (shown only where not the given limits).
    #[serde(skip_serializing_if = "Estimates::is_limits")]
    pub estimates: Estimates,
    /// How far each started job's first ETA was from its start: which promises to trust.
    pub first_eta_error: EtaErrors,
    /// Trace events that could not apply (a node that was gone by then, ...).
    pub notes: Vec<String>,
}

/// Over the started jobs that were given an ETA while they waited: how far the first one
/// was from the job's first start (start − ETA, so late is positive).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EtaErrors {
    pub jobs: u64,
    /// Started at their first ETA, to the second.
    pub exact: u64,
    /// Started before it (a running job ended before its estimate).
    pub early: u64,
    /// Started after it (the promise broke).
    pub late: u64,
    /// The absolute difference, seconds.
    pub abs_error_s: Percentiles,
}

impl EtaErrors {
    pub fn of<'o>(outcomes: impl Iterator<Item = &'o JobOutcome>) -> EtaErrors {
        let mut e = EtaErrors::default();
        let mut abs = Vec::new();
        for o in outcomes {
            let (Some(eta), Some(start)) = (o.first_eta, o.first_start) else {
                continue;
            };
            e.jobs += 1;
            match (start - eta).signum() {
                0 => e.exact += 1,
                -1 => e.early += 1,
                _ => e.late += 1,
            }
            abs.push((start - eta).abs() as f64);
        }
        e.abs_error_s = Percentiles::of(&abs);
        e
    }
}

/// A warm pool over a replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WarmMetrics {
    /// The plans' target, nodes, averaged over the replay.
    pub mean_target_nodes: f64,
    /// Nodes of the pool up and holding nothing, averaged over the replay.
    pub mean_idle_nodes: f64,
    /// What standing idle cost, in node-hours.
    pub idle_node_hours: f64,
    /// Jobs whose first run started on an idle node of the pool, and their time from
    /// submission to first GPU.
    pub warm_starts: u64,
    pub warm_time_to_first_gpu_s: Percentiles,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobCounts {
    pub submitted: u64,
    pub completed: u64,
    pub running_at_end: u64,
    pub waiting_at_end: u64,
    pub denied: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolMetrics {
    pub gpu_hours: f64,
    pub gpu_hours_available: f64,
    pub utilization: f64,
    /// Node-hours paid for, booting included.
    pub node_hours: f64,
    pub cost: f64,
    pub nodes_added: u64,
    pub nodes_removed: u64,
}

/// Time-to-first-GPU (submit → first start) and queue wait (all time spent queued,
/// requeues after preemption included) over the jobs that started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Waits {
    pub submitted: u64,
    pub started: u64,
    pub time_to_first_gpu_s: Percentiles,
    pub queue_wait_s: Percentiles,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles; all zero for no values.
    pub fn of(values: &[f64]) -> Percentiles {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let k = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v.get(k.saturating_sub(1).min(v.len() - 1))
                .copied()
                .unwrap_or(0.0)
        };
        Percentiles {
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TeamMetrics {
    #[serde(flatten)]
    pub waits: Waits,
    pub gpu_hours: f64,
    pub mean_gpus: f64,
    pub peak_gpus: f64,
    /// The policy's guarantee and burst limit, in GPUs (0 and `null` for no quota).
    pub guaranteed_gpus: f64,
    pub burst_gpus: Option<f64>,
    /// Mean GPUs held / guaranteed GPUs, 0..; `null` without a guarantee.
    pub mean_of_guarantee: Option<f64>,
    /// GPU-hours × each pool's price per GPU-hour.
    pub cost: f64,
    pub preempted: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Preemptions {
    pub count: u64,
    /// `priority`, `reclaim`, `spot_interrupt`.
    pub by_cause: BTreeMap<String, u64>,
    /// GPU-hours of work since the victims' last checkpoints, lost.
    pub lost_gpu_hours: f64,
    /// Jobs stopped by `node_down` events (their lost work is counted above).
    pub node_failures: u64,
    /// Runs stopped as the trace recorded (`interrupted_after_s`: a node failure, a
    /// preemption or a requeue in the source system), their lost work counted above.
    #[serde(skip_serializing_if = "is_zero")]
    pub interrupted_runs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleEvent {
    pub at: i64,
    pub pool: String,
    pub delta_nodes: i64,
    pub reason: String,
}

/// Time-weighted means per bucket. Series: `alloc.tier.T`, `alloc.team.T`,
/// `alloc.pool.P` (GPUs allocated), `avail.pool.P` (GPUs up), `nodes.pool.P` (nodes paid
/// for), `spend.pool.P` ($/h), `queue` (jobs waiting), `running` (jobs running).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    pub start: i64,
    pub bucket_s: i64,
    pub series: BTreeMap<String, Vec<f64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobOutcome {
    pub id: String,
    pub team: Option<String>,
    pub tier: Option<String>,
    /// `completed`, `running`, `waiting` or `denied`.
    pub status: &'static str,
    pub submitted_at: i64,
    pub first_start: Option<i64>,
    pub queue_wait_s: i64,
    pub pools: Vec<String>,
    pub preemptions: u32,
    pub lost_gpu_s: f64,
    /// The denying rule, or the route that moved the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routed_to: Option<String>,
    /// For a job still waiting: its last reason code and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reason code it waited under longest, with how long of its whole wait, also
    /// for jobs that later ran (`no_capacity (2h10m of 2h30m waited)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub main_wait: Option<String>,
    /// The first ETA it was given while it waited, seconds since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_eta: Option<i64>,
    /// It ran until its limit (`runtime_s`) and was stopped there, its actual runtime
    /// being longer.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// The runtime its decisions planned with where a prediction from history replaced
    /// its limit (`simulate --estimates predicted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_runtime_s: Option<u64>,
    /// The warm pool whose idle, ready node its first run started on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_warm: Option<String>,
}

impl JobOutcome {
    pub fn time_to_first_gpu(&self) -> Option<i64> {
        self.first_start.map(|s| s - self.submitted_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&v);
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(p.mean, 50.5);
        let one = Percentiles::of(&[7.0]);
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
    }
}
