//! Kubernetes pod listings (`kubectl get pods -A -o json`, one or more taken over time):
//! each GPU pod that ran to the end is a job — submitted at `creationTimestamp`, started
//! at `status.startTime`, done at its containers' last `finishedAt`. Pods of one gang
//! (`gantry.dev/gang` with `gantry.dev/gang-size`) are one job. A later listing's view of
//! a pod (by uid) replaces an earlier one, so a pod running in the first and finished in
//! the last counts with its real end. Team and tier come from `gantry.dev/team` and
//! `gantry.dev/tier`, else from the namespace and the priority class through the mapping.

use super::{at, Imported, Mapping, TraceJob};
use crate::core::declared::{duration_s, Runtime};
use serde_json::Value;
use std::collections::BTreeMap;

/// The command that writes what this reads.
pub const KUBECTL: &str = "kubectl get pods -A -o json";

#[derive(Debug, Clone)]
struct Seen {
    namespace: String,
    name: String,
    team: Option<String>,
    tier: Option<String>,
    priority_class: Option<String>,
    gang: Option<(String, u32)>,
    gpus: u32,
    created: i64,
    started: Option<i64>,
    finished: Option<i64>,
    /// The runtime the pod declared, as the controller reads it: its
    /// `gantry.dev/runtime` estimate bounded by its `activeDeadlineSeconds`.
    limit: Option<u64>,
    /// `limit` is the estimate, which nobody enforces, and the deadline behind it if
    /// the pod has one.
    estimate_only: bool,
    enforced: Option<u64>,
}

/// Reads every listing (`(file, text)`, oldest first) into one trace.
pub fn import(listings: &[(String, String)], map: &Mapping) -> Result<Imported, String> {
    let mut pods: BTreeMap<String, Seen> = BTreeMap::new();
    for (file, text) in listings {
        let list: Value = serde_json::from_str(text).map_err(|e| {
            at(
                file,
                e.line(),
                format!("not JSON: {e}; save the listing with `{KUBECTL}`"),
            )
        })?;
        let Some(items) = list.get("items").and_then(Value::as_array) else {
            return Err(at(
                file,
                1,
                format!("no `items`: a pod listing is a PodList, as `{KUBECTL}` writes"),
            ));
        };
        for pod in items {
            let uid = pod
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(seen) = read(pod) {
                pods.insert(uid.to_string(), seen);
            }
        }
    }
    let mut out = Imported::default();
    let mut gangs: BTreeMap<(String, String), Vec<Seen>> = BTreeMap::new();
    for seen in pods.into_values() {
        if seen.gpus == 0 {
            out.skip("no GPUs");
            continue;
        }
        match &seen.gang {
            Some((gang, _)) => gangs
                .entry((seen.namespace.clone(), gang.clone()))
                .or_default()
                .push(seen),
            None => job(
                &mut out,
                map,
                &format!("{}/{}", seen.namespace, seen.name),
                &[seen],
            ),
        }
    }
    for ((namespace, gang), members) in gangs {
        job(&mut out, map, &format!("{namespace}/{gang}"), &members);
    }
    Ok(out)
}

/// A job from its pods (one, or a gang's members), if it ran to the end.
fn job(out: &mut Imported, map: &Mapping, id: &str, pods: &[Seen]) {
    let Some(first) = pods.first() else { return };
    let size = first.gang.as_ref().map_or(1, |(_, n)| *n);
    if pods.len() < size as usize {
        out.skip("gang members missing from the listings");
        return;
    }
    let started: Option<Vec<i64>> = pods.iter().map(|p| p.started).collect();
    let finished: Option<Vec<i64>> = pods.iter().map(|p| p.finished).collect();
    let (Some(started), Some(finished)) = (started, finished) else {
        out.skip(if pods.iter().any(|p| p.started.is_none()) {
            "never started"
        } else {
            "not finished in the last listing"
        });
        return;
    };
    let start = started.iter().copied().min().unwrap_or(0);
    let end = finished.iter().copied().max().unwrap_or(start);
    let submitted = pods.iter().map(|p| p.created).min().unwrap_or(start);
    let team = first
        .team
        .clone()
        .or_else(|| map.team(&[first.namespace.as_str()]));
    let tier = first
        .tier
        .clone()
        .or_else(|| map.tier(&[first.priority_class.as_deref().unwrap_or("")]));
    out.admit(TraceJob {
        id: id.to_string(),
        team,
        tier,
        user: None,
        pools: Vec::new(),
        submitted_at: submitted,
        members: u32::try_from(pods.len()).unwrap_or(u32::MAX),
        gpus_per_member: first.gpus,
        runtime_s: u64::try_from(end - start).unwrap_or(0).max(1),
        limit_s: first.limit,
        interrupted_s: Vec::new(),
        estimate_only: first.estimate_only,
        enforced_s: first.enforced,
    });
}

fn read(pod: &Value) -> Option<Seen> {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str);
    let time = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp())
    };
    let label = |k: &str| {
        pod.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    // Added up without wrapping: a count past u32 is kept at u32::MAX, which the
    // import then skips as past simulate's per-member limit.
    let gpus: u64 = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let r = c.get("resources")?;
            let q = r
                .pointer("/limits/nvidia.com~1gpu")
                .or_else(|| r.pointer("/requests/nvidia.com~1gpu"))?;
            match q {
                Value::String(s) => s.parse::<u64>().ok(),
                Value::Number(n) => n.as_u64(),
                _ => None,
            }
        })
        .fold(0u64, u64::saturating_add);
    let gpus = u32::try_from(gpus).unwrap_or(u32::MAX);
    let finished = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|cs| {
            let ends: Option<Vec<i64>> = cs
                .iter()
                .map(|c| {
                    c.pointer("/state/terminated/finishedAt")?
                        .as_str()
                        .and_then(time)
                })
                .collect();
            ends?.into_iter().max()
        });
    let namespace = text("/metadata/namespace")?.to_string();
    let priority_class = text("/spec/priorityClassName").map(str::to_string);
    // As the controller reads it (`core::declared`): the estimate, bounded by the
    // deadline the kubelet enforces.
    let deadline = pod
        .pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_u64);
    let declared = Runtime::declared(
        pod.pointer("/metadata/annotations/gantry.dev~1runtime")
            .and_then(Value::as_str)
            .and_then(duration_s),
        deadline,
    );
    let (limit, estimate_only, enforced) = (
        declared.estimate_s,
        declared.estimate_only,
        declared.limit_s,
    );
    Some(Seen {
        name: text("/metadata/name")?.to_string(),
        team: label("gantry.dev/team"),
        tier: label("gantry.dev/tier"),
        priority_class,
        gang: label("gantry.dev/gang")
            .zip(label("gantry.dev/gang-size").and_then(|s| s.parse().ok())),
        gpus,
        created: text("/metadata/creationTimestamp").and_then(time)?,
        started: text("/status/startTime").and_then(time),
        finished,
        namespace,
        limit,
        estimate_only,
        enforced,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::*;

    /// A one-GPU pod with `annotations` and an `activeDeadlineSeconds` of `deadline`.
    fn pod(annotations: Value, deadline: Value) -> Value {
        serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations,
                         "creationTimestamp": "2026-11-24T08:00:00Z"},
            "spec": {"activeDeadlineSeconds": deadline, "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    }

    #[test]
    fn a_pods_declared_runtime_is_read_as_the_controller_reads_it() {
        let limit = |a, d| read(&pod(a, d)).and_then(|s| s.limit);
        let est = serde_json::json!({"gantry.dev/runtime": "1h30m"});
        assert_eq!(limit(est.clone(), Value::Null), Some(5400));
        assert_eq!(limit(serde_json::json!({}), 600.into()), Some(600));
        // Both: the shorter, as the controller plans it at the start.
        assert_eq!(limit(est.clone(), 7200.into()), Some(5400));
        assert_eq!(limit(est, 3600.into()), Some(3600));
        let bad = serde_json::json!({"gantry.dev/runtime": "soon"});
        assert_eq!(limit(bad, Value::Null), None);
    }

    /// An estimate is not a limit: the trace says so, with the deadline behind it, so a
    /// replay runs a pod that ran past its estimate as long as it ran.
    #[test]
    fn an_estimate_is_written_as_one_and_a_deadline_as_a_limit() {
        let seen = |a, d| {
            let s = read(&pod(a, d)).unwrap();
            (s.limit, s.estimate_only, s.enforced)
        };
        let est = serde_json::json!({"gantry.dev/runtime": "1h30m"});
        assert_eq!(seen(est.clone(), Value::Null), (Some(5400), true, None));
        assert_eq!(
            seen(est.clone(), 7200.into()),
            (Some(5400), true, Some(7200))
        );
        // The deadline is shorter: it is what is planned, and it is enforced.
        assert_eq!(seen(est, 3600.into()), (Some(3600), false, None));
        assert_eq!(
            seen(serde_json::json!({}), 600.into()),
            (Some(600), false, None)
        );
        let job = TraceJob {
            id: "ml/p".into(),
            team: None,
            tier: None,
            user: None,
            pools: Vec::new(),
            submitted_at: 0,
            members: 1,
            gpus_per_member: 1,
            runtime_s: 9000,
            limit_s: Some(5400),
            interrupted_s: Vec::new(),
            estimate_only: true,
            enforced_s: Some(7200),
        };
        let v = job.to_json();
        assert_eq!(
            (
                &v["runtime_s"],
                &v["actual_runtime_s"],
                &v["estimate_only"],
                &v["runtime_limit_s"]
            ),
            (&5400.into(), &9000.into(), &true.into(), &7200.into())
        );
    }
}
