//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection
//! does it: the holder renews the Lease every `renew` interval; another candidate takes it
//! over only after it has seen the Lease unchanged for a whole `duration` (measured on its
//! own clock, so clock skew between replicas does not matter). Writes are conditional on
//! the Lease's resourceVersion, so two candidates cannot both win. Only the leader runs
//! the queue; every replica keeps answering the webhook and the extender.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use std::time::{Duration, Instant};

/// How the election is run.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    /// This candidate (the pod name, by default).
    pub identity: String,
    /// How long a Lease not renewed stays with its holder.
    pub duration: Duration,
    /// How often the holder renews (and a candidate looks).
    pub renew: Duration,
}

impl Election {
    /// client-go's defaults (a 15 s lease, tried every 2 s) for the Lease `gantry-queue`
    /// in `namespace`, with this process as `identity`.
    pub fn new(namespace: &str, identity: &str) -> Election {
        Election {
            namespace: namespace.into(),
            name: "gantry-queue".into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            renew: Duration::from_secs(2),
        }
    }
}

/// What a candidate last saw of the Lease: its version, and when (on our clock) it last
/// changed.
#[derive(Debug, Clone)]
struct Observed {
    resource_version: String,
    holder: Option<String>,
    at: Instant,
}

fn now_micro() -> Option<MicroTime> {
    Some(MicroTime(k8s_openapi::jiff::Timestamp::now()))
}

/// Runs the election until the task is aborted, telling `leader` whether this candidate
/// holds the Lease. A failed renewal past the Lease's duration gives leadership up.
pub async fn run(client: Client, e: Election, leader: tokio::sync::watch::Sender<bool>) {
    let leases: Api<Lease> = Api::namespaced(client, &e.namespace);
    let mut observed: Option<Observed> = None;
    let mut renewed_at: Option<Instant> = None;
    loop {
        let held = try_acquire_or_renew(&leases, &e, &mut observed).await;
        match held {
            Ok(true) => renewed_at = Some(Instant::now()),
            Ok(false) => renewed_at = None,
            Err(error) => {
                let error = crate::bounded::brief(&error);
                tracing::warn!(%error, lease = %e.name, "lease: cannot read or write");
            }
        }
        let leading = renewed_at.is_some_and(|t| t.elapsed() < e.duration);
        if *leader.borrow() != leading {
            tracing::info!(identity = %e.identity, leading, "lease: leadership changed");
            leader.send_replace(leading);
        }
        tokio::time::sleep(e.renew).await;
    }
}

/// One round: `Ok(true)` when this candidate holds the Lease after it.
async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    e: &Election,
    observed: &mut Option<Observed>,
) -> Result<bool, String> {
    let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(e.identity.clone()),
        lease_duration_seconds: i32::try_from(e.duration.as_secs()).ok(),
        acquire_time: acquired.or_else(now_micro),
        renew_time: now_micro(),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let current = leases
        .get_opt(&e.name)
        .await
        .map_err(|err| format!("get lease {}/{}: {err}", e.namespace, e.name))?;
    let Some(current) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(e.name.clone()),
                namespace: Some(e.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec(0, None)),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            // Another candidate created it first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(err) => Err(format!("create lease: {err}")),
        };
    };
    let rv = current
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let cur = current.spec.clone().unwrap_or_default();
    let holder = cur.holder_identity.clone().filter(|h| !h.is_empty());
    let changed = observed
        .as_ref()
        .is_none_or(|o| o.resource_version != rv || o.holder != holder);
    if changed {
        *observed = Some(Observed {
            resource_version: rv.clone(),
            holder: holder.clone(),
            at: Instant::now(),
        });
    }
    let mine = holder.as_deref() == Some(e.identity.as_str());
    let expired = observed
        .as_ref()
        .is_some_and(|o| o.at.elapsed() >= e.duration);
    if !mine && holder.is_some() && !expired {
        return Ok(false);
    }
    let transitions = cur.lease_transitions.unwrap_or(0) + i32::from(!mine);
    let acquired = if mine { cur.acquire_time.clone() } else { None };
    let mut next = current.clone();
    next.spec = Some(spec(transitions, acquired));
    // The write carries the version read: a candidate that lost the race gets 409.
    match leases.replace(&e.name, &PostParams::default(), &next).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(err) => Err(format!("update lease: {err}")),
    }
}

/// The namespace gantry runs in: `$POD_NAMESPACE`, the service account's, else `default`.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_else(|| "default".into())
}

/// This replica's identity: `$POD_NAME`, else the host name and process id.
pub fn own_identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "gantry".into());
            format!("{host}-{}", std::process::id())
        })
}
