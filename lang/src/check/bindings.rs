//! Analyses of who may submit as each team (`crate::tenancy`): a team no one can submit
//! as (W0421), two teams (other than the default) bound to namespaces that overlap, so
//! pods there must name their team (W0422), and an open team beside bound ones, which any
//! pod may name (W0423); a team that can never run a job (W0424), and one whose burst
//! is never reached (W0425).

use super::Checker;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::Program;
use crate::source::Span;
use crate::tenancy::lists_overlap;

pub(crate) fn run(c: &mut Checker<'_>, p: &Program) {
    nobody(c, p);
    overlapping(c, p);
    open_beside_bound(c, p);
    runs_nothing(c, p);
    burst_never_reached(c, p);
}

/// W0424: a team guaranteed nothing whose every tier is never preempted (and may not
/// borrow): each of its jobs is `never_fits`.
fn runs_nothing(c: &mut Checker<'_>, p: &Program) {
    for t in &p.teams {
        // A guarantee that did not lower is not known to be 0.
        if t.guaranteed.effective_total_milli() > 0 || c.unlowered_guarantees.contains(&t.name) {
            continue;
        }
        let Some(tiers) = inside_guarantee_only(p, t) else {
            continue;
        };
        let Some(at) = c.spans.get(&format!("team/{}", t.name)).copied() else {
            continue;
        };
        let names: Vec<&str> = tiers.iter().map(|tier| tier.name.as_str()).collect();
        c.error(
            Diagnostic::new(
                codes::TEAM_CAN_RUN_NOTHING,
                format!("team `{}` can never run a job", t.name),
            )
            .with_label(
                at,
                format!(
                    "guaranteed nothing, and its tiers ({}) are never preempted, so they run only inside a guarantee",
                    names.join(", ")
                ),
            )
            .with_help(format!(
                "give `{}` a guarantee (`guaranteed = 8 gpu`), a tier that may be preempted, or `borrow = true` on the tier",
                t.name
            )),
        );
    }
}

fn span(c: &Checker<'_>, team: &str, key: &str) -> Option<Span> {
    c.spans.get(&format!("team/{team}/{key}")).copied()
}

/// W0421: an empty list admits no one.
fn nobody(c: &mut Checker<'_>, p: &Program) {
    for t in &p.teams {
        let identities_empty = matches!(
            (&t.users, &t.groups),
            (Some(u), Some(g)) if u.is_empty() && g.is_empty()
        ) || matches!((&t.users, &t.groups), (Some(u), None) if u.is_empty())
            || matches!((&t.users, &t.groups), (None, Some(g)) if g.is_empty());
        let key = if t.namespaces.as_ref().is_some_and(Vec::is_empty) {
            "namespaces"
        } else if identities_empty {
            if t.users.is_some() {
                "users"
            } else {
                "groups"
            }
        } else {
            continue;
        };
        let Some(at) = span(c, &t.name, key) else {
            continue;
        };
        c.error(
            Diagnostic::new(
                codes::TEAM_WITHOUT_SUBMITTERS,
                format!("no one can submit as team `{}`", t.name),
            )
            .with_label(at, "an empty list admits no one")
            .with_help(format!(
                "list who may submit as `{}` (e.g. `namespaces = [\"{}\"]`), or leave `{key}` out",
                t.name,
                t.name.replace('_', "-")
            )),
        );
    }
}

/// W0422: two teams whose namespaces (and identities) can both admit one request.
fn overlapping(c: &mut Checker<'_>, p: &Program) {
    // The default team is the fallback for pods no other team admits: sharing its
    // namespaces is what it is for.
    let bound: Vec<_> = p
        .teams
        .iter()
        .filter(|t| t.namespaces.is_some() && !t.default)
        .collect();
    for (i, a) in bound.iter().enumerate() {
        for b in bound.iter().skip(i + 1) {
            let shared = lists_overlap(a.namespaces.as_deref(), b.namespaces.as_deref());
            let identities = (a.users.is_none() && a.groups.is_none())
                || (b.users.is_none() && b.groups.is_none())
                || lists_overlap(a.users.as_deref(), b.users.as_deref())
                    && a.users.is_some()
                    && b.users.is_some()
                || lists_overlap(a.groups.as_deref(), b.groups.as_deref())
                    && a.groups.is_some()
                    && b.groups.is_some();
            if !(shared && identities) {
                continue;
            }
            let Some(at) = span(c, &b.name, "namespaces") else {
                continue;
            };
            let mut d = Diagnostic::new(
                codes::OVERLAPPING_BINDINGS,
                format!(
                    "teams `{}` and `{}` are bound to namespaces that overlap",
                    a.name, b.name
                ),
            )
            .with_label(at, format!("a namespace here also admits `{}`", a.name))
            .with_help(
                "a pod there must name its team with `gantry.dev/team`; give each team namespaces of its own so the team follows from the namespace",
            );
            if let Some(other) = span(c, &a.name, "namespaces") {
                d = d.with_label(other, format!("`{}`'s namespaces", a.name));
            }
            c.error(d);
        }
    }
}

/// W0423: an open team in a policy that binds others: any pod may name it.
fn open_beside_bound(c: &mut Checker<'_>, p: &Program) {
    let Some(bound) = p.teams.iter().find(|t| t.is_bound()) else {
        return;
    };
    for t in p.teams.iter().filter(|t| !t.is_bound()) {
        let Some(at) = c.spans.get(&format!("team/{}", t.name)).copied() else {
            continue;
        };
        c.error(
            Diagnostic::new(
                codes::OPEN_TEAM_BESIDE_BOUND,
                format!(
                    "team `{}` is open to every namespace and identity while `{}` is bound",
                    t.name, bound.name
                ),
            )
            .with_label(at, "any pod may name this team")
            .with_help(format!(
                "bind `{}` with `namespaces = [...]`, `users = [...]` or `groups = [...]`",
                t.name
            )),
        );
    }
}

/// The tiers `t` may use, when every one of them runs only inside its team's guarantee
/// (never preempted, and may not borrow).
fn inside_guarantee_only<'p>(
    p: &'p Program,
    t: &crate::ir::Team,
) -> Option<Vec<&'p crate::ir::Tier>> {
    use crate::ir::PreemptMode;
    let tiers: Vec<&crate::ir::Tier> = p
        .tiers
        .iter()
        .filter(|tier| t.tiers.as_ref().is_none_or(|ts| ts.contains(&tier.name)))
        .collect();
    let inside = tiers
        .iter()
        .all(|tier| tier.preempt == PreemptMode::Never && !tier.borrow);
    (!tiers.is_empty() && inside).then_some(tiers)
}

/// W0425: a team with a guarantee and a burst above it whose every tier is never
/// preempted and may not borrow: its jobs run only inside the guarantee, so the burst
/// promises GPUs the team can never use.
fn burst_never_reached(c: &mut Checker<'_>, p: &Program) {
    for t in &p.teams {
        let guaranteed = t.guaranteed.effective_total_milli();
        let Some(burst) = t
            .burst
            .as_ref()
            .map(crate::ir::Quota::effective_total_milli)
        else {
            continue;
        };
        // Guaranteed nothing is W0424's; a guarantee that did not lower is not known.
        if guaranteed == 0 || burst <= guaranteed || c.unlowered_guarantees.contains(&t.name) {
            continue;
        }
        let Some(tiers) = inside_guarantee_only(p, t) else {
            continue;
        };
        let Some(at) = c.spans.get(&format!("team/{}", t.name)).copied() else {
            continue;
        };
        let names: Vec<&str> = tiers.iter().map(|tier| tier.name.as_str()).collect();
        let gpus = super::analysis::gpus;
        c.error(
            Diagnostic::new(
                codes::BURST_NEVER_REACHED,
                format!("team `{}` never uses its burst", t.name),
            )
            .with_label(
                at,
                format!(
                    "its tiers ({}) are never preempted, so its jobs run only inside its guarantee ({}); the burst ({}) is never reached",
                    names.join(", "),
                    gpus(guaranteed),
                    gpus(burst)
                ),
            )
            .with_help(format!(
                "lower `burst` to the guarantee, let `{}` use a tier that may be preempted, or set `borrow = true` on the tier",
                t.name
            )),
        );
    }
}
