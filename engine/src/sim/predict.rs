//! Runtime predictions from history, for replays that plan with better numbers than the
//! users' limits. A job's limit (`runtime_s`) is a bound the user chose, often several
//! times what the job runs; backfill and ETAs planned from limits hold jobs back that
//! would fit. Like the system-generated predictions studied for backfill (Tsafrir,
//! Etsion and Feitelson, 2007: the recent history of the same user), a job is predicted
//! to run its limit times the mean ratio of actual runtime to limit over its user's last
//! [`RECENT`] finished jobs (its team's where the user has none yet), never more than the
//! limit and never under [`FLOOR_S`]. A job with no history to go by is planned with its
//! limit. Only jobs that finished before the job arrived count, so a replay never plans
//! with what it could not have known.
//!
//! A prediction can be too short. The replay then corrects it as such systems do: once a
//! job has run its prediction and still runs, decisions plan with its limit. A job that
//! is stopped and queued again is predicted afresh, as the queue controller predicts a
//! replacement pod. Decisions see a prediction as an estimate nobody enforces, with the
//! limit behind it (`estimate_only`, `runtime_limit_s`), so a plan wakes when one passes.
//!
//! The queue controller makes the same predictions (`serve --queue --estimates
//! predicted`, `cluster::predictions`) and keeps the history in its memory.

use std::collections::{BTreeMap, VecDeque};

/// Finished jobs per user (and per team) a prediction averages over.
pub const RECENT: usize = 3;
/// The shortest prediction, seconds: a job that ran a few seconds last time is not
/// promised to end within seconds now.
pub const FLOOR_S: u64 = 60;

/// How the replay's decisions see a job's runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimates {
    /// The job's `runtime_s` as given: its limit, or an estimate.
    #[default]
    Limits,
    /// Predicted from the recent history of its user or team (see the module's text).
    Predicted,
}

impl Estimates {
    pub fn is_limits(&self) -> bool {
        *self == Estimates::Limits
    }
}

/// Users (and teams) a history keeps at most: the controller keeps it in a ConfigMap,
/// and names come from objects tenants write. Later names are not learned.
pub const MAX_KEYS: usize = 4_096;

/// Recent ratios of actual runtime to limit, by user and by team.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Predictor {
    by_user: BTreeMap<String, VecDeque<f64>>,
    by_team: BTreeMap<String, VecDeque<f64>>,
}

impl Predictor {
    /// Whether nothing has been learned yet.
    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty() && self.by_team.is_empty()
    }

    /// A job of `user` and `team` with limit `limit_s` finished after running `ran_s`.
    pub fn observe(&mut self, user: Option<&str>, team: Option<&str>, limit_s: u64, ran_s: u64) {
        if limit_s == 0 {
            return;
        }
        let ratio = (ran_s as f64 / limit_s as f64).clamp(0.0, 1.0);
        for (map, key) in [(&mut self.by_user, user), (&mut self.by_team, team)] {
            let Some(key) = key else {
                continue;
            };
            if map.len() >= MAX_KEYS && !map.contains_key(key) {
                continue;
            }
            let recent = map.entry(key.to_string()).or_default();
            // A history read back from a ConfigMap a person edited may be longer.
            while recent.len() >= RECENT {
                recent.pop_front();
            }
            recent.push_back(ratio);
        }
    }

    /// The runtime to plan a job of `user` and `team` with, given its limit; `None`
    /// where there is no history to go by (plan with the limit).
    pub fn predict(&self, user: Option<&str>, team: Option<&str>, limit_s: u64) -> Option<u64> {
        let recent = user
            .and_then(|u| self.by_user.get(u))
            .filter(|r| !r.is_empty())
            .or_else(|| {
                team.and_then(|t| self.by_team.get(t))
                    .filter(|r| !r.is_empty())
            })?;
        let mean = recent.iter().sum::<f64>() / recent.len() as f64;
        // A history read back from an edited ConfigMap may hold anything.
        let mean = if mean.is_finite() {
            mean.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let predicted = (limit_s as f64 * mean).round() as u64;
        Some(predicted.max(FLOOR_S).min(limit_s))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::*;

    #[test]
    fn no_history_plans_with_the_limit() {
        let p = Predictor::default();
        assert_eq!(p.predict(Some("ana"), Some("vision"), 3600), None);
    }

    #[test]
    fn the_users_recent_ratio_scales_the_limit() {
        let mut p = Predictor::default();
        p.observe(Some("ana"), Some("vision"), 1000, 250);
        p.observe(Some("ana"), Some("vision"), 1000, 750);
        // Mean ratio 0.5.
        assert_eq!(p.predict(Some("ana"), Some("vision"), 3600), Some(1800));
        // A user with no history of their own is predicted from the team's.
        assert_eq!(p.predict(Some("bo"), Some("vision"), 600), Some(300));
        // Neither: the limit.
        assert_eq!(p.predict(Some("bo"), Some("nlp"), 600), None);
    }

    #[test]
    fn only_the_last_few_count_and_bounds_hold() {
        let mut p = Predictor::default();
        p.observe(Some("ana"), None, 100, 100);
        for _ in 0..RECENT {
            p.observe(Some("ana"), None, 100, 10);
        }
        // The full-length run fell out of the window.
        assert_eq!(p.predict(Some("ana"), None, 10_000), Some(1000));
        // Never under the floor, never over the limit (a job that ran past its limit
        // counts as having run its limit).
        assert_eq!(p.predict(Some("ana"), None, 100), Some(FLOOR_S));
        p.observe(Some("cy"), None, 100, 500);
        assert_eq!(p.predict(Some("cy"), None, 30), Some(30));
        // A zero limit teaches nothing.
        p.observe(Some("dee"), None, 0, 50);
        assert_eq!(p.predict(Some("dee"), None, 600), None);
    }

    #[test]
    fn names_past_the_cap_are_not_learned() {
        let mut p = Predictor::default();
        for i in 0..MAX_KEYS {
            p.observe(None, Some(&format!("t{i}")), 100, 50);
        }
        p.observe(None, Some("late"), 100, 50);
        assert_eq!(p.predict(None, Some("late"), 1000), None);
        // A name already kept still learns.
        p.observe(None, Some("t0"), 100, 20);
        assert_eq!(p.predict(None, Some("t0"), 1000), Some(350));
    }

    #[test]
    fn an_edited_history_reads_within_bounds() {
        let text = r#"{"by_team": {"a": [5.0, 7.0], "b": []}, "by_user": {}}"#;
        let p: Predictor = serde_json::from_str(text).unwrap();
        assert_eq!(p.predict(None, Some("a"), 600), Some(600));
        assert_eq!(p.predict(None, Some("b"), 600), None);
    }
}
