//! The policy test file format (`*.test.toml`, next to the policy) and how a plan is
//! checked against a test's expectations. See the README's "Policy tests" section.

use engine::decide::plan::{Action, Decision, Plan};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// The policy directory or file, relative to the test file; default: its directory.
    pub policy: Option<String>,
    /// A fleet file path (relative to the test file) or an inline fleet table.
    pub fleet: Option<toml::Value>,
    /// The decision time for tests that give none (seconds or RFC 3339).
    pub now: Option<toml::Value>,
    #[serde(default)]
    pub test: Vec<Spanned<TestCase>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub name: String,
    pub fleet: Option<toml::Value>,
    pub now: Option<toml::Value>,
    /// The autoscaler's state before the cycle (the plan's `state`), e.g. how long a
    /// trigger has held: `state = { pools = { spot = { trigger_since = { "up/0" = 1794900000 } } } }`.
    pub state: Option<toml::Value>,
    /// Jobs in the jobs-file format: pending, or running with `placement` and `started_at`.
    #[serde(default)]
    pub jobs: Vec<toml::Value>,
    #[serde(default)]
    pub expect: Vec<Spanned<Expect>>,
    /// Exactly these running jobs are preempted (any order).
    pub preempted: Option<Vec<String>>,
    /// Exactly these pools scale, by these node counts (`{}`: nothing scales).
    pub scale: Option<BTreeMap<String, i64>>,
    /// Exactly these warm targets, in nodes.
    pub warm: Option<BTreeMap<String, u64>>,
}

/// What one job's decision must be. Every field given is checked; the rest are free.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub job: String,
    /// `place`, `queue` or `deny`.
    pub action: Option<String>,
    /// The rule that denied (or routed) it.
    pub rule: Option<String>,
    pub routed_to: Option<String>,
    /// Every member placed in this pool.
    pub pool: Option<String>,
    /// Exactly these nodes (one per member, any order).
    pub nodes: Option<Vec<String>>,
    /// Exactly these victims (any order); `[]` for none.
    pub victims: Option<Vec<String>>,
    pub borrowing: Option<bool>,
    /// The reason code of a job that waits or is denied, e.g. `quota_exhausted`.
    pub reason: Option<String>,
    /// Text the reason's message contains.
    pub message: Option<String>,
    /// Text the reason's `unblock` contains.
    pub unblock: Option<String>,
}

fn code_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn what(d: &Decision) -> String {
    match d.action {
        Action::Place => {
            let mut nodes: Vec<&str> = d.placement.iter().map(|a| a.node.as_str()).collect();
            nodes.dedup();
            format!("place on {}", nodes.join(", "))
        }
        _ => match &d.reason {
            Some(r) => format!(
                "{} ({}: {})",
                code_name(&d.action),
                code_name(&r.code),
                r.message
            ),
            None => code_name(&d.action),
        },
    }
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// What is wrong with `d` against `e`, one line per mismatch.
pub fn check_decision(
    e: &Expect,
    d: &Decision,
    pool_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut mismatch = |field: &str, want: String, got: String| {
        out.push(format!(
            "job `{}`: expected {field} {want}, got {got}",
            e.job
        ));
    };
    if let Some(a) = &e.action {
        if *a != code_name(&d.action) {
            mismatch("action", format!("`{a}`"), format!("`{}`", what(d)));
        }
    }
    let rule = d
        .reason
        .as_ref()
        .and_then(|r| r.rule.clone())
        .or_else(|| d.routed_to.as_ref().map(|r| r.rule.clone()));
    if let Some(want) = &e.rule {
        if rule.as_ref() != Some(want) {
            mismatch(
                "rule",
                format!("`{want}`"),
                rule.map_or("no rule".into(), |r| format!("`{r}`")),
            );
        }
    }
    if let Some(want) = &e.routed_to {
        let got = d.routed_to.as_ref().map(|r| r.pool.clone());
        if got.as_ref() != Some(want) {
            mismatch(
                "routed_to",
                format!("`{want}`"),
                got.map_or("no route".into(), |p| format!("`{p}`")),
            );
        }
    }
    if let Some(want) = &e.pool {
        let pools: BTreeSet<String> = d
            .placement
            .iter()
            .map(|a| pool_of(&a.node).unwrap_or_else(|| "-".into()))
            .collect();
        if d.placement.is_empty() || pools.iter().any(|p| p != want) {
            mismatch("pool", format!("`{want}`"), format!("`{}`", what(d)))
        }
    }
    if let Some(want) = &e.nodes {
        let got: Vec<String> = d.placement.iter().map(|a| a.node.clone()).collect();
        if sorted(want) != sorted(&got) {
            mismatch("nodes", format!("{want:?}"), format!("{got:?}"));
        }
    }
    if let Some(want) = &e.victims {
        if sorted(want) != sorted(&d.victims) {
            mismatch("victims", format!("{want:?}"), format!("{:?}", d.victims));
        }
    }
    if let Some(want) = e.borrowing {
        if want != d.borrowing {
            mismatch("borrowing", want.to_string(), d.borrowing.to_string());
        }
    }
    let reason = d.reason.as_ref();
    if let Some(want) = &e.reason {
        let got = reason.map(|r| code_name(&r.code));
        if got.as_ref() != Some(want) {
            mismatch("reason", format!("`{want}`"), format!("`{}`", what(d)));
        }
    }
    if let Some(want) = &e.message {
        if !reason.is_some_and(|r| r.message.contains(want.as_str())) {
            mismatch(
                "a message containing",
                format!("{want:?}"),
                format!("`{}`", what(d)),
            );
        }
    }
    if let Some(want) = &e.unblock {
        let got = reason.and_then(|r| r.unblock.clone());
        if !got.as_ref().is_some_and(|u| u.contains(want.as_str())) {
            mismatch(
                "an unblock containing",
                format!("{want:?}"),
                format!("{got:?}"),
            );
        }
    }
    out
}

/// Test-level expectations: preempted jobs, scale and warm entries.
pub fn check_plan(t: &TestCase, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(want) = &t.preempted {
        let got: Vec<String> = plan.preemptions.iter().map(|p| p.job.clone()).collect();
        if sorted(want) != sorted(&got) {
            out.push(format!(
                "expected preempted {:?}, got {:?}",
                sorted(want),
                sorted(&got)
            ));
        }
    }
    if let Some(want) = &t.scale {
        let mut got: BTreeMap<String, i64> = BTreeMap::new();
        for s in plan.scale.iter().filter(|s| s.delta_nodes != 0) {
            *got.entry(s.pool.clone()).or_insert(0) += s.delta_nodes;
        }
        if *want != got {
            let reasons: Vec<String> = plan
                .scale
                .iter()
                .map(|s| format!("{} {:+}: {}", s.pool, s.delta_nodes, s.reason))
                .collect();
            out.push(format!(
                "expected scale {want:?}, got {got:?}{}",
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", reasons.join("; "))
                }
            ));
        }
    }
    if let Some(want) = &t.warm {
        let got: BTreeMap<String, u64> = plan
            .warm
            .iter()
            .map(|w| (w.pool.clone(), w.target_nodes))
            .collect();
        if *want != got {
            out.push(format!("expected warm targets {want:?}, got {got:?}"));
        }
    }
    out
}
