//! The admission decision for one AdmissionReview: map the pod to a job, check its team
//! and tier, run the policy's admission rules, and answer allowed or denied (naming the
//! rule), with warnings and, for `/mutate`, a JSON Patch: priority class per tier,
//! nodeSelector and toleration for the routed pool, labels and the rules' annotations.

use super::pod::{self, AdmissionReview, Pod, Response, ReviewResponse, Status, POOL_LABEL};
use super::trust;
use base64::Engine as _;
use engine::core::fleet::Fleet;
use engine::core::mig::MigTable;
use engine::decide::admission::admit;
use engine::decide::snapshot::{member_milli, JobState};
use lang::ir::Program;
use serde_json::{json, Value};

/// Warnings longer than this are cut (the API server's limit is 120 characters).
const WARNING_MAX: usize = 120;

/// What happened, for the decision metrics: `allow`, `deny` or `pass` (not a GPU pod),
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub action: &'static str,
    pub reason: String,
    pub dry_run: bool,
    /// The pod already carries this webhook's revision label: a reinvoked `/mutate`, or
    /// `/admit` after `/mutate`. The decision was counted the first time.
    pub repeat: bool,
    /// For the decision log: the pod (its name, else its `generateName`), its namespace,
    /// the operation, and a denial's message.
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub operation: String,
    pub message: Option<String>,
}

/// A request the webhook cannot read at all (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadReview(pub String);

#[derive(Debug)]
pub struct Context<'a> {
    pub program: &'a Program,
    pub revision: &'a str,
    pub fleet: &'a Fleet,
    pub mig: &'a MigTable,
    pub now: i64,
    /// What is free once running jobs are counted (see [`super::occupancy`]).
    pub occupancy: &'a super::occupancy::Occupancy,
    /// Gantry runs the queue (`serve --queue`): `/mutate` gates GPU pods.
    pub queue: bool,
    /// Whose requests may write gantry's keys, bind pods directly, act for others.
    pub trust: &'a super::trust::Trust,
    /// The queue's sealed assignments, pod uid → node (`state::Seen::assigned`).
    pub assigned: &'a std::collections::BTreeMap<String, String>,
}

/// The scheduling gate that holds a GPU pod until gantry places it; the node the queue
/// assigned a pod to (the first phase of placing it); set by the queue on a pod it
/// evicts: the job it makes room for and why.
pub use super::trust::{ASSIGNED_ANNOTATION, PREEMPTED_ANNOTATION, QUEUE_GATE};

/// Keys gantry itself writes on pods: bookkeeping, never an input of a decision, so the
/// queue's own patches are not judged again (a policy change must not block them).
fn bookkeeping(key: &str) -> bool {
    [
        REVISION_LABEL,
        ASSIGNED_ANNOTATION,
        trust::SEAL_ANNOTATION,
        PREEMPTED_ANNOTATION,
        trust::NOMINATED_ANNOTATION,
        trust::NOMINATION_SEAL_ANNOTATION,
    ]
    .contains(&key)
}

pub fn review(
    ctx: &Context<'_>,
    review: AdmissionReview,
    mutate: bool,
) -> Result<(ReviewResponse, Outcome), BadReview> {
    let repeat = review.request.as_ref().is_some_and(|r| {
        r.operation == "CREATE"
            && r.object
                .as_ref()
                .and_then(|o| o.pointer(&format!("/metadata/labels/{}", pointer(REVISION_LABEL))))
                .is_some()
    });
    let request = review.request.as_ref();
    let namespace = request.and_then(|r| r.namespace.clone());
    let pod = request.and_then(|r| {
        let meta = |key: &str| {
            let v = r.object.as_ref()?.pointer(&format!("/metadata/{key}"))?;
            v.as_str().filter(|n| !n.is_empty()).map(str::to_string)
        };
        let named = r.name.clone().filter(|n| !n.is_empty());
        named
            .or_else(|| meta("name"))
            .or_else(|| meta("generateName"))
    });
    let operation = request.map(|r| r.operation.clone()).unwrap_or_default();
    judge(ctx, review, mutate).map(|(response, outcome)| {
        let message = response.response.status.as_ref().map(|s| s.message.clone());
        let outcome = Outcome {
            repeat,
            namespace,
            pod,
            operation,
            message,
            ..outcome
        };
        (response, outcome)
    })
}

/// The label `/mutate` sets to the policy revision that admitted the pod.
use super::trust::REVISION_LABEL;

fn judge(
    ctx: &Context<'_>,
    review: AdmissionReview,
    mutate: bool,
) -> Result<(ReviewResponse, Outcome), BadReview> {
    if review.api_version != pod::API_VERSION || review.kind != "AdmissionReview" {
        return Err(BadReview(format!(
            "expected apiVersion {} and kind AdmissionReview, got {} {}",
            pod::API_VERSION,
            review.api_version,
            review.kind
        )));
    }
    let Some(req) = review.request else {
        return Err(BadReview("the AdmissionReview has no `request`".into()));
    };
    let uid = req.uid.clone();
    let dry_run = req.dry_run;
    let respond =
        |allowed: bool, status: Option<Status>, warnings: Vec<String>, patch: Option<String>| {
            ReviewResponse::new(Response {
                uid: uid.clone(),
                allowed,
                status,
                warnings,
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
            })
        };
    let outcome = |action: &'static str, reason: &str| Outcome {
        action,
        reason: reason.to_string(),
        dry_run,
        repeat: false,
        namespace: None,
        pod: None,
        operation: String::new(),
        message: None,
    };
    let operation = req.operation.as_str();
    if req.kind.kind != "Pod" || !matches!(operation, "CREATE" | "UPDATE") {
        return Ok((
            respond(true, None, Vec::new(), None),
            outcome("pass", "not_a_pod_create_or_update"),
        ));
    }
    let Some(object) = req.object else {
        return Err(BadReview(format!(
            "a {operation} of a Pod needs `request.object`"
        )));
    };
    let who = &req.user_info;
    let deny = |code: u16, message: String, reason: &str| {
        Ok((
            respond(false, Some(Status { code, message }), Vec::new(), None),
            outcome("deny", reason),
        ))
    };
    // A pod on its way out (finalizers being removed) is never held up, by the policy or
    // by the checks on gantry's keys.
    if operation == "UPDATE"
        && object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    {
        return Ok((
            respond(true, None, Vec::new(), None),
            outcome("pass", "being_deleted"),
        ));
    }
    // Gantry's own writes (assignments, releases, placeholders) are its bookkeeping.
    if ctx.trust.is_controller(who) {
        return Ok((
            respond(true, None, Vec::new(), None),
            outcome("pass", "gantry"),
        ));
    }
    let old = req.old_object.as_ref().filter(|_| operation == "UPDATE");
    let changed = trust::own_keys_changed(old, &object);
    if !changed.is_empty() {
        return deny(
            403,
            format!(
                "gantry: {} may be set, changed or removed only by gantry ({}); leave {} as gantry wrote {}",
                changed.join(", "),
                ctx.trust.controllers_named(),
                if changed.len() == 1 { "it" } else { "them" },
                if changed.len() == 1 { "it" } else { "them" },
            ),
            "gantry_key",
        );
    }
    if let Some(old) = old.filter(|o| !trust::is_gated(o)) {
        let relabelled = trust::team_or_tier_changed(old, &object);
        if !relabelled.is_empty() {
            return deny(
                403,
                format!(
                    "gantry: {} of a pod that left the queue never change{}: it was admitted and charged as it was; delete the pod and create it again to change {}",
                    relabelled.join(" and "),
                    if relabelled.len() == 1 { "s" } else { "" },
                    if relabelled.len() == 1 { "it" } else { "them" }
                ),
                "placed_pod_relabelled",
            );
        }
    }
    // A queued pod whose team or tier changes is judged again, by who changed it.
    let relabelled_in_queue =
        old.is_some_and(|o| !trust::team_or_tier_changed(o, &object).is_empty());
    let gated_now = trust::is_gated(&object);
    // An UPDATE that changes nothing a decision reads (labels other than gantry's,
    // finalizers, status, ...) is not judged again: a policy change must not block it.
    if operation == "UPDATE"
        && req
            .old_object
            .as_ref()
            .is_some_and(|old| decision_inputs(old) == decision_inputs(&object))
    {
        return Ok((
            respond(true, None, Vec::new(), None),
            outcome("pass", "update_without_scheduling_change"),
        ));
    }
    let pod: Pod = match serde_json::from_value(object) {
        Ok(p) => p,
        Err(e) => {
            let status = Status {
                code: 400,
                message: format!("gantry: cannot read the pod: {e}"),
            };
            return Ok((
                respond(false, Some(status), Vec::new(), None),
                outcome("deny", "unreadable_pod"),
            ));
        }
    };
    // The queue's own capacity placeholder (priority −1: anything preempts it) keeps its
    // class and is never gated, or it could not hold a node for the autoscaler.
    if super::extender::is_placeholder(&pod) {
        return Ok((
            respond(true, None, Vec::new(), None),
            outcome("pass", "placeholder"),
        ));
    }
    let job = match pod::job(&pod, req.namespace.as_deref(), ctx.now) {
        Ok(Some(job)) => job,
        Ok(None) => {
            return Ok((
                respond(true, None, Vec::new(), None),
                outcome("pass", "no_gpus"),
            ))
        }
        Err(e) => {
            let status = Status {
                code: 400,
                message: format!("gantry: {e}"),
            };
            return Ok((
                respond(false, Some(status), Vec::new(), None),
                outcome("deny", "bad_request"),
            ));
        }
    };
    let mut job = job;
    if operation == "CREATE" && pod.spec.node_name.is_some() && !ctx.trust.may_bind_directly(who) {
        return deny(
            403,
            format!(
                "gantry: a GPU pod may not be created bound to a node (spec.nodeName `{}`): GPU pods are placed by gantry; remove spec.nodeName (use a gantry.dev/pool node selector to choose where it may run)",
                pod.spec.node_name.as_deref().unwrap_or_default()
            ),
            "bound_at_create",
        );
    }
    let mut team_label = None;
    if operation == "CREATE" || relabelled_in_queue {
        let namespace = req
            .namespace
            .as_deref()
            .or(pod.metadata.namespace.as_deref())
            .unwrap_or_default();
        match trust::team_for(
            ctx.program,
            ctx.trust,
            job.team.as_deref(),
            namespace,
            who,
            mutate && operation == "CREATE",
        ) {
            Ok(trust::TeamChoice::Keep) => {}
            Ok(trust::TeamChoice::Set(team)) => {
                job.team = Some(team.clone());
                team_label = Some(team);
            }
            Err(m) => return deny(403, format!("gantry: {m}"), "team_binding"),
        }
    }
    engine::decide::default_job(ctx.program, &mut job);
    let js = JobState {
        member_milli: member_milli(ctx.fleet, ctx.mig, &job.shape.member),
        job: Box::new(job),
        running: None,
        revision: None,
    };
    let refuse = |reason: engine::decide::plan::Reason| {
        let mut message = format!("gantry: {}", reason.message);
        if let Some(u) = &reason.unblock {
            message.push_str(&format!(" ({u})"));
        }
        let status = Status { code: 403, message };
        Ok((
            respond(false, Some(status), Vec::new(), None),
            outcome("deny", "invalid_job"),
        ))
    };
    if let Some(reason) = engine::decide::invalid_job(ctx.program, &js) {
        return refuse(reason);
    }
    if !mutate {
        if let Some(tier) = js.job.tier.as_deref().and_then(|t| ctx.program.tier(t)) {
            if let Some(m) = trust::priority_mismatch(&pod, &tier.name, tier.priority) {
                return deny(403, format!("gantry: {m}"), "priority_mismatch");
            }
        }
    }
    let verdict = admit(ctx.program, &js, ctx.now);
    if let Some((rule, message)) = &verdict.denied {
        let status = Status {
            code: 403,
            message: format!("gantry: denied by rule {rule}: {message}"),
        };
        return Ok((
            respond(false, Some(status), Vec::new(), None),
            outcome("deny", rule),
        ));
    }
    if let Some(reason) = engine::decide::unassigned_job(ctx.program, &js) {
        return refuse(reason);
    }
    // Last, so a pod the policy refuses anyway hears why.
    if ctx.queue
        && !mutate
        && operation == "CREATE"
        && !gated_now
        && !ctx.trust.may_bind_directly(who)
    {
        return deny(
            403,
            format!(
                "gantry: a GPU pod must wait in gantry's queue, but this one has no `{QUEUE_GATE}` scheduling gate (gantry's mutating webhook did not run for it); create it again once the webhook answers"
            ),
            "not_gated",
        );
    }

    let mut warnings: Vec<String> = verdict.warnings.iter().map(|w| cut(w)).collect();
    let routed_pool = verdict.routed.as_ref().map(|(_, p)| p.as_str());
    if let Some(w) = vram_never_fits(ctx.program, &js, routed_pool) {
        warnings.push(cut(&w));
    }
    let reason = verdict
        .routed
        .as_ref()
        .map_or("allowed".to_string(), |(rule, _)| rule.clone());
    let patch = (mutate && operation == "CREATE").then(|| {
        let ops = patch_ops(
            ctx,
            &pod,
            &js,
            team_label.as_deref(),
            verdict.routed.as_ref().map(|(_, p)| p.as_str()),
            &verdict.annotations,
        );
        base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string())
    });
    Ok((
        respond(true, None, warnings, patch),
        outcome("allow", &reason),
    ))
}

fn cut(w: &str) -> String {
    if w.chars().count() <= WARNING_MAX {
        return w.to_string();
    }
    let mut s: String = w.chars().take(WARNING_MAX - 1).collect();
    s.push('…');
    s
}

/// A JSON Pointer segment (`/` and `~` escaped).
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A warning when the job's `gantry.dev/vram` is more than any GPU of the pools it may
/// use has (`80Gi` is 81,920 MiB; an H100 80GB has 81,559): it would wait for ever.
fn vram_never_fits(program: &Program, js: &JobState, routed: Option<&str>) -> Option<String> {
    let member = &js.job.shape.member;
    if member.vram_mib == 0 || member.mig_profile.is_some() {
        return None;
    }
    let pools: Vec<&lang::ir::Pool> = match routed {
        Some(p) => program.pool(p).into_iter().collect(),
        None if !js.job.shape.pools.is_empty() => js
            .job
            .shape
            .pools
            .iter()
            .filter_map(|p| program.pool(p))
            .collect(),
        None => program.pools.iter().collect(),
    };
    let largest = pools
        .iter()
        .filter_map(|p| program.node_shape(&p.node))
        .filter_map(|n| program.gpu_model(&n.gpu_model))
        .max_by_key(|m| m.memory_mib)?;
    (member.vram_mib > largest.memory_mib).then(|| {
        format!(
            "gantry.dev/vram {} MiB: no GPU it may use has that much ({}: {} MiB); ask for {}Gi or less",
            member.vram_mib,
            largest.id,
            largest.memory_mib,
            largest.memory_mib / 1024
        )
    })
}

/// The parts of a pod the pod → job mapping reads: `gantry.dev/*` labels and
/// annotations, the containers' and init containers' resources (and restart policy),
/// the overhead and the pool node selector.
fn decision_inputs(pod: &Value) -> Value {
    let at = |path: &str| pod.pointer(path).cloned().unwrap_or(Value::Null);
    let gantry_keys = |path: &str| -> Value {
        pod.pointer(path)
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| k.starts_with("gantry.dev/") && !bookkeeping(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<serde_json::Map<_, _>>()
            })
            // No map and a map of bookkeeping keys only read the same.
            .filter(|m| !m.is_empty())
            .map_or(Value::Null, Value::Object)
    };
    let containers = |path: &str| -> Value {
        pod.pointer(path)
            .and_then(Value::as_array)
            .map_or(Value::Null, |cs| {
                cs.iter()
                    .map(|c| json!([c.get("resources"), c.get("restartPolicy")]))
                    .collect()
            })
    };
    json!([
        gantry_keys("/metadata/labels"),
        gantry_keys("/metadata/annotations"),
        containers("/spec/containers"),
        containers("/spec/initContainers"),
        at("/spec/overhead"),
        at(&format!("/spec/nodeSelector/{}", pointer(POOL_LABEL))),
    ])
}

/// Whether two tolerations are the same (an absent operator is `Equal`).
fn same_toleration(a: &Value, b: &Value) -> bool {
    let field = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).map(str::to_string);
    let operator = |t: &Value| field(t, "operator").unwrap_or_else(|| "Equal".into());
    ["key", "value", "effect"]
        .iter()
        .all(|k| field(a, k) == field(b, k))
        && operator(a) == operator(b)
}

fn patch_ops(
    ctx: &Context<'_>,
    pod: &Pod,
    js: &JobState,
    team_label: Option<&str>,
    routed: Option<&str>,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Vec<Value> {
    let mut ops = Vec::new();
    if pod.metadata.labels.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
    }
    ops.push(json!({
        "op": "add",
        "path": format!("/metadata/labels/{}", pointer(REVISION_LABEL)),
        "value": ctx.revision.replace(':', "-"),
    }));
    if let Some(team) = team_label {
        // The one team the pod's namespace and identity admit.
        ops.push(json!({"op": "add", "path": "/metadata/labels/gantry.dev~1team", "value": team}));
    }
    if !annotations.is_empty() {
        if pod.metadata.annotations.is_none() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
        }
        for (k, v) in annotations {
            ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k)), "value": v}));
        }
    }
    if let Some(tier) = js
        .job
        .tier
        .as_deref()
        .filter(|t| ctx.program.tier(t).is_some())
    {
        // Object names are DNS subdomains: no underscores.
        let class = format!("gantry-{}", tier.replace('_', "-"));
        // A reinvoked webhook sees its own class (and the priority the API server resolved
        // from it): nothing to change then.
        if pod.spec.priority_class_name.as_deref() != Some(class.as_str()) {
            ops.push(json!({"op": "add", "path": "/spec/priorityClassName", "value": class}));
            // A priority resolved from an earlier class would contradict the new class.
            if pod.spec.priority.is_some() {
                ops.push(json!({"op": "remove", "path": "/spec/priority"}));
            }
        }
    }
    if ctx.queue && pod.spec.node_name.is_none() {
        // Held until gantry places it; a reinvocation finds the gate already there.
        let gate = json!({"name": QUEUE_GATE});
        match &pod.spec.scheduling_gates {
            None => {
                ops.push(json!({"op": "add", "path": "/spec/schedulingGates", "value": [gate]}))
            }
            Some(list)
                if list
                    .iter()
                    .any(|g| g.get("name").and_then(Value::as_str) == Some(QUEUE_GATE)) => {}
            Some(_) => {
                ops.push(json!({"op": "add", "path": "/spec/schedulingGates/-", "value": gate}))
            }
        }
    }
    if let Some(pool) = routed {
        match &pod.spec.node_selector {
            None => ops.push(json!({"op": "add", "path": "/spec/nodeSelector", "value": {POOL_LABEL: pool}})),
            Some(_) => ops.push(json!({"op": "add", "path": format!("/spec/nodeSelector/{}", pointer(POOL_LABEL)), "value": pool})),
        }
        let toleration =
            json!({"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"});
        // A reinvoked webhook finds the toleration it added: appending it again would
        // store it twice.
        match &pod.spec.tolerations {
            None => {
                ops.push(json!({"op": "add", "path": "/spec/tolerations", "value": [toleration]}))
            }
            Some(list) if list.iter().any(|t| same_toleration(t, &toleration)) => {}
            Some(_) => {
                ops.push(json!({"op": "add", "path": "/spec/tolerations/-", "value": toleration}))
            }
        }
    }
    ops
}
