//! Comparing two replays of one trace: the metrics that moved (overall, per tier, team
//! and pool), the jobs whose decisions differ, and `--fail-if` thresholds for CI gates.

use super::metrics::{JobOutcome, Metrics, Waits};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub rows: Vec<Row>,
    /// Jobs whose outcome differs, largest change in time-to-first-GPU first.
    pub jobs: Vec<JobChange>,
}

/// One metric in one scope under both policies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub metric: &'static str,
    /// `""` for the whole run, else `tier=…`, `team=…` or `pool=…`.
    pub scope: String,
    pub old: f64,
    pub new: f64,
}

impl Row {
    /// new − old, in the metric's unit (percentage points for utilization).
    pub fn change(&self) -> f64 {
        (self.new - self.old)
            * if self.metric == "utilization" {
                100.0
            } else {
                1.0
            }
    }

    /// The relative change in percent; infinite when the old value is 0 and the new is not.
    pub fn relative(&self) -> f64 {
        if self.old == 0.0 {
            if self.new == 0.0 {
                0.0
            } else {
                f64::INFINITY.copysign(self.new)
            }
        } else {
            (self.new - self.old) / self.old.abs() * 100.0
        }
    }

    pub fn name(&self) -> String {
        if self.scope.is_empty() {
            self.metric.to_string()
        } else {
            format!("{}({})", self.metric, self.scope)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobChange {
    pub job: String,
    pub team: Option<String>,
    pub tier: Option<String>,
    pub old: String,
    pub new: String,
    /// new − old time-to-first-GPU in seconds, when the job started under both.
    pub ttfg_change_s: Option<i64>,
}

/// Metric names `--fail-if` accepts, with the scopes each has.
pub const METRICS: &[(&str, &str)] = &[
    ("ttfg_p50", "tier, team"),
    ("ttfg_p95", "tier, team"),
    ("ttfg_p99", "tier, team"),
    ("wait_p50", "tier, team"),
    ("wait_p95", "tier, team"),
    ("wait_p99", "tier, team"),
    ("utilization", "pool"),
    ("gpu_hours", "pool, team"),
    ("cost", "pool, team"),
    ("preemptions", "team"),
    ("lost_gpu_hours", ""),
    ("completed", ""),
    ("denied", ""),
    ("waiting", ""),
    ("mean_target_nodes", "warm"),
    ("mean_idle_nodes", "warm"),
    ("warm_starts", "warm"),
    ("warm_ttfg_p50", "warm"),
];

fn wait_rows(rows: &mut Vec<Row>, scope: &str, old: &Waits, new: &Waits) {
    let (o, n) = (&old.time_to_first_gpu_s, &new.time_to_first_gpu_s);
    let (oq, nq) = (&old.queue_wait_s, &new.queue_wait_s);
    for (metric, a, b) in [
        ("ttfg_p50", o.p50, n.p50),
        ("ttfg_p95", o.p95, n.p95),
        ("ttfg_p99", o.p99, n.p99),
        ("wait_p50", oq.p50, nq.p50),
        ("wait_p95", oq.p95, nq.p95),
        ("wait_p99", oq.p99, nq.p99),
    ] {
        rows.push(Row {
            metric,
            scope: scope.to_string(),
            old: a,
            new: b,
        });
    }
}

fn union<'a, V>(a: &'a BTreeMap<String, V>, b: &'a BTreeMap<String, V>) -> Vec<&'a String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys
}

pub fn compare(old: &Metrics, new: &Metrics) -> Comparison {
    let mut rows = Vec::new();
    let row = |metric, scope: &str, old: f64, new: f64| Row {
        metric,
        scope: scope.to_string(),
        old,
        new,
    };
    rows.push(row("utilization", "", old.utilization, new.utilization));
    rows.push(row("gpu_hours", "", old.gpu_hours, new.gpu_hours));
    rows.push(row("cost", "", old.cost, new.cost));
    wait_rows(&mut rows, "", &old.all, &new.all);
    rows.push(row(
        "preemptions",
        "",
        old.preemptions.count as f64,
        new.preemptions.count as f64,
    ));
    rows.push(row(
        "lost_gpu_hours",
        "",
        old.preemptions.lost_gpu_hours,
        new.preemptions.lost_gpu_hours,
    ));
    rows.push(row(
        "completed",
        "",
        old.jobs.completed as f64,
        new.jobs.completed as f64,
    ));
    rows.push(row(
        "denied",
        "",
        old.jobs.denied as f64,
        new.jobs.denied as f64,
    ));
    rows.push(row(
        "waiting",
        "",
        old.jobs.waiting_at_end as f64,
        new.jobs.waiting_at_end as f64,
    ));
    let empty = Waits::default();
    for tier in union(&old.tiers, &new.tiers) {
        let (a, b) = (old.tiers.get(tier), new.tiers.get(tier));
        if a.is_none_or(|w| w.submitted == 0) && b.is_none_or(|w| w.submitted == 0) {
            continue;
        }
        wait_rows(
            &mut rows,
            &format!("tier={tier}"),
            a.unwrap_or(&empty),
            b.unwrap_or(&empty),
        );
    }
    for team in union(&old.teams, &new.teams) {
        let (a, b) = (old.teams.get(team), new.teams.get(team));
        let scope = format!("team={team}");
        wait_rows(
            &mut rows,
            &scope,
            a.map_or(&empty, |t| &t.waits),
            b.map_or(&empty, |t| &t.waits),
        );
        let pick =
            |f: &dyn Fn(&super::metrics::TeamMetrics) -> f64| (a.map_or(0.0, f), b.map_or(0.0, f));
        for (metric, (x, y)) in [
            ("gpu_hours", pick(&|t| t.gpu_hours)),
            ("cost", pick(&|t| t.cost)),
            ("preemptions", pick(&|t| t.preempted as f64)),
        ] {
            rows.push(row(metric, &scope, x, y));
        }
    }
    for pool in union(&old.warm, &new.warm) {
        let (a, b) = (old.warm.get(pool), new.warm.get(pool));
        let scope = format!("warm={pool}");
        let pick =
            |f: &dyn Fn(&super::metrics::WarmMetrics) -> f64| (a.map_or(0.0, f), b.map_or(0.0, f));
        for (metric, (x, y)) in [
            ("mean_target_nodes", pick(&|w| w.mean_target_nodes)),
            ("mean_idle_nodes", pick(&|w| w.mean_idle_nodes)),
            ("warm_starts", pick(&|w| w.warm_starts as f64)),
            ("warm_ttfg_p50", pick(&|w| w.warm_time_to_first_gpu_s.p50)),
        ] {
            rows.push(row(metric, &scope, x, y));
        }
    }
    for pool in union(&old.pools, &new.pools) {
        let (a, b) = (old.pools.get(pool), new.pools.get(pool));
        let scope = format!("pool={pool}");
        for (metric, x, y) in [
            (
                "utilization",
                a.map_or(0.0, |p| p.utilization),
                b.map_or(0.0, |p| p.utilization),
            ),
            (
                "gpu_hours",
                a.map_or(0.0, |p| p.gpu_hours),
                b.map_or(0.0, |p| p.gpu_hours),
            ),
            ("cost", a.map_or(0.0, |p| p.cost), b.map_or(0.0, |p| p.cost)),
        ] {
            rows.push(row(metric, &scope, x, y));
        }
    }
    Comparison {
        rows,
        jobs: job_changes(&old.job_outcomes, &new.job_outcomes),
    }
}

/// How a job fared, in words: status, start delay and pools, preemptions, rule.
pub fn describe(o: &JobOutcome) -> String {
    let mut parts = Vec::new();
    match (o.status, o.time_to_first_gpu()) {
        ("denied", _) => parts.push(format!(
            "denied by {}",
            o.rule.as_deref().unwrap_or("a rule")
        )),
        (status, Some(t)) => parts.push(format!(
            "{status}, started after {} on {}",
            short_duration(t),
            o.pools.join("+")
        )),
        (status, None) => parts.push(match &o.reason {
            Some(r) => format!("{status} ({})", r.split(':').next().unwrap_or(r)),
            None => status.to_string(),
        }),
    }
    if o.preemptions > 0 {
        parts.push(format!("preempted {}×", o.preemptions));
    }
    if let Some(pool) = &o.routed_to {
        parts.push(format!("routed to {pool}"));
    }
    parts.join(", ")
}

pub fn short_duration(s: i64) -> String {
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn job_changes(old: &[JobOutcome], new: &[JobOutcome]) -> Vec<JobChange> {
    let new_by_id: BTreeMap<&str, &JobOutcome> = new.iter().map(|o| (o.id.as_str(), o)).collect();
    let mut changes: Vec<JobChange> = old
        .iter()
        .filter_map(|a| {
            let b = new_by_id.get(a.id.as_str())?;
            let same = a.status == b.status
                && a.first_start == b.first_start
                && a.pools == b.pools
                && a.preemptions == b.preemptions
                && a.rule == b.rule
                && a.routed_to == b.routed_to;
            if same {
                return None;
            }
            Some(JobChange {
                job: a.id.clone(),
                team: a.team.clone(),
                tier: a.tier.clone(),
                old: describe(a),
                new: describe(b),
                ttfg_change_s: a
                    .time_to_first_gpu()
                    .zip(b.time_to_first_gpu())
                    .map(|(x, y)| y - x),
            })
        })
        .collect();
    changes.sort_by(|a, b| {
        let size = |c: &JobChange| c.ttfg_change_s.map_or(i64::MAX, i64::abs);
        size(b).cmp(&size(a)).then_with(|| a.job.cmp(&b.job))
    });
    changes
}

/// A `--fail-if` threshold: `METRIC[(SCOPE)] > N[%]` or `< N[%]`, on new − old.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub text: String,
    pub metric: String,
    pub scope: String,
    pub above: bool,
    pub limit: f64,
    pub relative: bool,
}

impl Threshold {
    pub fn parse(text: &str) -> Result<Threshold, String> {
        let usage = || {
            format!(
                "`--fail-if {text}`: expected METRIC[(SCOPE)] > CHANGE or < CHANGE, e.g. `ttfg_p95(tier=critical) > 10%` or `cost > 500`; metrics: {}",
                METRICS.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
            )
        };
        let (left, above, right) = if let Some((l, r)) = text.split_once('>') {
            (l, true, r)
        } else if let Some((l, r)) = text.split_once('<') {
            (l, false, r)
        } else {
            return Err(usage());
        };
        let left = left.trim();
        let (metric, scope) = match left.split_once('(') {
            Some((m, rest)) => {
                let scope = rest.strip_suffix(')').ok_or_else(usage)?;
                (m.trim(), scope.trim())
            }
            None => (left, ""),
        };
        let Some((_, scopes)) = METRICS.iter().find(|(m, _)| *m == metric) else {
            let hint = lang::suggest::closest(metric, METRICS.iter().map(|(m, _)| *m))
                .map(|s| format!("did you mean `{s}`? "))
                .unwrap_or_default();
            return Err(format!(
                "`--fail-if {text}`: unknown metric `{metric}`; {hint}{}",
                usage()
            ));
        };
        if !scope.is_empty() {
            let kind = scope.split_once('=').map(|(k, _)| k.trim()).unwrap_or("");
            if kind.is_empty() || !scopes.split(", ").any(|s| s == kind) {
                return Err(format!(
                    "`--fail-if {text}`: `{metric}` takes {}",
                    if scopes.is_empty() {
                        "no scope".to_string()
                    } else {
                        format!(
                            "a scope of {scopes} (e.g. `{metric}({}=NAME)`)",
                            scopes.split(", ").next().unwrap_or("")
                        )
                    }
                ));
            }
        }
        let right = right.trim();
        let (number, relative) = match right.strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (right, false),
        };
        let limit: f64 = number
            .trim_start_matches('+')
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(usage)?;
        Ok(Threshold {
            text: text.to_string(),
            metric: metric.to_string(),
            scope: scope.replace(' ', ""),
            above,
            limit,
            relative,
        })
    }

    /// The row this threshold reads and whether it is crossed; `None` when the scope
    /// names a tier, team or pool neither run has.
    pub fn check<'c>(&self, c: &'c Comparison) -> Option<(&'c Row, bool)> {
        let row = c
            .rows
            .iter()
            .find(|r| r.metric == self.metric && r.scope == self.scope)?;
        let value = if self.relative {
            row.relative()
        } else {
            row.change()
        };
        let crossed = if self.above {
            value > self.limit
        } else {
            value < self.limit
        };
        Some((row, crossed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_reject_clearly() {
        let t = Threshold::parse("ttfg_p95(tier=critical) > 10%").ok();
        assert_eq!(
            t.map(|t| (t.metric, t.scope, t.above, t.limit, t.relative)),
            Some(("ttfg_p95".into(), "tier=critical".into(), true, 10.0, true))
        );
        let t = Threshold::parse("utilization < -2").ok();
        assert_eq!(
            t.map(|t| (t.above, t.limit, t.relative)),
            Some((false, -2.0, false))
        );
        let e = Threshold::parse("ttfg_p59 > 1").err().unwrap_or_default();
        assert!(e.contains("did you mean `ttfg_p50`"), "{e}");
        let e = Threshold::parse("cost(tier=x) > 1")
            .err()
            .unwrap_or_default();
        assert!(e.contains("takes a scope of pool, team"), "{e}");
        assert!(Threshold::parse("cost = 1").is_err());
        assert!(Threshold::parse("cost > lots").is_err());
    }

    #[test]
    fn relative_and_absolute_changes() {
        let row = Row {
            metric: "ttfg_p95",
            scope: String::new(),
            old: 100.0,
            new: 135.0,
        };
        assert_eq!(row.change(), 35.0);
        assert_eq!(row.relative(), 35.0);
        let zero = Row {
            old: 0.0,
            ..row.clone()
        };
        assert!(zero.relative().is_infinite());
        let util = Row {
            metric: "utilization",
            scope: String::new(),
            old: 0.5,
            new: 0.45,
        };
        assert!((util.change() + 5.0).abs() < 1e-9);
    }
}
