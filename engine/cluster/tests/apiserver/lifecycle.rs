//! Creating and deleting pods and patching nodes, as the API server does them for the
//! calls the queue's capacity management makes: `POST` a pod (its PriorityClass resolved
//! to `spec.priority` as the Priority admission plugin does, 403 for a class that does
//! not exist, 409 for a name in use), `DELETE` a pod (with a uid precondition; 404 when
//! gone), and a JSON merge `PATCH` of a node.

use super::{json_response, status, FakeApi, Kind};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// PriorityClasses the fake server knows, with their values.
pub const PRIORITY_CLASSES: &[(&str, i64)] = &[
    ("gantry-placeholder", -1),
    ("gantry-critical", 1_000_000),
    ("gantry-standard", 10_000),
    ("gantry-best-effort", 100),
];

pub async fn create_pod(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let Ok(mut pod) = serde_json::from_slice::<Value>(&body) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &status(400, "BadRequest", "not a Pod"),
        );
    };
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Err(r) = api.write("POST", format!("pods/{ns}/{name}")) {
        return r;
    }
    let key = format!("{ns}/{name}");
    if api.get_object(Kind::Pods, &key).is_some() {
        return json_response(
            StatusCode::CONFLICT,
            &status(
                409,
                "AlreadyExists",
                &format!("pods \"{name}\" already exists"),
            ),
        );
    }
    if let Some(class) = pod["spec"]["priorityClassName"].as_str() {
        match PRIORITY_CLASSES.iter().find(|(c, _)| *c == class) {
            Some((_, value)) => pod["spec"]["priority"] = json!(value),
            None => {
                return json_response(
                    StatusCode::FORBIDDEN,
                    &status(
                        403,
                        "Forbidden",
                        &format!("pods \"{name}\" is forbidden: no PriorityClass with name {class} was found"),
                    ),
                )
            }
        }
    }
    pod["metadata"]["namespace"] = json!(ns);
    pod["metadata"]["uid"] = json!(format!("uid-{ns}-{name}-{}", api.resource_version()));
    pod["metadata"]["creationTimestamp"] = json!("2026-11-24T08:40:00Z");
    pod["status"] = json!({"phase": "Pending"});
    api.apply(Kind::Pods, pod);
    json_response(
        StatusCode::CREATED,
        &api.get_object(Kind::Pods, &key).unwrap_or(Value::Null),
    )
}

pub async fn delete_pod(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("DELETE", format!("pods/{ns}/{name}")) {
        return r;
    }
    let key = format!("{ns}/{name}");
    let Some(pod) = api.get_object(Kind::Pods, &key) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("pods \"{name}\" not found")),
        );
    };
    let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(uid) = options
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
    {
        if pod["metadata"]["uid"].as_str() != Some(uid) {
            return json_response(
                StatusCode::CONFLICT,
                &status(409, "Conflict", "Precondition failed: UID in precondition"),
            );
        }
    }
    api.delete(Kind::Pods, &key);
    json_response(StatusCode::OK, &pod)
}

pub async fn patch_node(
    State(api): State<Arc<FakeApi>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PATCH", format!("nodes/{name}")) {
        return r;
    }
    let Some(mut node) = api.get_object(Kind::Nodes, &name) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("nodes \"{name}\" not found")),
        );
    };
    let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    json_patch::merge(&mut node, &patch);
    api.apply(Kind::Nodes, node);
    json_response(
        StatusCode::OK,
        &api.get_object(Kind::Nodes, &name).unwrap_or(Value::Null),
    )
}
