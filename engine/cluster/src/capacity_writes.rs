//! Carries out capacity changes (`capacity`): placeholder pods created and deleted in
//! gantry's namespace, nodes marked and unmarked, ProvisioningRequests and their
//! PodTemplates. A creation that finds its object, or a deletion that finds it gone, is
//! not an error: a cycle before got there first.

use crate::capacity::{self, CapacityAction};
use crate::controller::params;
use crate::provreq;
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use kube::api::{DeleteParams, DynamicObject, Patch, PostParams};
use kube::{Api, Client};
use serde_json::Value;

fn exists_ok<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

fn gone_ok<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub fn name(a: &CapacityAction) -> &'static str {
    match a {
        CapacityAction::CreatePlaceholder { .. } => "create_placeholder",
        CapacityAction::DeletePlaceholder { .. } => "delete_placeholder",
        CapacityAction::KeepNode { .. } => "keep_node",
        CapacityAction::UnkeepNode { .. } => "unkeep_node",
        CapacityAction::CreateProvisioningRequest { .. } => "create_provisioning_request",
        CapacityAction::DeleteProvisioningRequest { .. } => "delete_provisioning_request",
    }
}

/// Carries out one capacity change. Creating a placeholder that exists, or deleting one
/// that is gone, is not an error (another cycle got there first).
pub async fn apply(client: &Client, action: &CapacityAction, now: i64) -> Result<(), String> {
    match action {
        CapacityAction::CreatePlaceholder { name, pod, .. } => {
            let namespace = pod
                .pointer("/metadata/namespace")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let object: Pod = serde_json::from_value(pod.clone())
                .map_err(|e| format!("placeholder {name}: {}", crate::bounded::brief(&e)))?;
            match pods.create(&PostParams::default(), &object).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(kube::Error::Api(s)) if s.message.contains(capacity::PLACEHOLDER_CLASS) => Err(format!(
                    "create placeholder {namespace}/{name}: {} (apply the PriorityClass {} from examples/kubernetes/deployment.yaml)",
                    s.message,
                    capacity::PLACEHOLDER_CLASS
                )),
                Err(e) => Err(format!("create placeholder {namespace}/{name}: {e}")),
            }
        }
        CapacityAction::DeletePlaceholder {
            namespace,
            name,
            uid,
            ..
        } => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let params = kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..kube::api::DeleteParams::default()
            };
            match pods.delete(name, &params).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                Err(e) => Err(format!("delete placeholder {name}: {e}")),
            }
        }
        CapacityAction::CreateProvisioningRequest {
            name,
            template,
            request,
            ..
        } => {
            let namespace = request
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let templates: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
            let object: PodTemplate = serde_json::from_value(template.clone())
                .map_err(|e| format!("pod template {name}: {}", crate::bounded::brief(&e)))?;
            exists_ok(templates.create(&PostParams::default(), &object).await).map_err(|e| {
                format!(
                    "create pod template {namespace}/{name}: {}",
                    crate::bounded::brief(&e)
                )
            })?;
            let version = request
                .get("apiVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.rsplit('/').next())
                .unwrap_or("v1");
            let requests: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &provreq::resource(version));
            let object: DynamicObject = serde_json::from_value(request.clone()).map_err(|e| {
                format!("provisioning request {name}: {}", crate::bounded::brief(&e))
            })?;
            exists_ok(requests.create(&PostParams::default(), &object).await).map_err(|e| {
                format!(
                    "create provisioning request {namespace}/{name}: {}",
                    crate::bounded::brief(&e)
                )
            })
        }
        CapacityAction::DeleteProvisioningRequest {
            api_version,
            namespace,
            name,
            ..
        } => {
            let version = api_version.rsplit('/').next().unwrap_or("v1");
            let requests: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &provreq::resource(version));
            gone_ok(requests.delete(name, &DeleteParams::default()).await).map_err(|e| {
                format!(
                    "delete provisioning request {namespace}/{name}: {}",
                    crate::bounded::brief(&e)
                )
            })?;
            let templates: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
            gone_ok(templates.delete(name, &DeleteParams::default()).await).map_err(|e| {
                format!(
                    "delete pod template {namespace}/{name}: {}",
                    crate::bounded::brief(&e)
                )
            })
        }
        CapacityAction::KeepNode { node, .. } | CapacityAction::UnkeepNode { node, .. } => {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
            let patch = capacity::mark_patch(action, now).unwrap_or_default();
            match nodes.patch(node, &params(), &Patch::Merge(&patch)).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(format!("mark node {node}: {e}")),
            }
        }
    }
}

/// Carries out capacity changes in order while `leading()` holds; returns how many were
/// done and what was refused.
pub async fn enact(
    client: &Client,
    actions: &[CapacityAction],
    now: i64,
    leading: impl Fn() -> bool,
) -> (usize, Vec<(CapacityAction, String)>) {
    let mut done = 0;
    let mut refused = Vec::new();
    for a in actions {
        if !leading() {
            break;
        }
        match apply(client, a, now).await {
            Ok(()) => done += 1,
            Err(e) => {
                tracing::warn!(error = %e, "a capacity change was refused; retried next cycle");
                refused.push((a.clone(), e));
            }
        }
    }
    (done, refused)
}
