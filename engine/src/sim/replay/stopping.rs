//! Jobs stopping within their grace, as the queue controller sees their pods until they
//! are gone (`cluster::nomination`, `cluster::enact`):
//! - a victim's members on the nodes its preemptor takes are the preemptor's now;
//! - its members elsewhere hold their GPUs, as running jobs no team is charged for and no
//!   cycle may preempt (team and tier `(foreign)`, which no policy names);
//! - nothing else is started on a node while a job stops there: a job placed there is
//!   decided again once the node is clear.

use super::jobs::choice;
use crate::core::fleet::Fleet;
use crate::decide::snapshot::{JobState, Running};
use crate::inventory::jobs_file::{Job, PlacedMember};
use std::collections::{HashMap, HashSet};

/// The team and tier of what a stopping job still holds, as the controller names them.
const FOREIGN: &str = "(foreign)";

#[derive(Debug, Default)]
pub(super) struct Stopping {
    /// Per node where a job stopped: until when it stops there.
    until: HashMap<usize, i64>,
    /// The nodes the plan being carried out stops jobs on.
    by_plan: HashSet<usize>,
    /// Victims' members off their preemptors' nodes, until their grace ends.
    holders: Vec<(i64, Job, u64)>,
}

impl Stopping {
    /// A plan's preemptions are about to be carried out.
    pub fn plan_begins(&mut self) {
        self.by_plan.clear();
    }

    /// A job stops on `node` until `until`.
    pub fn stops_on(&mut self, node: usize, until: i64) {
        let at = self.until.entry(node).or_insert(until);
        *at = (*at).max(until);
        self.by_plan.insert(node);
    }

    /// `member` of victim `victim` (of `member_milli`, started at `started_at`) holds its
    /// GPUs until `until`.
    pub fn holds(
        &mut self,
        victim: &Job,
        member: &PlacedMember,
        (member_milli, started_at): (u64, i64),
        until: i64,
    ) {
        let mut shape = victim.shape.clone();
        shape.members = 1;
        shape.pools.clear();
        let held = Job {
            id: format!("{}+stopping-on-{}", victim.id, member.node),
            team: Some(FOREIGN.into()),
            tier: Some(FOREIGN.into()),
            shape,
            placement: vec![member.clone()],
            // It holds them until its grace ends (as the controller estimates it).
            started_at: Some(started_at),
            runtime_s: Some(u64::try_from(until.saturating_sub(started_at)).unwrap_or(0)),
            ..Job::default()
        };
        self.holders.push((until, held, member_milli));
    }

    /// Whether a job placed on `nodes` waits: a job stopped there by this plan, or stops
    /// there still after `now`.
    pub fn blocks<'n>(&self, mut nodes: impl Iterator<Item = &'n usize>, now: i64) -> bool {
        nodes.any(|n| self.by_plan.contains(n) || self.until.get(n).is_some_and(|&u| u > now))
    }

    /// Until when jobs stop on any of `nodes`, if any do.
    pub fn until_on<'n>(&self, nodes: impl Iterator<Item = &'n usize>) -> Option<i64> {
        nodes.filter_map(|n| self.until.get(n).copied()).max()
    }

    /// Whether a job stops on one of `nodes` after `now` (one stopped with no grace is
    /// gone at once).
    pub fn past<'n>(&self, mut nodes: impl Iterator<Item = &'n usize>, now: i64) -> bool {
        nodes.any(|n| self.until.get(n).is_some_and(|&u| u > now))
    }

    /// The decision states of what stopping jobs hold at `now` on `fleet`; those whose
    /// grace is over are dropped.
    pub fn states(
        &mut self,
        fleet: &Fleet,
        index: &HashMap<String, usize>,
        now: i64,
    ) -> Vec<JobState> {
        self.holders.retain(|(until, _, _)| *until > now);
        self.until.retain(|_, until| *until > now);
        self.holders
            .iter()
            .filter_map(|(_, job, member_milli)| {
                let members = job
                    .placement
                    .iter()
                    .map(|p| choice(fleet, index, p))
                    .collect::<Option<Vec<_>>>()?;
                Some(JobState {
                    job: Box::new(job.clone()),
                    running: Some(Running {
                        members,
                        started_at: job.started_at.unwrap_or(now),
                        last_checkpoint_at: None,
                    }),
                    member_milli: *member_milli,
                    revision: None,
                })
            })
            .collect()
    }
}
