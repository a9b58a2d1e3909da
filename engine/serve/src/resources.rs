//! What a pod asks for, by Kubernetes' resource model (the scheduler's effective pod
//! request, `k8s.io/component-helpers/resource.PodRequests`):
//!
//! - a container's request is its `requests` entry, else its `limits` entry (the API
//!   server defaults one from the other); a CPU or memory request above its limit is
//!   invalid;
//! - GPUs and MIG instances are extended resources: they cannot be overcommitted, so a
//!   request needs a limit and the two must be equal; they are whole numbers;
//! - the pod asks for the larger of (its containers plus its sidecars — init containers
//!   with `restartPolicy: Always`) and, for each other init container in order, that init
//!   container plus the sidecars started before it; then `spec.overhead` is added.
//!
//! Quantities are read by [`super::quantity`], exactly as the API server reads them.

use super::pod::{Container, Pod, GPU, MIG_PREFIX};
use super::quantity::{self, QuantityError};
use std::collections::BTreeMap;

/// Whole GPUs (or MIG instances of one profile) one container may ask for.
const MAX_PER_CONTAINER: u64 = 64;

/// What the pod asks for, in the units of a job.
#[derive(Debug, Default, PartialEq)]
pub struct Asks {
    pub gpus: u32,
    pub mig: Option<(String, u32)>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// One container's (or the pod's) amounts of each resource Gantry reads.
#[derive(Debug, Default, Clone, PartialEq)]
struct Amounts {
    cpu_milli: u64,
    memory_bytes: u64,
    gpus: u64,
    /// MIG instances by profile.
    mig: BTreeMap<String, u64>,
}

impl Amounts {
    /// Resource by resource, `f` of the two amounts (a missing MIG profile counts 0).
    fn combine(&self, o: &Amounts, f: fn(u64, u64) -> u64) -> Amounts {
        let mut mig = self.mig.clone();
        for (p, n) in &o.mig {
            let e = mig.entry(p.clone()).or_insert(0);
            *e = f(*e, *n);
        }
        Amounts {
            cpu_milli: f(self.cpu_milli, o.cpu_milli),
            memory_bytes: f(self.memory_bytes, o.memory_bytes),
            gpus: f(self.gpus, o.gpus),
            mig,
        }
    }

    fn plus(&self, o: &Amounts) -> Amounts {
        self.combine(o, u64::saturating_add)
    }

    /// Resource by resource, the larger.
    fn max(&self, o: &Amounts) -> Amounts {
        self.combine(o, u64::max)
    }
}

fn text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads `key` of a requests/limits map in units of 10^`unit_exp10`.
fn read(
    map: &BTreeMap<String, serde_json::Value>,
    key: &str,
    unit_exp10: i32,
    place: &str,
    field: &str,
) -> Result<Option<u64>, String> {
    let Some(v) = map.get(key) else {
        return Ok(None);
    };
    let raw = text(v).ok_or(QuantityError::Syntax);
    raw.and_then(|r| quantity::parse(&r, unit_exp10))
        .map(Some)
        .map_err(|e| format!("{place}.resources.{field}[{key}]: `{v}` {e}"))
}

/// CPU or memory: the request, else the limit; a request above the limit is invalid.
fn compute(c: &Container, key: &str, unit_exp10: i32, place: &str) -> Result<u64, String> {
    let r = &c.resources;
    let request = read(&r.requests, key, unit_exp10, place, "requests")?;
    let limit = read(&r.limits, key, unit_exp10, place, "limits")?;
    if let (Some(q), Some(l)) = (request, limit) {
        if q > l {
            return Err(format!(
                "{place}.resources.requests[{key}]: must be less than or equal to the {key} limit"
            ));
        }
    }
    Ok(request.or(limit).unwrap_or(0))
}

/// GPUs or MIG instances: a whole number; a request needs an equal limit.
fn extended(c: &Container, key: &str, place: &str) -> Result<u64, String> {
    let r = &c.resources;
    let milli = |field: &str, map| read(map, key, -3, place, field);
    let request = milli("requests", &r.requests)?;
    let limit = milli("limits", &r.limits)?;
    let n = match (request, limit) {
        (Some(_), None) => {
            return Err(format!(
                "{place}.resources.limits[{key}]: a limit must be set, equal to the request (GPUs cannot be overcommitted)"
            ))
        }
        (Some(q), Some(l)) if q != l => {
            return Err(format!(
                "{place}.resources.requests[{key}]: must be equal to the {key} limit (GPUs cannot be overcommitted)"
            ))
        }
        (_, Some(l)) => l,
        (None, None) => return Ok(0),
    };
    if n % 1000 != 0 || n / 1000 > MAX_PER_CONTAINER {
        return Err(format!(
            "{place}.resources.limits[{key}]: must be a whole number of {} up to {MAX_PER_CONTAINER}",
            if key == GPU { "GPUs" } else { "MIG instances" }
        ));
    }
    Ok(n / 1000)
}

fn container(c: &Container, place: &str) -> Result<Amounts, String> {
    let r = &c.resources;
    let mut mig = BTreeMap::new();
    for key in r.limits.keys().chain(r.requests.keys()) {
        if let Some(profile) = key.strip_prefix(MIG_PREFIX) {
            if !mig.contains_key(profile) {
                let n = extended(c, key, place)?;
                mig.insert(profile.to_string(), n);
            }
        }
    }
    mig.retain(|_, n| *n > 0);
    Ok(Amounts {
        cpu_milli: compute(c, "cpu", -3, place)?,
        memory_bytes: compute(c, "memory", 0, place)?,
        gpus: extended(c, GPU, place)?,
        mig,
    })
}

fn place(kind: &str, i: usize, c: &Container) -> String {
    match &c.name {
        Some(n) => format!("{kind}[{i}] ({n})"),
        None => format!("{kind}[{i}]"),
    }
}

/// The pod's effective request (see the module documentation).
pub fn asks(pod: &Pod) -> Result<Asks, String> {
    let mut total = Amounts::default();
    for (i, c) in pod.spec.containers.iter().enumerate() {
        total = total.plus(&container(c, &place("spec.containers", i, c))?);
    }
    let mut sidecars = Amounts::default();
    let mut init_peak = Amounts::default();
    for (i, c) in pod.spec.init_containers.iter().enumerate() {
        let amounts = container(c, &place("spec.initContainers", i, c))?;
        let during = if c.restart_policy.as_deref() == Some("Always") {
            total = total.plus(&amounts);
            sidecars = sidecars.plus(&amounts);
            sidecars.clone()
        } else {
            amounts.plus(&sidecars)
        };
        init_peak = init_peak.max(&during);
    }
    let mut pod_total = total.max(&init_peak);
    if let Some(overhead) = &pod.spec.overhead {
        let overhead_container = Container {
            resources: super::pod::Resources {
                requests: overhead.clone(),
                limits: BTreeMap::new(),
            },
            ..Container::default()
        };
        pod_total = pod_total.plus(&container(&overhead_container, "spec.overhead")?);
    }
    finish(pod_total)
}

/// The most GPUs or MIG instances one pod may ask for: far above any real node (the
/// cluster view closes a node that claims more), so nothing is ever sized by a larger
/// count read from a pod.
pub const MAX_GPUS_PER_POD: u64 = 1024;

/// Past what any node has is an error, not a wrapped-around or clamped number.
fn finish(a: Amounts) -> Result<Asks, String> {
    const LIMIT: u64 = 1_000_000_000_000_000;
    let too_much = |what: &str| format!("the pod asks for more {what} in all than any node has");
    if a.cpu_milli >= LIMIT {
        return Err(too_much("cpu"));
    }
    if a.memory_bytes >= LIMIT.saturating_mul(1000) {
        return Err(too_much("memory"));
    }
    let capped = |n: u64, what: &str| {
        if n > MAX_GPUS_PER_POD {
            return Err(format!(
                "the pod asks for {n} {what}, above the {MAX_GPUS_PER_POD} gantry accepts for one pod"
            ));
        }
        u32::try_from(n).map_err(|_| too_much(what))
    };
    let gpus = capped(a.gpus, "GPUs")?;
    let mut profiles = a.mig.into_iter();
    let mig = match (profiles.next(), profiles.next()) {
        (None, _) => None,
        (Some((p, n)), None) => Some((p, capped(n, "MIG instances")?)),
        (Some((p, _)), Some((q, _))) => {
            return Err(format!(
                "the containers ask for two MIG profiles, {p} and {q}; one pod uses one"
            ))
        }
    };
    Ok(Asks {
        gpus,
        mig,
        cpu_milli: a.cpu_milli,
        memory_mib: a.memory_bytes.div_ceil(1024 * 1024),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "spec": spec })).unwrap_or_default()
    }

    fn containers(cs: &[serde_json::Value]) -> Pod {
        pod(json!({ "containers": cs }))
    }

    fn limits(key: &str, v: &str) -> serde_json::Value {
        json!({"resources": {"limits": {key: v}}})
    }

    #[test]
    fn mig_instances_are_summed_over_containers_and_bad_counts_refused() {
        let one = limits("nvidia.com/mig-1g.10gb", "1");
        let a = asks(&containers(&vec![one; 8])).unwrap_or_default();
        assert_eq!(a.mig, Some(("1g.10gb".to_string(), 8)));
        for bad in ["abc", "-5", "0.5", "1e2", "65"] {
            let c = limits("nvidia.com/mig-1g.10gb", bad);
            assert!(asks(&containers(&[c])).is_err(), "{bad}");
        }
        // Zero asks for nothing: not a MIG pod.
        let zero = limits("nvidia.com/mig-1g.10gb", "0");
        assert_eq!(asks(&containers(&[zero])).map(|a| a.mig), Ok(None));
    }

    #[test]
    fn gpus_cannot_be_overcommitted() {
        let request_only = json!({"resources": {"requests": {"nvidia.com/gpu": "1"}}});
        let e = asks(&containers(&[request_only])).err().unwrap_or_default();
        assert!(e.contains("a limit must be set"), "{e}");
        let unequal = json!({"resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}});
        let e = asks(&containers(&[unequal])).err().unwrap_or_default();
        assert!(e.contains("must be equal"), "{e}");
        let equal = json!({"resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}});
        assert_eq!(asks(&containers(&[equal])).map(|a| a.gpus), Ok(2));
        // 1e1 and 10 are the same quantity.
        assert_eq!(
            asks(&containers(&[limits(GPU, "1e1")])).map(|a| a.gpus),
            Ok(10)
        );
    }

    #[test]
    fn a_request_above_its_limit_is_invalid_and_a_limit_alone_is_the_request() {
        let above = json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}});
        assert!(asks(&containers(&[above])).is_err());
        let a = asks(&containers(&[
            json!({"resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}}}),
        ]))
        .unwrap_or_default();
        assert_eq!((a.cpu_milli, a.memory_mib), (1500, 1024));
    }

    #[test]
    fn init_containers_and_sidecars_count_as_the_scheduler_counts_them() {
        // An init container asking 8 GPUs before a 1-GPU main container: the pod needs 8.
        let spec = json!({
            "initContainers": [{"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        });
        assert_eq!(asks(&pod(spec)).map(|a| a.gpus), Ok(8));
        // A sidecar (restartPolicy: Always) runs beside the main containers: added; and
        // beside every later init container.
        let spec = json!({
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            ],
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        });
        // max(2 + 1, 4 + 1) = 5
        assert_eq!(asks(&pod(spec)).map(|a| a.gpus), Ok(5));
        // CPU: requests, and overhead is added.
        let spec = json!({
            "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
            "containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"requests": {"cpu": "500m"}}}],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        });
        let a = asks(&pod(spec)).unwrap_or_default();
        assert_eq!((a.cpu_milli, a.memory_mib), (3250, 120));
    }

    #[test]
    fn errors_name_the_container_and_the_field() {
        let spec = json!({
            "initContainers": [{"name": "warmup", "resources": {"limits": {"memory": "lots"}}}],
            "containers": [],
        });
        let e = asks(&pod(spec)).err().unwrap_or_default();
        assert!(e.starts_with("spec.initContainers[0] (warmup).resources.limits[memory]: `\"lots\"` is not a quantity"), "{e}");
    }

    #[test]
    fn sums_do_not_wrap_around() {
        let huge = json!({"resources": {"requests": {"cpu": "900P"}}});
        assert!(asks(&containers(&[huge.clone(), huge])).is_err());
        let many = limits(GPU, "64");
        assert_eq!(
            asks(&containers(&vec![many.clone(); 16])).map(|a| a.gpus),
            Ok(1024)
        );
        // Past the per-pod cap: refused with the count, never sized by it.
        let e = asks(&containers(&vec![many; 17])).err().unwrap_or_default();
        assert!(e.contains("1088 GPUs") && e.contains("1024"), "{e}");
        assert!(asks(&containers(&[limits(GPU, "2000000000")])).is_err());
    }
}
