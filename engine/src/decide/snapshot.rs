//! The decision cycle's input: the fleet, every job (pending and running) and the teams'
//! usage history, validated against each other. Building it is where bad job files are
//! caught: duplicate ids, placements on nodes or GPUs that do not exist, GPUs given twice.

use crate::core::alloc::{ClusterState, Request};
use crate::core::fleet::{Fleet, MILLI};
use crate::core::gang::JobShape;
use crate::core::mig::{self, MigTable};
use crate::core::packing::OnNode;
use crate::core::placer::Choice;
use crate::inventory::jobs_file::Job;

/// A running job's whereabouts.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    /// One choice per member, as the placer would have made it.
    pub members: Vec<Choice>,
    pub started_at: i64,
    pub last_checkpoint_at: Option<i64>,
}

/// A job as the cycle sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobState {
    pub job: Box<Job>,
    pub running: Option<Running>,
    /// What one member counts for in quotas and fair share, in milli-GPUs: its GPUs ×
    /// share, or for MIG its instances' share of the GPU's compute slices.
    pub member_milli: u64,
    /// The caller's name for this state, when it keeps states between cycles: a
    /// [`super::PlacementDecider`] remembers what it worked out of a state by it, so two states
    /// it is given with one revision must agree in `job` and in `running` (all but
    /// `last_checkpoint_at`, which is read afresh each cycle). `None`: nothing is
    /// remembered.
    pub revision: Option<u64>,
}

impl JobState {
    pub fn id(&self) -> &str {
        &self.job.id
    }
    pub fn shape(&self) -> &JobShape {
        &self.job.shape
    }
    /// GPUs in milli-GPUs over all members.
    pub fn gpu_milli(&self) -> u64 {
        u64::from(self.job.shape.members) * self.member_milli
    }
}

/// Past usage of a team: `gpu_s` GPU-seconds (and optionally CPU and memory) consumed
/// around `at`, decayed by the cohort's half-life in fair share.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecord {
    pub team: String,
    pub at: i64,
    pub gpu_s: f64,
    #[serde(default)]
    pub cpu_s: f64,
    #[serde(default)]
    pub memory_mib_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Shared, so a caller that keeps it between cycles lets [`super::PlacementDecider`] see at a
    /// glance that it has not changed.
    pub fleet: std::sync::Arc<Fleet>,
    pub jobs: Vec<JobState>,
    pub usage: Vec<UsageRecord>,
    /// MIG profiles of the fleet's GPU models.
    pub mig: MigTable,
    /// The autoscaler's memory from the previous cycle.
    pub scale_state: super::scale_memory::ScaleState,
    /// Past job starts, for warm-pool sizes.
    pub starts: Vec<super::scale_memory::Start>,
    /// Nodes with a spot interruption notice: their jobs are requeued and nothing new
    /// is placed on them.
    pub interrupted: std::collections::BTreeSet<usize>,
    /// Nodes that take nothing new (cordoned, not Ready, draining); what runs there stays.
    pub closed: std::collections::BTreeSet<usize>,
    /// Reasons say moments as wall-clock times ("at 2026-11-28T14:05Z") instead of
    /// countdowns ("in 8m55s"): for text that is written once and read later, like a pod's
    /// condition, which must not change every cycle only because time passed.
    pub wall_clock: bool,
}

impl Snapshot {
    /// Whether new work may be placed on node `n`.
    pub fn takes_new(&self, n: usize) -> bool {
        !self.interrupted.contains(&n) && !self.closed.contains(&n)
    }
}

/// A spot interruption notice for a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at: i64,
    pub event: EventKind,
    pub node: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    SpotInterrupt,
}

/// A problem with a job that makes the snapshot unusable, naming the job and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    pub job: String,
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}: job `{}`: field `{}`: {}",
            self.line, self.job, self.field, self.message
        )
    }
}

impl Snapshot {
    /// Validates `jobs` against `fleet` and resolves running placements to node indices.
    /// Every problem found is returned, not only the first.
    pub fn build(
        fleet: impl Into<std::sync::Arc<Fleet>>,
        jobs: Vec<Job>,
        usage: Vec<UsageRecord>,
        mig_table: &MigTable,
    ) -> Result<Snapshot, Vec<SnapshotError>> {
        // A caller that kept its fleet shares it (`PlacementDecider` then knows it at a glance).
        let fleet: std::sync::Arc<Fleet> = fleet.into();
        let mut errors = Vec::new();
        // Each job repeating an earlier one's id, with that one's line: found before the
        // jobs move, without copying an id.
        let mut repeated: std::collections::HashMap<usize, usize> = Default::default();
        {
            let mut first: rustc_hash::FxHashMap<&str, usize> =
                rustc_hash::FxHashMap::with_capacity_and_hasher(jobs.len(), Default::default());
            for (k, job) in jobs.iter().enumerate() {
                if let Some(line) = first.insert(job.id.as_str(), job.line) {
                    first.insert(job.id.as_str(), line);
                    repeated.insert(k, line);
                }
            }
        }
        // Hashed: looked up once per running member (tens of thousands at production
        // shape), where a tree compared names all the way down.
        let node_index: rustc_hash::FxHashMap<&str, usize> = fleet
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut state = ClusterState::new(&fleet, mig_table);
        let mut states = Vec::with_capacity(jobs.len());
        for (k, job) in jobs.into_iter().enumerate() {
            let error = |field: &str, message: String| SnapshotError {
                job: job.id.clone(),
                line: job.line,
                field: field.to_string(),
                message,
            };
            if let Some(first) = repeated.get(&k) {
                errors.push(error(
                    "id",
                    format!("duplicate id; it is also used on line {first}"),
                ));
                continue;
            }
            let running = if job.placement.is_empty() {
                None
            } else {
                let mut members = Vec::new();
                for (k, p) in job.placement.iter().enumerate() {
                    match resolve(&fleet, &node_index, &mut state, mig_table, &job, p) {
                        Ok(choice) => members.push(choice),
                        Err(m) => errors.push(error(&format!("placement[{k}]"), m)),
                    }
                }
                Some(Running {
                    members,
                    started_at: job.started_at.unwrap_or(0),
                    last_checkpoint_at: job.last_checkpoint_at,
                })
            };
            let member_milli = member_milli(&fleet, mig_table, &job.shape.member);
            states.push(JobState {
                job: Box::new(job),
                running,
                member_milli,
                revision: None,
            });
        }
        if errors.is_empty() {
            Ok(Snapshot {
                fleet,
                jobs: states,
                usage,
                mig: mig_table.clone(),
                scale_state: Default::default(),
                starts: Vec::new(),
                interrupted: Default::default(),
                closed: Default::default(),
                wall_clock: false,
            })
        } else {
            Err(errors)
        }
    }
}

/// A member's weight in milli-GPUs. A MIG instance counts for its share of the GPU's
/// compute slices (a 3g of 7 is 428m), on the first fleet GPU model that offers the profile.
pub fn member_milli(fleet: &Fleet, mig_table: &MigTable, member: &Request) -> u64 {
    let Some(name) = &member.mig_profile else {
        return member.gpu_milli_total();
    };
    let slices = fleet.nodes.iter().flat_map(|n| &n.gpus).find_map(|g| {
        let profile = mig_table.profile(&g.model, name)?;
        let total = mig_table
            .profiles(&g.model)
            .iter()
            .map(|p| p.compute_slices)
            .max()?;
        Some((profile.compute_slices, total))
    });
    match slices {
        Some((used, total)) if total > 0 => {
            u64::from(member.num_gpu) * u64::from(used) * u64::from(MILLI) / u64::from(total)
        }
        _ => u64::from(member.num_gpu) * u64::from(MILLI),
    }
}

/// One member's placement as a placer choice, taken from `state` so that a GPU given twice
/// is caught.
fn resolve(
    fleet: &Fleet,
    node_index: &rustc_hash::FxHashMap<&str, usize>,
    state: &mut ClusterState,
    mig_table: &MigTable,
    job: &Job,
    p: &crate::inventory::jobs_file::PlacedMember,
) -> Result<Choice, String> {
    let Some(&node) = node_index.get(p.node.as_str()) else {
        return Err(format!("node `{}` is not in the fleet", p.node));
    };
    let (Some(n), Some(free)) = (fleet.nodes.get(node), state.nodes.get_mut(node)) else {
        return Err(format!("node `{}` is not in the fleet", p.node));
    };
    resolve_member(n, node, free, mig_table, job, p)
}

/// One member's placement on node `n` (index `node`), taken from its free resources. A
/// placement that names the node but no GPUs (what the Kubernetes API can say of a bound
/// pod) takes its GPUs by count: see `resolve_node_level`.
pub fn resolve_member(
    n: &crate::core::fleet::Node,
    node: usize,
    free: &mut crate::core::alloc::NodeFree,
    mig_table: &MigTable,
    job: &Job,
    p: &crate::inventory::jobs_file::PlacedMember,
) -> Result<Choice, String> {
    let member: &Request = &job.shape.member;
    if p.gpus.is_empty() && member.num_gpu > 0 {
        return resolve_node_level(n, node, free, mig_table, member, p.gpu_milli);
    }
    if p.gpus.len() != member.num_gpu as usize {
        return Err(format!(
            "{} GPUs listed on {}, the job asks for {} per member",
            p.gpus.len(),
            p.node,
            member.num_gpu
        ));
    }
    let milli = p.gpu_milli.unwrap_or(member.gpu_milli);
    if milli != member.gpu_milli && member.mig_profile.is_none() {
        return Err(format!(
            "gpu_milli {milli} differs from the job's {}",
            member.gpu_milli
        ));
    }
    if free.cpu_milli < member.cpu_milli || free.memory_mib < member.memory_mib {
        return Err(format!(
            "{} has too little CPU or memory left for this member ({} CPU milli and {} MiB free)",
            p.node, free.cpu_milli, free.memory_mib
        ));
    }
    let mut gpus = Vec::new();
    for (k, g) in p.gpus.iter().enumerate() {
        let found = n.gpus.iter().position(|x| x.index == *g);
        let Some((i, gpu)) = found.and_then(|i| Some((i, n.gpus.get(i)?))) else {
            return Err(format!(
                "GPU {g} does not exist on {} ({} GPUs)",
                p.node,
                n.gpus.len()
            ));
        };
        if gpus.contains(&i) {
            return Err(format!("GPU {g} is listed twice"));
        }
        match &member.mig_profile {
            Some(name) => {
                let profile = mig_table.profile(&gpu.model, name).ok_or_else(|| {
                    format!(
                        "GPU {g} on {} ({}) has no MIG profile {name}",
                        p.node, gpu.model
                    )
                })?;
                let start = p.mig_starts.get(k).copied().ok_or_else(|| {
                    "a MIG job's placement needs `mig_starts`, one per GPU".to_string()
                })?;
                let mask = mig::mask(profile, start);
                match free.mig.get(i) {
                    Some(Some(used)) if used & mask == 0 && profile.starts.contains(&start) => {
                        free.take_mig(i, mask);
                    }
                    Some(Some(_)) => {
                        return Err(format!(
                            "MIG slots of {name} at {start} on GPU {g} of {} are taken or not a valid start",
                            p.node
                        ))
                    }
                    _ => return Err(format!("GPU {g} on {} is not in MIG mode", p.node)),
                }
            }
            None => {
                let have = free.gpu_milli.get(i).copied().unwrap_or(0);
                if have < milli || milli > MILLI {
                    return Err(format!(
                        "GPU {g} on {} is already taken ({have} milli-GPU free, {milli} needed)",
                        p.node
                    ));
                }
            }
        }
        gpus.push(i);
    }
    let request = Request {
        gpu_milli: milli,
        ..member.clone()
    };
    free.take(&request, &gpus);
    Ok(Choice {
        node,
        on: OnNode {
            gpus,
            mig_starts: p.mig_starts.clone(),
        },
    })
}

/// A node-level placement: the member holds `num_gpu` GPUs (or MIG instances) of node
/// `node` without saying which. They are taken from the node's free state the way the
/// placer would choose them (fullest GPU for shares, one NVLink island for whole GPUs,
/// the MIG start that keeps most room), so the counts per node are exact; which indices
/// stand for them is internal bookkeeping and never reported as the job's.
fn resolve_node_level(
    n: &crate::core::fleet::Node,
    node: usize,
    free: &mut crate::core::alloc::NodeFree,
    mig_table: &MigTable,
    member: &Request,
    gpu_milli: Option<u32>,
) -> Result<Choice, String> {
    let request = Request {
        gpu_milli: gpu_milli.unwrap_or(member.gpu_milli),
        // The model was checked when the pod was placed; what runs there is what it got.
        models: Vec::new(),
        vram_mib: 0,
        ..member.clone()
    };
    let workload = crate::core::frag::Workload::typical(&[]);
    let ctx = crate::core::packing::Context {
        strategy: crate::core::packing::Strategy::BestFit,
        workload: &workload,
        mig: mig_table,
    };
    if !crate::core::packing::feasible(&ctx, n, free, &request) {
        return Err(format!(
            "{} has no room left for this member ({}; {} CPU milli and {} MiB free)",
            n.name,
            crate::core::gang::describe(&request),
            free.cpu_milli,
            free.memory_mib
        ));
    }
    let (_, on) = crate::core::packing::score(&ctx, n, free, &request, (0.0, 0.0));
    crate::core::placer::take_on(&ctx, n, free, &request, &on);
    Ok(Choice { node, on })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fleet::Node;
    use crate::inventory::jobs_file::PlacedMember;

    fn job(id: &str, gpus: u32, node: &str) -> Job {
        let mut j = Job {
            id: id.into(),
            placement: vec![PlacedMember {
                node: node.into(),
                gpus: Vec::new(),
                gpu_milli: None,
                mig_starts: Vec::new(),
            }],
            ..Job::default()
        };
        j.shape.members = 1;
        j.shape.member.num_gpu = gpus;
        j.shape.member.gpu_milli = MILLI;
        j
    }

    #[test]
    fn node_level_placements_take_gpus_by_count() {
        let fleet = Fleet {
            nodes: vec![Node::uniform("n0", 64_000, 512_000, 8, "H100-SXM5-80GB")],
        };
        let mig = MigTable::default();
        let snapshot = Snapshot::build(
            fleet.clone(),
            vec![job("a", 5, "n0"), job("b", 3, "n0")],
            Vec::new(),
            &mig,
        )
        .unwrap_or_else(|e| unreachable!("{e:?}"));
        let taken: Vec<usize> = snapshot
            .jobs
            .iter()
            .flat_map(|j| j.running.iter().flat_map(|r| &r.members))
            .flat_map(|c| c.on.gpus.clone())
            .collect();
        let mut distinct = taken.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 8, "no GPU counted twice: {taken:?}");
        // A ninth GPU on an 8-GPU node is an error naming the job and the node.
        let errors = Snapshot::build(
            fleet,
            vec![job("a", 5, "n0"), job("b", 4, "n0")],
            Vec::new(),
            &mig,
        )
        .err()
        .unwrap_or_default();
        assert_eq!(errors.len(), 1);
        assert!(
            errors
                .iter()
                .any(|e| e.job == "b" && e.message.contains("n0 has no room")),
            "{errors:?}"
        );
    }
}
