//! The writes that only tell (a waiting pod's condition and its Event, a placed pod's
//! condition turned `False`) go out beside the cycles, not in them: a queue of thousands
//! told why it waits, or a slow status write, never holds up the next decision, the
//! releases and evictions the cycle makes, or a completion's refill.
//!
//! One telling per pod is kept, the newest: a reason that changes before its write went
//! out replaces it. A pod's tellings are written one at a time, in order; different
//! pods' concurrently, at most [`TELLINGS_IN_FLIGHT`] at a time. What was sent is
//! remembered until the view shows it, so the cycles that run meanwhile (whose cached
//! pods do not show it yet) do not send it again.

use crate::controller;
use crate::enact::{Action, PLACED};
use crate::pods::PodSeen;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How many tellings the leader has in flight at once (beside the cycle's own writes,
/// `controller::WRITES_IN_FLIGHT`).
pub const TELLINGS_IN_FLIGHT: usize = 16;

/// A telling sent but not yet seen in the view is forgotten after this long (the pod's
/// condition was changed by someone else, or its watch event was lost): it is then sent
/// again if a cycle still wants it.
const SENT_FOR: Duration = Duration::from_secs(60);

/// Whether an action only tells: the condition and Events of a waiting pod, the
/// condition of a placed one.
pub fn only_tells(a: &Action) -> bool {
    matches!(a, Action::Wait { .. } | Action::Placed { .. })
}

fn key(a: &Action) -> String {
    let pod = a.pod();
    format!("{}/{}", pod.namespace, pod.name)
}

/// What a telling leaves in the pod's condition: (reason, message); `Placed`'s message
/// is not compared.
fn said(a: &Action) -> Option<(String, Option<String>)> {
    match a {
        Action::Wait {
            reason, message, ..
        } => Some((reason.clone(), Some(message.clone()))),
        Action::Placed { .. } => Some((PLACED.to_string(), None)),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The newest telling of each pod not yet started, with the time it speaks for.
    queued: HashMap<String, (Action, i64)>,
    /// Pods in the order their tellings were queued.
    order: VecDeque<String>,
    in_flight: HashSet<String>,
    /// What each pod was last sent, until the view shows it.
    sent: HashMap<String, ((String, Option<String>), Instant)>,
    /// Refused tellings since the last cycle read them, for its errors and metrics.
    refused: Vec<(Action, String)>,
    /// Pods released while a telling of theirs was in flight: owed a `Placed` after it.
    owed: HashSet<String>,
}

/// The leader's tellings: queued by the cycles, written by [`Teller::run`].
#[derive(Debug, Clone, Default)]
pub struct Teller {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<tokio::sync::Notify>,
}

impl Teller {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A cycle's actions, less the tellings already sent and not yet in the view. A
    /// release of a pod whose waiting condition was sent (and may not show yet) turns
    /// its condition to `Placed` too, and the pod's queued telling is dropped: it is
    /// placed now.
    pub fn sift(&self, actions: Vec<Action>, pods: &BTreeMap<String, PodSeen>) -> Vec<Action> {
        let mut inner = self.lock();
        // What the view now shows (or a pod gone) is no longer remembered.
        inner.sent.retain(|k, ((reason, message), at)| {
            let Some(p) = pods.get(k) else { return false };
            let shown = p.waiting.as_ref().is_some_and(|(r, m)| {
                r == reason && message.as_ref().is_none_or(|message| message == m)
            });
            !shown && at.elapsed() < SENT_FOR
        });
        let mut out = Vec::with_capacity(actions.len());
        for mut a in actions {
            let k = key(&a);
            if let Some(s) = said(&a) {
                if inner.sent.get(&k).is_some_and(|(sent, _)| *sent == s) {
                    continue;
                }
            }
            if let Action::Nominate { .. } = &a {
                // Its own write says what it waits for; an older word queued would
                // follow and undo it.
                inner.queued.remove(&k);
            }
            if let Action::Release { told, .. } = &mut a {
                // A telling still queued was never written: the pod's condition is what
                // the view shows (or what is in flight), so nothing more to undo.
                let unwritten = inner.queued.remove(&k).is_some() && !inner.in_flight.contains(&k);
                if unwritten {
                    inner.sent.remove(&k);
                }
                if inner
                    .sent
                    .get(&k)
                    .is_some_and(|((reason, _), _)| reason != PLACED)
                {
                    *told = true;
                }
                // A wait still being written would land after the release's own
                // condition: the teller says Placed after it instead (`Teller::placed`).
                if *told && inner.in_flight.contains(&k) {
                    *told = false;
                    inner.owed.insert(k.clone());
                }
            }
            out.push(a);
        }
        out
    }

    /// Queues `actions` (tellings only; others are ignored) to be written as of `now`.
    pub fn tell(&self, actions: impl IntoIterator<Item = Action>, now: i64) {
        let mut inner = self.lock();
        let mut any = false;
        for a in actions {
            let Some(s) = said(&a) else { continue };
            let k = key(&a);
            inner.sent.insert(k.clone(), (s, Instant::now()));
            if inner.queued.insert(k.clone(), (a, now)).is_none() {
                inner.order.push_back(k);
            }
            any = true;
        }
        drop(inner);
        if any {
            self.wake.notify_one();
        }
    }

    /// After the cycle's writes: each nomination done is remembered as told (its write
    /// carried its condition), and each release done of a pod owed a `Placed` (`sift`)
    /// is told it, behind the telling that was in flight.
    pub fn written(&self, done: &[Action], now: i64) {
        let mut owed = Vec::new();
        {
            let mut inner = self.lock();
            for a in done {
                if let Action::Nominate {
                    reason, message, ..
                } = a
                {
                    let said = (reason.clone(), Some(message.clone()));
                    inner.sent.insert(key(a), (said, Instant::now()));
                }
            }
            if inner.owed.is_empty() {
                return;
            }
            for a in done {
                if let Action::Release { pod, node, .. } = a {
                    if inner.owed.remove(&key(a)) {
                        owed.push(Action::Placed {
                            pod: pod.clone(),
                            node: node.clone(),
                        });
                    }
                }
            }
            // A release refused owes nothing: the pod still waits.
            inner.owed.clear();
        }
        self.tell(owed, now);
    }

    /// Drops every queued telling: this replica no longer leads.
    pub fn drop_queued(&self) {
        let mut inner = self.lock();
        inner.queued.clear();
        inner.order.clear();
        inner.sent.clear();
        inner.owed.clear();
    }

    /// Tellings queued and not yet started.
    pub fn queued(&self) -> usize {
        self.lock().queued.len()
    }

    /// Tellings refused since the last call, with why.
    pub fn take_refused(&self) -> Vec<(Action, String)> {
        std::mem::take(&mut self.lock().refused)
    }

    /// The next telling to write: the first queued pod none of whose is in flight.
    fn next(&self) -> Option<(String, Action, i64)> {
        let mut inner = self.lock();
        while let Some(k) = inner.order.pop_front() {
            if inner.in_flight.contains(&k) {
                // Put back behind the one in flight when it is done (`done`).
                continue;
            }
            if let Some((a, now)) = inner.queued.remove(&k) {
                inner.in_flight.insert(k.clone());
                return Some((k, a, now));
            }
        }
        None
    }

    fn done(&self, k: &str, a: Action, result: Result<(), String>) {
        let mut inner = self.lock();
        inner.in_flight.remove(k);
        if inner.queued.contains_key(k) {
            inner.order.push_back(k.to_string());
        }
        if result.is_ok() {
            controller::log_enacted(&a);
        }
        if let Err(e) = result {
            tracing::warn!(error = %e, "a waiting reason was not written; told again by a later cycle");
            // Not sent after all: a later cycle sends it again.
            if inner
                .sent
                .get(k)
                .is_some_and(|(s, _)| Some(s) == said(&a).as_ref())
            {
                inner.sent.remove(k);
            }
            inner.refused.push((a, e));
        }
        drop(inner);
        self.wake.notify_one();
    }

    /// Writes queued tellings while `leading()` holds, [`TELLINGS_IN_FLIGHT`] at a
    /// time, until the task is aborted.
    pub async fn run(self, client: kube::Client, leading: impl Fn() -> bool + Send + 'static) {
        let slots = Arc::new(tokio::sync::Semaphore::new(TELLINGS_IN_FLIGHT));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let Some((k, a, now)) = self.next() else {
                drop(slot);
                self.wake.notified().await;
                continue;
            };
            if !leading() {
                self.drop_queued();
                self.lock().in_flight.remove(&k);
                continue;
            }
            let teller = self.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let result = controller::apply(&client, &a, now).await;
                teller.done(&k, a, result);
                drop(slot);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enact::PodRef;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("u-{name}"),
        }
    }

    /// A one-pod job's release onto n0, not told before.
    fn release(name: &str) -> Action {
        Action::Release {
            pod: pod(name),
            job: name.into(),
            node: "n0".into(),
            patch: serde_json::Value::Null,
            told: false,
        }
    }

    fn wait(name: &str, reason: &str, message: &str) -> Action {
        Action::Wait {
            pod: pod(name),
            reason: reason.into(),
            message: message.into(),
            event: true,
        }
    }

    fn seen(name: &str, waiting: Option<(&str, &str)>) -> (String, PodSeen) {
        let conditions: Vec<serde_json::Value> = waiting
            .map(|(r, m)| {
                serde_json::json!({"type": crate::pods::WAITING_CONDITION, "status": "True",
                                   "reason": r, "message": m})
            })
            .into_iter()
            .collect();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}")},
            "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": "Pending", "conditions": conditions}
        }))
        .unwrap_or_default();
        (format!("ml/{name}"), crate::pods::pod(&pod))
    }

    #[test]
    fn a_telling_sent_is_not_sent_again_until_the_view_shows_it() {
        let teller = Teller::default();
        let pods: BTreeMap<String, PodSeen> = [seen("a", None)].into_iter().collect();
        let first = teller.sift(vec![wait("a", "NoCapacity", "none free")], &pods);
        assert_eq!(first.len(), 1);
        teller.tell(first, 0);
        // The next cycle still sees no condition: the same words are not queued again.
        assert!(teller
            .sift(vec![wait("a", "NoCapacity", "none free")], &pods)
            .is_empty());
        // New words are.
        assert_eq!(
            teller
                .sift(vec![wait("a", "QuotaExhausted", "at its burst")], &pods)
                .len(),
            1
        );
        // Once the view shows it, what a cycle asks for is sent again.
        let shown: BTreeMap<String, PodSeen> = [seen("a", Some(("NoCapacity", "none free")))]
            .into_iter()
            .collect();
        assert!(teller.sift(Vec::new(), &shown).is_empty());
        assert_eq!(
            teller
                .sift(vec![wait("a", "NoCapacity", "none free")], &pods)
                .len(),
            1
        );
    }

    #[test]
    fn the_newest_telling_of_a_pod_replaces_a_queued_one_and_a_release_drops_it() {
        let teller = Teller::default();
        teller.tell(
            [wait("a", "NoCapacity", "x"), wait("b", "NoCapacity", "y")],
            0,
        );
        teller.tell([wait("a", "QuotaExhausted", "z")], 10);
        assert_eq!(teller.queued(), 2);
        let next = teller.next();
        assert!(
            matches!(&next, Some((k, Action::Wait { reason, .. }, 10)) if k == "ml/a" && reason == "QuotaExhausted"),
            "{next:?}"
        );
        // A release of b: its telling, never written, is dropped, and there is no
        // condition to turn False.
        let release = release("b");
        let pods: BTreeMap<String, PodSeen> = [seen("b", None)].into_iter().collect();
        let out = teller.sift(vec![release], &pods);
        assert!(matches!(
            out.as_slice(),
            [Action::Release { told: false, .. }]
        ));
        assert_eq!(teller.queued(), 0);
        assert!(teller.next().is_none());
    }

    #[test]
    fn a_pod_released_after_its_wait_was_written_is_told_placed() {
        let teller = Teller::default();
        teller.tell([wait("a", "NoCapacity", "x")], 0);
        let next = teller.next();
        assert!(next.is_some());
        let Some((k, a, _)) = next else { return };
        teller.done(&k, a, Ok(()));
        // Written, not yet in the view: the release turns it False.
        let pods: BTreeMap<String, PodSeen> = [seen("a", None)].into_iter().collect();
        let out = teller.sift(vec![release("a")], &pods);
        assert!(matches!(
            out.as_slice(),
            [Action::Release { told: true, .. }]
        ));
    }

    #[test]
    fn a_pod_released_while_its_wait_is_written_is_told_placed_after_it() {
        let teller = Teller::default();
        teller.tell([wait("a", "NoCapacity", "x")], 0);
        let next = teller.next();
        assert!(next.is_some());
        let Some((k, a, _)) = next else { return };
        let release = release("a");
        let pods: BTreeMap<String, PodSeen> = [seen("a", None)].into_iter().collect();
        let out = teller.sift(vec![release], &pods);
        // Its own condition write would race the wait in flight: none with the release.
        assert!(matches!(
            out.as_slice(),
            [Action::Release { told: false, .. }]
        ));
        teller.written(&out, 5);
        // Queued behind the wait in flight, and written once it is done.
        assert!(teller.next().is_none());
        teller.done(&k, a, Ok(()));
        assert!(matches!(
            teller.next(),
            Some((_, Action::Placed { node, .. }, 5)) if node == "n0"
        ));
    }

    #[test]
    fn a_pods_tellings_are_written_one_at_a_time() {
        let teller = Teller::default();
        teller.tell([wait("a", "NoCapacity", "x")], 0);
        let next = teller.next();
        assert!(next.is_some());
        let Some((k, a, _)) = next else { return };
        teller.tell([wait("a", "QuotaExhausted", "z")], 10);
        // a's first is in flight: its second waits for it.
        assert!(teller.next().is_none());
        teller.done(&k, a, Ok(()));
        assert!(matches!(teller.next(), Some((_, Action::Wait { .. }, 10))));
    }
}
