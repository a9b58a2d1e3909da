//! Static analyses over the lowered program: promises the fleet cannot keep, quotas that
//! contradict each other, rules that never fire, time windows that are empty or overlap,
//! scale steps too small for the gangs they serve, and MIG profiles that do not fit.

use super::Checker;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::{self, BinaryOp, Expr, Program, RuleAction, Value};
use crate::source::Span;

pub(crate) fn run(c: &mut Checker<'_>, p: &Program) {
    guarantees(c, p);
    quotas(c, p);
    unusable_tiers(c, p);
    shadowed_rules(c, p);
    windows(c, p);
    gangs(c, p);
    mig(c, p);
    scaling_limits(c, p);
    defaults(c, p);
    super::bindings::run(c, p);
    super::lints::run(c, p);
}

/// At most one default tier and one default team.
fn defaults(c: &mut Checker<'_>, p: &Program) {
    let tiers: Vec<&str> = p
        .tiers
        .iter()
        .filter(|t| t.default)
        .map(|t| t.name.as_str())
        .collect();
    let teams: Vec<&str> = p
        .teams
        .iter()
        .filter(|t| t.default)
        .map(|t| t.name.as_str())
        .collect();
    for (kind, names) in [("tier", tiers), ("team", teams)] {
        let Some((first, rest)) = names.split_first() else {
            continue;
        };
        for name in rest {
            let Some(at) = span(c, &[format!("{kind}/{name}/default")]) else {
                continue;
            };
            let mut d = Diagnostic::new(
                codes::TWO_DEFAULTS,
                format!("{kind} `{name}` is a second default {kind}"),
            )
            .with_label(at, format!("`{first}` is already the default {kind}"))
            .with_help(format!("keep `default = true` on one {kind} only"));
            if let Some(other) = span(c, &[format!("{kind}/{first}/default")]) {
                d = d.with_label(other, "the first default");
            }
            c.error(d);
        }
    }
}

fn span(c: &Checker<'_>, keys: &[String]) -> Option<Span> {
    keys.iter().find_map(|k| c.spans.get(k).copied())
}

/// Where rule `name` is defined, from its definition rather than a `spans` entry (a large
/// policy is mostly rules). Modules loaded later win, as they were lowered later.
fn rule_span(c: &Checker<'_>, name: &str) -> Option<Span> {
    c.local.iter().rev().find_map(|names| {
        let def = c.defs.get(*names.get(name)?)?;
        (def.kind == super::types::DefKind::Rule).then_some(def.span)
    })
}

pub(super) fn gpus(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        format!("{} gpu", milli / 1000)
    } else {
        format!("{} gpu", milli as f64 / 1000.0)
    }
}

/// Pools by name, the first of a name winning as `Program::pool` does: the analyses look a
/// pool up per warm pool and autoscale block, which must not scan every pool each time.
pub(super) fn pools_by_name(p: &Program) -> std::collections::HashMap<&str, &ir::Pool> {
    let mut by_name = std::collections::HashMap::with_capacity(p.pools.len());
    for pool in &p.pools {
        by_name.entry(pool.name.as_str()).or_insert(pool);
    }
    by_name
}

fn guarantees(c: &mut Checker<'_>, p: &Program) {
    // Each pool's guaranteed teams in team order, gathered in one pass over the teams.
    let mut guaranteed_in: std::collections::HashMap<&str, Vec<(&ir::Team, u64)>> =
        std::collections::HashMap::new();
    for team in &p.teams {
        for (pool, &g) in &team.guaranteed.per_pool_milli {
            guaranteed_in
                .entry(pool.as_str())
                .or_default()
                .push((team, g));
        }
    }
    for pool in &p.pools {
        let Some(teams) = guaranteed_in.get(pool.name.as_str()) else {
            continue;
        };
        let cap = p.pool_max_gpus(pool) * 1000;
        // Teams that alone exceed the pool are reported once each; the rest are summed.
        let mut sum = 0;
        let mut contributors = Vec::new();
        let mut reported_sum = false;
        for &(team, g) in teams {
            let Some(at) = span(
                c,
                &[
                    format!("team/{}/guaranteed/{}", team.name, pool.name),
                    format!("team/{}/guaranteed", team.name),
                ],
            ) else {
                continue;
            };
            if g > cap {
                c.error(
                    Diagnostic::new(
                        codes::GUARANTEE_EXCEEDS_POOL,
                        format!(
                            "team `{}` is guaranteed {} in pool `{}`, which holds at most {}",
                            team.name,
                            gpus(g),
                            pool.name,
                            gpus(cap)
                        ),
                    )
                    .with_label(at, "more than the pool can ever hold")
                    .with_help(format!(
                        "lower the guarantee to {} or less, or raise the pool's maximum nodes",
                        gpus(cap)
                    )),
                );
                continue;
            }
            sum += g;
            contributors.push(format!("`{}`", team.name));
            if sum > cap && !reported_sum {
                reported_sum = true;
                c.error(
                    Diagnostic::new(
                        codes::GUARANTEE_EXCEEDS_POOL,
                        format!(
                            "guarantees in pool `{}` add up to {}, but it holds at most {}",
                            pool.name,
                            gpus(sum),
                            gpus(cap)
                        ),
                    )
                    .with_label(
                        at,
                        format!(
                            "teams {} together exceed the pool here",
                            contributors.join(", ")
                        ),
                    )
                    .with_help(
                        "guarantees must all be honoured at once; lower them or grow the pool",
                    ),
                );
            }
        }
    }
    if p.pools.is_empty() {
        return;
    }
    let cap: u64 = p
        .pools
        .iter()
        .map(|pool| p.pool_max_gpus(pool) * 1000)
        .sum();
    let mut sum = 0;
    for team in &p.teams {
        let Some(g) = team.guaranteed.total_milli else {
            continue;
        };
        sum += g;
        let Some(at) = span(c, &[format!("team/{}/guaranteed", team.name)]) else {
            continue;
        };
        if g > cap || sum > cap {
            let what = if g > cap {
                format!(
                    "team `{}` is guaranteed {}, but all pools together hold at most {}",
                    team.name,
                    gpus(g),
                    gpus(cap)
                )
            } else {
                format!(
                    "guarantees add up to {}, but all pools together hold at most {}",
                    gpus(sum),
                    gpus(cap)
                )
            };
            c.error(
                Diagnostic::new(codes::GUARANTEE_EXCEEDS_POOL, what)
                    .with_label(at, "cannot be met by the fleet")
                    .with_help("lower the guarantees or raise the pools' maximum nodes"),
            );
        }
    }
}

fn quotas(c: &mut Checker<'_>, p: &Program) {
    for team in &p.teams {
        let guaranteed = team.guaranteed.effective_total_milli();
        if let Some(lend) = &team.lend {
            let l = lend.effective_total_milli();
            if l > guaranteed {
                if let Some(at) = span(c, &[format!("team/{}/lend", team.name)]) {
                    c.error(
                        Diagnostic::new(
                            codes::LEND_EXCEEDS_GUARANTEE,
                            format!(
                                "team `{}` lends {} but is guaranteed only {}",
                                team.name,
                                gpus(l),
                                gpus(guaranteed)
                            ),
                        )
                        .with_label(at, "more than the team has")
                        .with_help(format!("lend at most {}", gpus(guaranteed))),
                    );
                }
            }
        }
        if let Some(burst) = &team.burst {
            let b = burst.effective_total_milli();
            if guaranteed > b {
                let at = span(c, &[format!("team/{}/guaranteed", team.name)]);
                let burst_at = span(c, &[format!("team/{}/burst", team.name)]);
                if let Some(at) = at {
                    let mut d = Diagnostic::new(
                        codes::GUARANTEE_EXCEEDS_BURST,
                        format!(
                            "team `{}` is guaranteed {} but may burst only to {}",
                            team.name,
                            gpus(guaranteed),
                            gpus(b)
                        ),
                    )
                    .with_label(at, "guarantee");
                    if let Some(bs) = burst_at {
                        d = d.with_label(bs, "burst limit below it");
                    }
                    c.error(d.with_help(format!("raise `burst` to at least {}", gpus(guaranteed))));
                }
            }
        }
    }
}

fn unusable_tiers(c: &mut Checker<'_>, p: &Program) {
    if p.teams.is_empty() || p.teams.iter().any(|t| t.tiers.is_none()) {
        return;
    }
    for tier in &p.tiers {
        let used = p
            .teams
            .iter()
            .any(|t| t.tiers.as_ref().is_some_and(|ts| ts.contains(&tier.name)));
        if used {
            continue;
        }
        if let Some(at) = span(c, &[format!("tier/{}", tier.name)]) {
            // A tier of the standard library cannot be removed: import only the ones used.
            let module = c
                .world
                .modules
                .iter()
                .find(|m| m.files.contains(&at.file))
                .map(|m| m.name.clone())
                .filter(|m| m.starts_with("std."));
            let mut fix = None;
            let help = match module {
                Some(m) => {
                    let used: Vec<&str> = p
                        .tiers
                        .iter()
                        .map(|t| t.name.as_str())
                        .filter(|n| {
                            p.teams.iter().any(|t| {
                                t.tiers.as_ref().is_some_and(|ts| ts.iter().any(|x| x == n))
                            })
                        })
                        .collect();
                    let import = format!("{m}.{{{}}}", used.join(", "));
                    fix = whole_import(c, &m).map(|at| (at, import.clone()));
                    format!(
                        "`{}` comes from `use {m}`; import only the tiers teams use: `use {import}`",
                        tier.name,
                    )
                }
                None => format!(
                    "add `{}` to a team's `tiers`, or remove the tier",
                    tier.name
                ),
            };
            let d = Diagnostic::new(
                codes::UNUSABLE_TIER,
                format!("no team may use tier `{}`", tier.name),
            )
            .with_label(at, "every team lists its tiers, and none lists this one")
            .with_help(help);
            c.error(match fix {
                Some((at, text)) => d.with_fix(at, text),
                None => d,
            });
        }
    }
}

/// The module path of the policy's `use MODULE` (importing everything) of `module`.
fn whole_import(c: &Checker<'_>, module: &str) -> Option<Span> {
    let files = &c.world.modules.first()?.files;
    c.asts
        .iter()
        .filter(|(id, _)| files.contains(id))
        .flat_map(|(_, f)| &f.items)
        .find_map(|item| match &item.kind {
            crate::syntax::ast::ItemKind::Use(u) if u.names.is_none() && u.module() == module => {
                Some(u.path_span)
            }
            _ => None,
        })
}

fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Binary {
            op: BinaryOp::And,
            lhs,
            rhs,
        } => {
            let mut v = conjuncts(lhs);
            v.extend(conjuncts(rhs));
            v
        }
        other => vec![other],
    }
}

/// `(subject, op, constant)` of a comparison with a constant on the right.
fn comparison(e: &Expr) -> Option<(&Expr, BinaryOp, f64)> {
    match e {
        Expr::Binary { op, lhs, rhs }
            if matches!(
                op,
                BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq
            ) =>
        {
            let k = rhs.as_const_number()?;
            (lhs.as_const_number().is_none()).then_some((&**lhs, *op, k))
        }
        _ => None,
    }
}

/// Whether `b` being true guarantees `a` is true (conservatively).
fn implies_one(b: &Expr, a: &Expr) -> bool {
    if a == b || *a == Expr::Const(Value::Bool(true)) {
        return true;
    }
    let (Some((sb, ob, kb)), Some((sa, oa, ka))) = (comparison(b), comparison(a)) else {
        return false;
    };
    if sb != sa {
        return false;
    }
    use BinaryOp::*;
    match (ob, oa) {
        (Gt, Gt) | (Ge, Ge) | (Gt, Ge) => kb >= ka,
        (Ge, Gt) => kb > ka,
        (Lt, Lt) | (Le, Le) | (Lt, Le) => kb <= ka,
        (Le, Lt) => kb < ka,
        (Eq, Gt) => kb > ka,
        (Eq, Ge) => kb >= ka,
        (Eq, Lt) => kb < ka,
        (Eq, Le) => kb <= ka,
        (Eq, Eq) => kb == ka,
        _ => false,
    }
}

fn implies(b: &Expr, a: &Expr) -> bool {
    let bs = conjuncts(b);
    conjuncts(a)
        .iter()
        .all(|ca| bs.iter().any(|cb| implies_one(cb, ca)))
}

/// What a conjunct tests: the expression compared against a constant, or the conjunct itself.
fn subject_key(e: &Expr) -> String {
    match comparison(e) {
        Some((subject, _, _)) => format!("{subject:?}"),
        None => format!("{e:?}"),
    }
}

/// Earlier rules a later one is compared with, at most, so that policies with many rules on
/// one field stay fast to check.
const MAX_SHADOW_CANDIDATES: usize = 256;

fn shadowed_rules(c: &mut Checker<'_>, p: &Program) {
    // Earlier rules that stop evaluation, indexed by the subject of their first conjunct: a
    // rule can only be implied by one whose every conjunct's subject it also tests.
    let mut by_subject: std::collections::HashMap<String, Vec<usize>> =
        std::collections::HashMap::new();
    for (i, later) in p.rules.iter().enumerate() {
        let subjects: Vec<String> = conjuncts(&later.condition)
            .into_iter()
            .map(subject_key)
            .collect();
        let mut candidates: Vec<usize> = subjects
            .iter()
            .chain(std::iter::once(&subject_key(&Expr::Const(Value::Bool(
                true,
            )))))
            .filter_map(|s| by_subject.get(s))
            .flat_map(|v| v.iter().rev().take(MAX_SHADOW_CANDIDATES).copied())
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let earlier = candidates
            .into_iter()
            .filter_map(|j| p.rules.get(j))
            .find(|r| {
                let stops = matches!(
                    (&r.action, &later.action),
                    (RuleAction::Deny { .. }, _)
                        | (RuleAction::Route { .. }, RuleAction::Route { .. })
                );
                stops && implies(&later.condition, &r.condition)
            });
        if matches!(
            later.action,
            RuleAction::Deny { .. } | RuleAction::Route { .. }
        ) {
            if let Some(first) = conjuncts(&later.condition).first() {
                by_subject.entry(subject_key(first)).or_default().push(i);
            }
        }
        let Some(earlier) = earlier else { continue };
        let (Some(at), first) = (rule_span(c, &later.name), rule_span(c, &earlier.name)) else {
            continue;
        };
        let verb = if matches!(earlier.action, RuleAction::Deny { .. }) {
            "denies"
        } else {
            "routes"
        };
        let mut d = Diagnostic::new(
            codes::SHADOWED_RULE,
            format!(
                "rule `{}` can never fire: `{}` {verb} every job it matches first",
                later.name, earlier.name
            ),
        )
        .with_label(at, "never reached");
        if let Some(f) = first {
            d = d.with_label(f, "this earlier rule matches first");
        }
        c.error(d.with_help(format!(
            "move `{}` above `{}`, or narrow `{}`",
            later.name, earlier.name, earlier.name
        )));
    }
}

const WEEK_MIN: u32 = 7 * 1440;

/// Minutes of the week a window covers, as half-open intervals (at most 14: one per day,
/// split where a Sunday window wraps into Monday). Intervals, not a minute bitmap, so that
/// a policy with thousands of windows stays small to check.
fn coverage(w: &ir::TimeWindow) -> Vec<(u32, u32)> {
    let len = if w.end_min > w.start_min {
        w.end_min - w.start_min
    } else {
        1440 - w.start_min + w.end_min
    };
    let mut spans = Vec::new();
    for day in 0..7u32 {
        if w.days & (1 << day) == 0 {
            continue;
        }
        let from = day * 1440 + w.start_min;
        let to = from + len;
        if to <= WEEK_MIN {
            spans.push((from, to));
        } else {
            spans.push((from, WEEK_MIN));
            spans.push((0, to - WEEK_MIN));
        }
    }
    spans
}

fn overlaps(a: &[(u32, u32)], b: &[(u32, u32)]) -> bool {
    a.iter()
        .any(|&(s, e)| b.iter().any(|&(t, f)| s < f && t < e))
}

fn windows(c: &mut Checker<'_>, p: &Program) {
    // Earlier windows per pool, in order: a window is compared only with its own pool's.
    type Earlier<'p> = Vec<(&'p str, usize, Vec<(u32, u32)>)>;
    let mut per_pool: std::collections::HashMap<&str, Earlier<'_>> =
        std::collections::HashMap::new();
    for warm in &p.warm {
        for (i, w) in warm.windows.iter().enumerate() {
            let key = format!("warm/{}/window/{i}", warm.name);
            let Some(at) = span(c, &[key]) else { continue };
            if w.start_min == w.end_min || w.days == 0 {
                c.error(
                    Diagnostic::new(codes::EMPTY_WINDOW, "this time window is never active")
                        .with_label(at, "starts and ends at the same time")
                        .with_help("to mean all day write `00:00..24:00`; windows may wrap past midnight, e.g. `22:00..06:00`"),
                );
                continue;
            }
            let cov = coverage(w);
            let pool = warm.pool.as_str();
            let earlier = per_pool.entry(pool).or_default();
            if let Some((other_warm, j, _)) = earlier.iter().find(|(_, _, o)| overlaps(&cov, o)) {
                let other_at = span(c, &[format!("warm/{other_warm}/window/{j}")]);
                let mut d = Diagnostic::new(
                    codes::OVERLAPPING_WINDOWS,
                    if *other_warm == warm.name {
                        format!("windows of warm pool `{}` overlap", warm.name)
                    } else {
                        format!("warm pools `{other_warm}` and `{}` are both active on pool `{pool}` at once", warm.name)
                    },
                )
                .with_label(at, "overlaps");
                if let Some(o) = other_at {
                    d = d.with_label(o, "this window");
                }
                c.error(d.with_help("make the windows disjoint so one size applies at a time"));
            }
            earlier.push((warm.name.as_str(), i, cov));
        }
    }
}

fn gangs(c: &mut Checker<'_>, p: &Program) {
    for pool in &p.pools {
        let Some(max_gang) = pool.max_gang_gpus.or(p.placement.max_gang_gpus) else {
            continue;
        };
        let cap = p.pool_max_gpus(pool);
        if u64::from(max_gang) > cap {
            if let Some(at) = span(
                c,
                &[
                    format!("pool/{}/max_gang", pool.name),
                    "placement/max_gang".into(),
                    format!("pool/{}", pool.name),
                ],
            ) {
                c.error(
                    Diagnostic::new(
                        codes::POOL_CANNOT_HOLD_GANG,
                        format!("pool `{}` holds at most {cap} GPUs, fewer than its largest gang of {max_gang}", pool.name),
                    )
                    .with_label(at, "gang larger than the pool")
                    .with_help("lower `max_gang` or raise the pool's maximum nodes"),
                );
            }
        }
    }
    let pools = pools_by_name(p);
    for a in &p.autoscale {
        let Some(&pool) = pools.get(a.pool.as_str()) else {
            continue;
        };
        let Some(max_gang) = pool.max_gang_gpus.or(p.placement.max_gang_gpus) else {
            continue;
        };
        let per_node = p.node_shape(&pool.node).map_or(0, |n| u64::from(n.gpus));
        for (i, t) in a.up.iter().enumerate() {
            let Some(step) = t.step.as_ref().and_then(Expr::as_const_number) else {
                continue;
            };
            let added = (step.max(0.0) as u64) * per_node;
            if added >= u64::from(max_gang) {
                continue;
            }
            if let Some(at) = span(c, &[format!("autoscale/{}/up/{i}", a.pool)]) {
                let need = u64::from(max_gang).div_ceil(per_node.max(1));
                c.error(
                    Diagnostic::new(
                        codes::STEP_CANNOT_FIT_GANG,
                        format!("this step adds {added} GPUs, but gangs in pool `{}` may need {max_gang}", a.pool),
                    )
                    .with_label(at, format!("{step} nodes of {per_node} GPUs"))
                    .with_help(format!("add at least {need} nodes per step, or scale by demand with `pending_nodes(fits = {})`", a.pool)),
                );
            }
        }
    }
}

fn mig(c: &mut Checker<'_>, p: &Program) {
    for g in &p.gpu_models {
        for prof in &g.mig_profiles {
            let Some(at) = span(c, &[format!("gpu/{}/mig/{}", g.name, prof.name)]) else {
                continue;
            };
            let problem = if g.mig_slots == 0 {
                Some(format!(
                    "GPU model `{}` declares no MIG slots (`mig_slots`)",
                    g.name
                ))
            } else if prof.memory_mib > g.memory_mib {
                Some(format!(
                    "profile `{}` has more memory than the GPU",
                    prof.name
                ))
            } else if prof.compute_slices == 0 || prof.compute_slices > 7 {
                Some(format!(
                    "profile `{}` must use 1 to 7 compute slices",
                    prof.name
                ))
            } else if prof.starts.is_empty() {
                Some(format!("profile `{}` has no start positions", prof.name))
            } else {
                prof.starts
                    .iter()
                    .find(|s| **s + prof.width > g.mig_slots)
                    .map(|s| {
                        format!(
                            "profile `{}` starting at slot {s} needs {} slots, past the GPU's {}",
                            prof.name, prof.width, g.mig_slots
                        )
                    })
            };
            if let Some(message) = problem {
                c.error(
                    Diagnostic::new(codes::BAD_MIG_PROFILE, message)
                        .with_label(at, "this profile")
                        .with_help(
                            "check the profile against `nvidia-smi mig -lgipp` for this GPU",
                        ),
                );
            }
        }
    }
}

/// Warm targets a pool can never reach, and spend caps below what one node costs.
fn scaling_limits(c: &mut Checker<'_>, p: &Program) {
    let pools = pools_by_name(p);
    for w in &p.warm {
        let Some(&pool) = pools.get(w.pool.as_str()) else {
            continue;
        };
        let least = match (w.clamp, w.size.as_const_number()) {
            (Some((lo, _)), _) => lo,
            (None, Some(n)) => n,
            (None, None) => continue,
        };
        if least > f64::from(pool.max_nodes) {
            if let Some(at) = span(c, &[format!("warm/{}/size", w.name)]) {
                c.error(
                    Diagnostic::new(
                        codes::WARM_ABOVE_MAX,
                        format!(
                            "warm pool `{}` keeps at least {least} nodes warm, but pool `{}` has at most {}",
                            w.name, pool.name, pool.max_nodes
                        ),
                    )
                    .with_label(at, "above the pool's maximum")
                    .with_help(format!(
                        "lower the warm size (or its clamp) to at most {} nodes, or raise the pool's `nodes` range",
                        pool.max_nodes
                    )),
                );
            }
        }
    }
    for a in &p.autoscale {
        let (Some(pool), Some(cap)) = (pools.get(a.pool.as_str()).copied(), a.max_spend_per_hour)
        else {
            continue;
        };
        let Some(rate) = pool.cost_per_node_hour else {
            continue;
        };
        let floor = rate * f64::from(pool.min_nodes.max(1));
        if cap < floor {
            if let Some(at) = span(c, &[format!("autoscale/{}/max_spend", a.pool)]) {
                let what = if pool.min_nodes > 1 {
                    format!("its {} minimum nodes cost {floor} $/h", pool.min_nodes)
                } else {
                    format!("one node costs {rate} $/h")
                };
                c.error(
                    Diagnostic::new(
                        codes::SPEND_CAP_BELOW_NODE,
                        format!(
                            "`max_spend` of {cap} $/h for pool `{}` is below what {what}",
                            a.pool
                        ),
                    )
                    .with_label(at, "the pool could never scale")
                    .with_help(format!(
                        "raise `max_spend` to at least {floor} $/h, or use a cheaper node shape"
                    )),
                );
            }
        }
    }
}
