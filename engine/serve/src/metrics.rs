//! Prometheus metrics in the text exposition format: request counts and latency
//! histograms per endpoint, decisions by action and reason, policy reloads, inventory reads
//! and certificate reloads by result, the active revision
//! as an info metric, and GPUs by model and health.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Latency histogram bounds in seconds.
const BUCKETS: [f64; 12] = [
    0.000_25, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    decisions: BTreeMap<(String, String), u64>,
    reloads: BTreeMap<&'static str, u64>,
    inventory_reads: BTreeMap<&'static str, u64>,
    tls_reloads: BTreeMap<&'static str, u64>,
    /// (team, tier, cause) → evictions.
    preemptions: BTreeMap<(String, String, String), u64>,
    /// (team, tier) → GPU-seconds of work lost to preemption.
    lost: BTreeMap<(String, String), f64>,
    /// (team, tier) → waits of jobs placed, seconds.
    waits: BTreeMap<(String, String), WaitHistogram>,
    /// Action → API writes refused.
    enactment_errors: BTreeMap<String, u64>,
    /// (verb, resource) → API writes made, as the cluster client counts them.
    api_writes: BTreeMap<(String, String), u64>,
    /// The pools as the last queue cycle saw them.
    pools: Vec<PoolGauge>,
}

/// One pool's capacity and cost, for the dashboards.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolGauge {
    pub pool: String,
    /// `reserved`, `on_demand` or `spot`.
    pub capacity: String,
    pub nodes: u64,
    pub gpus: u64,
    /// Nodes × the policy's cost per node-hour.
    pub spend_per_hour: f64,
    /// Placeholder pods waiting for a node (scale-ups asked of the cluster's autoscaler).
    pub placeholders_pending: u64,
    /// Placeholder pods holding a node (warm capacity).
    pub placeholders_bound: u64,
}

/// Wait-time bounds in seconds: a minute to a week.
const WAIT_BUCKETS: [f64; 10] = [
    60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 43_200.0, 86_400.0, 604_800.0,
];

#[derive(Debug, Default)]
struct WaitHistogram {
    counts: [u64; WAIT_BUCKETS.len()],
    count: u64,
    sum: f64,
}

fn outcome(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "failed"
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut guard = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    pub fn request(&self, endpoint: &str, status: u16, seconds: f64) {
        self.with(|m| {
            *m.requests
                .entry((endpoint.to_string(), status))
                .or_insert(0) += 1;
            let h = m.latency.entry(endpoint.to_string()).or_default();
            h.count += 1;
            h.sum += seconds;
            for (slot, bound) in h.counts.iter_mut().zip(BUCKETS) {
                if seconds <= bound {
                    *slot += 1;
                }
            }
        });
    }

    pub fn decision(&self, action: &str, reason: &str) {
        self.with(|m| {
            *m.decisions
                .entry((action.to_string(), reason.to_string()))
                .or_insert(0) += 1;
        });
    }

    pub fn reload(&self, ok: bool) {
        self.with(|m| *m.reloads.entry(outcome(ok)).or_insert(0) += 1);
    }

    pub fn inventory_read(&self, ok: bool) {
        self.with(|m| *m.inventory_reads.entry(outcome(ok)).or_insert(0) += 1);
    }

    pub fn tls_reload(&self, ok: bool) {
        self.with(|m| *m.tls_reloads.entry(outcome(ok)).or_insert(0) += 1);
    }

    /// A job of `team` and `tier` evicted for another (`cause`: priority or reclaim).
    pub fn preempted(&self, team: &str, tier: &str, cause: &str, lost_gpu_s: f64) {
        self.with(|m| {
            *m.preemptions
                .entry((team.into(), tier.into(), cause.into()))
                .or_insert(0) += 1;
            *m.lost.entry((team.into(), tier.into())).or_insert(0.0) += lost_gpu_s;
        });
    }

    /// A job placed after waiting `seconds`.
    pub fn waited(&self, team: &str, tier: &str, seconds: f64) {
        self.with(|m| {
            let h = m.waits.entry((team.into(), tier.into())).or_default();
            h.count += 1;
            h.sum += seconds;
            for (slot, bound) in h.counts.iter_mut().zip(WAIT_BUCKETS) {
                if seconds <= bound {
                    *slot += 1;
                }
            }
        });
    }

    /// An API write of the queue refused (`action`: assign, release, evict, ...).
    pub fn enactment_error(&self, action: &str) {
        self.with(|m| *m.enactment_errors.entry(action.into()).or_insert(0) += 1);
    }

    /// Every API write this process made so far, by (verb, resource).
    pub fn set_api_writes(&self, writes: BTreeMap<(String, String), u64>) {
        self.with(|m| m.api_writes = writes);
    }

    /// The pools as the last queue cycle saw them.
    pub fn set_pools(&self, pools: Vec<PoolGauge>) {
        self.with(|m| m.pools = pools);
    }

    fn render_pools(m: &Inner, out: &mut String) {
        let labels = |p: &PoolGauge| {
            format!(
                "pool=\"{}\",capacity=\"{}\"",
                esc(&p.pool),
                esc(&p.capacity)
            )
        };
        out.push_str("# HELP gantry_pool_nodes GPU nodes per pool and capacity kind.\n# TYPE gantry_pool_nodes gauge\n");
        for p in &m.pools {
            let _ = writeln!(out, "gantry_pool_nodes{{{}}} {}", labels(p), p.nodes);
        }
        out.push_str("# HELP gantry_pool_gpus GPUs per pool and capacity kind.\n# TYPE gantry_pool_gpus gauge\n");
        for p in &m.pools {
            let _ = writeln!(out, "gantry_pool_gpus{{{}}} {}", labels(p), p.gpus);
        }
        out.push_str("# HELP gantry_pool_spend_per_hour Spend rate per pool: nodes times the policy's cost per node-hour.\n# TYPE gantry_pool_spend_per_hour gauge\n");
        for p in &m.pools {
            let _ = writeln!(
                out,
                "gantry_pool_spend_per_hour{{{}}} {}",
                labels(p),
                p.spend_per_hour
            );
        }
        out.push_str("# HELP gantry_pool_placeholder_pods Placeholder pods per pool: pending (asking the autoscaler for nodes) or bound (holding warm nodes).\n# TYPE gantry_pool_placeholder_pods gauge\n");
        for p in &m.pools {
            let l = labels(p);
            let _ = writeln!(
                out,
                "gantry_pool_placeholder_pods{{{l},state=\"pending\"}} {}",
                p.placeholders_pending
            );
            let _ = writeln!(
                out,
                "gantry_pool_placeholder_pods{{{l},state=\"bound\"}} {}",
                p.placeholders_bound
            );
        }
    }

    fn render_queue(m: &Inner, out: &mut String) {
        out.push_str("# HELP gantry_preemptions_total Jobs evicted by the queue, by the victim's team and tier and the cause.
# TYPE gantry_preemptions_total counter
");
        for ((team, tier, cause), n) in &m.preemptions {
            let _ = writeln!(
                out,
                "gantry_preemptions_total{{team=\"{}\",tier=\"{}\",cause=\"{}\"}} {n}",
                esc(team),
                esc(tier),
                esc(cause)
            );
        }
        out.push_str("# HELP gantry_preempted_gpu_seconds_total Work lost to preemption (since the last checkpoint), in GPU-seconds.
# TYPE gantry_preempted_gpu_seconds_total counter
");
        for ((team, tier), s) in &m.lost {
            let _ = writeln!(
                out,
                "gantry_preempted_gpu_seconds_total{{team=\"{}\",tier=\"{}\"}} {s}",
                esc(team),
                esc(tier)
            );
        }
        out.push_str(
            "# HELP gantry_queue_wait_seconds How long placed jobs waited in the queue.
# TYPE gantry_queue_wait_seconds histogram
",
        );
        for ((team, tier), h) in &m.waits {
            let l = format!("team=\"{}\",tier=\"{}\"", esc(team), esc(tier));
            for (bound, n) in WAIT_BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "gantry_queue_wait_seconds_bucket{{{l},le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "gantry_queue_wait_seconds_bucket{{{l},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "gantry_queue_wait_seconds_sum{{{l}}} {}", h.sum);
            let _ = writeln!(out, "gantry_queue_wait_seconds_count{{{l}}} {}", h.count);
        }
        out.push_str("# HELP gantry_enactment_errors_total API writes of the queue that were refused, by action.
# TYPE gantry_enactment_errors_total counter
");
        for (a, n) in &m.enactment_errors {
            let _ = writeln!(
                out,
                "gantry_enactment_errors_total{{action=\"{}\"}} {n}",
                esc(a)
            );
        }
        out.push_str("# HELP gantry_api_writes_total Writes gantry made to the API server, by verb and resource.
# TYPE gantry_api_writes_total counter
");
        for ((verb, resource), n) in &m.api_writes {
            let _ = writeln!(
                out,
                "gantry_api_writes_total{{verb=\"{}\",resource=\"{}\"}} {n}",
                esc(verb),
                esc(resource)
            );
        }
    }

    /// The exposition text; `revision` and `gpus` (model, healthy → count) are current.
    pub fn render(&self, revision: Option<&str>, gpus: &BTreeMap<(String, bool), u64>) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str("# HELP gantry_requests_total HTTP requests by endpoint and status code.\n# TYPE gantry_requests_total counter\n");
            for ((e, code), n) in &m.requests {
                let _ = writeln!(out, "gantry_requests_total{{endpoint=\"{}\",code=\"{code}\"}} {n}", esc(e));
            }
            out.push_str("# HELP gantry_request_duration_seconds Request latency by endpoint.\n# TYPE gantry_request_duration_seconds histogram\n");
            for (e, h) in &m.latency {
                for (bound, n) in BUCKETS.iter().zip(h.counts) {
                    let _ = writeln!(out, "gantry_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"{bound}\"}} {n}", esc(e));
                }
                let _ = writeln!(out, "gantry_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"+Inf\"}} {}", esc(e), h.count);
                let _ = writeln!(out, "gantry_request_duration_seconds_sum{{endpoint=\"{}\"}} {}", esc(e), h.sum);
                let _ = writeln!(out, "gantry_request_duration_seconds_count{{endpoint=\"{}\"}} {}", esc(e), h.count);
            }
            out.push_str("# HELP gantry_admission_decisions_total Admission decisions by action and reason (rule).\n# TYPE gantry_admission_decisions_total counter\n");
            for ((a, r), n) in &m.decisions {
                let _ = writeln!(out, "gantry_admission_decisions_total{{action=\"{}\",reason=\"{}\"}} {n}", esc(a), esc(r));
            }
            for (name, help, counts) in [
                ("gantry_policy_reloads_total", "Policy reloads by result.", &m.reloads),
                ("gantry_inventory_reads_total", "Inventory reads (NVML or fleet file) by result.", &m.inventory_reads),
                ("gantry_tls_reloads_total", "Certificate reloads after the files changed, by result.", &m.tls_reloads),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for result in ["ok", "failed"] {
                    let n = counts.get(result).copied().unwrap_or(0);
                    let _ = writeln!(out, "{name}{{result=\"{result}\"}} {n}");
                }
            }
            Metrics::render_queue(m, &mut out);
            Metrics::render_pools(m, &mut out);
        });
        out.push_str("# HELP gantry_policy_info The policy revision being served.\n# TYPE gantry_policy_info gauge\n");
        if let Some(r) = revision {
            let _ = writeln!(out, "gantry_policy_info{{revision=\"{}\"}} 1", esc(r));
        }
        out.push_str("# HELP gantry_gpus GPUs in the inventory by model and health.\n# TYPE gantry_gpus gauge\n");
        for ((model, healthy), n) in gpus {
            let health = if *healthy { "healthy" } else { "unhealthy" };
            let _ = writeln!(
                out,
                "gantry_gpus{{model=\"{}\",health=\"{health}\"}} {n}",
                esc(model)
            );
        }
        out
    }
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
