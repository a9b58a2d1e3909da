//! Turning a finished replay into its metrics.

use super::Sim;
use crate::core::fleet::MILLI;
use crate::sim::metrics::{
    EtaErrors, JobCounts, JobOutcome, Metrics, Percentiles, PoolMetrics, TeamMetrics, Waits,
    WarmMetrics,
};
use std::collections::{BTreeMap, BTreeSet};

impl Sim<'_> {
    pub(super) fn into_metrics(mut self) -> Metrics {
        let end = self.now;
        let span = (end - self.start).max(1) as f64;
        // Each job's slot is given up for its outcome as it goes.
        let (outcomes, submitted_flags): (Vec<JobOutcome>, Vec<bool>) =
            std::mem::take(&mut self.jobs)
                .into_inner()
                .into_iter()
                .map(|j| j.outcome(end))
                .unzip();
        let mut counts = JobCounts {
            submitted: submitted_flags.iter().filter(|s| **s).count() as u64,
            ..JobCounts::default()
        };
        let mut waiting_by_reason: BTreeMap<String, u64> = BTreeMap::new();
        let mut denied_by_rule: BTreeMap<String, u64> = BTreeMap::new();
        for (submitted, outcome) in submitted_flags.iter().zip(&outcomes) {
            match (outcome.status, submitted) {
                ("completed", _) => counts.completed += 1,
                ("running", _) => counts.running_at_end += 1,
                ("denied", _) => {
                    counts.denied += 1;
                    let rule = outcome.rule.clone().unwrap_or_else(|| "-".to_string());
                    *denied_by_rule.entry(rule).or_insert(0) += 1;
                }
                (_, true) => {
                    counts.waiting_at_end += 1;
                    let code = outcome
                        .reason
                        .as_deref()
                        .and_then(|r| r.split(':').next())
                        .unwrap_or("not_decided")
                        .to_string();
                    *waiting_by_reason.entry(code).or_insert(0) += 1;
                }
                // Not submitted by the end.
                (_, false) => {}
            }
        }
        let submitted: Vec<&JobOutcome> = submitted_flags
            .iter()
            .zip(&outcomes)
            .filter(|(s, _)| **s)
            .map(|(_, o)| o)
            .collect();
        let waits_of = |pick: &dyn Fn(&JobOutcome) -> bool| {
            waits(submitted.iter().copied().filter(|o| pick(o)))
        };
        let key = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
        let tier_names: BTreeSet<String> = self
            .program
            .tiers
            .iter()
            .map(|t| t.name.clone())
            .chain(submitted.iter().map(|o| key(&o.tier)))
            .collect();
        let tiers = tier_names
            .into_iter()
            .map(|t| {
                let w = waits_of(&|o| key(&o.tier) == t);
                (t, w)
            })
            .collect();
        let team_names: BTreeSet<String> = self
            .program
            .teams
            .iter()
            .map(|t| t.name.clone())
            .chain(submitted.iter().map(|o| key(&o.team)))
            .collect();
        let teams = team_names
            .into_iter()
            .map(|name| {
                let policy = self.program.teams.iter().find(|t| t.name == name);
                let guaranteed = policy.map_or(0.0, |t| {
                    t.guaranteed.effective_total_milli() as f64 / f64::from(MILLI)
                });
                let gpu_s = self.rec.integral(&format!("alloc.team.{name}"));
                let metrics = TeamMetrics {
                    waits: waits_of(&|o| key(&o.team) == name),
                    gpu_hours: gpu_s / 3600.0,
                    mean_gpus: gpu_s / span,
                    peak_gpus: self.rec.peak(&format!("alloc.team.{name}")),
                    guaranteed_gpus: guaranteed,
                    burst_gpus: policy.and_then(|t| {
                        t.burst
                            .as_ref()
                            .map(|b| b.effective_total_milli() as f64 / f64::from(MILLI))
                    }),
                    mean_of_guarantee: (guaranteed > 0.0).then(|| gpu_s / span / guaranteed),
                    cost: self.rec.integral(&format!("cost.team.{name}")) / 3600.0,
                    preempted: submitted
                        .iter()
                        .filter(|o| key(&o.team) == name)
                        .map(|o| u64::from(o.preemptions))
                        .sum(),
                };
                (name, metrics)
            })
            .collect();
        let pool_names: BTreeSet<String> = ["alloc.pool.", "avail.pool.", "nodes.pool."]
            .iter()
            .flat_map(|p| self.rec.keys(p))
            .collect();
        let pools: BTreeMap<String, PoolMetrics> = pool_names
            .into_iter()
            .map(|p| {
                let used = self.rec.integral(&format!("alloc.pool.{p}"));
                let avail = self.rec.integral(&format!("avail.pool.{p}"));
                let m = PoolMetrics {
                    gpu_hours: used / 3600.0,
                    gpu_hours_available: avail / 3600.0,
                    utilization: if avail > 0.0 { used / avail } else { 0.0 },
                    node_hours: self.rec.integral(&format!("nodes.pool.{p}")) / 3600.0,
                    cost: self.rec.integral(&format!("spend.pool.{p}")) / 3600.0,
                    nodes_added: self.added.get(&p).copied().unwrap_or(0),
                    nodes_removed: self.removed.get(&p).copied().unwrap_or(0),
                };
                (p, m)
            })
            .collect();
        let warm: BTreeMap<String, WarmMetrics> = self
            .program
            .warm
            .iter()
            .map(|w| w.pool.clone())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .map(|pool| {
                let ttfg: Vec<f64> = submitted
                    .iter()
                    .filter(|o| o.started_warm.as_deref() == Some(pool.as_str()))
                    .filter_map(|o| o.time_to_first_gpu())
                    .map(|t| t as f64)
                    .collect();
                let idle = self.rec.integral(&format!("warm.idle.{pool}"));
                let m = WarmMetrics {
                    mean_target_nodes: self.rec.integral(&format!("warm.target.{pool}")) / span,
                    mean_idle_nodes: idle / span,
                    idle_node_hours: idle / 3600.0,
                    warm_starts: ttfg.len() as u64,
                    warm_time_to_first_gpu_s: Percentiles::of(&ttfg),
                };
                (pool, m)
            })
            .collect();
        let gpu_hours: f64 = pools.values().map(|p| p.gpu_hours).sum();
        let available: f64 = pools.values().map(|p| p.gpu_hours_available).sum();
        Metrics {
            policy_revision: self.config.policy_revision.clone(),
            start: self.start,
            end,
            cycles: self.cycles,
            jobs: counts,
            utilization: if available > 0.0 {
                gpu_hours / available
            } else {
                0.0
            },
            gpu_hours,
            gpu_hours_available: available,
            cost: pools.values().map(|p| p.cost).sum(),
            pools,
            warm,
            all: waits(submitted.iter().copied()),
            tiers,
            teams,
            preemptions: self.preemptions,
            denied_by_rule,
            waiting_by_reason,
            scale_events: self.scale_events,
            timeline: self.rec.timeline(end),
            estimates: self.config.estimates,
            first_eta_error: EtaErrors::of(submitted.iter().copied()),
            job_outcomes: outcomes,
            notes: self.notes,
        }
    }
}

fn waits<'a>(jobs: impl Iterator<Item = &'a JobOutcome>) -> Waits {
    let (mut submitted, mut ttfg, mut wait) = (0u64, Vec::new(), Vec::new());
    for o in jobs {
        submitted += 1;
        if let Some(t) = o.time_to_first_gpu() {
            ttfg.push(t as f64);
            wait.push(o.queue_wait_s as f64);
        }
    }
    Waits {
        submitted,
        started: ttfg.len() as u64,
        time_to_first_gpu_s: Percentiles::of(&ttfg),
        queue_wait_s: Percentiles::of(&wait),
    }
}
