//! The decision cycle's output, in the contract's shape: one decision per pending job, one
//! preemption per evicted running job, and the scale and warm entries (filled by the
//! autoscaler). Every job that is not placed carries a reason.

use crate::inventory::jobs_file::PriorBooking;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub policy_revision: String,
    /// The `now` the plan was decided at, seconds since the epoch.
    pub now: i64,
    pub decisions: Vec<Decision>,
    pub preemptions: Vec<Preemption>,
    /// The head blocked job's reservation, if backfill made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Reservation>,
    /// Conservative backfill's reservations and those of the starvation bound, in queue
    /// order (under conservative backfill the first is also `reservation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Booked>,
    pub scale: Vec<ScaleEntry>,
    pub warm: Vec<WarmEntry>,
    /// The autoscaler's memory for the next cycle (pass it back as `--state`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<super::scale_memory::ScaleState>,
    /// When jobs wait: the earliest later time this plan may change though nothing
    /// arrives or ends (a running job's protection ends: `min_runtime`, a checkpoint,
    /// `reclaim_within`; a running job's estimate nobody enforces passes). The
    /// controller and the replay decide again then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_decision_at: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Place,
    Queue,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assignment {
    pub node: String,
    pub gpus: Vec<u32>,
    pub gpu_milli: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mig_starts: Vec<u32>,
}

impl Plan {
    /// Each booked job's booking (`reservations`): what the next cycle passes back as its
    /// `booked`, so a job placed at its booked start lands where it was booked (the
    /// controller, `simulate` and the tests' replays all pass it so). EASY's head is not
    /// among them: under EASY a job placed now is placed by the packing strategy.
    pub fn bookings_made(&self) -> BTreeMap<String, PriorBooking> {
        self.reservations
            .iter()
            .map(|b| {
                let nodes = b.nodes.iter().map(|n| n.node.clone()).collect();
                let booked = PriorBooking {
                    start_at: b.start_at,
                    nodes,
                };
                (b.job.clone(), booked)
            })
            .collect()
    }
}

impl Decision {
    /// `job` as running where this decision placed it, from `at`: the jobs-file form a
    /// next cycle (or a simulation) reads back. `None` unless the decision places it.
    pub fn started(
        &self,
        job: &crate::inventory::jobs_file::Job,
        at: i64,
    ) -> Option<crate::inventory::jobs_file::Job> {
        if self.action != Action::Place {
            return None;
        }
        let mut running = job.clone();
        running.placement = self
            .placement
            .iter()
            .map(|a| crate::inventory::jobs_file::PlacedMember {
                node: a.node.clone(),
                gpus: a.gpus.clone(),
                gpu_milli: Some(a.gpu_milli),
                mig_starts: a.mig_starts.clone(),
            })
            .collect();
        running.started_at = Some(at);
        running.booked = None;
        Some(running)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub job: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// GPUs the job asks for, over all members.
    pub gpus: f64,
    pub action: Action,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<Assignment>,
    /// Running jobs this placement displaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub victims: Vec<String>,
    /// Placed on capacity borrowed from the cohort (reclaimable by its owner).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub borrowing: bool,
    /// The pool an admission rule routed the job to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routed_to: Option<Routed>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Routed {
    pub pool: String,
    pub rule: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// An admission rule denied the job.
    DeniedByRule,
    /// The job names a team or tier the policy does not define, or a tier its team may not use.
    InvalidJob,
    /// No node (in the allowed pools) has an allowed GPU model or MIG profile.
    NoSuchModel,
    /// A member needs more than any node has, even empty.
    NeverFits,
    /// The required topology group cannot hold the gang, even empty.
    TopologyUnsatisfiable,
    /// The team's guarantee and what it may borrow are used up.
    QuotaExhausted,
    /// It would fit the fleet; what is free now (plus what may be preempted) does not hold it.
    NoCapacity,
    /// It holds the reservation: it starts when running jobs end.
    Reserved,
    /// It would fit, but only on GPUs reserved for an earlier job and it would not end
    /// before that job starts.
    WaitingForReservation,
    /// A gang not all of whose members have arrived; past the policy's `gang_timeout` it
    /// is requeued (it says so) and waits for the rest.
    GangIncomplete,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
    /// 1-based place among the waiting jobs in queue order; `None` for a denied job.
    pub position: Option<usize>,
    /// Seconds until it is expected to start, when the running jobs' estimates say.
    pub eta_s: Option<i64>,
    /// Whether `eta_s` is a reservation's start or an estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta_kind: Option<EtaKind>,
    /// What would let it run.
    pub unblock: Option<String>,
    /// The rule that denied it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// A gang that has waited longer than the policy's `gang_timeout`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gang_timeout_exceeded: bool,
    /// It waits for its team's quota (its own running jobs, or quota its team's
    /// reservations hold), which more nodes would not give it: the autoscaler leaves it
    /// out of demand, as it does `quota_exhausted`.
    #[serde(skip)]
    pub held_by_quota: bool,
}

impl Reason {
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Reason {
        Reason {
            code,
            message: message.into(),
            position: None,
            eta_s: None,
            eta_kind: None,
            unblock: None,
            rule: None,
            gang_timeout_exceeded: false,
            held_by_quota: false,
        }
    }

    pub fn unblock(mut self, text: impl Into<String>) -> Reason {
        self.unblock = Some(text.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preemption {
    pub job: String,
    #[serde(rename = "for")]
    pub for_job: String,
    pub grace_s: u64,
    /// GPU-seconds of work since the victim's last checkpoint (or start).
    pub lost_gpu_s: f64,
    /// Why this job may be preempted: `priority` or `reclaim` (its team borrows).
    pub cause: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reservation {
    pub job: String,
    /// Seconds since the epoch when the reserved GPUs are expected free.
    pub start_at: i64,
    pub nodes: Vec<String>,
}

/// One of conservative backfill's reservations: GPUs booked per node from the job's
/// earliest start to its expected end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Booked {
    pub job: String,
    pub start_at: i64,
    /// `None`: the job gives no runtime, so its GPUs stay booked.
    pub end_at: Option<i64>,
    pub nodes: Vec<BookedNode>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BookedNode {
    pub node: String,
    /// Whole GPUs booked there (a MIG booking: the GPUs its slots are on); `None` for the
    /// whole node (MIG instances whose slots at the start could not be worked out).
    pub gpus: Option<u64>,
}

/// Where an ETA comes from: a reservation (exact under the runtime estimates) or an
/// estimate of when running jobs free room of the job's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EtaKind {
    Reservation,
    Estimate,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleEntry {
    pub pool: String,
    pub delta_nodes: i64,
    pub reason: String,
    /// For a removal, the idle nodes chosen to go.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmEntry {
    pub pool: String,
    pub target_nodes: u64,
    pub reason: String,
}

/// A moment as a kept text says it: rounded up to the minute, UTC,
/// `2026-11-28T14:05Z`.
pub fn wall_time(at: i64) -> String {
    let at = at.saturating_add(59).div_euclid(60).saturating_mul(60);
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%MZ").to_string())
        .unwrap_or_default()
}

/// A duration as people write it: `45s`, `8m20s`, `2h21m`, `3d04h`.
pub fn human_duration(s: i64) -> String {
    let s = s.max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 && s % 60 == 0 => format!("{}m", s / 60),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}
