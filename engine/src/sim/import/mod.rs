//! Replay traces from real systems: a Slurm accounting export (`sacct --parsable2`) or
//! Kubernetes pod listings (`kubectl get pods -A -o json`, taken over time) become the
//! trace format `gantry simulate` reads (JSON Lines of jobs with `submitted_at` and
//! `runtime_s`). A mapping file renames the source's accounts, QOS, namespaces and
//! priority classes to the policy's teams and tiers.

pub mod kubernetes;
pub mod slurm;

use crate::core::natural::NaturalId;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Names in the source system → the policy's (TOML: `[teams]`, `[tiers]`, `[pools]`,
/// `[defaults]`). A name with no mapping is kept as it is.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    /// Slurm account (else user), or a pod's namespace → team.
    #[serde(default)]
    pub teams: BTreeMap<String, String>,
    /// Slurm QOS (else partition), or a pod's priority class → tier.
    #[serde(default)]
    pub tiers: BTreeMap<String, String>,
    /// Slurm partition → pool (jobs of an unmapped partition name no pool).
    #[serde(default)]
    pub pools: BTreeMap<String, String>,
    #[serde(default)]
    pub defaults: Defaults,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// The team of a job whose account and user have no mapping (instead of the name).
    pub team: Option<String>,
    /// The tier of a job whose QOS and partition have no mapping.
    pub tier: Option<String>,
}

impl Mapping {
    pub fn parse(file: &str, text: &str) -> Result<Mapping, String> {
        toml::from_str(text).map_err(|e| format!("{file}: {e}"))
    }

    /// The team for the first of `names` with a mapping, else the default, else the
    /// first non-empty name.
    fn team(&self, names: &[&str]) -> Option<String> {
        pick(&self.teams, names, self.defaults.team.as_deref())
    }

    fn tier(&self, names: &[&str]) -> Option<String> {
        pick(&self.tiers, names, self.defaults.tier.as_deref())
    }
}

fn pick(map: &BTreeMap<String, String>, names: &[&str], default: Option<&str>) -> Option<String> {
    names
        .iter()
        .find_map(|n| map.get(*n).cloned())
        .or_else(|| default.map(str::to_string))
        .or_else(|| {
            names
                .iter()
                .find(|n| !n.is_empty())
                .map(|n| (*n).to_string())
        })
}

/// One job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub id: String,
    pub team: Option<String>,
    pub tier: Option<String>,
    pub user: Option<String>,
    pub pools: Vec<String>,
    pub submitted_at: i64,
    pub members: u32,
    pub gpus_per_member: u32,
    /// How long it really ran.
    pub runtime_s: u64,
    /// The time limit it was submitted with, when the source gives one: what a scheduler
    /// plans with.
    pub limit_s: Option<u64>,
    /// Its earlier runs, stopped from outside and requeued (seconds each, in order).
    pub interrupted_s: Vec<u64>,
    /// `limit_s` is an estimate nobody enforces (a pod's `gantry.dev/runtime`): the
    /// job ran past it where it ran longer, up to `enforced_s` if it has one.
    pub estimate_only: bool,
    /// Behind an estimate, the limit that was enforced (a pod's `activeDeadlineSeconds`).
    pub enforced_s: Option<u64>,
}

impl TraceJob {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "submitted_at": self.submitted_at,
            "members": self.members,
            "gpus_per_member": self.gpus_per_member,
            "runtime_s": self.limit_s.unwrap_or(self.runtime_s),
        });
        if let Some(o) = v.as_object_mut() {
            for (key, value) in [
                ("team", &self.team),
                ("tier", &self.tier),
                ("user", &self.user),
            ] {
                if let Some(s) = value {
                    o.insert(key.into(), json!(s));
                }
            }
            if !self.pools.is_empty() {
                o.insert("pools".into(), json!(self.pools));
            }
            if !self.interrupted_s.is_empty() {
                o.insert("interrupted_after_s".into(), json!(self.interrupted_s));
            }
            // Decisions see the limit; the replay ends the job when it really ended.
            if self.limit_s.is_some() {
                o.insert("actual_runtime_s".into(), json!(self.runtime_s));
            }
            if self.estimate_only && self.limit_s.is_some() {
                o.insert("estimate_only".into(), json!(true));
                if let Some(limit) = self.enforced_s {
                    o.insert("runtime_limit_s".into(), json!(limit));
                }
            }
        }
        v
    }
}

/// What an import made, and what it left out and why (counted per reason).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Imported {
    pub jobs: Vec<TraceJob>,
    pub skipped: BTreeMap<String, usize>,
    /// What a person should know of the import: lines skipped as malformed (the first
    /// few, with their line numbers), jobs replayed from a state other than completed.
    pub notes: Vec<String>,
}

impl Imported {
    fn skip(&mut self, why: &str) {
        self.skip_n(why, 1);
    }

    fn skip_n(&mut self, why: &str, n: usize) {
        if n > 0 {
            *self.skipped.entry(why.to_string()).or_insert(0) += n;
        }
    }

    /// Keeps `job` if `simulate` would take it, else counts it as skipped with why: a
    /// trace that imports is a trace that replays.
    fn admit(&mut self, job: TraceJob) {
        use crate::inventory::jobs_file::{MAX_GPUS_PER_MEMBER, MAX_MEMBERS};
        if job.members == 0 || job.members > MAX_MEMBERS {
            self.skip(&format!(
                "more than {MAX_MEMBERS} members (simulate's limit)"
            ));
        } else if job.gpus_per_member > MAX_GPUS_PER_MEMBER {
            self.skip(&format!(
                "more than {MAX_GPUS_PER_MEMBER} GPUs per member (simulate's limit)"
            ));
        } else {
            self.jobs.push(job);
        }
    }

    /// The trace: jobs in submit order (ties by id, numbers as numbers: Slurm's `2`
    /// before `10`, `123_2` before `123_10`), one JSON object per line.
    pub fn to_jsonl(&mut self) -> String {
        self.jobs.sort_by(|a, b| {
            (a.submitted_at, NaturalId(&a.id)).cmp(&(b.submitted_at, NaturalId(&b.id)))
        });
        let mut out = String::new();
        for j in &self.jobs {
            out.push_str(&j.to_json().to_string());
            out.push('\n');
        }
        out
    }
}

/// An error in one line of an input file.
pub fn at(file: &str, line: usize, message: impl std::fmt::Display) -> String {
    format!("{file}:{line}: {message}")
}
