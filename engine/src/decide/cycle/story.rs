//! One job's story (`gantry plan --job ID`): what the cycle did with it, step by step, in
//! the order it did it. Only the asked-for job is told; for every other job each step
//! costs one comparison.

use super::{Blocked, Cycle};
use crate::core::placer::Choice;
use crate::decide::admission::rule_results;
use crate::decide::plan::human_duration;
use crate::decide::plan::{Action, Decision};
use crate::decide::quota::gpus;
use crate::decide::snapshot::{JobState, Snapshot};
use lang::ir::Program;

/// The lines told about the asked-for job.
#[derive(Debug, Default)]
pub(super) struct Story {
    pub job: String,
    pub lines: Vec<String>,
}

/// Runs one cycle's placement as `decide_placement` does and tells what happened to job
/// `id`: the rules, its place in the queue, the quota arithmetic, the placement tried, the
/// victim sets considered and why each was not used, and the outcome. `None` when no job
/// has that id.
pub fn placement_story<'s>(
    program: &Program,
    snapshot: &'s Snapshot,
    now: i64,
    id: &str,
) -> Option<(super::Placement<'s>, Vec<String>)> {
    let original = snapshot.jobs.iter().find(|j| j.id() == id)?;
    let mut lines = Vec::new();
    let named = |what: &str, v: &Option<String>| match v {
        Some(x) => format!("{what} {x}"),
        None => format!("no {what}"),
    };
    lines.push(format!(
        "job {id}: {}, {}, {} × {} GPU{} per member, submitted {}",
        named("team", &original.job.team),
        named("tier", &original.job.tier),
        original.job.shape.members,
        original.job.shape.member.num_gpu,
        if original.job.shape.member.num_gpu == 1 {
            ""
        } else {
            "s"
        },
        original
            .job
            .submitted_at
            .map_or("at an unknown time".to_string(), |s| format!(
                "{} ago",
                human_duration(now - s)
            )),
    ));
    let mut defaulted = original.job.clone();
    super::default_job(program, &mut defaulted);
    if defaulted.team != original.job.team || defaulted.tier != original.job.tier {
        lines.push(format!(
            "defaults: {}, {} (`default = true` in the policy)",
            named("team", &defaulted.team),
            named("tier", &defaulted.tier)
        ));
    }
    let (plan, told) = super::decide_with_story(
        program,
        snapshot,
        now,
        Some(Story {
            job: id.to_string(),
            lines,
        }),
    );
    Some((plan, told.map(|s| s.lines).unwrap_or_default()))
}

impl Cycle<'_> {
    /// Node names of a placement, once each.
    pub(super) fn nodes_of(&self, choices: &[Choice]) -> String {
        let mut names: Vec<String> = choices
            .iter()
            .filter_map(|c| self.node_name(c.node))
            .collect();
        names.dedup();
        names.join(", ")
    }

    /// Whether `js` is the job whose story is told.
    pub(super) fn telling(&self, js: &JobState) -> bool {
        self.story.as_ref().is_some_and(|s| s.job == js.id())
    }

    /// Adds a line to the story, if `js` is its job.
    pub(super) fn tell(&mut self, js: &JobState, line: impl FnOnce(&Self) -> String) {
        if self.telling(js) {
            let text = line(self);
            if let Some(s) = &mut self.story {
                s.lines.push(text);
            }
        }
    }

    /// The admission rules' verdicts for the story.
    pub(super) fn tell_rules(&mut self, js: &JobState) {
        if !self.telling(js) {
            return;
        }
        let results = rule_results(self.program, js, self.now);
        if results.is_empty() {
            self.tell(js, |_| "rules: the policy has none".into());
        }
        for (rule, matched) in results {
            self.tell(js, |_| {
                format!(
                    "rule {rule}: {}",
                    if matched { "matches" } else { "does not match" }
                )
            });
        }
    }

    /// The team's quota arithmetic for the story.
    pub(super) fn tell_quota(&mut self, js: &JobState) {
        self.tell(js, |c| {
            let ix = c.team_ix(js.job.team.as_deref());
            let Some((used, guaranteed)) = c.ledger.usage(ix) else {
                return "quota: the job's team has no quota in the policy".into();
            };
            let burst = c.ledger.burst(ix).map_or("no burst limit".into(), |b| {
                format!("may burst to {}", gpus(b))
            });
            format!(
                "quota: team {} uses {} of its {} guarantee and {burst}; this job needs {}",
                c.ledger.name(ix),
                gpus(used),
                gpus(guaranteed),
                gpus(js.gpu_milli())
            )
        });
    }
}

/// The placement tried without preemption, for the story.
pub(super) fn attempt(c: &Cycle<'_>, attempt: &Result<(Vec<Choice>, bool), Blocked>) -> String {
    match attempt {
        Ok((choices, _)) => format!("placement: fits now on {}", c.nodes_of(choices)),
        Err(Blocked::Capacity(u)) => format!("placement: {}", u.message),
        Err(Blocked::Quota(q)) => format!("placement: room found, but {}", q.message(&c.ledger)),
        Err(Blocked::Reservation(r)) => {
            format!("placement: fits only on GPUs reserved for {}", r.job)
        }
    }
}

/// The decision, as the story's last line.
pub(super) fn outcome(d: &Decision) -> String {
    match (&d.action, &d.reason) {
        (Action::Place, _) => {
            let mut nodes: Vec<&str> = d.placement.iter().map(|a| a.node.as_str()).collect();
            nodes.dedup();
            let mut text = format!("outcome: placed on {}", nodes.join(", "));
            if !d.victims.is_empty() {
                text.push_str(&format!(", preempting {}", d.victims.join(", ")));
            }
            text
        }
        (_, Some(r)) => {
            let code = serde_json::to_value(r.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let mut text = format!("outcome: {code}: {}", r.message);
            if let Some(eta) = r.eta_s {
                text.push_str(&format!("; ETA {}", human_duration(eta)));
            }
            if let Some(u) = &r.unblock {
                text.push_str(&format!("; {u}"));
            }
            text
        }
        (_, None) => "outcome: queued".into(),
    }
}
