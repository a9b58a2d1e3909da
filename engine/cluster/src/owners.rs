//! Gang sizes from the pods' owners: a `batch/v1` Job runs `parallelism` pods at once (no
//! more than the completions still to go), and the Jobs of one JobSet run together. The
//! queue admits such a group whole, as Kueue admits a Job as one workload.
//!
//! A pod's own `gantry.dev/gang` / `gantry.dev/gang-size` labels win over its owner
//! (`gantry.dev/gang-size: "1"` on a Job's pod template queues its pods one by one).

use crate::pods::PodSeen;
use k8s_openapi::api::batch::v1 as batch;
use std::collections::BTreeMap;

/// The label JobSet sets on its Jobs and their pods.
pub const JOBSET_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// A Job as the queue reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerJob {
    pub namespace: String,
    pub name: String,
    /// Pods that run at once: `parallelism`, at most the completions still to go.
    pub size: u32,
    /// The JobSet it belongs to.
    pub jobset: Option<String>,
}

/// The Job as the queue keeps it.
pub fn job(j: &batch::Job) -> OwnerJob {
    let spec = j.spec.as_ref();
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1).max(0);
    let size = match spec.and_then(|s| s.completions) {
        Some(completions) => {
            let succeeded = j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
            parallelism.min(completions.saturating_sub(succeeded))
        }
        None => parallelism,
    };
    OwnerJob {
        namespace: j.metadata.namespace.clone().unwrap_or_default(),
        name: j.metadata.name.clone().unwrap_or_default(),
        size: u32::try_from(size).unwrap_or(0).max(1),
        jobset: j
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(JOBSET_LABEL))
            .cloned(),
    }
}

/// `namespace/name`, a Job's key in the view.
pub fn key(j: &batch::Job) -> String {
    format!(
        "{}/{}",
        j.metadata.namespace.as_deref().unwrap_or(""),
        j.metadata.name.as_deref().unwrap_or("")
    )
}

/// Which job a pod belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// A job of its own.
    Single,
    /// A gang: `namespace/name` and how many pods it has.
    Gang(String, u32),
    /// Owned by a Job the view has not seen yet: it waits a cycle.
    OwnerUnseen(String),
}

/// The Jobs of a cluster, with each JobSet's total size.
#[derive(Debug, Default)]
pub struct Owners<'a> {
    jobs: Option<&'a BTreeMap<String, OwnerJob>>,
    jobsets: BTreeMap<(String, String), u32>,
}

impl<'a> Owners<'a> {
    /// `None`: Jobs are not watched (the view without the queue); pods then form gangs
    /// only by their own labels.
    pub fn new(jobs: Option<&'a BTreeMap<String, OwnerJob>>) -> Owners<'a> {
        let mut jobsets: BTreeMap<(String, String), u32> = BTreeMap::new();
        for j in jobs.into_iter().flat_map(BTreeMap::values) {
            if let Some(set) = &j.jobset {
                let total = jobsets
                    .entry((j.namespace.clone(), set.clone()))
                    .or_default();
                *total = total.saturating_add(j.size);
            }
        }
        Owners { jobs, jobsets }
    }

    /// The job `p` belongs to.
    pub fn membership(&self, p: &PodSeen) -> Membership {
        if p.gang_declared {
            return match &p.gang {
                Some(g) if p.gang_size > 1 => Membership::Gang(g.clone(), p.gang_size),
                _ => Membership::Single,
            };
        }
        let (Some(jobs), Some(owner)) = (self.jobs, &p.owner_job) else {
            return Membership::Single;
        };
        let key = format!("{}/{owner}", p.namespace);
        let Some(job) = jobs.get(&key) else {
            return Membership::OwnerUnseen(key);
        };
        let (name, size) = match &job.jobset {
            Some(set) => (
                set.clone(),
                self.jobsets
                    .get(&(job.namespace.clone(), set.clone()))
                    .copied()
                    .unwrap_or(job.size),
            ),
            None => (job.name.clone(), job.size),
        };
        if size > 1 {
            Membership::Gang(format!("{}/{name}", p.namespace), size)
        } else {
            Membership::Single
        }
    }
}
