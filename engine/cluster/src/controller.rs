//! Gantry as the queue: each cycle (on a change in the cluster, debounced, and on a tick)
//! builds the decision snapshot from the view, runs `decide`, and carries the plan out
//! through the API server (`enact` says what to do; this file does it, in order; a refused
//! write skips the rest of its job's writes, and the next cycle starts again from what the
//! pods say).

use crate::capacity;
use crate::enact::{self, Action};
use crate::memory::{self, Memory};
use crate::queue::{self, QueueView};
use crate::seal_secret;
use crate::store::Stores;
use engine::cycle::Decider;
use engine::decide::plan::Plan;
use engine::decide::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use serve::queue::QueueReport;
use serve::state::{AppState, LoadedPolicy};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Changes closer together than this are one cycle.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// A cycle runs at least this often (ETAs, gang timeouts, reservations age).
const TICK: Duration = Duration::from_secs(10);
/// Cycles decided again at once because the bookings moved, in a row, before the loop
/// waits as usual (as the replay re-decides one instant at most 8 times).
const MAX_REDECIDES_IN_A_ROW: u32 = 7;
/// The `source.component` of gantry's Events and the field manager of its patches.
pub const COMPONENT: &str = "gantry";

/// One cycle's decisions: the view, the plan and the actions, from the caches alone.
pub fn cycle(
    stores: &Stores,
    policy: &LoadedPolicy,
    now: i64,
) -> Result<(QueueView, Plan, Vec<Action>), String> {
    cycle_with(stores, policy, &Memory::default(), now)
}

/// [`cycle`] with what the engine remembers (usage, autoscaler state, starts).
pub fn cycle_with(
    stores: &Stores,
    policy: &LoadedPolicy,
    memory: &Memory,
    now: i64,
) -> Result<(QueueView, Plan, Vec<Action>), String> {
    cycle_kept(stores, policy, memory, now, &mut Kept::default())
}

/// What a controller keeps from one cycle to the next: the view ([`queue::ViewKeeper`])
/// and the placer's indexes ([`Decider`]). Neither changes a plan, only its cost.
#[derive(Debug, Default)]
pub struct Kept {
    pub view: queue::ViewKeeper,
    pub decider: Decider,
    /// How long the last cycle's steps took.
    pub phases: Phases,
}

/// The wall time of one cycle's steps: view, snapshot, decision, actions.
#[derive(Debug, Default, Clone, Copy)]
pub struct Phases {
    pub view: std::time::Duration,
    pub snapshot: std::time::Duration,
    pub decide: std::time::Duration,
    pub actions: std::time::Duration,
}

/// What `/v1/queue` shows of a cycle: its jobs, and the gated pods it does not queue.
pub fn queue_report(view: &QueueView, plan: &Plan, leading: bool) -> QueueReport {
    let mut report = QueueReport::new(plan, &view.jobs, leading);
    report.bound = Some(view.bound.clone());
    // A nominated job holds its nodes but waits for its victims to stop.
    for row in &mut report.jobs {
        if let Some(n) = view.nominated.get(&row.job) {
            row.state = "preempting".into();
            row.reason = Some(format!(
                "nominated to {} until {}; waits for {} evicted pod{} to stop",
                row.nodes.join(", "),
                engine::decide::plan::wall_time(n.until),
                n.victims.len(),
                if n.victims.len() == 1 { "" } else { "s" }
            ));
        }
    }
    report.not_queued(
        view.unqueued
            .iter()
            .map(|u| (u.pod.as_str(), u.reason, u.message.as_str(), u.gpus)),
    );
    report
}

/// [`cycle_with`] through what the last cycle [`Kept`] (same plan, less work for what did
/// not change).
pub fn cycle_kept(
    stores: &Stores,
    policy: &LoadedPolicy,
    memory: &Memory,
    now: i64,
    kept: &mut Kept,
) -> Result<(QueueView, Plan, Vec<Action>), String> {
    let trust = queue::Trust {
        seal: stores.seal.as_ref(),
        program: Some(&policy.program),
        now,
        predictions: memory.predictions.on.then_some(&memory.predictions),
    };
    let start = std::time::Instant::now();
    let mut view = kept.view.view(stores, trust)?;
    let viewed = std::time::Instant::now();
    let mut snapshot = snapshot(&mut view, stores.pods.objects(), policy)?;
    // Reasons become pod conditions, which must not count down (`crate::telling`).
    snapshot.wall_clock = true;
    snapshot.usage = memory.usage.clone();
    snapshot.scale_state = memory.arrivals(&view.fleet, now).state;
    snapshot.starts = memory.starts.clone();
    for js in snapshot.jobs.iter_mut().filter(|js| js.running.is_none()) {
        js.job.booked = memory.booked.0.get(&js.job.id).cloned();
    }
    let built = std::time::Instant::now();
    let plan = kept.decider.decide(&policy.program, &snapshot, now);
    let decided = std::time::Instant::now();
    let actions = enact::actions(&view, stores.pods.objects(), &plan, now);
    kept.phases = Phases {
        view: viewed - start,
        snapshot: built - viewed,
        decide: decided - built,
        actions: decided.elapsed(),
    };
    Ok((view, plan, actions))
}

/// The decision snapshot of `view`. A running job that does not fit its node as gantry
/// knows it (the node shrank, a GPU failed under it) is a problem of one of two kinds. A
/// nomination on that node is a promise that can no longer be kept: it is given up and
/// the job waits again (`crate::nomination`), so pods that run keep what they hold;
/// unless it fits once it takes over the GPUs that pods stopping there hold: other
/// nominations' victims, or pods whose nomination was withdrawn
/// (`nomination::take_over_stopping`). A
/// running pod that still does not fit is left out with a warning rather than stopping the
/// queue, and its node is closed: what it holds it still holds, so its node takes nothing
/// new rather than being counted free. One build when everything fits.
pub fn snapshot(
    view: &mut QueueView,
    pods: &std::collections::BTreeMap<String, crate::pods::PodSeen>,
    policy: &LoadedPolicy,
) -> Result<Snapshot, String> {
    let mut left_out: BTreeSet<String> = BTreeSet::new();
    let mut left_out_on: BTreeSet<String> = BTreeSet::new();
    // Nominations that took over other victims' stopping members (once each).
    let mut taken_over: BTreeSet<String> = BTreeSet::new();
    // Each round gives up nominations or leaves jobs out, so the jobs run out first.
    let mut snapshot = loop {
        // Sized once: a filtered collect grows by doubling, moving every job (about
        // 600 bytes each, tens of MB at production shape) at each step.
        let mut jobs = Vec::with_capacity(view.jobs.len());
        jobs.extend(
            view.jobs
                .iter()
                .filter(|j| !left_out.contains(&j.id))
                .cloned(),
        );
        let errors = match Snapshot::build(
            std::sync::Arc::clone(&view.fleet),
            jobs,
            Vec::new(),
            &policy.mig,
        ) {
            Ok(s) => break s,
            Err(errors) => errors,
        };
        let bad: BTreeSet<&str> = errors.iter().map(|e| e.job.as_str()).collect();
        let short: BTreeSet<&str> = view
            .jobs
            .iter()
            .filter(|j| bad.contains(j.id.as_str()))
            .flat_map(|j| j.placement.iter().map(|m| m.node.as_str()))
            .collect();
        let unfit: Vec<String> = view
            .nominated
            .iter()
            .filter(|(id, n)| {
                bad.contains(id.as_str()) || n.nodes.iter().any(|x| short.contains(x.as_str()))
            })
            .map(|(id, _)| id.clone())
            .collect();
        if !unfit.is_empty() {
            let mut took = false;
            for id in &unfit {
                if taken_over.insert(id.clone()) {
                    took |= crate::nomination::take_over_stopping(view, pods, id);
                }
            }
            if took {
                continue;
            }
            for id in unfit {
                tracing::info!(job = %id, "nomination given up: the job no longer fits the nodes it was nominated to");
                crate::nomination::give_up(view, pods, &id);
            }
            continue;
        }
        let before = left_out.len();
        for e in &errors {
            tracing::warn!(job = %e.job, error = %e.message, "left out of the cycle");
            left_out.insert(e.job.clone());
        }
        left_out_on.extend(short.iter().map(|n| n.to_string()));
        if left_out.len() == before {
            return Err(errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "));
        }
    };
    snapshot.closed = view.closed.keys().copied().collect();
    snapshot.closed.extend(
        view.fleet
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| left_out_on.contains(&n.name))
            .map(|(i, _)| i),
    );
    snapshot.interrupted = view.interrupted.keys().copied().collect();
    Ok(snapshot)
}

pub(crate) fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(COMPONENT.into()),
        ..PatchParams::default()
    }
}

/// A `policy/v1` Eviction with the tier's grace. Written out rather than through
/// `Api::evict`, whose body (kube 5) names the options `delete_options`, which the API
/// server does not read: the grace period would be lost. Sent raw so that a refusal keeps
/// its Status's causes: a PodDisruptionBudget is named only there.
async fn evict(client: &Client, pod: &enact::PodRef, grace_s: u64) -> Result<(), String> {
    use http_body_util::BodyExt;
    let body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        "deleteOptions": {
            "gracePeriodSeconds": grace_s,
            "preconditions": {"uid": pod.uid}
        }
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{}/pods/{}/eviction",
        pod.namespace, pod.name
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(kube::client::Body::from(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
    .map_err(|e| crate::bounded::brief(&e))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| crate::bounded::brief(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    // A Status is small; anything past this is not read.
    let limited = http_body_util::Limited::new(response.into_body(), 64 * 1024);
    let text = limited
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Err(refusal(status, &text))
}

/// A refused request's words: the Status's message and each cause's, or the HTTP status.
pub fn refusal(status: http::StatusCode, body: &[u8]) -> String {
    let Ok(s) = serde_json::from_slice::<serde_json::Value>(body) else {
        return format!("HTTP {status}");
    };
    let mut words = s
        .get("message")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_string();
    let causes = s
        .pointer("/details/causes")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("message").and_then(serde_json::Value::as_str));
    for c in causes {
        words.push_str(if words.is_empty() { "" } else { ": " });
        words.push_str(c);
    }
    if words.is_empty() {
        words = format!("HTTP {status}");
    }
    crate::bounded::cut(&format!("{words} ({})", status.as_u16()))
}

/// Carries out one action.
pub async fn apply(client: &Client, action: &Action, now: i64) -> Result<(), String> {
    let pod = action.pod();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let fail = |what: &str, e: kube::Error| {
        let e = crate::bounded::brief(&e);
        format!("{what} {}/{}: {e}", pod.namespace, pod.name)
    };
    match action {
        Action::Assign { node, seal, .. } => {
            let patch = enact::assign_patch(&pod.uid, Some(node), seal.as_deref());
            pods.patch(&pod.name, &params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| fail("assign", e))?;
        }
        Action::Unassign { .. } => {
            let patch = enact::assign_patch(&pod.uid, None, None);
            pods.patch(&pod.name, &params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| fail("unassign", e))?;
        }
        Action::Release {
            job,
            node,
            patch,
            told,
            ..
        } => {
            pods.patch(&pod.name, &params(), &Patch::Merge(patch))
                .await
                .map_err(|e| fail("release", e))?;
            // kube-scheduler's own Event says where it binds; the condition, which said
            // the pod waits, now says it does not.
            if *told {
                let message = format!("job {job} placed on {node} by gantry");
                let patch = enact::condition_patch(false, enact::PLACED, &message, now);
                pods.patch_status(&pod.name, &params(), &Patch::Strategic(&patch))
                    .await
                    .map_err(|e| fail("condition", e))?;
            }
        }
        Action::Nominate {
            text,
            seal,
            reason,
            message,
            ..
        } => {
            let patch =
                enact::nominating_patch(&pod.uid, (text, seal.as_deref()), (reason, message), now);
            pods.patch_status(&pod.name, &params(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| fail("nominate", e))?;
        }
        Action::Unnominate { .. } => {
            let patch = enact::nomination_patch(&pod.uid, None);
            pods.patch(&pod.name, &params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| fail("unnominate", e))?;
        }
        Action::Evict {
            job,
            for_job,
            cause,
            grace_s,
            marked,
            mark_seal,
            ..
        } => {
            if !marked {
                let mark = enact::eviction_mark(cause, for_job);
                let patch = json!({"metadata": {"uid": pod.uid, "annotations": {
                    crate::pods::PREEMPTED_ANNOTATION: mark,
                    crate::pods::PREEMPTION_SEAL_ANNOTATION: mark_seal,
                }}});
                pods.patch(&pod.name, &params(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| fail("mark", e))?;
            }
            evict(client, pod, *grace_s)
                .await
                .map_err(|e| format!("evict {}/{}: {e}", pod.namespace, pod.name))?;
            let message = format!("job {job} preempted for {for_job} ({cause}); grace {grace_s}s");
            crate::events::record(client, pod, "Warning", "Preempted", &message, now).await?;
        }
        Action::Placed { node, .. } => {
            let message = format!("placed on {node}");
            let patch = enact::condition_patch(false, enact::PLACED, &message, now);
            pods.patch_status(&pod.name, &params(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| fail("condition", e))?;
        }
        Action::Wait {
            reason,
            message,
            event: with_event,
            ..
        } => {
            let patch = enact::condition_patch(true, reason, message, now);
            pods.patch_status(&pod.name, &params(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| fail("condition", e))?;
            if *with_event {
                crate::events::record(client, pod, "Normal", reason, message, now).await?;
            }
        }
    }
    Ok(())
}

/// How many writes the leader has in flight at once: client-go's default QPS is 5 with
/// bursts of 10; kube-scheduler's is 50/100. Writes to different pods do not wait on
/// each other, and the API server answers each in a few milliseconds, so a queue of
/// thousands is told in seconds rather than a minute.
pub const WRITES_IN_FLIGHT: usize = 32;

/// Carries out `actions` while `leading()` holds: each job's writes in order (a gang is
/// never released past a failed assignment: a refused write skips the rest of that job's
/// writes this cycle), other jobs' and pods' writes concurrently, at most
/// [`WRITES_IN_FLIGHT`] at a time, so one slow or refused write (a PodDisruptionBudget
/// refusing an eviction) holds up nothing else. Returns what was done and what was
/// refused, with why, each in the order of `actions`.
pub async fn enact(
    client: &Client,
    actions: &[Action],
    now: i64,
    leading: impl Fn() -> bool,
) -> (Vec<Action>, Vec<(Action, String)>) {
    use futures::StreamExt;
    // Sequences: one per job, in the order its actions come; one per action without a job.
    let mut sequences: Vec<Vec<usize>> = Vec::new();
    let mut of_job: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, a) in actions.iter().enumerate() {
        match a.job() {
            Some(j) => match of_job.get(j).and_then(|&s| sequences.get_mut(s)) {
                Some(sequence) => sequence.push(i),
                None => {
                    of_job.insert(j, sequences.len());
                    sequences.push(vec![i]);
                }
            },
            None => sequences.push(vec![i]),
        }
    }
    let leading = &leading;
    let outcomes: Vec<(usize, Result<(), String>)> = futures::stream::iter(sequences)
        .map(|sequence| async move {
            let mut out = Vec::new();
            for i in sequence {
                let Some(a) = actions.get(i) else { continue };
                if !leading() {
                    break;
                }
                let result = apply(client, a, now).await;
                let failed = result.is_err() && a.refusal_stops_job();
                out.push((i, result));
                if failed {
                    break;
                }
            }
            out
        })
        .buffer_unordered(WRITES_IN_FLIGHT)
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let mut outcomes = outcomes;
    outcomes.sort_by_key(|(i, _)| *i);
    let mut done = Vec::new();
    let mut refused: Vec<(Action, String)> = Vec::new();
    for (i, result) in outcomes {
        let Some(a) = actions.get(i) else { continue };
        match result {
            Ok(()) => {
                log_enacted(a);
                done.push(a.clone());
            }
            Err(e) => {
                tracing::warn!(error = %e, "a write was refused; the next cycle starts from what the pods say");
                refused.push((a.clone(), e));
            }
        }
    }
    (done, refused)
}

/// The last cycle, for `/v1/queue` and tests.
#[derive(Debug, Clone, Default)]
pub struct LastCycle {
    pub at: i64,
    pub plan: Option<Plan>,
    pub actions: usize,
    pub errors: Vec<String>,
}

/// What the controller works with.
pub struct Queue {
    pub client: Client,
    pub stores: Arc<Mutex<Stores>>,
    /// Bumped on every change in the cluster view.
    pub changes: tokio::sync::watch::Receiver<u64>,
    pub state: Arc<AppState>,
    pub last: Arc<Mutex<LastCycle>>,
    /// Whether this replica holds the Lease.
    pub leader: tokio::sync::watch::Receiver<bool>,
    /// Where the Lease and the memory ConfigMap live.
    pub namespace: String,
    pub save_every: Duration,
    /// Drive the cluster's autoscaler (placeholders and node marks); `None`: leave
    /// capacity alone.
    pub capacity: Option<capacity::Settings>,
    /// Plan with runtimes predicted from teams' history (`crate::predictions`).
    pub predict_runtimes: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// How long one read of the engine's memory may take before it is tried again.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The waits between reads of the memory that failed: doubling from the first to the
/// last.
const LOAD_BACKOFF_MIN: Duration = Duration::from_millis(500);
const LOAD_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long a follower waits before reading the seal's Secret again when the leader has
/// not made it yet.
const SEAL_MISSING_RETRY: Duration = Duration::from_secs(5);

/// How often the leader writes the engine's memory (when it changed).
pub const SAVE_EVERY: Duration = Duration::from_secs(60);

/// How long until the next cycle when nothing changes: until the plan's next decision
/// time (a protection ending, which the replay decides at too), at most a TICK.
fn wake_after(next_decision_at: Option<i64>, now: i64) -> Duration {
    next_decision_at
        .and_then(|at| u64::try_from(at.saturating_sub(now)).ok())
        .map_or(TICK, |s| Duration::from_secs(s.max(1)).min(TICK))
}

/// Runs cycles until the task is aborted, enacting only while `leader` says this replica
/// holds the Lease (and stopping mid-cycle when it no longer does). The engine's memory
/// is read from the cluster at start and whenever this replica becomes the leader, and
/// the leader writes it back at most once a minute.
pub async fn run(q: Queue) {
    let Queue {
        client,
        stores,
        mut changes,
        state,
        last,
        mut leader,
        namespace,
        save_every,
        capacity: capacity_settings,
        predict_runtimes,
    } = q;
    let mut memory = Memory::default();
    // The view and the placer's indexes, kept from cycle to cycle (plans are `decide`'s).
    let mut kept_by_cycles = Kept::default();
    // The policy revision whose tiers' PriorityClasses were last checked.
    let mut classes_checked: Option<String> = None;
    let mut loaded = false;
    let mut load_backoff = LOAD_BACKOFF_MIN;
    let mut was_leading = false;
    let mut saved = memory.clone();
    let mut saved_at: Option<std::time::Instant> = None;
    // The assignment seal's key once read, and when to try again after a failed read.
    let mut seal: Option<crate::seal::Seal> = None;
    let mut seal_retry_at: Option<std::time::Instant> = None;
    let mut seal_backoff = LOAD_BACKOFF_MIN;
    // Waiting reasons are written beside the cycles (`crate::teller`); the writer ends
    // with this task.
    let teller = crate::teller::Teller::default();
    let _teller_task = AbortOnDrop(tokio::spawn(teller.clone().run(client.clone(), {
        let leader = leader.clone();
        move || *leader.borrow()
    })));
    // The next cycle comes at a change, at the last plan's next decision time, or a TICK
    // on (a cycle skipped leaves no time to wake at).
    let mut next_decision_at: Option<i64> = None;
    let mut moved_in_a_row = 0;
    loop {
        let wake_in = wake_after(next_decision_at.take(), state.now());
        tokio::select! {
            _ = tokio::time::timeout(wake_in, changes.changed()) => {}
            _ = leader.changed() => {}
        }
        tokio::time::sleep(DEBOUNCE).await;
        changes.borrow_and_update();
        let leading = *leader.borrow_and_update();
        if leading && !was_leading {
            // What the last leader wrote since this replica read it; and the seal's key
            // at once, which a new leader makes if there is none.
            loaded = false;
            seal_retry_at = None;
        }
        if !leading {
            teller.drop_queued();
        }
        was_leading = leading;
        if !loaded {
            // Nothing is decided, enacted or written before the memory is read: a leader
            // that went on without it would write an empty memory over days of usage.
            // Only a missing ConfigMap starts empty (`memory::load`).
            match tokio::time::timeout(LOAD_TIMEOUT, memory::load(&client, &namespace)).await {
                Ok(Ok(m)) => {
                    memory = m;
                    memory.predictions.on = predict_runtimes;
                    saved = memory.clone();
                    saved_at = None;
                    loaded = true;
                    load_backoff = LOAD_BACKOFF_MIN;
                }
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => e,
                        _ => format!("no answer in {} s", LOAD_TIMEOUT.as_secs()),
                    };
                    tracing::warn!(%error, retry_in_s = load_backoff.as_secs_f64(), "engine memory not read; the queue waits until it is");
                    tokio::time::sleep(load_backoff).await;
                    load_backoff = (load_backoff * 2).min(LOAD_BACKOFF_MAX);
                    continue;
                }
            }
        }
        // The seal's key, from its Secret (`crate::seal_secret`). Every replica reads it,
        // since each one's extender trusts only sealed assignments; the leader makes it when
        // there is none and places nothing until it holds it.
        if seal.is_none() && seal_retry_at.is_none_or(|t| std::time::Instant::now() >= t) {
            let read =
                seal_secret::load_or_make(&client, &namespace, memory.seal_key.as_deref(), leading);
            match tokio::time::timeout(LOAD_TIMEOUT, read).await {
                Ok(Ok(seal_secret::Found::Key(key))) => {
                    match stores.lock() {
                        Ok(mut s) => s.seal = Some(key.clone()),
                        Err(p) => p.into_inner().seal = Some(key.clone()),
                    }
                    seal = Some(key);
                    seal_backoff = LOAD_BACKOFF_MIN;
                }
                // A follower waits for the leader to make it, reading again in a while.
                Ok(Ok(seal_secret::Found::Missing)) => {
                    seal_retry_at = Some(std::time::Instant::now() + SEAL_MISSING_RETRY);
                }
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => e,
                        _ => format!("no answer in {} s", LOAD_TIMEOUT.as_secs()),
                    };
                    tracing::warn!(%error, retry_in_s = seal_backoff.as_secs_f64(), "the assignment seal's key is not read; nothing is placed until it is");
                    seal_retry_at = Some(std::time::Instant::now() + seal_backoff);
                    seal_backoff = (seal_backoff * 2).min(LOAD_BACKOFF_MAX);
                }
            }
        }
        if leading && seal.is_none() {
            continue;
        }
        if leading && memory.seal_key.is_some() {
            // A key an older gantry kept in the memory ConfigMap leaves it now that the
            // Secret holds it (a failed write is retried with the next save).
            memory.seal_key = None;
            if let Err(error) = memory::save(&client, &namespace, &memory).await {
                tracing::warn!(%error, "the old copy of the seal's key is still in the memory ConfigMap; removed at the next write");
            } else {
                saved = memory.clone();
                saved_at = Some(std::time::Instant::now());
            }
        }
        let Some(policy) = state.policy() else {
            continue;
        };
        if classes_checked.as_deref() != Some(policy.revision.as_str()) {
            classes_checked = Some(policy.revision.clone());
            // Bounded: a hung API server must not hold up the queue for it.
            let check = crate::priority_classes::check(&client, &policy.program);
            let notes = tokio::time::timeout(Duration::from_secs(10), check)
                .await
                .unwrap_or_else(|_| {
                    vec![
                        "the tiers' PriorityClasses could not be read within 10 s; not checked"
                            .into(),
                    ]
                });
            for n in &notes {
                tracing::warn!(problem = %n, "a tier's PriorityClass");
            }
            match stores.lock() {
                Ok(mut s) => s.class_notes = notes,
                Err(p) => p.into_inner().class_notes = notes,
            }
        }
        let now = state.now();
        // Deciding takes a CPU for a while at scale: off the runtime's workers, so the
        // webhook and the extender keep answering meanwhile.
        let decided = {
            let (stores, policy, snapshot_memory, settings) = (
                stores.clone(),
                policy.clone(),
                memory.clone(),
                capacity_settings.clone(),
            );
            let mut kept = std::mem::take(&mut kept_by_cycles);
            let cycle = tokio::task::spawn_blocking(move || {
                let s = match stores.lock() {
                    Ok(s) => s,
                    Err(p) => p.into_inner(),
                };
                let decided = cycle_kept(&s, &policy, &snapshot_memory, now, &mut kept).map(
                    |(view, plan, actions)| {
                        let (changes, gauges) = settings.map_or((Vec::new(), Vec::new()), |c| {
                            (
                                capacity::actions(&policy.program, &plan, &s, &c),
                                capacity::gauges(&policy.program, &s, &c.namespace),
                            )
                        });
                        (view, plan, actions, changes, gauges)
                    },
                );
                (decided, kept)
            })
            .await;
            match cycle {
                Ok((decided, kept)) => {
                    kept_by_cycles = kept;
                    decided
                }
                // A panicked cycle leaves nothing kept: the next one starts fresh.
                Err(e) => Err(format!("the cycle failed: {e}")),
            }
        };
        let (mut view, plan, actions, changes, gauges) = match decided {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "queue cycle skipped");
                continue;
            }
        };
        next_decision_at = plan.next_decision_at;
        state.metrics.set_pools(gauges);
        // Every replica shows the queue; only the leader changes the cluster.
        let mut report = queue_report(&view, &plan, leading);
        report.revision = policy.revision.clone();
        state.set_queue_report(report);
        let mut errors = Vec::new();
        let mut done = 0;
        let planned = actions.len();
        if leading {
            // Tellings are queued for the teller and not waited for; the rest (assign,
            // nominate, evict, release) is carried out before the next decision, which
            // must see it.
            let sifted = match stores.lock() {
                Ok(s) => teller.sift(actions, s.pods.objects()),
                Err(p) => teller.sift(actions, p.into_inner().pods.objects()),
            };
            let (tellings, decisive): (Vec<Action>, Vec<Action>) =
                sifted.into_iter().partition(crate::teller::only_tells);
            teller.tell(tellings, now);
            let (succeeded, mut refused) =
                enact(&client, &decisive, now, || *leader.borrow()).await;
            match stores.lock() {
                Ok(mut s) => s.remember_evictions(&succeeded, &refused),
                Err(p) => p.into_inner().remember_evictions(&succeeded, &refused),
            }
            teller.written(&succeeded, now);
            refused.extend(teller.take_refused());
            for (a, e) in &refused {
                state.metrics.enactment_error(action_name(a));
                errors.push(e.clone());
            }
            done = succeeded.len();
            count(&state, &view, &plan, &succeeded, now);
            let (changed, refused) =
                crate::capacity_writes::enact(&client, &changes, now, || *leader.borrow()).await;
            for (a, e) in &refused {
                state
                    .metrics
                    .enactment_error(crate::capacity_writes::name(a));
                errors.push(e.clone());
            }
            done += changed;
            let pools = memory::node_pools(&view.fleet);
            memory.arrived(memory.arrivals(&view.fleet, now));
            if let Some(learned) = view.learned.take() {
                memory.predictions = crate::predictions::Predictions {
                    on: true,
                    ..learned
                };
            }
            // Decided again at once (within a second) while the bookings move, a few
            // times in a row at most: a booking can move back and forth.
            if memory.remember(&plan, &pools) && moved_in_a_row < MAX_REDECIDES_IN_A_ROW {
                moved_in_a_row += 1;
                next_decision_at = Some(now);
            } else {
                moved_in_a_row = 0;
            }
            memory.account(&view.jobs, now);
            if memory != saved && saved_at.is_none_or(|t| t.elapsed() >= save_every) {
                match memory::save(&client, &namespace, &memory).await {
                    Ok(()) => {
                        saved = memory.clone();
                        saved_at = Some(std::time::Instant::now());
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "engine memory not written; retried next cycle")
                    }
                }
            }
            if planned > 0 || !changes.is_empty() {
                tracing::info!(
                    actions = planned + changes.len(),
                    done,
                    errors = errors.len(),
                    "queue cycle"
                );
            }
        }
        state.metrics.set_api_writes(crate::api_writes::counts());
        let mut l = match last.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        *l = LastCycle {
            at: now,
            plan: Some(plan),
            actions: done,
            errors,
        };
    }
}

/// Aborts its task when dropped: a task that must not outlive the one that started it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The decision log's line for an action carried out (see
/// `serve::decision_log`): placements, evictions with their cause, and waiting
/// reasons that changed. Assignments (the first phase of a placement) are at debug level.
pub(crate) fn log_enacted(a: &Action) {
    use serve::decision_log::{admit, TARGET};
    let level = match a {
        Action::Assign { .. } | Action::Unassign { .. } | Action::Placed { .. } => {
            tracing::Level::DEBUG
        }
        _ => tracing::Level::INFO,
    };
    let Some(dropped) = admit(level) else {
        return;
    };
    let pod = a.pod();
    let (namespace, name) = (pod.namespace.as_str(), pod.name.as_str());
    match a {
        Action::Assign { job, node, .. } => tracing::debug!(
            target: TARGET, decision = "assign", namespace, pod = name, job, node, dropped,
            "assign: {namespace}/{name} to {node}"
        ),
        Action::Unassign { .. } => tracing::debug!(
            target: TARGET, decision = "unassign", namespace, pod = name, dropped,
            "unassign: {namespace}/{name}"
        ),
        Action::Release { job, node, .. } => tracing::info!(
            target: TARGET, decision = "place", namespace, pod = name, job, node, dropped,
            "place: {namespace}/{name} (job {job}) on {node}"
        ),
        Action::Evict {
            job,
            for_job,
            cause,
            grace_s,
            ..
        } => tracing::info!(
            target: TARGET, decision = "evict", namespace, pod = name, job, for_job, cause,
            grace_s, dropped,
            "evict: {namespace}/{name} (job {job}) for {for_job}: {cause}"
        ),
        Action::Nominate { job, node, .. } => tracing::info!(
            target: TARGET, decision = "nominate", namespace, pod = name, job, node, dropped,
            "nominate: {namespace}/{name} (job {job}) to {node} while its victims stop"
        ),
        Action::Unnominate { .. } => tracing::info!(
            target: TARGET, decision = "unnominate", namespace, pod = name, dropped,
            "unnominate: {namespace}/{name} (preempted before it was released)"
        ),
        Action::Placed { node, .. } => tracing::debug!(
            target: TARGET, decision = "placed", namespace, pod = name, node, dropped,
            "placed: {namespace}/{name} bound to {node}"
        ),
        Action::Wait {
            reason, message, ..
        } => tracing::info!(
            target: TARGET, decision = "wait", namespace, pod = name, reason, detail = message, dropped,
            "wait: {namespace}/{name}: {reason}"
        ),
    }
}

fn action_name(a: &Action) -> &'static str {
    match a {
        Action::Assign { .. } => "assign",
        Action::Unassign { .. } => "unassign",
        Action::Release { .. } => "release",
        Action::Evict { .. } => "evict",
        Action::Nominate { .. } => "nominate",
        Action::Unnominate { .. } => "unnominate",
        Action::Placed { .. } => "placed",
        Action::Wait { .. } => "wait",
    }
}

/// Metrics of what was carried out: evictions (and the work they lost) and the waits of
/// jobs released, by team and tier.
fn count(state: &AppState, view: &QueueView, plan: &Plan, done: &[Action], now: i64) {
    // `view.jobs` is sorted by id.
    let job = |id: &str| {
        view.jobs
            .binary_search_by(|j| j.id.as_str().cmp(id))
            .ok()
            .and_then(|i| view.jobs.get(i))
    };
    let lost: std::collections::BTreeMap<&str, f64> = plan
        .preemptions
        .iter()
        .map(|p| (p.job.as_str(), p.lost_gpu_s))
        .collect();
    let labels = |id: &str| {
        job(id).map_or((String::new(), String::new()), |j| {
            (
                j.team.clone().unwrap_or_default(),
                j.tier.clone().unwrap_or_default(),
            )
        })
    };
    let mut released = BTreeSet::new();
    let mut evicted = BTreeSet::new();
    for a in done {
        match a {
            Action::Release { job: id, .. } if released.insert(id.clone()) => {
                let waited = job(id)
                    .filter(|j| j.placement.is_empty())
                    .or_else(|| view.nominated.get(id).map(|n| &n.waiting));
                if let Some(j) = waited {
                    let (team, tier) = labels(id);
                    let waited = now - j.submitted_at.unwrap_or(now);
                    state.metrics.waited(&team, &tier, waited.max(0) as f64);
                }
            }
            Action::Evict {
                job: id,
                cause,
                marked: false,
                ..
            } if evicted.insert(id.clone()) => {
                let (team, tier) = labels(id);
                let lost = lost.get(id.as_str()).copied().unwrap_or(0.0);
                state.metrics.preempted(&team, &tier, cause, lost);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_cycle_comes_when_the_plan_says_within_a_tick() {
        assert_eq!(wake_after(None, 100), TICK);
        assert_eq!(wake_after(Some(103), 100), Duration::from_secs(3));
        assert_eq!(wake_after(Some(100_000), 100), TICK);
        // Never a busy loop, whatever the plan says.
        assert_eq!(wake_after(Some(100), 100), Duration::from_secs(1));
        assert_eq!(wake_after(Some(50), 100), TICK);
    }
}
