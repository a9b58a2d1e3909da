//! Every write this process makes to the API server, counted by verb and resource as the
//! API server's audit log would name them (`patch pods/status`, `create events`), for
//! `gantry_api_writes_total`: the queue must be heard from only on change.

use std::collections::BTreeMap;
use std::sync::Mutex;

static WRITES: Mutex<BTreeMap<(&'static str, String), u64>> = Mutex::new(BTreeMap::new());

/// Counts a request if it writes.
pub fn count(method: &http::Method, path: &str) {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::PUT => "update",
        http::Method::DELETE => "delete",
        _ => return,
    };
    let mut w = match WRITES.lock() {
        Ok(w) => w,
        Err(p) => p.into_inner(),
    };
    *w.entry((verb, resource(path))).or_insert(0) += 1;
}

/// The counts so far.
pub fn counts() -> BTreeMap<(String, String), u64> {
    let w = match WRITES.lock() {
        Ok(w) => w,
        Err(p) => p.into_inner(),
    };
    w.iter()
        .map(|((verb, resource), n)| ((verb.to_string(), resource.clone()), *n))
        .collect()
}

/// The resource a path names: `pods`, `pods/status`, `leases.coordination.k8s.io`.
pub fn resource(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let (group, rest) = match parts.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => return "other".into(),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (kind, sub) = match rest {
        [kind] | [kind, _] => (*kind, None),
        [kind, _, sub, ..] => (*kind, Some(*sub)),
        [] => return "other".into(),
    };
    let kind = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    match sub {
        Some(sub) => format!("{kind}/{sub}"),
        None => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_resource() {
        for (path, want) in [
            ("/api/v1/namespaces/ml/pods/a", "pods"),
            ("/api/v1/namespaces/ml/pods/a/status", "pods/status"),
            ("/api/v1/namespaces/ml/pods/a/eviction", "pods/eviction"),
            ("/api/v1/namespaces/ml/events", "events"),
            ("/api/v1/nodes/n0", "nodes"),
            ("/api/v1/namespaces", "namespaces"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/gantry-system/leases/gantry-queue",
                "leases.coordination.k8s.io",
            ),
            ("/healthz", "other"),
        ] {
            assert_eq!(resource(path), want, "{path}");
        }
    }
}
