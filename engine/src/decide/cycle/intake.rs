//! What a cycle does with its input before deciding: jobs that name no team or tier get
//! the policy's defaults, jobs on spot nodes given notice are stopped and queued again,
//! and the checks that deny a job outright (a team or tier the policy does not know, or
//! none where the policy needs one), shared with the webhook and the extender.

use super::{decide_cycle, story, Carried, Placement};
use crate::decide::plan::{Preemption, Reason, ReasonCode};
use crate::decide::snapshot::{JobState, Snapshot};
use lang::ir::Program;
use std::borrow::Cow;

/// Jobs that name no team or tier get the policy's default ones (`default = true`), before
/// admission rules; `None` when no job needs one (nothing is copied then).
pub(super) fn with_defaults(program: &Program, snapshot: &Snapshot) -> Option<Snapshot> {
    let team = program.default_team().map(|t| t.name.clone());
    let tier = program.default_tier().map(|t| t.name.clone());
    let needs = |js: &JobState| {
        (team.is_some() && js.job.team.is_none()) || (tier.is_some() && js.job.tier.is_none())
    };
    if !snapshot.jobs.iter().any(needs) {
        return None;
    }
    let mut defaulted = snapshot.clone();
    for js in &mut defaulted.jobs {
        default_job(program, &mut js.job);
    }
    Some(defaulted)
}

pub(super) fn decide_defaulted<'s>(
    program: &Program,
    snapshot: Cow<'s, Snapshot>,
    now: i64,
    story: Option<story::Story>,
    kept: Option<Carried>,
) -> (Placement<'s>, Option<story::Story>, Option<Carried>) {
    if snapshot.interrupted.is_empty() {
        let (plan, story, kept) = decide_cycle(program, &snapshot, now, Vec::new(), story, kept);
        let placement = Placement {
            plan,
            judged: snapshot,
        };
        return (placement, story, kept);
    }
    // Spot interruptions: jobs on noticed nodes stop (after the pool's notice) and are
    // queued again from their last checkpoint, one interruption and preemption more, so
    // the policy's rules can route them elsewhere; nothing new goes on those nodes.
    // The defaulted copy, when there is one, is queued again in place.
    let mut requeued = snapshot.into_owned();
    let mut stops = Vec::new();
    for js in &mut requeued.jobs {
        let Some(run) = &js.running else { continue };
        let Some(node) = run
            .members
            .iter()
            .map(|c| c.node)
            .find(|n| requeued.interrupted.contains(n))
        else {
            continue;
        };
        let n = requeued.fleet.nodes.get(node);
        let notice = n
            .and_then(|n| n.pool.as_deref())
            .and_then(|p| program.pool(p))
            .and_then(|p| p.notice_s)
            .unwrap_or(0);
        let since = run
            .last_checkpoint_at
            .unwrap_or(run.started_at)
            .max(run.started_at);
        stops.push(Preemption {
            job: js.id().to_string(),
            for_job: format!(
                "spot interruption of {}",
                n.map_or("?", |n| n.name.as_str())
            ),
            grace_s: notice,
            lost_gpu_s: js.gpu_milli() as f64 / 1000.0 * (now - since).max(0) as f64,
            cause: "spot_interrupt".to_string(),
        });
        js.running = None;
        js.job.placement.clear();
        js.job.spot_interruptions += 1;
        js.job.preemptions += 1;
    }
    let (plan, story, kept) = decide_cycle(program, &requeued, now, stops, story, kept);
    let placement = Placement {
        plan,
        judged: Cow::Owned(requeued),
    };
    (placement, story, kept)
}

/// A team or tier the policy does not know, or a tier the team may not use.
pub fn invalid_job(program: &Program, js: &JobState) -> Option<Reason> {
    invalid_job_among(program, js, |name| program.team(name))
}

/// [`invalid_job`] with the policy's teams found by `team_of` (the cycle's index).
pub(super) fn invalid_job_among<'p>(
    program: &'p Program,
    js: &JobState,
    team_of: impl Fn(&str) -> Option<&'p lang::ir::Team>,
) -> Option<Reason> {
    let names = |v: Vec<&str>| v.join(", ");
    if let Some(team) = &js.job.team {
        match team_of(team) {
            None => {
                return Some(
                    Reason::new(
                        ReasonCode::InvalidJob,
                        format!(
                            "job {}: field `team`: team `{team}` is not defined in the policy",
                            js.id()
                        ),
                    )
                    .unblock(format!(
                        "use one of: {}",
                        names(program.teams.iter().map(|t| t.name.as_str()).collect())
                    )),
                )
            }
            Some(t) => {
                if let (Some(allowed), Some(tier)) = (&t.tiers, &js.job.tier) {
                    if !allowed.contains(tier) && program.tier(tier).is_some() {
                        return Some(
                            Reason::new(
                                ReasonCode::InvalidJob,
                                format!("team {team} may not use tier {tier}"),
                            )
                            .unblock(format!("use one of its tiers: {}", allowed.join(", "))),
                        );
                    }
                }
            }
        }
    }
    if let Some(tier) = &js.job.tier {
        if program.tier(tier).is_none() {
            return Some(
                Reason::new(
                    ReasonCode::InvalidJob,
                    format!(
                        "job {}: field `tier`: tier `{tier}` is not defined in the policy",
                        js.id()
                    ),
                )
                .unblock(format!(
                    "use one of: {}",
                    names(program.tiers.iter().map(|t| t.name.as_str()).collect())
                )),
            );
        }
    }
    None
}

/// No team (or tier) where the policy has teams (tiers) and no default one: such a job
/// would skip every quota (or never be preempted). Checked after the admission rules, so
/// a policy's own rule for it speaks first.
pub fn unassigned_job(program: &Program, js: &JobState) -> Option<Reason> {
    let names = |v: Vec<&str>| v.join(", ");
    if js.job.team.is_none() && !program.teams.is_empty() && program.default_team().is_none() {
        return Some(
            Reason::new(
                ReasonCode::InvalidJob,
                format!(
                    "job {}: no `team`, and the policy's teams have quotas that every job counts against",
                    js.id()
                ),
            )
            .unblock(format!(
                "set `team` to one of: {}; or mark one team `default = true`",
                names(program.teams.iter().map(|t| t.name.as_str()).collect())
            )),
        );
    }
    if js.job.tier.is_none() && !program.tiers.is_empty() && program.default_tier().is_none() {
        return Some(
            Reason::new(
                ReasonCode::InvalidJob,
                format!(
                    "job {}: no `tier`, and the policy has tiers but no default one",
                    js.id()
                ),
            )
            .unblock(format!(
                "set `tier` to one of: {}; or mark one tier `default = true`",
                names(program.tiers.iter().map(|t| t.name.as_str()).collect())
            )),
        );
    }
    None
}

/// Gives a job that names no team or tier the policy's default ones (`default = true`).
pub fn default_job(program: &Program, job: &mut crate::inventory::jobs_file::Job) {
    if job.team.is_none() {
        job.team = program.default_team().map(|t| t.name.clone());
    }
    if job.tier.is_none() {
        job.tier = program.default_tier().map(|t| t.name.clone());
    }
}
