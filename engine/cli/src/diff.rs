//! `gantry diff`: replay one trace under two policies (paths, or `REV:PATH` read from git)
//! and report what changes, as a table, markdown for a pull request, or JSON; `--fail-if`
//! thresholds make it a CI gate.

use super::simulate::{load, run_replay, ReplayInput};
use super::{fail, Io, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE};
use engine::sim::diff::{compare, short_duration, Comparison, Row, Threshold};
use engine::sim::metrics::Metrics;
use engine::sim::replay::Config;
use lang::ir::Program;
use std::io::Write;
use std::path::Path;
use std::process::Command;

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum DiffFormat {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The policy before: a directory or file, or `REV:PATH` from git (e.g. `main:policies/prod`).
    #[arg(long)]
    pub old: String,
    /// The policy after, in the same forms.
    #[arg(long)]
    pub new: String,
    #[command(flatten)]
    pub input: ReplayInput,
    #[arg(long, value_enum, default_value_t = DiffFormat::Table)]
    pub format: DiffFormat,
    /// Exit 1 when a change crosses this threshold: `METRIC[(SCOPE)] > N[%]` or `< N[%]`
    /// on new minus old, e.g. `ttfg_p95(tier=critical) > 10%`. Repeatable.
    #[arg(long = "fail-if")]
    pub fail_if: Vec<String>,
    /// Jobs listed in table and markdown output (all are in JSON).
    #[arg(long, default_value_t = 20)]
    pub max_jobs: usize,
}

struct Side {
    label: String,
    revision: String,
    metrics: Metrics,
}

pub fn run(args: &DiffArgs, io: &mut Io<'_>) -> u8 {
    let thresholds: Vec<Threshold> =
        match args.fail_if.iter().map(|t| Threshold::parse(t)).collect() {
            Ok(t) => t,
            Err(e) => return fail(io, e),
        };
    let mut sides = Vec::new();
    for spec in [&args.old, &args.new] {
        let (program, revision) = match load_policy(spec, io) {
            Ok(p) => p,
            Err(code) => return code,
        };
        let mut loaded = match load(&args.input, &program, io) {
            Ok(l) => l,
            Err(code) => return code,
        };
        let config = Config {
            policy_revision: revision.clone(),
            ..loaded.config.clone()
        };
        let metrics = match run_replay(&program, &mut loaded, &config, io) {
            Ok(m) => m,
            Err(code) => return code,
        };
        sides.push(Side {
            label: spec.clone(),
            revision,
            metrics,
        });
    }
    let (Some(old), Some(new)) = (sides.first(), sides.get(1)) else {
        return EXIT_USAGE;
    };
    let comparison = compare(&old.metrics, &new.metrics);
    let mut checks = Vec::new();
    for t in &thresholds {
        match t.check(&comparison) {
            Some((row, crossed)) => checks.push((t, row.clone(), crossed)),
            None => {
                return fail(
                    io,
                    format!("`--fail-if {}`: neither run has `{}`", t.text, t.scope),
                )
            }
        }
    }
    let trace = args
        .input
        .trace
        .as_deref()
        .map(files::display_name)
        .unwrap_or_default();
    let text = match args.format {
        DiffFormat::Json => json(old, new, &trace, &comparison, &checks),
        DiffFormat::Markdown => markdown(old, new, &trace, &comparison, &checks, args.max_jobs),
        DiffFormat::Table => table(old, new, &trace, &comparison, &checks, args.max_jobs),
    };
    let _ = io.stdout.write_all(text.as_bytes());
    if checks.iter().any(|(_, _, crossed)| *crossed) {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}

/// A policy from a path, or from git when `spec` is `REV:PATH` and no such path exists.
fn load_policy(spec: &str, io: &mut Io<'_>) -> Result<(Program, String), u8> {
    if Path::new(spec).exists() {
        return super::policy::load_with_revision(Path::new(spec), io);
    }
    let Some((rev, path)) = spec.split_once(':').filter(|(r, _)| !r.is_empty()) else {
        return Err(fail(
            io,
            format!("`{spec}` does not exist; give a policy directory or file, or REV:PATH from git (e.g. main:policies/prod)"),
        ));
    };
    let inputs = git_policy(rev, path).map_err(|e| fail(io, format!("`{spec}`: {e}")))?;
    super::policy::load_sources(spec, inputs, io)
}

fn git(args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().next().unwrap_or("git failed").to_string());
    }
    String::from_utf8(out.stdout).map_err(|_| "git printed something that is not UTF-8".into())
}

/// The `.gantry` files of the policy at `path` in revision `rev`, as (name, text).
fn git_policy(rev: &str, path: &str) -> Result<Vec<(String, String)>, String> {
    let path = path.trim_end_matches('/');
    let listing = git(&["ls-tree", "-r", "--name-only", rev, "--", path])?;
    let files: Vec<&str> = listing.lines().filter(|f| f.ends_with(".gantry")).collect();
    if files.is_empty() {
        return Err(format!("no `.gantry` files at `{path}` in {rev}"));
    }
    let parent = |f: &str| {
        Path::new(f)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    let mut dirs: Vec<_> = files.iter().map(|f| parent(f)).collect();
    dirs.sort();
    dirs.dedup();
    let chosen = if files.len() == 1 || dirs.len() == 1 {
        files
    } else {
        let own: Vec<&str> = files
            .iter()
            .copied()
            .filter(|f| parent(f) == Path::new(path))
            .collect();
        if own.is_empty() {
            return Err(format!(
                "`{path}` holds {} policies in {rev}; name one directory",
                dirs.len()
            ));
        }
        own
    };
    chosen
        .into_iter()
        .map(|f| {
            Ok((
                format!("{rev}:{f}"),
                git(&["show", &format!("{rev}:./{f}")])?,
            ))
        })
        .collect()
}

fn value(metric: &str, v: f64) -> String {
    match metric {
        m if m.starts_with("ttfg_") || m.starts_with("wait_") => short_duration(v.round() as i64),
        "utilization" => format!("{:.1}%", v * 100.0),
        "cost" => format!("${v:.2}"),
        "gpu_hours" | "lost_gpu_hours" => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

fn change(row: &Row) -> String {
    if row.old == row.new {
        return "=".into();
    }
    if row.metric == "utilization" {
        return format!("{:+.1} pp", row.change());
    }
    let rel = row.relative();
    if rel.is_finite() {
        format!("{rel:+.1}%")
    } else {
        format!("+{}", value(row.metric, row.new - row.old))
    }
}

/// Whole-run rows always; per tier, team and pool the headline metrics that moved by 1%
/// or more (JSON has every row).
fn shown(c: &Comparison) -> impl Iterator<Item = &Row> {
    const HEADLINE: [&str; 7] = [
        "ttfg_p50",
        "ttfg_p95",
        "wait_p95",
        "utilization",
        "gpu_hours",
        "cost",
        "preemptions",
    ];
    c.rows.iter().filter(|r| {
        r.scope.is_empty()
            || (HEADLINE.contains(&r.metric)
                && r.old != r.new
                && (r.metric == "utilization" && r.change().abs() >= 1.0
                    || r.metric != "utilization" && r.relative().abs() >= 1.0))
    })
}

type Check<'t> = (&'t Threshold, Row, bool);

fn check_lines(checks: &[Check<'_>], markdown: bool) -> Vec<String> {
    checks
        .iter()
        .map(|(t, row, crossed)| {
            let mark = match (markdown, crossed) {
                (true, true) => "❌",
                (true, false) => "✅",
                (false, true) => "FAIL",
                (false, false) => "ok",
            };
            format!(
                "{mark} `{}`: {} → {} ({})",
                t.text,
                value(row.metric, row.old),
                value(row.metric, row.new),
                change(row)
            )
        })
        .collect()
}

fn table(
    old: &Side,
    new: &Side,
    trace: &str,
    c: &Comparison,
    checks: &[Check<'_>],
    max_jobs: usize,
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "old: {} ({})\nnew: {} ({})\ntrace: {trace}, {} jobs\n\n",
        old.label, old.revision, new.label, new.revision, old.metrics.jobs.submitted
    ));
    out.push_str(&format!(
        "{:<36} {:>12} {:>12} {:>10}\n",
        "metric", "old", "new", "change"
    ));
    for r in shown(c) {
        out.push_str(&format!(
            "{:<36} {:>12} {:>12} {:>10}\n",
            r.name(),
            value(r.metric, r.old),
            value(r.metric, r.new),
            change(r)
        ));
    }
    out.push_str(&format!("\n{} jobs decided differently\n", c.jobs.len()));
    for j in c.jobs.iter().take(max_jobs) {
        out.push_str(&format!("  {}: {} → {}\n", j.job, j.old, j.new));
    }
    if c.jobs.len() > max_jobs {
        out.push_str(&format!(
            "  … and {} more (--max-jobs, or --format json)\n",
            c.jobs.len() - max_jobs
        ));
    }
    for l in check_lines(checks, false) {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn markdown(
    old: &Side,
    new: &Side,
    trace: &str,
    c: &Comparison,
    checks: &[Check<'_>],
    max_jobs: usize,
) -> String {
    let mut out = String::from("### Gantry policy diff\n\n");
    out.push_str(&format!(
        "**old** `{}` (`{}`) · **new** `{}` (`{}`) · trace `{trace}` ({} jobs)\n\n",
        old.label, old.revision, new.label, new.revision, old.metrics.jobs.submitted
    ));
    out.push_str("| metric | old | new | change |\n|---|---:|---:|---:|\n");
    for r in shown(c) {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            r.name(),
            value(r.metric, r.old),
            value(r.metric, r.new),
            change(r)
        ));
    }
    if !c.jobs.is_empty() {
        out.push_str(&format!(
            "\n<details><summary>{} jobs decided differently</summary>\n\n| job | team | tier | old | new |\n|---|---|---|---|---|\n",
            c.jobs.len()
        ));
        for j in c.jobs.iter().take(max_jobs) {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                j.job,
                j.team.as_deref().unwrap_or("-"),
                j.tier.as_deref().unwrap_or("-"),
                j.old,
                j.new
            ));
        }
        if c.jobs.len() > max_jobs {
            out.push_str(&format!("\n… and {} more.\n", c.jobs.len() - max_jobs));
        }
        out.push_str("\n</details>\n");
    } else {
        out.push_str("\nNo job is decided differently.\n");
    }
    let lines = check_lines(checks, true);
    if !lines.is_empty() {
        out.push_str("\n**Checks**\n\n");
        for l in lines {
            out.push_str(&format!("- {l}\n"));
        }
    }
    out
}

fn json(old: &Side, new: &Side, trace: &str, c: &Comparison, checks: &[Check<'_>]) -> String {
    let side = |s: &Side| {
        serde_json::json!({
            "policy": s.label,
            "revision": s.revision,
        })
    };
    let value = serde_json::json!({
        "old": side(old),
        "new": side(new),
        "trace": trace,
        "metrics": c.rows.iter().map(|r| serde_json::json!({
            "metric": r.metric,
            "scope": r.scope,
            "old": r.old,
            "new": r.new,
            "change": r.change(),
            "relative_pct": if r.relative().is_finite() { serde_json::json!(r.relative()) } else { serde_json::Value::Null },
        })).collect::<Vec<_>>(),
        "jobs": c.jobs,
        "checks": checks.iter().map(|(t, _, crossed)| serde_json::json!({
            "threshold": t.text,
            "failed": crossed,
        })).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}
