//! Creating and deleting pods and patching nodes, as the API server does them for the
//! calls the queue's capacity management makes: `POST` a pod (its PriorityClass resolved
//! to `spec.priority` as the Priority admission plugin does, 403 for a class that does
//! not exist, 409 for a name in use), `DELETE` a pod (with a uid precondition; 404 when
//! gone), and a JSON merge `PATCH` of a node.

use super::{json_response, list_or_watch, status, FakeApi, Kind};
use axum::body::Bytes;
use axum::extract::Query;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
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

fn no_crd() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    )
}

/// The API group document (`GET /apis/autoscaling.x-k8s.io`) once the CRD is there.
pub async fn provisioning_group(State(api): State<Arc<FakeApi>>) -> Response {
    if !api.provisioning_served() {
        return no_crd();
    }
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroup", "apiVersion": "v1", "name": "autoscaling.x-k8s.io",
            "versions": [{"groupVersion": "autoscaling.x-k8s.io/v1", "version": "v1"},
                         {"groupVersion": "autoscaling.x-k8s.io/v1beta1", "version": "v1beta1"}],
            "preferredVersion": {"groupVersion": "autoscaling.x-k8s.io/v1", "version": "v1"}}),
    )
}

pub async fn list_provisioning_requests(
    State(api): State<Arc<FakeApi>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !api.provisioning_served() {
        return no_crd();
    }
    list_or_watch(&api, Kind::ProvisioningRequests, &q).await
}

/// Creates a namespaced object of `kind` from `body`; 409 when the name is taken.
fn create(api: &FakeApi, kind: Kind, ns: &str, body: &Bytes) -> Response {
    let Ok(mut obj) = serde_json::from_slice::<Value>(body) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &status(400, "BadRequest", "not JSON"),
        );
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Err(r) = api.write("POST", format!("{}/{ns}/{name}", kind_path(kind))) {
        return r;
    }
    let key = format!("{ns}/{name}");
    if api.get_object(kind, &key).is_some() {
        return json_response(
            StatusCode::CONFLICT,
            &status(409, "AlreadyExists", &format!("\"{name}\" already exists")),
        );
    }
    obj["metadata"]["namespace"] = json!(ns);
    obj["metadata"]["uid"] = json!(format!("uid-{ns}-{name}"));
    api.apply(kind, obj);
    json_response(
        StatusCode::CREATED,
        &api.get_object(kind, &key).unwrap_or(Value::Null),
    )
}

fn remove(api: &FakeApi, kind: Kind, ns: &str, name: &str) -> Response {
    if let Err(r) = api.write("DELETE", format!("{}/{ns}/{name}", kind_path(kind))) {
        return r;
    }
    let key = format!("{ns}/{name}");
    match api.get_object(kind, &key) {
        Some(obj) => {
            api.delete(kind, &key);
            json_response(StatusCode::OK, &obj)
        }
        None => json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("\"{name}\" not found")),
        ),
    }
}

fn kind_path(kind: Kind) -> &'static str {
    match kind {
        Kind::ProvisioningRequests => "provisioningrequests",
        Kind::PodTemplates => "podtemplates",
        _ => "objects",
    }
}

pub async fn create_provisioning_request(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    if !api.provisioning_served() {
        return no_crd();
    }
    create(&api, Kind::ProvisioningRequests, &ns, &body)
}

pub async fn delete_provisioning_request(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if !api.provisioning_served() {
        return no_crd();
    }
    remove(&api, Kind::ProvisioningRequests, &ns, &name)
}

pub async fn create_pod_template(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    create(&api, Kind::PodTemplates, &ns, &body)
}

pub async fn delete_pod_template(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    remove(&api, Kind::PodTemplates, &ns, &name)
}
