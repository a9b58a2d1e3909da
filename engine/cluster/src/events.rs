//! Gantry's Events on pods, counted as a series the way Kubernetes' own recorder
//! (client-go's EventCorrelator) does: one `v1` Event per (pod, reason), named for both,
//! and a repeat patches its `count`, `lastTimestamp` and message instead of creating
//! another. A pod whose reason goes back and forth leaves two Events with growing
//! counts, not one object per change (`kubectl describe` shows "x3 over 10m").

use crate::enact::PodRef;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;

/// How many series' counts are remembered; past it they are forgotten at once and each
/// is read back from the API server on its next repeat (one GET, no lost count).
const REMEMBERED: usize = 50_000;

/// The count last written for each series this process made or read, by Event key
/// (`namespace/name`) and the pod's uid: a repeat patches without reading first.
static COUNTS: Mutex<Option<HashMap<String, i32>>> = Mutex::new(None);

/// The Event's name for `pod` and `reason`: the pod's name (cut so the whole stays a
/// valid name) and a digest of its uid and the reason, so a pod re-created under the
/// same name starts new series.
pub fn series_name(pod: &PodRef, reason: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{}\n{reason}", pod.uid).as_bytes(),
    );
    let hex: String = digest
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let base: String = pod.name.chars().take(200).collect();
    format!("{base}.gantry-{hex}")
}

fn time(now: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(now)
        .ok()
        .map(Time)
}

/// Forgets every series' count, as a restarted process has: the next repeat reads the
/// count back. For tests.
#[doc(hidden)]
pub fn forget_counts() {
    let mut counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *counts = None;
}

fn remembered(key: &str) -> Option<i32> {
    let counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counts.as_ref().and_then(|c| c.get(key).copied())
}

fn remember(key: String, count: i32) {
    let mut counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let c = counts.get_or_insert_with(HashMap::new);
    if c.len() >= REMEMBERED && !c.contains_key(&key) {
        c.clear();
    }
    c.insert(key, count);
}

/// Records `reason` on `pod`: the series' Event is created with count 1, or, when it
/// exists, patched to the next count with this message and time. An Event the API
/// server has dropped (its TTL, an hour by default) starts again at 1.
pub async fn record(
    client: &Client,
    pod: &PodRef,
    kind: &str,
    reason: &str,
    message: &str,
    now: i64,
) -> Result<(), String> {
    let events: Api<Event> = Api::namespaced(client.clone(), &pod.namespace);
    let name = series_name(pod, reason);
    let key = format!("{}/{name}\n{}", pod.namespace, pod.uid);
    let message: String = message.chars().take(1024).collect();
    let fail = |err: kube::Error| {
        format!(
            "event on {}/{}: {}",
            pod.namespace,
            pod.name,
            crate::bounded::brief(&err)
        )
    };
    let repeat = |count: i32| {
        json!({
            "count": count,
            "message": message,
            "lastTimestamp": time(now),
        })
    };
    if let Some(count) = remembered(&key) {
        match events
            .patch(
                &name,
                &crate::controller::params(),
                &Patch::Merge(&repeat(count + 1)),
            )
            .await
        {
            Ok(_) => {
                remember(key, count + 1);
                return Ok(());
            }
            // Gone (expired, or deleted): a new series below.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(fail(e)),
        }
    }
    let first = new_event(pod, &name, kind, reason, &message, now);
    match events.create(&PostParams::default(), &first).await {
        Ok(_) => {
            remember(key, 1);
            Ok(())
        }
        // Made before this process knew of it (another leader, a restart): read its
        // count, then add one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let have = events.get(&name).await.map_err(fail)?;
            // Anyone who may create Events in the namespace can take the name (it is
            // derived from public fields): an Event not gantry's about this pod is left
            // alone, and this one is recorded under a name of its own, outside any series.
            let ours = have.involved_object.uid.as_deref() == Some(pod.uid.as_str())
                && have.reporting_component.as_deref() == Some(crate::controller::COMPONENT);
            if !ours {
                let mut single = first;
                single.metadata.name = None;
                let base: String = pod.name.chars().take(200).collect();
                single.metadata.generate_name = Some(format!("{base}.gantry-"));
                return events
                    .create(&PostParams::default(), &single)
                    .await
                    .map(|_| ())
                    .map_err(fail);
            }
            let count = have.count.unwrap_or(1).saturating_add(1);
            events
                .patch(
                    &name,
                    &crate::controller::params(),
                    &Patch::Merge(&repeat(count)),
                )
                .await
                .map_err(fail)?;
            remember(key, count);
            Ok(())
        }
        Err(e) => Err(fail(e)),
    }
}

fn new_event(pod: &PodRef, name: &str, kind: &str, reason: &str, message: &str, now: i64) -> Event {
    use crate::controller::COMPONENT;
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(kind.into()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some(COMPONENT.into()),
            host: None,
        }),
        first_timestamp: time(now),
        last_timestamp: time(now),
        event_time: k8s_openapi::jiff::Timestamp::from_second(now)
            .ok()
            .map(MicroTime),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(COMPONENT.into()),
        action: Some(reason.into()),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> PodRef {
        PodRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_series_is_named_for_its_pod_and_reason() {
        let a = series_name(&pod("train-0", "u1"), "NoCapacity");
        assert!(a.starts_with("train-0.gantry-"), "{a}");
        assert_eq!(a, series_name(&pod("train-0", "u1"), "NoCapacity"));
        assert_ne!(a, series_name(&pod("train-0", "u1"), "QuotaExhausted"));
        // The same name, another pod.
        assert_ne!(a, series_name(&pod("train-0", "u2"), "NoCapacity"));
        // The longest pod name still gives a valid (at most 253 characters) name.
        let long = series_name(&pod(&"x".repeat(253), "u1"), "NoCapacity");
        assert!(long.len() <= 253, "{}", long.len());
    }
}
