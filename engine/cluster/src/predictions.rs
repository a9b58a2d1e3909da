//! Runtime predictions in the queue (`serve --queue --estimates predicted`), as
//! `gantry simulate --estimates predicted` makes them (`engine::sim::predict`): a pod
//! with an enforced limit (`activeDeadlineSeconds`) is planned with that limit times the
//! mean ratio of runtime to limit of its team's last finished jobs, until it has run
//! that long; then with its limit.
//!
//! What counts as finished: a job seen running whose pods are gone, unless gantry
//! evicted it or its node went away or was interrupted (it is queued again, as a replay
//! requeues it). It ran from its pods' start to the cycle that no longer sees them. A
//! deleted job counts as finished early, as a cancelled job does in a replay of `sacct`.
//!
//! A pod set is predicted when a cycle first sees it queued, from the history then, and
//! keeps that prediction until it is placed and has outlived it. Pods queued again under
//! new names (a Job controller's replacements) are predicted afresh, as the replay
//! predicts a job queued again. The history is kept in the engine's memory
//! (`crate::memory`); what is known of each job is kept by the leader only.
//!
//! Estimates (`gantry.dev/runtime`) are planned with as given: predictions stand in for
//! limits only. Pods carry no user gantry trusts, so predictions go by team.

use crate::memory::Unsaved;
use crate::queue::FOREIGN;
use engine::inventory::jobs_file::Job;
use engine::sim::predict::Predictor;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The history predictions are made from, and what the last cycle knew of each job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Predictions {
    pub history: Predictor,
    #[serde(skip)]
    pub jobs: Unsaved<BTreeMap<String, Known>>,
    /// Whether the queue predicts at all (`--estimates predicted`): set at start, never
    /// written.
    #[serde(skip)]
    pub on: bool,
}

/// One job with an enforced limit, as the cycles have seen it.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    team: Option<String>,
    limit_s: u64,
    /// Once it was seen queued: what it is planned with while that holds (`None`: no
    /// history then, or none shorter than its limit).
    predicted: Option<Option<u64>>,
    /// When it was first seen queued for this run: its run starts no earlier. (A gang's
    /// replacements placed while its evicted members still stop are shown running from
    /// those members' start until they are gone.)
    queued_at: Option<i64>,
    /// Its run's start, while it runs, and the nodes it runs on.
    run: Option<(i64, Vec<String>)>,
    /// It has run past its prediction: planned with its limit from then on.
    outlived: bool,
    /// It stops without finishing: gantry evicted it, or its node went away.
    stopped: bool,
}

/// A job the prediction applies to: one with an enforced limit and a team of the policy.
fn limit_of(j: &Job) -> Option<u64> {
    let team = j.team.as_deref();
    if j.estimate_only || team == Some(FOREIGN) {
        return None;
    }
    j.runtime_s.filter(|s| *s > 0)
}

impl Predictions {
    /// Whether there is nothing to keep in the ConfigMap.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// The state after a cycle that sees `jobs` at `now`, `up` naming the nodes present
    /// and not interrupted: jobs no longer seen that finished are learned from (first,
    /// so a job queued in the same moment is predicted with them), new ones are
    /// predicted, runs are followed.
    pub fn advanced(&self, jobs: &[Job], up: &BTreeSet<&str>, now: i64) -> Predictions {
        let mut next = self.clone();
        let present: BTreeSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let known = std::mem::take(&mut next.jobs.0);
        // A gang's replacements queue as `X+<pod>` beside its stopping members
        // (`crate::queue`) and become `X` once those are gone: the same run, which keeps
        // what was known of it (predicted when first queued, as the replay predicts a job
        // at its eviction), and has not finished.
        let mut renamed: BTreeMap<String, Known> = BTreeMap::new();
        for (id, k) in known {
            if present.contains(id.as_str()) {
                next.jobs.0.insert(id, k);
                continue;
            }
            if let Some((base, _)) = id.split_once('+').filter(|(b, _)| present.contains(b)) {
                renamed.insert(base.to_string(), k);
                continue;
            }
            let Some((started, nodes)) = k.run.filter(|_| !k.stopped) else {
                continue;
            };
            if nodes.iter().any(|n| !up.contains(n.as_str())) {
                continue;
            }
            let ran = u64::try_from(now - started).unwrap_or(0);
            next.history
                .observe(None, k.team.as_deref(), k.limit_s, ran);
        }
        let Predictions {
            history,
            jobs: kept,
            ..
        } = &mut next;
        for j in jobs {
            let Some(limit) = limit_of(j) else {
                kept.0.remove(&j.id);
                continue;
            };
            let mut running = j
                .started_at
                .filter(|_| !j.placement.is_empty())
                .map(|s| (s, j.placement.iter().map(|m| m.node.clone()).collect()));
            if let Some(k) = renamed.remove(&j.id) {
                kept.0.insert(j.id.clone(), k);
            }
            let k = kept.0.entry(j.id.clone()).or_insert_with(|| Known {
                team: j.team.clone(),
                limit_s: limit,
                predicted: None,
                queued_at: None,
                run: None,
                outlived: false,
                stopped: false,
            });
            if k.run.is_some() && running.is_none() {
                // Queued again under its old name (a gang's members replaced): a new run,
                // predicted afresh.
                *k = Known {
                    predicted: None,
                    queued_at: None,
                    run: None,
                    outlived: false,
                    stopped: false,
                    ..k.clone()
                };
            }
            if k.predicted.is_none() && running.is_none() {
                let p = history.predict(None, k.team.as_deref(), limit);
                k.predicted = Some(p.filter(|p| *p < limit));
                k.queued_at = Some(now);
            }
            if let (Some((start, _)), Some(queued)) = (running.as_mut(), k.queued_at) {
                *start = (*start).max(queued);
            }
            k.limit_s = limit;
            k.run = running;
            if let Some((started, nodes)) = &k.run {
                let p = k
                    .predicted
                    .flatten()
                    .map(|p| i64::try_from(p).unwrap_or(i64::MAX));
                k.outlived |= p.is_some_and(|p| now - started >= p);
                k.stopped |= nodes.iter().any(|n| !up.contains(n.as_str()));
            }
        }
        next
    }

    /// Each job is planned with its prediction while that holds: as an estimate nobody
    /// enforces, its limit behind it, so a plan wakes when it passes.
    pub fn apply(&self, jobs: &mut [Job]) {
        for j in jobs {
            let Some(k) = self.jobs.0.get(&j.id) else {
                continue;
            };
            let (Some(Some(p)), false) = (k.predicted, k.outlived) else {
                continue;
            };
            if limit_of(j).is_some() {
                j.runtime_s = Some(p);
                j.runtime_limit_s = Some(k.limit_s);
                j.estimate_only = true;
            }
        }
    }

    /// The jobs a plan evicts stop without finishing: not learned from.
    pub fn evicting<'a>(&mut self, jobs: impl IntoIterator<Item = &'a str>) {
        for id in jobs {
            if let Some(k) = self.jobs.0.get_mut(id) {
                k.stopped = true;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::*;
    use engine::inventory::jobs_file::PlacedMember;

    fn queued(id: &str, team: &str, limit: u64) -> Job {
        Job {
            id: id.into(),
            team: Some(team.into()),
            runtime_s: Some(limit),
            ..Job::default()
        }
    }

    fn running(id: &str, team: &str, limit: u64, node: &str, started: i64) -> Job {
        Job {
            placement: vec![PlacedMember {
                node: node.into(),
                gpus: vec![0],
                gpu_milli: None,
                mig_starts: Vec::new(),
            }],
            started_at: Some(started),
            ..queued(id, team, limit)
        }
    }

    fn up<'a>(nodes: &[&'a str]) -> BTreeSet<&'a str> {
        nodes.iter().copied().collect()
    }

    /// `a` ran on n1 from 0 to 400 of its 1,000 s limit.
    fn after_a_finished(p: &Predictions) -> Predictions {
        let p = p.advanced(&[running("a", "ml", 1000, "n1", 0)], &up(&["n1"]), 100);
        p.advanced(&[], &up(&["n1"]), 400)
    }

    fn planned(p: &Predictions, job: Job) -> Job {
        let mut jobs = [job];
        p.apply(&mut jobs);
        let [j] = jobs;
        j
    }

    #[test]
    fn a_finished_job_predicts_its_teams_next() {
        let p = after_a_finished(&Predictions::default());
        let p = p.advanced(&[queued("b", "ml", 2000)], &up(&["n1"]), 400);
        let b = planned(&p, queued("b", "ml", 2000));
        assert_eq!(b.runtime_s, Some(800));
        assert_eq!(b.runtime_limit_s, Some(2000));
        assert!(b.estimate_only);
        // Another team has no history: planned with its limit.
        let p = p.advanced(&[queued("c", "cv", 2000)], &up(&["n1"]), 400);
        assert_eq!(
            planned(&p, queued("c", "cv", 2000)),
            queued("c", "cv", 2000)
        );
    }

    #[test]
    fn an_evicted_job_or_one_whose_node_went_is_not_learned() {
        let mut p = Predictions::default();
        p = p.advanced(&[running("a", "ml", 1000, "n1", 0)], &up(&["n1"]), 100);
        p.evicting(["a"]);
        let p = p.advanced(&[], &up(&["n1"]), 400);
        assert!(p.is_empty());
        let p = p.advanced(&[running("a", "ml", 1000, "n1", 0)], &up(&["n1"]), 100);
        let p = p.advanced(&[], &up(&[]), 400);
        assert!(p.is_empty());
        // Interrupted while it ran, gone later: stopped, not finished.
        let p = p.advanced(&[running("d", "ml", 1000, "n2", 0)], &up(&[]), 100);
        let p = p.advanced(&[], &up(&["n2"]), 400);
        assert!(p.is_empty());
    }

    #[test]
    fn a_prediction_is_made_at_first_sight_and_kept() {
        let p = Predictions::default();
        let b = queued("b", "ml", 2000);
        let p = p.advanced(
            &[b.clone(), running("a", "ml", 1000, "n1", 0)],
            &up(&["n1"]),
            0,
        );
        let p = p.advanced(std::slice::from_ref(&b), &up(&["n1"]), 400);
        assert!(!p.is_empty());
        assert_eq!(planned(&p, queued("b", "ml", 2000)).runtime_s, Some(2000));
    }

    #[test]
    fn a_job_past_its_prediction_is_planned_with_its_limit() {
        let p = after_a_finished(&Predictions::default());
        let p = p.advanced(&[queued("b", "ml", 2000)], &up(&["n1"]), 400);
        let b = running("b", "ml", 2000, "n1", 500);
        let p = p.advanced(std::slice::from_ref(&b), &up(&["n1"]), 1000);
        assert_eq!(planned(&p, b.clone()).runtime_s, Some(800));
        let p = p.advanced(std::slice::from_ref(&b), &up(&["n1"]), 1300);
        assert_eq!(planned(&p, b.clone()), b);
    }

    #[test]
    fn a_job_queued_again_is_predicted_afresh() {
        let p = Predictions::default();
        let b = running("b", "ml", 2000, "n2", 0);
        let p = p.advanced(&[b], &up(&["n1", "n2"]), 10);
        let p = after_a_finished(&p);
        let p = p.advanced(&[queued("b", "ml", 2000)], &up(&["n1", "n2"]), 500);
        assert_eq!(planned(&p, queued("b", "ml", 2000)).runtime_s, Some(800));
    }

    /// Gang `g`'s replacements queue as `g+g-0-r1` while its evicted members stop, and
    /// are `g` once they are gone: predicted when first queued, not again then, and the
    /// renamed entry is not learned from as a job that finished.
    #[test]
    fn a_gangs_replacements_keep_their_prediction_when_renamed() {
        let mut p = Predictions::default();
        p = p.advanced(&[running("g", "ml", 2000, "n2", 0)], &up(&["n1", "n2"]), 10);
        p.evicting(["g"]);
        let stopping = running("g", "ml", 2000, "n2", 0);
        let replacements = queued("g+g-0-r1", "ml", 2000);
        p = p.advanced(&[stopping, replacements.clone()], &up(&["n1", "n2"]), 20);
        assert_eq!(planned(&p, replacements).runtime_s, Some(2000));
        // `a` finishes while they wait: it must not change their prediction.
        let waiting = queued("g+g-0-r1", "ml", 2000);
        let a = running("a", "ml", 1000, "n1", 0);
        let p = p.advanced(&[waiting.clone(), a], &up(&["n1", "n2"]), 100);
        let p = p.advanced(std::slice::from_ref(&waiting), &up(&["n1", "n2"]), 400);
        let before = p.history.clone();
        let p = p.advanced(&[queued("g", "ml", 2000)], &up(&["n1", "n2"]), 500);
        assert_eq!(planned(&p, queued("g", "ml", 2000)).runtime_s, Some(2000));
        assert_eq!(p.history, before);
        // Placed and renamed while it runs: not learned as finished either.
        let p = p.advanced(
            &[running("g+g-0-r1", "ml", 2000, "n1", 600)],
            &up(&["n1"]),
            600,
        );
        let g = running("g", "ml", 2000, "n1", 600);
        let p = p.advanced(std::slice::from_ref(&g), &up(&["n1"]), 700);
        assert_eq!(p.history, before);
        // Placed while its evicted members still stop, the gang is shown running from
        // their start: its run still starts when it was queued, not past its prediction.
        let mut p = p;
        p.evicting(["g"]);
        let stopping = running("g", "ml", 2000, "n1", 600);
        let p = p.advanced(
            &[stopping, queued("g+g-0-r2", "ml", 2000)],
            &up(&["n1"]),
            800,
        );
        let merged = running("g", "ml", 2000, "n1", 600);
        let p = p.advanced(std::slice::from_ref(&merged), &up(&["n1"]), 1450);
        assert_eq!(planned(&p, merged).runtime_s, Some(800));
        // A new job is predicted from the history.
        let p = p.advanced(&[g, queued("b", "ml", 2000)], &up(&["n1"]), 700);
        assert_eq!(planned(&p, queued("b", "ml", 2000)).runtime_s, Some(800));
    }

    #[test]
    fn estimates_and_foreign_jobs_are_left_as_they_are() {
        let p = after_a_finished(&Predictions::default());
        let estimate = Job {
            estimate_only: true,
            runtime_limit_s: Some(2000),
            ..queued("e", "ml", 300)
        };
        let foreign = queued("f", FOREIGN, 2000);
        let p = p.advanced(&[estimate.clone(), foreign.clone()], &up(&["n1"]), 400);
        assert_eq!(planned(&p, estimate.clone()), estimate);
        assert_eq!(planned(&p, foreign.clone()), foreign);
        // Neither is learned from when it ends.
        let before = p.history.clone();
        let runs = [
            Job {
                placement: running("e", "ml", 1, "n1", 400).placement,
                started_at: Some(400),
                ..estimate
            },
            Job {
                placement: running("f", "x", 1, "n1", 400).placement,
                started_at: Some(400),
                ..foreign
            },
        ];
        let p = p
            .advanced(&runs, &up(&["n1"]), 500)
            .advanced(&[], &up(&["n1"]), 600);
        assert_eq!(p.history, before);
    }
}
