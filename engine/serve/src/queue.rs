//! What `/v1/queue` and the queue metrics show: every job gantry queues or runs in the
//! cluster, with its place, state, reason and ETA — from the last cycle of `serve --queue`.

use engine::decide::plan::{Action, EtaKind, Plan};
use engine::inventory::jobs_file::Job;
use lang::ir::Program;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueRow {
    /// 1-based place among waiting jobs; `None` for running ones.
    pub position: Option<usize>,
    pub job: String,
    pub team: Option<String>,
    pub tier: Option<String>,
    /// GPUs over all members (MIG instances count their share of a GPU).
    pub gpus: f64,
    pub members: u32,
    /// `running`; for a waiting job its reason code (`no_capacity`, `quota_exhausted`,
    /// ...) or the decision (`place`, `deny`, ...).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_s: Option<i64>,
    /// `reservation` (exact under the runtime estimates) or `estimate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_kind: Option<EtaKind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// A gated pod gantry does not queue (its `state` says why): in no team's figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_queued: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueReport {
    /// When the cycle ran.
    pub at: i64,
    pub revision: String,
    /// Whether this replica enacts (holds the Lease); every replica computes the queue.
    pub leading: bool,
    pub jobs: Vec<QueueRow>,
    /// GPUs in pods bound to nodes, by (team, tier) as the pods say, where the caller
    /// knows the pods: `gantry_gpus_in_use` is then what is bound, not what the running
    /// jobs were planned to hold.
    #[serde(skip)]
    pub bound: Option<BTreeMap<(String, String), f64>>,
}

/// GPUs over all members of a job (MIG instances count their share of a GPU).
pub fn job_gpus(j: &Job) -> f64 {
    member_gpus(j) * f64::from(j.shape.members)
}

/// GPUs one member of a job asks for.
pub fn member_gpus(j: &Job) -> f64 {
    let m = &j.shape.member;
    if m.mig_profile.is_some() {
        f64::from(m.num_gpu) / 7.0
    } else {
        f64::from(m.num_gpu) * f64::from(m.gpu_milli) / 1000.0
    }
}

/// `GangMismatch` → `gang_mismatch`.
fn snake_case(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn name(action: Action) -> String {
    code(&action)
}

/// A serde enum's snake_case name.
fn code(v: &impl Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl QueueReport {
    /// Waiting jobs in queue order, then running ones by id. `jobs` are the cycle's jobs
    /// (running ones have placements).
    pub fn new(plan: &Plan, jobs: &[Job], leading: bool) -> QueueReport {
        let by_id: BTreeMap<&str, &Job> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        let mut waiting: Vec<QueueRow> = plan
            .decisions
            .iter()
            .map(|d| QueueRow {
                position: d.reason.as_ref().and_then(|r| r.position),
                job: d.job.clone(),
                team: d.team.clone(),
                tier: d.tier.clone(),
                gpus: d.gpus,
                members: by_id.get(d.job.as_str()).map_or(1, |j| j.shape.members),
                state: match (&d.reason, d.action) {
                    (Some(r), Action::Queue) => code(&r.code),
                    _ => name(d.action),
                },
                reason: d.reason.as_ref().map(|r| r.message.clone()),
                eta_s: d.reason.as_ref().and_then(|r| r.eta_s),
                eta_kind: d.reason.as_ref().and_then(|r| r.eta_kind),
                nodes: d.placement.iter().map(|a| a.node.clone()).collect(),
                not_queued: false,
            })
            .collect();
        waiting.sort_by_key(|r| (r.position.is_none(), r.position));
        let running = jobs.iter().filter(|j| !j.placement.is_empty()).map(|j| {
            let mut nodes: Vec<String> = j.placement.iter().map(|p| p.node.clone()).collect();
            nodes.dedup();
            QueueRow {
                position: None,
                job: j.id.clone(),
                team: j.team.clone(),
                tier: j.tier.clone(),
                gpus: job_gpus(j),
                members: j.shape.members,
                state: "running".into(),
                reason: None,
                eta_s: None,
                eta_kind: None,
                nodes,
                not_queued: false,
            }
        });
        QueueReport {
            at: plan.now,
            revision: plan.policy_revision.clone(),
            leading,
            jobs: waiting.into_iter().chain(running).collect(),
            bound: None,
        }
    }

    /// Adds a row for each pod gantry does not queue — (pod, reason, message, GPUs) —
    /// after the waiting jobs, before the running ones: its state is the reason in
    /// snake_case, no team or tier is claimed for it, and the metrics leave it out.
    pub fn not_queued<'a>(
        &mut self,
        pods: impl IntoIterator<Item = (&'a str, &'a str, &'a str, f64)>,
    ) {
        let at = self
            .jobs
            .iter()
            .position(|r| r.state == "running")
            .unwrap_or(self.jobs.len());
        let rows: Vec<QueueRow> = pods
            .into_iter()
            .map(|(pod, reason, message, gpus)| QueueRow {
                position: None,
                job: pod.to_string(),
                team: None,
                tier: None,
                gpus,
                members: 1,
                state: snake_case(reason),
                reason: Some(message.to_string()),
                eta_s: None,
                eta_kind: None,
                nodes: Vec::new(),
                not_queued: true,
            })
            .collect();
        // One splice: a row inserted at a time would move the running rows each time.
        self.jobs.splice(at..at, rows);
    }

    /// Gauges per team and tier: waiting jobs and GPUs, GPUs running; per team the
    /// guarantee and burst, in GPUs.
    pub fn render_metrics(&self, program: &Program, out: &mut String) {
        let mut pending: BTreeMap<(String, String), (u64, f64)> = BTreeMap::new();
        let mut running: BTreeMap<(String, String), f64> = BTreeMap::new();
        for r in &self.jobs {
            let key = (
                r.team.clone().unwrap_or_default(),
                r.tier.clone().unwrap_or_default(),
            );
            if r.not_queued {
                continue;
            }
            if r.state == "running" {
                *running.entry(key).or_insert(0.0) += r.gpus;
            } else if r.state != "place" {
                let e = pending.entry(key).or_insert((0, 0.0));
                e.0 += 1;
                e.1 += r.gpus;
            }
        }
        let label = |(team, tier): &(String, String)| {
            format!("team=\"{}\",tier=\"{}\"", esc(team), esc(tier))
        };
        out.push_str("# HELP gantry_queue_pending_jobs Jobs waiting in gantry's queue.\n# TYPE gantry_queue_pending_jobs gauge\n");
        for (k, (n, _)) in &pending {
            let _ = writeln!(out, "gantry_queue_pending_jobs{{{}}} {n}", label(k));
        }
        out.push_str("# HELP gantry_queue_pending_gpus GPUs asked for by waiting jobs.\n# TYPE gantry_queue_pending_gpus gauge\n");
        for (k, (_, g)) in &pending {
            let _ = writeln!(out, "gantry_queue_pending_gpus{{{}}} {g}", label(k));
        }
        if let Some(bound) = &self.bound {
            running.clone_from(bound);
        }
        out.push_str("# HELP gantry_gpus_in_use GPUs held by gantry's pods bound to nodes.\n# TYPE gantry_gpus_in_use gauge\n");
        for (k, g) in &running {
            let _ = writeln!(out, "gantry_gpus_in_use{{{}}} {g}", label(k));
        }
        out.push_str("# HELP gantry_team_guaranteed_gpus A team's guarantee.\n# TYPE gantry_team_guaranteed_gpus gauge\n# HELP gantry_team_burst_gpus How far a team may burst.\n# TYPE gantry_team_burst_gpus gauge\n");
        for t in &program.teams {
            let gpus = |milli: u64| milli as f64 / 1000.0;
            let _ = writeln!(
                out,
                "gantry_team_guaranteed_gpus{{team=\"{}\"}} {}",
                esc(&t.name),
                gpus(t.guaranteed.effective_total_milli())
            );
            if let Some(b) = &t.burst {
                let _ = writeln!(
                    out,
                    "gantry_team_burst_gpus{{team=\"{}\"}} {}",
                    esc(&t.name),
                    gpus(b.effective_total_milli())
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP gantry_queue_leader Whether this replica enacts the queue.\n# TYPE gantry_queue_leader gauge\ngantry_queue_leader {}",
            u8::from(self.leading)
        );
    }
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
