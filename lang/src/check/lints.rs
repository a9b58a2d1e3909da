//! Plausibility lints: values that check but that an experienced operator would call a
//! mistake. Each is a warning with a code, and a fix where one reading is clearly meant:
//! a duration off by a unit (`half_life = 7m`), a legacy time zone (`"EST"`), `lend` on
//! a team no cohort borrows from, a warm `clamp` above its pool, a `min_runtime` longer
//! than `max_lost`, and GPU models that reuse a standard id or start MIG instances where
//! NVIDIA does not.

use super::Checker;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::{PreemptMode, Program};
use crate::source::{FileId, Span};
use crate::syntax::ast::{self, BinaryOp, BlockKind, ExprKind, ItemKind, StmtKind, ValueKind};
use std::collections::BTreeMap;

const MINUTE: f64 = 60.0;
const HOUR: f64 = 3600.0;
const DAY: f64 = 86400.0;

/// A duration field and the range operators use: (block, field, least, most, typical,
/// what it means). Outside the range the value is most likely in the wrong unit.
const DURATIONS: &[(BlockKind, &str, f64, f64, f64, &str)] = &[
    (BlockKind::Cohort, "half_life", HOUR, 365.0 * DAY, 7.0 * DAY,
        "past usage counts half after each half life; days are usual (Slurm's PriorityDecayHalfLife is 7 days)"),
    (BlockKind::Tier, "grace", 0.0, 2.0 * HOUR, 2.0 * MINUTE,
        "a preempted job gets this long to checkpoint before it is stopped; seconds to minutes are usual"),
    (BlockKind::Tier, "max_lost", MINUTE, 7.0 * DAY, HOUR,
        "a job is preempted only while the work since its last checkpoint is under this"),
    (BlockKind::Tier, "reclaim_within", 0.0, 7.0 * DAY, HOUR,
        "a borrowing job past max_lost without a checkpoint stays protected this long more"),
    (BlockKind::Tier, "min_runtime", 0.0, 7.0 * DAY, 10.0 * MINUTE,
        "a job is not preempted before it has run this long"),
    (BlockKind::Tier, "default_runtime", MINUTE, 30.0 * DAY, HOUR,
        "the runtime assumed for jobs that give none"),
    (BlockKind::Team, "default_runtime", MINUTE, 30.0 * DAY, HOUR,
        "the runtime assumed for jobs that give none"),
    (BlockKind::Pool, "boot", 10.0, 2.0 * HOUR, 5.0 * MINUTE,
        "how long a new node takes to join; minutes are usual"),
    (BlockKind::Pool, "notice", 10.0, HOUR, 2.0 * MINUTE,
        "the warning before a spot node is taken back (2 minutes on AWS, 30 seconds on GCP)"),
    (BlockKind::Placement, "gang_timeout", MINUTE, 7.0 * DAY, 10.0 * MINUTE,
        "how long a gang may wait for its members before it is requeued"),
    (BlockKind::Placement, "reserve_after_wait", MINUTE, 30.0 * DAY, DAY,
        "how long a job waits before it is given a reservation"),
    (BlockKind::Autoscale, "cooldown", 10.0, DAY, 5.0 * MINUTE,
        "the pause between two scaling actions of a pool"),
    (BlockKind::Autoscale, "cooldown_up", 10.0, DAY, 5.0 * MINUTE,
        "the pause after a scale-up"),
    (BlockKind::Autoscale, "cooldown_down", 10.0, DAY, 10.0 * MINUTE,
        "the pause after a scale-down"),
];

/// `idle > D` in a scale-down trigger: cluster-autoscaler waits 10 minutes by default.
const IDLE: (f64, f64, f64) = (MINUTE, 6.0 * HOUR, 15.0 * MINUTE);

/// Runs the lints, quiet about definitions that already have an error (the lints run
/// after the other analyses, whose errors count too).
pub(crate) fn run(c: &mut Checker<'_>, p: &Program) {
    let failed = c.failed_definitions();
    let before = c.diags.len();
    lints(c, p);
    c.drop_reports_on(&failed, before);
}

fn lints(c: &mut Checker<'_>, p: &Program) {
    for d in std::mem::take(&mut c.tree_lints) {
        c.error(d);
    }
    lend_without_cohort(c, p);
    clamp_above_max(c, p);
    min_runtime_over_max_lost(c, p);
    gpu_models(c, p);
}

/// The lints that read the policy's own syntax tree (units as written, zones): worked out
/// before lowering, as a plain check frees each block's tree once it is lowered.
pub(crate) fn tree_lints(files: &[FileId], asts: &BTreeMap<FileId, ast::File>) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for block in policy_blocks(files, asts) {
        durations(block, &mut found);
        if block.kind == BlockKind::Autoscale {
            for s in &block.body {
                if let StmtKind::Trigger(t) = &s.kind {
                    idle_thresholds(&t.condition, &mut found);
                }
            }
        }
        if block.kind == BlockKind::Warm {
            zones(block, &mut found);
        }
    }
    found
}

/// Every block of the policy's own files (not the standard library's), nested ones too.
fn policy_blocks<'a>(
    files: &[FileId],
    asts: &'a BTreeMap<FileId, ast::File>,
) -> Vec<&'a ast::Block> {
    fn walk<'a>(b: &'a ast::Block, out: &mut Vec<&'a ast::Block>) {
        out.push(b);
        for s in &b.body {
            if let StmtKind::Block(inner) = &s.kind {
                walk(inner, out);
            }
        }
    }
    let mut out = Vec::new();
    for (_, file) in asts.iter().filter(|(id, _)| files.contains(id)) {
        for item in &file.items {
            if let ItemKind::Block(b) = &item.kind {
                walk(b, &mut out);
            }
        }
    }
    out
}

/// A duration literal: (seconds, the number, the number as written, the unit word).
fn duration(e: &ast::Expr) -> Option<(f64, f64, &str, &ast::Ident)> {
    let ExprKind::Quantity(q) = &e.kind else {
        return None;
    };
    let (text, value, unit) = (&q.text, &q.value, q.unit.as_ref()?);
    match super::types::unit(&unit.name)? {
        (crate::ir::Dim::Duration, factor) => Some((value * factor, *value, text.as_str(), unit)),
        _ => None,
    }
}

fn durations(block: &ast::Block, out: &mut Vec<Diagnostic>) {
    for s in &block.body {
        let StmtKind::Assign { key, value } = &s.kind else {
            continue;
        };
        let ValueKind::Expr(e) = &value.kind else {
            continue;
        };
        let Some(&(_, field, least, most, typical, meaning)) = DURATIONS
            .iter()
            .find(|(kind, field, ..)| *kind == block.kind && *field == key.name)
        else {
            continue;
        };
        if let Some(d) = implausible(e, field, (least, most, typical), meaning) {
            out.push(d);
        }
    }
}

fn idle_thresholds(e: &ast::Expr, out: &mut Vec<Diagnostic>) {
    match &e.kind {
        ExprKind::Binary {
            op: BinaryOp::And | BinaryOp::Or,
            lhs,
            rhs,
        } => {
            idle_thresholds(lhs, out);
            idle_thresholds(rhs, out);
        }
        ExprKind::Binary {
            op: BinaryOp::Gt | BinaryOp::Ge,
            lhs,
            rhs,
        } if matches!(&lhs.kind, ExprKind::Path(p) if p.len() == 1 && p.first().is_some_and(|i| i.name == "idle")) =>
        {
            let meaning =
                "a node idle this long is let go; cluster-autoscaler's default is 10 minutes";
            if let Some(d) = implausible(rhs, "idle", IDLE, meaning) {
                out.push(d);
            }
        }
        ExprKind::Paren(inner) => idle_thresholds(inner, out),
        _ => {}
    }
}

/// W0414 when the duration `e` is outside `(least, most)`, with the same number in the
/// unit that lands nearest `typical` as the fix.
fn implausible(
    e: &ast::Expr,
    field: &str,
    range: (f64, f64, f64),
    meaning: &str,
) -> Option<Diagnostic> {
    let (least, most, typical) = range;
    let (seconds, n, number, unit) = duration(e)?;
    if (least..=most).contains(&seconds) {
        return None;
    }
    let short = seconds < least;
    let better = [("s", 1.0), ("m", MINUTE), ("h", HOUR), ("d", DAY)]
        .into_iter()
        .filter(|(u, f)| *u != unit.name && (least..=most).contains(&(n * f)))
        .min_by(|a, b| {
            let far = |f: f64| ((n * f) / typical).ln().abs();
            far(a.1).total_cmp(&far(b.1))
        });
    let message = format!(
        "`{field}` of {number}{} is unusually {}",
        unit.name,
        if short { "short" } else { "long" }
    );
    let d = Diagnostic::new(codes::IMPLAUSIBLE_DURATION, message).with_label(
        e.span,
        format!("usually {} to {}", human(least), human(most)),
    );
    Some(match better {
        Some((u, _)) => d
            .with_help(format!("{meaning}; did you mean `{number}{u}`?"))
            .with_fix(unit.span, u),
        None => d.with_help(format!("{meaning}; check the unit")),
    })
}

fn human(seconds: f64) -> String {
    match seconds {
        0.0 => "0s".into(),
        s if s >= DAY && s % DAY == 0.0 => format!("{}d", s / DAY),
        s if s >= HOUR && s % HOUR == 0.0 => format!("{}h", s / HOUR),
        s if s >= MINUTE && s % MINUTE == 0.0 => format!("{}m", s / MINUTE),
        s => format!("{s}s"),
    }
}

/// Zones with no daylight-saving rules of their own (`EST` is UTC−5 all year) or kept only
/// for compatibility, and the zone people who write them usually mean.
const LEGACY_ZONES: &[(&str, &str)] = &[
    ("EST", "America/New_York"),
    ("MST", "America/Denver"),
    ("HST", "Pacific/Honolulu"),
    ("EST5EDT", "America/New_York"),
    ("CST6CDT", "America/Chicago"),
    ("MST7MDT", "America/Denver"),
    ("PST8PDT", "America/Los_Angeles"),
    ("US/Eastern", "America/New_York"),
    ("US/Central", "America/Chicago"),
    ("US/Mountain", "America/Denver"),
    ("US/Pacific", "America/Los_Angeles"),
    ("CET", "Europe/Paris"),
    ("MET", "Europe/Paris"),
    ("EET", "Europe/Athens"),
    ("WET", "Europe/Lisbon"),
    ("GB", "Europe/London"),
    ("PRC", "Asia/Shanghai"),
    ("ROK", "Asia/Seoul"),
    ("Japan", "Asia/Tokyo"),
    ("Singapore", "Asia/Singapore"),
];

fn zones(block: &ast::Block, out: &mut Vec<Diagnostic>) {
    for s in &block.body {
        let StmtKind::Assign { value, .. } = &s.kind else {
            continue;
        };
        let ValueKind::Windows(w) = &value.kind else {
            continue;
        };
        let Some(zone) = &w.zone else { continue };
        let name = zone.value.as_str();
        let meant = LEGACY_ZONES
            .iter()
            .find(|(z, _)| *z == name)
            .map(|(_, m)| *m);
        let fixed_offset = name.starts_with("Etc/GMT") && name.len() > "Etc/GMT".len();
        if meant.is_none() && !fixed_offset {
            continue;
        }
        let d = Diagnostic::new(
            codes::LEGACY_TIMEZONE,
            format!("`{name}` is a legacy or fixed-offset time zone"),
        )
        .with_label(zone.span, "no daylight-saving rules of a place");
        out.push(match meant {
            Some(m) => {
                // The span holds the quotes when it is two longer than the name.
                let quoted = (zone.span.end - zone.span.start) as usize == zone.raw.len() + 2;
                let replacement = if quoted { format!("\"{m}\"") } else { m.to_string() };
                d.with_help(format!(
                    "windows follow the zone's clock, and `{name}` does not change with summer time where it is used; name the place, e.g. `\"{m}\"`"
                ))
                .with_fix(zone.span, replacement)
            }
            None => d.with_help(
                "`Etc/GMT+5` is UTC−5 all year (the sign is inverted); name the place, e.g. `\"America/New_York\"`",
            ),
        });
    }
}

fn span(c: &Checker<'_>, key: &str) -> Option<Span> {
    c.spans.get(key).copied()
}

/// W0416: a team outside every cohort lends to no one.
fn lend_without_cohort(c: &mut Checker<'_>, p: &Program) {
    for team in p
        .teams
        .iter()
        .filter(|t| t.cohort.is_none() && t.lend.is_some())
    {
        let Some(at) = span(c, &format!("team/{}/lend", team.name)) else {
            continue;
        };
        c.error(
            Diagnostic::new(
                codes::LEND_WITHOUT_COHORT,
                format!("team `{}` lends but belongs to no cohort", team.name),
            )
            .with_label(at, "no team can borrow this")
            .with_help(format!(
                "teams borrow only within their cohort: put `{}` in a `cohort` block (or set `cohort = NAME`), or remove `lend`",
                team.name
            )),
        );
    }
}

/// W0418: a warm pool's upper clamp above what its pool can ever hold never binds.
fn clamp_above_max(c: &mut Checker<'_>, p: &Program) {
    let pools = super::analysis::pools_by_name(p);
    for w in &p.warm {
        let (Some((_, hi)), Some(&pool)) = (w.clamp, pools.get(w.pool.as_str())) else {
            continue;
        };
        let max = f64::from(pool.max_nodes);
        if hi <= max {
            continue;
        }
        let Some(at) = span(c, &format!("warm/{}/size", w.name)) else {
            continue;
        };
        c.error(
            Diagnostic::new(
                codes::CLAMP_ABOVE_MAX,
                format!(
                    "warm pool `{}` is clamped to at most {hi} nodes, but pool `{}` holds at most {max}",
                    w.name, pool.name
                ),
            )
            .with_label(at, format!("the upper bound is above {max} nodes"))
            .with_help(format!(
                "the warm pool stops at {max} nodes anyway; lower the clamp to {max}, or raise the pool's `nodes`"
            )),
        );
    }
}

/// W0420: a tier that protects jobs for longer than it lets them lose.
fn min_runtime_over_max_lost(c: &mut Checker<'_>, p: &Program) {
    for tier in &p.tiers {
        let Some(max_lost) = tier.max_lost_s else {
            continue;
        };
        if tier.preempt != PreemptMode::AfterCheckpoint || tier.min_runtime_s <= max_lost {
            continue;
        }
        let Some(at) = span(c, &format!("tier/{}", tier.name)) else {
            continue;
        };
        c.error(
            Diagnostic::new(
                codes::MIN_RUNTIME_OVER_MAX_LOST,
                format!(
                    "tier `{}` protects jobs for {} but lets them lose at most {}",
                    tier.name,
                    human(tier.min_runtime_s as f64),
                    human(max_lost as f64)
                ),
            )
            .with_label(at, "min_runtime is longer than max_lost")
            .with_help(
                "once past min_runtime, a job that has not checkpointed has more than max_lost at stake and cannot be preempted until it does; make min_runtime at most max_lost, or say why in a comment",
            ),
        );
    }
}

/// W0417 and W0419: a policy's own GPU model reusing a standard-library id, or starting a
/// MIG profile where NVIDIA's placement rules do not allow (a start is a multiple of the
/// profile's width, and on 8-slot GPUs the profile's compute slices end by slice 7).
fn gpu_models(c: &mut Checker<'_>, p: &Program) {
    let own: Vec<crate::source::FileId> = c
        .world
        .modules
        .first()
        .map(|m| m.files.clone())
        .unwrap_or_default();
    let std_ids = standard_gpu_ids();
    for g in &p.gpu_models {
        let Some(at) = span(c, &format!("gpu/{}", g.name)).filter(|s| own.contains(&s.file)) else {
            continue;
        };
        if let Some((_, std_name)) = std_ids
            .iter()
            .find(|(id, name)| *id == g.id && *name != g.name)
        {
            c.error(
                Diagnostic::new(
                    codes::GPU_ID_SHADOWS_STDLIB,
                    format!("GPU model `{}` uses the id `{}` of the standard `{std_name}`", g.name, g.id),
                )
                .with_label(at, "a second model with a standard id")
                .with_help(format!(
                    "inventories name GPUs by id, so nodes reporting `{}` match either model; use `std.gpus.{{{std_name}}}`, or give this model its own id",
                    g.id
                )),
            );
        }
        for prof in &g.mig_profiles {
            let Some(at) = span(c, &format!("gpu/{}/mig/{}", g.name, prof.name)) else {
                continue;
            };
            let bad = prof.starts.iter().copied().find(|s| {
                (prof.width > 0 && s % prof.width != 0)
                    || (g.mig_slots == 8 && s + prof.compute_slices > 7)
            });
            if let Some(start) = bad {
                c.error(
                    Diagnostic::new(
                        codes::MIG_START_NOT_ALLOWED,
                        format!("profile `{}` may not start at slot {start}", prof.name),
                    )
                    .with_label(at, "NVIDIA does not place this profile there")
                    .with_help(format!(
                        "an instance {} slots wide starts at a multiple of {}, and its {} compute slices must end by slice 7; `nvidia-smi mig -lgipp` lists the real placements",
                        prof.width, prof.width, prof.compute_slices
                    )),
                );
            }
        }
    }
}

/// (id, model name) of every GPU model in `std.gpus`.
fn standard_gpu_ids() -> Vec<(String, String)> {
    let Some(text) = stdlib::module("std.gpus") else {
        return Vec::new();
    };
    let (file, _) = crate::syntax::parse(0, text);
    let mut out = Vec::new();
    for item in &file.items {
        let ItemKind::Block(b) = &item.kind else {
            continue;
        };
        let (Some(name), BlockKind::Gpu) = (&b.name, b.kind) else {
            continue;
        };
        for s in &b.body {
            if let StmtKind::Assign { key, value } = &s.kind {
                if let (
                    true,
                    ValueKind::Expr(ast::Expr {
                        kind: ExprKind::Str(id),
                        ..
                    }),
                ) = (key.name == "id", &value.kind)
                {
                    out.push((id.value.to_string(), name.name.to_string()));
                }
            }
        }
    }
    out
}
