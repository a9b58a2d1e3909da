//! The HTTP surface, `app(state) -> Router`: admission (`/admit`, `/mutate`), the plan API
//! (`/v1/plan`), status, health, readiness and Prometheus metrics. Every error is a JSON
//! body `{"error": ...}` with a 4xx or 5xx status; no handler panics on a request.

use super::admission::{self, Context};
use super::extender::{self, ExtenderArgs};
use super::pod::AdmissionReview;
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use engine::decide::snapshot::{Snapshot, UsageRecord};
use engine::inventory::{catalog, fleet_file, jobs_file};
use serde_json::{json, Value};
use std::sync::Arc;

/// Request bodies above this are refused with 413.
pub const BODY_LIMIT: usize = 1024 * 1024;
/// A request whose body has not arrived by then is answered 408 (a slow client must not
/// hold a worker; the API server's own webhook timeout is shorter anyway).
pub const REQUEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// `/v1/plan` computes at most this long (below the request deadline); the answer is then
/// 503 and the computation finishes in the background, holding the one plan slot.
pub const PLAN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(8);
/// What one `/v1/plan` request may ask for: its work grows with nodes, GPUs and gang
/// members, and none of them is bounded by the body size (`count` expands a node entry).
pub const PLAN_MAX_NODES: u64 = 10_000;
pub const PLAN_MAX_GPUS: u64 = 80_000;
pub const PLAN_MAX_MEMBERS: u64 = 100_000;

pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/admit", post(admit))
        .route("/mutate", post(mutate))
        .route("/extender/filter", post(extender_filter))
        .route("/extender/prioritize", post(extender_prioritize))
        .route("/v1/plan", post(plan))
        .route("/v1/status", get(status))
        .route("/v1/queue", get(queue))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint; see /v1/status") })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "this endpoint does not take that method: POST for /admit, /mutate, /extender/* and /v1/plan, GET for the rest",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({"error": message.into()}))).into_response()
}

/// Counts and times every request by its route, and bounds how long one may take.
async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let started = std::time::Instant::now();
    let deadline = state.request_deadline;
    let response = match tokio::time::timeout(deadline, next.run(req)).await {
        Ok(r) => r,
        Err(_) => error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request did not arrive within {} ms",
                deadline.as_millis()
            ),
        ),
    };
    state.metrics.request(
        &endpoint,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// The body, or the JSON error for a body that is too large or unreadable.
fn body(raw: Result<Bytes, BytesRejection>) -> Result<Bytes, (StatusCode, String)> {
    raw.map_err(|e| {
        let code = e.status();
        let message = if code == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the request body is over the {BODY_LIMIT}-byte limit")
        } else {
            format!("cannot read the request body: {e}")
        };
        (code, message)
    })
}

async fn admit(State(state): State<Arc<AppState>>, raw: Result<Bytes, BytesRejection>) -> Response {
    review(&state, raw, false)
}

async fn mutate(
    State(state): State<Arc<AppState>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    review(&state, raw, true)
}

/// Reads the body as a `T` (`what` names it in the 400 error) and hands it, with the live
/// policy and inventory, to `handle`.
fn with_context<T: serde::de::DeserializeOwned>(
    state: &AppState,
    raw: Result<Bytes, BytesRejection>,
    what: &str,
    handle: impl FnOnce(&Context<'_>, T) -> Response,
) -> Response {
    let bytes = match body(raw) {
        Ok(b) => b,
        Err((code, message)) => return error(code, message),
    };
    let parsed: T = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("not {what}: {e}")),
    };
    let (Some(policy), Some(inventory)) = (state.policy(), state.inventory()) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no policy or inventory loaded yet",
        );
    };
    let occupancy = state.occupancy(&policy, &inventory);
    let ctx = Context {
        program: &policy.program,
        revision: &policy.revision,
        fleet: &inventory.fleet,
        mig: &policy.mig,
        now: state.now(),
        occupancy: &occupancy,
        queue: state.queue,
        trust: &state.trust,
        assigned: &inventory.assigned,
    };
    handle(&ctx, parsed)
}

fn review(state: &AppState, raw: Result<Bytes, BytesRejection>, mutate: bool) -> Response {
    with_context(
        state,
        raw,
        "an AdmissionReview",
        |ctx, parsed: AdmissionReview| match admission::review(ctx, parsed, mutate) {
            Ok((response, outcome)) => {
                // Counted once per pod: dry runs, reinvocations and `/admit` after
                // `/mutate` are answered but not counted again.
                if !outcome.dry_run && !outcome.repeat {
                    state.metrics.decision(outcome.action, &outcome.reason);
                }
                let endpoint = if mutate { "mutate" } else { "admit" };
                super::decision_log::admission(endpoint, &outcome, ctx.revision);
                Json(response).into_response()
            }
            Err(e) => error(StatusCode::BAD_REQUEST, e.0),
        },
    )
}

/// Answers an extender call with what `judge` makes of the arguments.
fn extender_call<T: serde::Serialize>(
    state: &AppState,
    raw: Result<Bytes, BytesRejection>,
    judge: impl FnOnce(&Context<'_>, ExtenderArgs) -> Result<T, String>,
) -> Response {
    let what = "ExtenderArgs (PascalCase Pod, Nodes or NodeNames)";
    with_context(state, raw, what, |ctx, args| match judge(ctx, args) {
        Ok(result) => Json(result).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    })
}

async fn extender_filter(
    State(state): State<Arc<AppState>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    extender_call(&state, raw, extender::filter)
}

async fn extender_prioritize(
    State(state): State<Arc<AppState>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    extender_call(&state, raw, extender::prioritize)
}

/// `{jobs: [...], fleet?: {...}, now?: t, usage?: [...]}` → the plan. Without `fleet` the
/// live inventory is used.
async fn plan(State(state): State<Arc<AppState>>, raw: Result<Bytes, BytesRejection>) -> Response {
    let bytes = match body(raw) {
        Ok(b) => b,
        Err((code, message)) => return error(code, message),
    };
    // One at a time, and all of it (parsing included) on the low-priority plan thread:
    // admission on the runtime's workers never waits behind a plan.
    let Ok(permit) = state.plan_slot.clone().try_acquire_owned() else {
        return busy("another /v1/plan request is being computed; retry in a few seconds");
    };
    let deadline = state.plan_deadline;
    let work = super::plan_worker::run(move || {
        let _permit = permit;
        compute_plan(&state, &bytes)
    });
    match tokio::time::timeout(deadline, work).await {
        Ok(Some(response)) => response,
        Ok(None) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the plan computation failed; see the server log",
        ),
        Err(_) => busy(&format!(
            "the plan took longer than {} s; send fewer jobs or nodes",
            deadline.as_secs()
        )),
    }
}

/// A `/v1/plan` request's answer, computed on the plan thread.
fn compute_plan(state: &AppState, bytes: &[u8]) -> Response {
    let request: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("not JSON: {e}")),
    };
    let Some(policy) = state.policy() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no policy loaded yet");
    };
    if let Some(f) = request.get("fleet") {
        if let Err(message) = fleet_within_limits(f) {
            return error(StatusCode::PAYLOAD_TOO_LARGE, message);
        }
    }
    let fleet = match request.get("fleet") {
        Some(f) => match fleet_file::parse(
            "request.fleet",
            &f.to_string(),
            &catalog::merged(&policy.program.gpu_models),
        ) {
            Ok(f) => f,
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        },
        None => match state.inventory() {
            Some(i) => (*i.fleet).clone(),
            None => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no inventory yet; send `fleet`",
                )
            }
        },
    };
    let Some(jobs) = request.get("jobs").filter(|j| j.is_array()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "`jobs` is required: an array of jobs in the jobs-file format",
        );
    };
    let jobs = match jobs_file::parse("request.jobs", &jobs.to_string()) {
        Ok(j) => j,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let usage: Vec<UsageRecord> = match request.get("usage") {
        None => Vec::new(),
        Some(u) => match serde_json::from_value(u.clone()) {
            Ok(u) => u,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("`usage`: {e}")),
        },
    };
    let now = match request.get("now") {
        None => state.now(),
        Some(t) => match t
            .as_i64()
            .or_else(|| t.as_str().and_then(jobs_file::rfc3339_seconds))
        {
            Some(n) => n,
            None => return error(StatusCode::BAD_REQUEST, "`now`: give seconds or RFC 3339"),
        },
    };
    let snapshot = match Snapshot::build(fleet, jobs, usage, &policy.mig) {
        Ok(s) => s,
        Err(errors) => {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return error(StatusCode::UNPROCESSABLE_ENTITY, list.join("; "));
        }
    };
    let members: u64 = snapshot
        .jobs
        .iter()
        .map(|j| u64::from(j.job.shape.members))
        .sum();
    if members > PLAN_MAX_MEMBERS {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the jobs have {members} members in all; /v1/plan takes at most {PLAN_MAX_MEMBERS} (run `gantry plan` for larger what-ifs)"),
        );
    }
    let mut plan = engine::cycle::decide(&policy.program, &snapshot, now);
    plan.policy_revision.clone_from(&policy.revision);
    Json(plan).into_response()
}

/// 503 with a `Retry-After`.
fn busy(message: &str) -> Response {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, message);
    r.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("5"),
    );
    r
}

/// The fleet of a `/v1/plan` request, counted before it is expanded: nodes (with `count`)
/// and GPUs at most [`PLAN_MAX_NODES`] and [`PLAN_MAX_GPUS`].
fn fleet_within_limits(fleet: &Value) -> Result<(), String> {
    let entries = fleet
        .get("nodes")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let (mut nodes, mut gpus) = (0u64, 0u64);
    for e in entries {
        let count = e.get("count").and_then(Value::as_u64).unwrap_or(1);
        let per_node = match e.get("gpus") {
            Some(Value::Array(list)) => list.len() as u64,
            Some(g) => g.get("count").and_then(Value::as_u64).unwrap_or(0),
            None => 0,
        };
        nodes = nodes.saturating_add(count);
        gpus = gpus.saturating_add(count.saturating_mul(per_node));
    }
    if nodes > PLAN_MAX_NODES {
        return Err(format!("the fleet has {nodes} nodes; /v1/plan takes at most {PLAN_MAX_NODES} (run `gantry plan` for larger what-ifs)"));
    }
    if gpus > PLAN_MAX_GPUS {
        return Err(format!("the fleet has {gpus} GPUs; /v1/plan takes at most {PLAN_MAX_GPUS} (run `gantry plan` for larger what-ifs)"));
    }
    Ok(())
}

async fn status(State(state): State<Arc<AppState>>) -> Response {
    // Anyone who reaches the port reads this: without `--status-detail`, absolute paths
    // become file names and policy errors lose their source excerpts.
    let detail = state.status_detail;
    let shown = |s: &str| {
        if detail {
            s.to_string()
        } else {
            redact_paths(s)
        }
    };
    let policy = state.policy().map(|p| {
        json!({
            "revision": p.revision,
            "git_commit": p.git_commit,
            "directory": shown(&p.dir.display().to_string()),
            "files": p.files.iter().map(|f| shown(f)).collect::<Vec<_>>(),
            "loaded_at": p.loaded_at,
        })
    });
    let inventory = state.inventory().map(|i| {
        json!({
            "source": shown(&i.source),
            "read_at": i.read_at,
            "nodes": i.fleet.nodes.len(),
            "gpus": i.fleet.gpu_count(),
            "running_jobs": i.running.len(),
            "closed_nodes": i.closed.as_ref(),
            "error": i.error.as_deref().map(shown),
            "notes": i.notes.iter().map(|n| shown(n)).collect::<Vec<_>>(),
        })
    });
    let mut last_reload = state.reload_status();
    if !detail {
        last_reload.error = last_reload
            .error
            .map(|e| redact_paths(&without_excerpts(&e)));
    }
    Json(json!({
        "policy": policy,
        "last_reload": last_reload,
        "inventory": inventory,
        "detail": detail,
    }))
    .into_response()
}

/// Absolute paths in `text` cut to their last component (`/etc/gantry/p/main.gantry` →
/// `main.gantry`).
pub fn redact_paths(text: &str) -> String {
    let ends = |c: char| c.is_whitespace() || "`'\"]),:".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('/') {
        let before = rest.get(..start).unwrap_or_default();
        // Only a path that starts a word: `a/b` inside a word stays.
        let starts_word = before
            .chars()
            .last()
            .is_none_or(|c| ends(c) || c == '[' || c == '(');
        out.push_str(before);
        let from = rest.get(start..).unwrap_or_default();
        let len = from.find(ends).unwrap_or(from.len());
        let path = from.get(..len).unwrap_or_default();
        if starts_word {
            out.push_str(path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("/"));
        } else {
            out.push_str(path);
        }
        rest = from.get(len..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// A rendered diagnostic list without its source lines (the code, message, location and
/// help stay).
fn without_excerpts(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            let numbered = t
                .split_once('│')
                .is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()));
            !(numbered || t.starts_with('·') || t.starts_with('╰') || t.starts_with('│'))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    match (state.policy().is_some(), state.inventory().is_some()) {
        (true, true) => Json(json!({"status": "ready"})).into_response(),
        (policy, inventory) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: policy loaded {policy}, inventory read {inventory}"),
        ),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let revision = state.policy().map(|p| p.revision.clone());
    let gpus = state.inventory().map(|i| i.gpus()).unwrap_or_default();
    let mut text = state.metrics.render(revision.as_deref(), &gpus);
    if let (Some(report), Some(policy)) = (state.queue_report(), state.policy()) {
        report.render_metrics(&policy.program, &mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The queue as the last cycle of `serve --queue` saw it.
async fn queue(State(state): State<Arc<AppState>>) -> Response {
    match state.queue_report() {
        Some(report) => Json(report.as_ref().clone()).into_response(),
        None if state.queue => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no queue cycle has run yet",
        ),
        None => error(
            StatusCode::NOT_FOUND,
            "this gantry does not run the queue (serve --queue with a cluster view)",
        ),
    }
}

#[cfg(test)]
mod status_tests {
    use super::redact_paths;

    #[test]
    fn absolute_paths_become_file_names_and_the_rest_stays() {
        for (text, want) in [
            (
                "cannot read `/etc/gantry/p/main.gantry`: denied",
                "cannot read `main.gantry`: denied",
            ),
            ("╭─[/tmp/x/main.gantry:1:6]", "╭─[main.gantry:1:6]"),
            ("fleet file /srv/fleet.toml", "fleet file fleet.toml"),
            (
                "policies/onprem-dgx relative, 1/2 GPUs",
                "policies/onprem-dgx relative, 1/2 GPUs",
            ),
            ("/", "/"),
        ] {
            assert_eq!(redact_paths(text), want, "{text}");
        }
    }
}
