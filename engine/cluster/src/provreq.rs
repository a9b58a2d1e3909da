//! cluster-autoscaler's ProvisioningRequest (`autoscaling.x-k8s.io`): with
//! `--scale-through provisioning-request`, the nodes the plan asks for waiting work are
//! requested atomically — all of a request's nodes or none (the
//! `best-effort-atomic-scale-up.autoscaling.x-k8s.io` class), so a gang never gets half
//! its nodes — instead of with pending placeholder pods. Each request names a PodTemplate
//! of the same name holding one whole node of the pool's shape. Warm pools still use
//! placeholders: a request is for a scale-up, not standing capacity.

use kube::api::{ApiResource, DynamicObject};
use kube::Client;
use serde_json::{json, Value};

pub const GROUP: &str = "autoscaling.x-k8s.io";
/// The provisioning class: atomic scale-up, retried by cluster-autoscaler until
/// `ValidUntilSeconds`.
pub const CLASS: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

/// A ProvisioningRequest as the view keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvReqSeen {
    pub namespace: String,
    pub name: String,
    /// Gantry's pool label (`gantry.dev/placeholder`) on requests it made.
    pub pool: Option<String>,
    /// Nodes asked for (the pod set's count).
    pub count: u64,
    /// `Provisioned` is `True`: the nodes are up.
    pub provisioned: bool,
    /// `Failed` is `True`, with the message.
    pub failed: Option<String>,
}

/// The API resource for `version` (`v1`, or `v1beta1` on cluster-autoscaler 1.29–1.30).
pub fn resource(version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "ProvisioningRequest".into(),
        plural: "provisioningrequests".into(),
    }
}

/// The request as the view keeps it.
pub fn seen(o: &DynamicObject) -> ProvReqSeen {
    let condition = |t: &str| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter().find(|c| {
                    c.get("type").and_then(Value::as_str) == Some(t)
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
    };
    ProvReqSeen {
        namespace: o.metadata.namespace.clone().unwrap_or_default(),
        name: o.metadata.name.clone().unwrap_or_default(),
        pool: o
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::capacity::PLACEHOLDER_LABEL))
            .cloned(),
        count: o
            .data
            .pointer("/spec/podSets")
            .and_then(Value::as_array)
            .map_or(0, |sets| {
                sets.iter()
                    .filter_map(|s| s.get("count").and_then(Value::as_u64))
                    .sum::<u64>()
            }),
        provisioned: condition("Provisioned").is_some(),
        failed: condition("Failed").map(|c| {
            c.get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        }),
    }
}

/// `namespace/name`, its key in the view.
pub fn key(o: &DynamicObject) -> String {
    format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or(""),
        o.metadata.name.as_deref().unwrap_or("")
    )
}

/// The request for `count` nodes of `pool`, each one pod of `template`'s shape, retried
/// for `valid_s` seconds.
pub fn request(
    api_version: &str,
    namespace: &str,
    name: &str,
    pool: &str,
    count: u64,
    valid_s: u64,
) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {crate::capacity::PLACEHOLDER_LABEL: pool, "app.kubernetes.io/managed-by": "gantry"},
        },
        "spec": {
            "provisioningClassName": CLASS,
            "parameters": {"ValidUntilSeconds": valid_s.to_string()},
            "podSets": [{"count": count, "podTemplateRef": {"name": name}}],
        },
    })
}

/// The PodTemplate a request names: the placeholder pod's metadata labels and spec.
pub fn template(placeholder: &Value) -> Value {
    let at = |p: &str| placeholder.pointer(p).cloned().unwrap_or(Value::Null);
    json!({
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": at("/metadata/name"),
            "namespace": at("/metadata/namespace"),
            "labels": at("/metadata/labels"),
        },
        "template": {
            "metadata": {"labels": at("/metadata/labels")},
            "spec": at("/spec"),
        },
    })
}

/// The version of `autoscaling.x-k8s.io` the API server prefers (`v1` where served, else
/// `v1beta1`); an error saying what to do when the group is not there at all.
pub async fn discover(client: &Client) -> Result<String, String> {
    let request = http::Request::get(format!("/apis/{GROUP}"))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let group: Value = client.request(request).await.map_err(|e| {
        let e = crate::bounded::brief(&e);
        format!(
            "the cluster has no {GROUP} API ({e}): ProvisioningRequest needs cluster-autoscaler 1.29 or later with --enable-provisioning-requests and its CRD installed; use --scale-through placeholders otherwise"
        )
    })?;
    let versions: Vec<&str> = group
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("version").and_then(Value::as_str))
        .collect();
    ["v1", "v1beta1"]
        .into_iter()
        .find(|v| versions.contains(v))
        .map(str::to_string)
        .ok_or_else(|| format!("{GROUP} serves {versions:?}, not v1 or v1beta1"))
}
