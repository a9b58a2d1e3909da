//! Reclaims over many cycles while victims stop slowly (issue 52 #2): one victim set per
//! preemptor, its nodes held for it (its nomination) until its victims are gone, no
//! eviction for a job then placed elsewhere, and never a victim from a team at or below
//! its guarantee.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::Kind;
use cluster::enact::Action;
use harness::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

fn gpus_of(p: &Value) -> u32 {
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

/// The evictions among `actions`: (pod, the job it was evicted for).
fn evictions(actions: &[Action]) -> Vec<(String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Evict { pod, for_job, .. } => Some((pod.name.clone(), for_job.clone())),
            _ => None,
        })
        .collect()
}

fn released(actions: &[Action]) -> Vec<(String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { pod, node, .. } => Some((pod.name.clone(), node.clone())),
            _ => None,
        })
        .collect()
}

/// Waits until the view sees `node` with `healthy` GPUs (settling waits for pods).
async fn seen_healthy(h: &Harness, node: &str, healthy: u32) {
    for _ in 0..200 {
        let seen = h
            .live
            .stores()
            .nodes
            .objects()
            .get(node)
            .map(|n| n.node.gpus.iter().filter(|g| g.healthy).count() as u32);
        if seen == Some(healthy) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the view did not see {node} with {healthy} healthy GPUs");
}

/// GPUs a team holds in pods bound and not stopping, or nominated to a node.
fn holding(h: &Harness, team: &str) -> u32 {
    h.api
        .pods()
        .values()
        .filter(|p| p["metadata"]["labels"]["gantry.dev/team"] == team)
        .filter(|p| {
            p["spec"]["nodeName"].is_string()
                || p["metadata"]["annotations"]["gantry.dev/nominated-node"].is_string()
        })
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .map(gpus_of)
        .sum()
}

/// Alpha borrows beta's 8 GPUs: four bound 4-GPU best_effort pods fill both nodes.
async fn alpha_fills_both_nodes() -> Harness {
    alpha_fills_both_nodes_at("best_effort").await
}

/// Alpha runs four 4-GPU pods of `tier` on the two nodes.
async fn alpha_fills_both_nodes_at(tier: &str) -> Harness {
    let h = harness().await;
    for i in 0..4 {
        h.api
            .apply(Kind::Pods, gated(&format!("a-{i}"), "alpha", tier, 4, None));
    }
    h.cycle().await;
    assert_eq!(h.api.bind_released(), 4);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_is_one_victim_set_whose_room_is_held_until_its_job_binds() {
    let h = alpha_fills_both_nodes().await;
    // Beta wants 4 of its guarantee back: one victim, 4 GPUs, and b-0 is nominated to
    // the victim's node before it is evicted.
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "best_effort", 4, None));
    let (actions, _) = h.cycle().await;
    let evicted = evictions(&actions);
    assert_eq!(evicted.len(), 1, "{:?}", kinds(&actions));
    assert_eq!(evicted[0].1, "ml/b-0");
    let victim = h.pod(&evicted[0].0);
    let node = victim["spec"]["nodeName"].as_str().unwrap().to_string();
    let nomination = h.pod("b-0")["metadata"]["annotations"]["gantry.dev/nominated-node"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        nomination.starts_with(&format!("{node} until ")),
        "{nomination}"
    );
    let k = kinds(&actions);
    let (nominate, evict) = (
        k.iter().position(|a| a == "nominate b-0").unwrap(),
        k.iter().position(|a| a.starts_with("evict")).unwrap(),
    );
    assert!(nominate < evict, "nominated before the eviction: {k:?}");

    // While the victim stops slowly, alpha's higher-tier pod arrives (it may take room
    // from alpha's own best_effort pods, but not the GPUs freed for b-0), and beta's
    // second pod, which reclaims on its own.
    h.api
        .apply(Kind::Pods, gated("a-s", "alpha", "standard", 4, None));
    h.api
        .apply(Kind::Pods, gated("b-1", "beta", "best_effort", 4, None));
    let mut victims_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut placed: BTreeMap<String, String> = BTreeMap::new();
    for step in 1..=8 {
        let (actions, _) = h.cycle_at(NOW + 10 * step).await;
        for (pod, for_job) in evictions(&actions) {
            assert_ne!(for_job, "ml/b-0", "a second victim set for b-0: {pod}");
            victims_of.entry(for_job).or_default().push(pod);
        }
        for (pod, to) in released(&actions) {
            assert_ne!(pod, "b-0", "released while its victim stops");
            assert!(
                to != node || pod != "b-1",
                "b-1 took the GPUs freed for b-0"
            );
            placed.insert(pod, to);
        }
        h.api.bind_released();
        assert!(holding(&h, "alpha") >= 8, "alpha below its guarantee");
        assert_eq!(
            waiting(&h.pod("b-0")).unwrap().0,
            "Preempting",
            "at step {step}"
        );
        if step == 4 {
            // The other victims are gone; b-0's is still stopping.
            let keep = format!("ml/{}", evicted[0].0);
            for (key, p) in h.api.pods() {
                if key != keep && p["metadata"]["deletionTimestamp"].is_string() {
                    h.api.delete(Kind::Pods, &key);
                }
            }
        }
    }
    // Each preemptor had one victim set; alpha is at its guarantee.
    for (job, pods) in &victims_of {
        assert_eq!(pods.len(), 1, "{job}: {pods:?}");
    }
    assert_eq!(holding(&h, "alpha"), 8, "{victims_of:?} {placed:?}");
    // b-0's victim is gone: b-0 goes where it was nominated.
    assert_eq!(h.api.finish_deletions(), 1);
    let (actions, _) = h.cycle_at(NOW + 100).await;
    let now_placed: BTreeMap<String, String> = released(&actions).into_iter().collect();
    assert_eq!(now_placed.get("b-0"), Some(&node), "{:?}", kinds(&actions));
    assert!(evictions(&actions).is_empty());
    // The release cleared the nomination.
    let b0 = h.pod("b-0");
    assert!(b0["metadata"]["annotations"]["gantry.dev/nominated-node"].is_null());
    h.api.bind_released();
    // Beta's third pod would take beta past its guarantee: alpha, at its own, is not a
    // victim for it.
    h.api
        .apply(Kind::Pods, gated("b-2", "beta", "best_effort", 4, None));
    for step in 0..4 {
        let (actions, _) = h.cycle_at(NOW + 200 + 10 * step).await;
        assert!(evictions(&actions).is_empty(), "{:?}", kinds(&actions));
    }
    assert_eq!(holding(&h, "alpha"), 8);
}

/// A GPU fails on the node a preemptor was nominated to while its victim stops: the
/// preemptor no longer fits there, so its nomination is given up and it is decided again,
/// never released onto the short node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nomination_whose_node_loses_a_gpu_is_given_up() {
    let h = harness().await;
    h.gang("a", "alpha", 2, 8);
    h.cycle().await;
    assert_eq!(h.api.bind_released(), 2);
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "standard", 8, None));
    let (actions, _) = h.cycle().await;
    // The gang goes whole (both nodes), and b-0 is nominated to one of them.
    assert_eq!(evictions(&actions).len(), 2, "{:?}", kinds(&actions));
    let nomination = h.pod("b-0")["metadata"]["annotations"]["gantry.dev/nominated-node"]
        .as_str()
        .unwrap()
        .to_string();
    let node = nomination.split(' ').next().unwrap().to_string();
    // The nominated node's device plugin withholds a failed GPU.
    h.api.update(Kind::Nodes, &node, |n| {
        n["status"]["allocatable"]["nvidia.com/gpu"] = json!("7");
    });
    seen_healthy(&h, &node, 7).await;
    assert_eq!(h.api.finish_deletions(), 2);
    let (actions, _) = h.cycle_at(NOW + 10).await;
    let placed = released(&actions);
    assert_eq!(placed.len(), 1, "{:?}", kinds(&actions));
    assert_ne!(placed[0].1, node, "released onto a node with 7 GPUs");
    assert!(evictions(&actions).is_empty());
}

/// A nomination expires when its victims do not go (a PodDisruptionBudget refuses every
/// eviction): until then the preemptor says so and the eviction is retried, without a
/// second victim set; after, the job is decided afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_victim_is_retried_until_the_nomination_expires() {
    let h = alpha_fills_both_nodes().await;
    for i in 0..4 {
        h.api.update(Kind::Pods, &format!("ml/a-{i}"), |p| {
            p["metadata"]["labels"]["pdb"] = json!("block")
        });
    }
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "best_effort", 4, None));
    let (actions, _) = h.cycle().await;
    let first: BTreeSet<String> = evictions(&actions).into_iter().map(|(p, _)| p).collect();
    assert_eq!(first.len(), 1, "{:?}", kinds(&actions));
    // Retried each cycle, the same pod, marked once.
    let marks = |h: &Harness| {
        h.api
            .writes()
            .iter()
            .filter(|(verb, path)| verb == "PATCH" && path.contains("/pods/a-"))
            .count()
    };
    let marked = marks(&h);
    for step in 1..=3 {
        let (actions, _) = h.cycle_at(NOW + 10 * step).await;
        let again: BTreeSet<String> = evictions(&actions).into_iter().map(|(p, _)| p).collect();
        assert_eq!(again, first, "{:?}", kinds(&actions));
        assert!(
            !kinds(&actions).contains(&"nominate b-0".to_string()),
            "the nomination stands: {:?}",
            kinds(&actions)
        );
        let (_, message) = waiting(&h.pod("b-0")).unwrap();
        assert!(
            message.contains("refused to evict")
                && message.contains("The disruption budget trainers-pdb needs 1 healthy pods"),
            "the budget is named: {message}"
        );
    }
    assert_eq!(marks(&h), marked, "the mark is written once");
    // best_effort's grace is 30 s; the nomination lapses 30 s + 120 s after the eviction.
    let (actions, _) = h.cycle_at(NOW + 200).await;
    let k = kinds(&actions);
    assert!(
        k.iter().any(|a| a == "nominate b-0"),
        "decided afresh, nominated again: {k:?}"
    );
}

/// `/v1/queue` shows a nominated job as preempting, with its nodes, not as running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_report_shows_a_nominated_job_as_preempting() {
    let h = harness().await;
    h.gang("a", "alpha", 2, 8);
    h.cycle().await;
    h.api.bind_released();
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "standard", 8, None));
    h.cycle().await;
    h.settle().await;
    let (view, plan, _) =
        cluster::controller::cycle_with(&h.live.stores(), &h.policy, &h.memory, NOW + 10).unwrap();
    let rows = cluster::controller::queue_report(&view, &plan, true).jobs;
    let row = rows.iter().find(|r| r.job == "ml/b-0").unwrap();
    assert_eq!(row.state, "preempting", "{rows:?}");
    assert_eq!(row.nodes.len(), 1);
    assert!(
        row.reason
            .as_deref()
            .unwrap()
            .contains("evicted pods to stop"),
        "{row:?}"
    );
    // The stopping gang is charged to no team and is no one's victim.
    assert!(!rows
        .iter()
        .any(|r| r.job == "ml/a" && r.team.as_deref() == Some("alpha")));
    // Yet its pods are still bound: `gantry_gpus_in_use` is what is bound.
    let mut metrics = String::new();
    cluster::controller::queue_report(&view, &plan, true)
        .render_metrics(&h.policy.program, &mut metrics);
    let in_use: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("gantry_gpus_in_use{"))
        .collect();
    assert_eq!(
        in_use,
        ["gantry_gpus_in_use{team=\"alpha\",tier=\"best_effort\"} 16"],
        "{metrics}"
    );
}

mod many_cycles {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Arrive {
            alpha: bool,
            tier: u8,
            gpus: u32,
            gang: bool,
        },
        Finish {
            pick: usize,
        },
        /// The kubelet finishes the pods that are stopping.
        Stop,
        /// The device plugin withholds `lost` failed GPUs of a node, or offers all again.
        Fail {
            node: u8,
            lost: u32,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (any::<bool>(), 0u8..3, prop::sample::select(vec![1u32, 2, 4, 8]), prop::bool::weighted(0.2))
                .prop_map(|(alpha, tier, gpus, gang)| Step::Arrive { alpha, tier, gpus, gang }),
            2 => any::<usize>().prop_map(|pick| Step::Finish { pick }),
            2 => Just(Step::Stop),
            1 => (0u8..2, 0u32..3).prop_map(|(node, lost)| Step::Fail { node, lost }),
        ]
    }

    const TIERS: [&str; 3] = ["critical", "standard", "best_effort"];
    const GUARANTEE: u32 = 8;
    /// The shortest a nomination stands: best_effort's grace (30 s) and the slack.
    const SHORTEST_HOLD_S: i64 = 30 + cluster::nomination::SLACK_S;

    fn team(p: &Value) -> String {
        p["metadata"]["labels"]["gantry.dev/team"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The job a pod belongs to, as the queue names it.
    fn job_of(key: &str, p: &Value) -> String {
        match p["metadata"]["labels"]["gantry.dev/gang"].as_str() {
            Some(g) => format!("ml/{g}"),
            None => key.to_string(),
        }
    }

    /// The nodes a job's pods are nominated to, when every pod's nomination stands at
    /// `now` (by the annotation's time; the test does not check seals).
    fn nominated(pods: &BTreeMap<String, Value>, job: &str, now: i64) -> Option<Vec<String>> {
        let members: Vec<&Value> = pods
            .iter()
            .filter(|(k, p)| job_of(k, p) == job)
            .map(|(_, p)| p)
            .collect();
        if members.is_empty() {
            return None;
        }
        members
            .iter()
            .map(|p| {
                let text = p["metadata"]["annotations"]["gantry.dev/nominated-node"].as_str()?;
                let (node, until) = cluster::nomination::read(text)?;
                (until > now).then(|| node.to_string())
            })
            .collect()
    }

    /// The nodes `actions` nominate `job`'s pods to.
    fn nominations(actions: &[Action], job: &str) -> BTreeSet<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Nominate { job: j, node, .. } if j == job => Some(node.clone()),
                _ => None,
            })
            .collect()
    }

    /// GPUs a team holds: pods bound or released and not stopping, and nominated ones.
    fn holding(pods: &BTreeMap<String, Value>, team_name: &str, now: i64) -> u32 {
        pods.iter()
            .filter(|(_, p)| team(p) == team_name)
            .filter(|(_, p)| !p["metadata"]["deletionTimestamp"].is_string())
            .filter(|(k, p)| {
                let gated = p["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty());
                !gated || nominated(pods, &job_of(k, p), now).is_some()
            })
            .map(|(_, p)| gpus_of(p))
            .sum()
    }

    /// GPUs a node holds: pods bound there (stopping ones too) and pods released to it.
    fn booked(pods: &BTreeMap<String, Value>, node: &str) -> u32 {
        pods.values()
            .filter(|p| {
                p["spec"]["nodeName"].as_str() == Some(node)
                    || (p["spec"]["nodeName"].is_null()
                        && p["spec"]["schedulingGates"].as_array().is_none_or(|g| g.is_empty())
                        && p.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                            .and_then(Value::as_str)
                            == Some(node))
            })
            .map(gpus_of)
            .sum()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(8), ..ProptestConfig::default() })]

        /// Random arrivals, completions, slow-stopping victims and failing GPUs: every
        /// preemptor gets one victim set while its nomination stands and is released
        /// where it was nominated; no node is released onto past its healthy GPUs; a
        /// team is reclaimed from only while it borrows.
        #[test]
        fn reclaims_hold_their_choice_across_cycles(steps in prop::collection::vec(step(), 6..22)) {
            replay(&steps)?;
        }
    }

    /// Found by the property test: a standard job that took over a withdrawn nomination
    /// kept it for one cycle only, and with it gone a best_effort job of its team
    /// reclaimed 8 GPUs from a team that held no more than its guarantee.
    #[test]
    fn a_reclaim_takes_nothing_from_a_team_at_its_guarantee_after_a_takeover() {
        let arrive = |alpha, tier, gpus| Step::Arrive {
            alpha,
            tier,
            gpus,
            gang: false,
        };
        let steps = [
            arrive(true, 1, 1),
            arrive(true, 1, 1),
            arrive(true, 1, 8),
            arrive(false, 2, 8),
            arrive(true, 2, 8),
            Step::Finish {
                pick: 12_056_188_959_811_820_993,
            },
            arrive(false, 1, 8),
            arrive(true, 2, 2),
        ];
        replay(&steps).unwrap();
    }

    /// Found by the property test: alpha's job inside its guarantee reclaimed 2 GPUs from
    /// beta, which held 5 of its 8; beta borrowed only by a job placed in the same cycle,
    /// not released while pods stopped on its node.
    #[test]
    fn a_reclaim_counts_no_placement_of_the_same_cycle() {
        let a = |alpha, tier, gpus| Step::Arrive {
            alpha,
            tier,
            gpus,
            gang: false,
        };
        let steps = [
            a(false, 2, 8),
            Step::Arrive {
                alpha: true,
                tier: 0,
                gpus: 4,
                gang: true,
            },
            a(false, 0, 2),
            a(false, 0, 1),
            a(true, 0, 1),
            a(false, 1, 4),
            a(false, 0, 1),
            Step::Finish {
                pick: 1_003_638_729_206_711_601,
            },
            Step::Finish {
                pick: 1_199_645_719_172_115_488,
            },
            a(false, 2, 2),
            a(true, 0, 2),
            a(true, 1, 1),
            a(true, 0, 2),
        ];
        replay(&steps).unwrap();
    }

    /// Plays `steps` on a fresh two-node cluster, a cycle after each, checking the
    /// property test's invariants at every cycle.
    fn replay(steps: &[Step]) -> Result<(), TestCaseError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
                let h = harness().await;
                let mut allocatable: BTreeMap<String, u32> =
                    [("n0".to_string(), 8), ("n1".to_string(), 8)].into();
                // Per node: the cycle its healthy GPUs last changed.
                let mut failed_at: BTreeMap<String, usize> = BTreeMap::new();
                // Per preemptor: the step and time its victims were chosen, their nodes.
                let mut victim_set: BTreeMap<String, (usize, i64, BTreeSet<String>)> = BTreeMap::new();
                let mut nominated_to: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for (n, s) in steps.iter().enumerate() {
                    let now = NOW + 10 * n as i64;
                    match *s {
                        Step::Arrive { alpha, tier, gpus, gang } => {
                            let (t, c) = if alpha { ("alpha", 'a') } else { ("beta", 'b') };
                            if gang {
                                for m in 0..2 {
                                    h.api.apply(Kind::Pods, gated(&format!("{c}g{n}-{m}"), t, TIERS[tier as usize], gpus, Some((&format!("{c}g{n}"), 2))));
                                }
                            } else {
                                h.api.apply(Kind::Pods, gated(&format!("{c}{n}"), t, TIERS[tier as usize], gpus, None));
                            }
                        }
                        Step::Finish { pick } => {
                            let bound: Vec<String> = h.api.pods().into_iter()
                                .filter(|(_, p)| p["spec"]["nodeName"].is_string())
                                .map(|(k, _)| k).collect();
                            if !bound.is_empty() {
                                h.api.delete(Kind::Pods, &bound[pick % bound.len()]);
                            }
                        }
                        Step::Stop => {
                            h.api.finish_deletions();
                        }
                        Step::Fail { node, lost } => {
                            let name = format!("n{node}");
                            h.api.update(Kind::Nodes, &name, |v| {
                                v["status"]["allocatable"]["nvidia.com/gpu"] = json!((8 - lost).to_string());
                            });
                            allocatable.insert(name.clone(), 8 - lost);
                            seen_healthy(&h, &name, 8 - lost).await;
                            failed_at.insert(name, n);
                        }
                    }
                    h.settle().await;
                    let before = h.api.pods();
                    let (actions, _) = h.cycle_at(now).await;
                    let after = h.api.pods();
                    // One victim set per preemptor while its nomination stands.
                    let mut new_victims: BTreeMap<String, Vec<String>> = BTreeMap::new();
                    // Preemptors with a victim taken for priority (which may be for quota
                    // room, anywhere), not by reclaim.
                    let mut for_priority: BTreeSet<String> = BTreeSet::new();
                    // GPUs taken from each team by other teams' jobs this cycle.
                    let mut taken: BTreeMap<String, u32> = BTreeMap::new();
                    for a in &actions {
                        if let Action::Evict { pod, for_job, marked: false, cause, .. } = a {
                            new_victims.entry(for_job.clone()).or_default().push(pod.name.clone());
                            if cause != "reclaim" {
                                for_priority.insert(for_job.clone());
                            }
                            let victim = &before[&format!("ml/{}", pod.name)];
                            let asker_team = before.iter().find(|(k, p)| &job_of(k, p) == for_job).map(|(_, p)| team(p));
                            if asker_team.as_deref().is_some_and(|t| t != team(victim)) {
                                *taken.entry(team(victim)).or_insert(0) += gpus_of(victim);
                            }
                        }
                    }
                    // Across teams, only from a team that borrows: what it held once this
                    // cycle's placements were made, before other teams took from it.
                    for (t, gpus) in &taken {
                        let held = holding(&after, t, now) + gpus;
                        prop_assert!(held > GUARANTEE,
                            "step {n}: {gpus} GPUs taken from {t}, which held {held} of its {GUARANTEE}: {:?}", kinds(&actions));
                    }
                    for a in &actions {
                        match a {
                            Action::Nominate { job, .. } => {
                                nominated_to.insert(job.clone(), nominations(&actions, job));
                            }
                            // A higher tier took its room: its choice is undone.
                            Action::Unnominate { pod } => {
                                let key = format!("ml/{}", pod.name);
                                let job = job_of(&key, &before[&key]);
                                nominated_to.remove(&job);
                                victim_set.remove(&job);
                            }
                            _ => {}
                        }
                    }
                    for (job, victims) in &new_victims {
                        // A reclaim frees room on the nodes its job takes, and no victim
                        // there is spare: without the smallest, the room would not suffice.
                        // (A priority victim set may free quota instead, anywhere.)
                        let per_member = before.iter().find(|(k, p)| &job_of(k, p) == job).map_or(0, |(_, p)| gpus_of(p));
                        let mut need: BTreeMap<String, u32> = BTreeMap::new();
                        for a in &actions {
                            if let Action::Nominate { job: j, node, .. } = a {
                                if j == job {
                                    *need.entry(node.clone()).or_insert(0) += per_member;
                                }
                            }
                        }
                        for (node, need) in need.iter().filter(|_| !for_priority.contains(job)) {
                            // By victim job: a gang goes whole.
                            let mut by_job: BTreeMap<String, u32> = BTreeMap::new();
                            for v in victims {
                                let key = format!("ml/{v}");
                                let p = &before[&key];
                                if p["spec"]["nodeName"].as_str() == Some(node.as_str()) {
                                    *by_job.entry(job_of(&key, p)).or_insert(0) += gpus_of(p);
                                }
                            }
                            let on: Vec<u32> = by_job.into_values().collect();
                            let (sum, least) = (on.iter().sum::<u32>(), on.iter().copied().min().unwrap_or(0));
                            prop_assert!(on.is_empty() || sum < need + least,
                                "step {n}: {job} needs {need} GPUs on {node}; evicted {on:?} there");
                        }
                        if let Some((first, at, nodes)) = victim_set.get(job) {
                            let failed = nodes.iter().any(|x| failed_at.get(x).is_some_and(|c| c >= first));
                            let stopping: Vec<&String> = before.iter()
                                .filter(|(_, p)| p["metadata"]["annotations"]["gantry.dev/preempted"].as_str()
                                    .is_some_and(|m| m.ends_with(&format!("for {job}"))))
                                .map(|(k, _)| k).collect();
                            prop_assert!(failed || now - at >= SHORTEST_HOLD_S || stopping.is_empty(),
                                "step {n}: a second victim set for {job} ({victims:?}) while its first (step {first}) is still stopping: {stopping:?}");
                        }
                        // Where the plan put the preemptor (its nomination), and where
                        // its victims were: a GPU failing on either may undo the choice.
                        let mut nodes: BTreeSet<String> = victims.iter()
                            .filter_map(|v| before[&format!("ml/{v}")]["spec"]["nodeName"].as_str().map(str::to_string))
                            .collect();
                        nodes.extend(nominations(&actions, job));
                        victim_set.insert(job.clone(), (n, now, nodes));
                    }
                    for a in &actions {
                        if let Action::Release { pod, node, job, .. } = a {
                            // A preemptor goes where it was nominated.
                            if let Some((first, at, nodes)) = victim_set.get(job) {
                                let failed = nodes.iter().any(|x| failed_at.get(x).is_some_and(|c| c >= first));
                                if !failed && now - at < SHORTEST_HOLD_S {
                                    let to = nominated_to.get(job).cloned().unwrap_or_default();
                                    prop_assert!(to.contains(node),
                                        "step {n}: {} released to {node}, nominated to {to:?}", pod.name);
                                }
                            }
                            // Never onto a node past its healthy GPUs.
                            let held = booked(&after, node);
                            prop_assert!(held <= allocatable[node],
                                "step {n}: {node} booked {held} of {} GPUs after releasing {}", allocatable[node], pod.name);
                        }
                    }
                    h.api.bind_released();
                }
                Ok(())
            })
    }
}

/// A higher tier that takes a nominated job's room while that job's victim still stops
/// holds the room as long, and is told it waits for the stopping pods, not for the
/// withdrawn job (which runs nowhere) to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nomination_taken_over_is_held_while_its_victims_stop() {
    // Alpha's pods stop within standard's grace, longer than best_effort's.
    let h = alpha_fills_both_nodes_at("standard").await;
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "best_effort", 4, None));
    let (actions, _) = h.cycle().await;
    assert_eq!(evictions(&actions).len(), 1, "{:?}", kinds(&actions));
    let (node, until) = cluster::nomination::read(
        h.pod("b-0")["metadata"]["annotations"]["gantry.dev/nominated-node"]
            .as_str()
            .unwrap(),
    )
    .map(|(n, u)| (n.to_string(), u))
    .unwrap();
    // The victim has not stopped when beta's standard job of the same size arrives.
    h.api
        .apply(Kind::Pods, gated("b-s", "beta", "standard", 4, None));
    let (actions, _) = h.cycle_at(NOW + 10).await;
    let k = kinds(&actions);
    assert!(k.contains(&"unnominate b-0".to_string()), "{k:?}");
    assert!(!k.iter().any(|a| a.starts_with("evict")), "{k:?}");
    let annotations = &h.pod("b-s")["metadata"]["annotations"];
    let (taken, taken_until) =
        cluster::nomination::read(annotations["gantry.dev/nominated-node"].as_str().unwrap())
            .unwrap();
    assert_eq!(taken, node);
    assert!(taken_until >= until, "{taken_until} < {until}");
    let (reason, message) = waiting(&h.pod("b-s")).unwrap();
    assert_eq!(reason, "Preempting");
    assert!(
        message.starts_with(&format!(
            "placed on {node} once the pods stopping there are gone"
        )) && message.contains("takes the room held for ml/b-0 (nomination withdrawn)"),
        "{message}"
    );
    // Once b-0's nomination is gone from its pod, the pods stopping for it still make
    // room for b-s: its nomination stands, b-s picks no victim of its own and is not
    // released while they stop. (b-0, within beta's guarantee, may reclaim again from
    // alpha, which still borrows.)
    for step in 2..=4 {
        let (actions, _) = h.cycle_at(NOW + 10 * step).await;
        let k = kinds(&actions);
        assert!(
            !k.iter().any(|a| a == "release b-s" || a == "nominate b-s"),
            "step {step}: {k:?}"
        );
        assert!(
            evictions(&actions)
                .iter()
                .all(|(_, for_job)| for_job != "ml/b-s"),
            "step {step}: {k:?}"
        );
        let held = cluster::nomination::read(
            h.pod("b-s")["metadata"]["annotations"]["gantry.dev/nominated-node"]
                .as_str()
                .unwrap_or_default(),
        )
        .map(|(n, u)| (n.to_string(), u));
        assert_eq!(held, Some((node.clone(), taken_until)), "step {step}");
    }
    h.api.finish_deletions();
    let (actions, _) = h.cycle_at(NOW + 50).await;
    assert!(
        kinds(&actions).contains(&"release b-s".to_string()),
        "{:?}",
        kinds(&actions)
    );
}

/// A higher tier may preempt a nominated job before it was released: its nomination is
/// withdrawn, and its pods, never bound, are not evicted (an eviction would delete them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nominated_job_preempted_by_a_higher_tier_is_withdrawn_not_evicted() {
    let h = alpha_fills_both_nodes().await;
    h.api
        .apply(Kind::Pods, gated("b-0", "beta", "best_effort", 4, None));
    let (actions, _) = h.cycle().await;
    assert_eq!(evictions(&actions).len(), 1, "{:?}", kinds(&actions));
    // Beta's standard job needs a whole node: b-0's nomination is in its way.
    h.api
        .apply(Kind::Pods, gated("b-s", "beta", "standard", 8, None));
    let mut withdrawn = false;
    for step in 1..=4 {
        let (actions, _) = h.cycle_at(NOW + 10 * step).await;
        let k = kinds(&actions);
        assert!(!k.contains(&"evict b-0".to_string()), "{k:?}");
        withdrawn |= k.contains(&"unnominate b-0".to_string());
        h.api.finish_deletions();
        h.api.bind_released();
    }
    assert!(withdrawn, "b-s took b-0's place");
    let b0 = h.pod("b-0");
    assert!(b0["metadata"]["deletionTimestamp"].is_null(), "{b0}");
    assert!(
        b0["spec"]["schedulingGates"].is_array(),
        "still queued: {b0}"
    );
    assert!(h.pod("b-s")["spec"]["nodeName"].is_string());
}
