//! `gantry plan`: one decision cycle over a policy, a fleet file and a jobs file (pending
//! and running), printed as the contract's plan JSON or as a readable queue.

use super::{fail, Io, EXIT_OK, EXIT_USAGE};
use engine::core::mig::MigTable;
use engine::decide::plan::{Action, Plan};
use engine::decide::scale_memory::ScaleState;
use engine::decide::snapshot::{Event, Snapshot, UsageRecord};
use engine::inventory::jobs_file::rfc3339_seconds;
use engine::inventory::{catalog, fleet_file, jobs_file};
use files::read_text;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum PlanFormat {
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Policy directory or file.
    #[arg(long)]
    pub policy: PathBuf,
    /// Fleet file (JSON or TOML).
    #[arg(long)]
    pub fleet: PathBuf,
    /// Jobs, pending and running (JSON array or JSON Lines).
    #[arg(long)]
    pub jobs: PathBuf,
    /// Team usage history for fair share (JSON Lines of {team, at, gpu_s, cpu_s, memory_mib_s}).
    #[arg(long)]
    pub usage: Option<PathBuf>,
    /// The autoscaler's state from the previous cycle (the plan's `state`, as JSON).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Write the autoscaler's state for the next cycle here.
    #[arg(long)]
    pub state_out: Option<PathBuf>,
    /// Events since the last cycle (JSON Lines of {at, event: "spot_interrupt", node}).
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Past job starts for warm-pool sizes (JSON Lines of {at, pool, team, tier, gpus}).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// The decision time: seconds since the epoch or RFC 3339. Default: the latest time in
    /// the jobs file (submit, start or checkpoint), so a saved snapshot replays the same.
    #[arg(long)]
    pub now: Option<String>,
    #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
    pub format: PlanFormat,
    /// Tell one job's story instead of the whole plan: the rules, its place in the queue,
    /// the quota arithmetic, the placement and victim sets considered, and the outcome.
    #[arg(long, value_name = "ID")]
    pub job: Option<String>,
}

pub fn run(args: &PlanArgs, io: &mut Io<'_>) -> u8 {
    let (program, revision) = match super::policy::load_with_revision(&args.policy, io) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let models = catalog::merged(&program.gpu_models);
    let fleet = match read_text(&args.fleet).and_then(|(name, text)| {
        fleet_file::parse(&name, &text, &models).map_err(|e| e.to_string())
    }) {
        Ok(f) => f,
        Err(e) => return fail(io, e),
    };
    let (jobs_name, jobs) = match read_text(&args.jobs).and_then(|(name, text)| {
        jobs_file::parse(&name, &text)
            .map(|j| (name, j))
            .map_err(|e| e.to_string())
    }) {
        Ok(j) => j,
        Err(e) => return fail(io, e),
    };
    let usage = match &args.usage {
        None => Vec::new(),
        Some(path) => match read_text(path).and_then(|(name, text)| parse_usage(&name, &text)) {
            Ok(u) => u,
            Err(e) => return fail(io, e),
        },
    };
    let now = match &args.now {
        Some(t) => match t.parse::<i64>().ok().or_else(|| rfc3339_seconds(t)) {
            Some(n) => n,
            None => {
                return fail(
                    io,
                    format!("--now `{t}` is not a time; give seconds or RFC 3339"),
                )
            }
        },
        None => jobs
            .iter()
            .flat_map(|j| [j.submitted_at, j.started_at, j.last_checkpoint_at])
            .flatten()
            .max()
            .unwrap_or(0),
    };
    let scale_state = match &args.state {
        None => ScaleState::default(),
        Some(path) => match read_text(path).and_then(|(name, text)| {
            let mut de = serde_json::Deserializer::from_str(&text);
            serde_path_to_error::deserialize(&mut de).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                format!("{name}:{}: field `{path}`: {inner}", inner.line())
            })
        }) {
            Ok(s) => s,
            Err(e) => return fail(io, e),
        },
    };
    let starts = match &args.history {
        None => Vec::new(),
        Some(path) => match read_text(path).and_then(|(name, text)| parse_lines(&name, &text)) {
            Ok(s) => s,
            Err(e) => return fail(io, e),
        },
    };
    let events: Vec<Event> = match &args.events {
        None => Vec::new(),
        Some(path) => match read_text(path).and_then(|(name, text)| parse_lines(&name, &text)) {
            Ok(e) => e,
            Err(e) => return fail(io, e),
        },
    };
    let mut interrupted = std::collections::BTreeSet::new();
    for (i, e) in events.iter().enumerate() {
        match fleet.nodes.iter().position(|n| n.name == e.node) {
            Some(n) if e.at <= now => {
                interrupted.insert(n);
            }
            Some(_) => {}
            None => {
                let file = args
                    .events
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string());
                return fail(
                    io,
                    format!(
                        "{file}: event {}: node `{}` is not in the fleet",
                        i + 1,
                        e.node
                    ),
                );
            }
        }
    }
    let mig = MigTable::from_models(&models);
    let snapshot = match Snapshot::build(fleet, jobs, usage, &mig) {
        Ok(s) => Snapshot {
            scale_state,
            starts,
            interrupted,
            ..s
        },
        Err(errors) => {
            for e in &errors {
                let _ = writeln!(io.stderr, "error: {jobs_name}:{e}");
            }
            return EXIT_USAGE;
        }
    };
    if let Some(id) = &args.job {
        return story(&program, &snapshot, now, id, args.format, io);
    }
    let mut plan = engine::cycle::decide(&program, &snapshot, now);
    plan.policy_revision = revision;
    if let (Some(out), Some(state)) = (&args.state_out, &plan.state) {
        let text = serde_json::to_string_pretty(state).unwrap_or_default();
        if let Err(e) = std::fs::write(out, text + "\n") {
            return fail(io, format!("cannot write `{}`: {e}", out.display()));
        }
    }
    match args.format {
        PlanFormat::Json => {
            // Streamed: a plan of 100,000 GPUs is tens of MB, never held as text.
            let mut out = std::io::BufWriter::with_capacity(1 << 16, &mut io.stdout);
            let written = serde_json::to_writer_pretty(&mut out, &plan)
                .map_err(|e| e.to_string())
                .and_then(|()| writeln!(out).map_err(|e| e.to_string()))
                .and_then(|()| out.flush().map_err(|e| e.to_string()));
            drop(out);
            if let Err(e) = written {
                return fail(io, format!("cannot write the plan: {e}"));
            }
        }
        PlanFormat::Table => table(&plan, io),
    }
    // The process ends next and takes its memory back at once: freeing a 100,000-GPU
    // snapshot and plan piece by piece was 4% of such a run.
    std::mem::forget(plan);
    std::mem::forget(snapshot);
    EXIT_OK
}

/// `--job ID`: one job's story, as lines or as JSON (`{job, story, decision}`).
fn story(
    program: &lang::ir::Program,
    snapshot: &Snapshot,
    now: i64,
    id: &str,
    format: PlanFormat,
    io: &mut Io<'_>,
) -> u8 {
    let Some((plan, lines)) = engine::cycle::job_story(program, snapshot, now, id) else {
        let _ = writeln!(
            io.stderr,
            "error: no job `{id}` in the jobs file; give the `id` of a pending or running job"
        );
        return EXIT_USAGE;
    };
    let decision = plan.decisions.iter().find(|d| d.job == id);
    match format {
        PlanFormat::Table => {
            for line in &lines {
                let _ = writeln!(io.stdout, "{line}");
            }
            if decision.is_none() {
                let _ = writeln!(io.stdout, "outcome: running (not decided in this cycle)");
            }
            for p in plan.preemptions.iter().filter(|p| p.job == id) {
                let _ = writeln!(
                    io.stdout,
                    "preempted for {} ({}; grace {})",
                    p.for_job,
                    p.cause,
                    duration(p.grace_s as i64)
                );
            }
        }
        PlanFormat::Json => {
            let value = serde_json::json!({ "job": id, "story": lines, "decision": decision });
            let _ = writeln!(
                io.stdout,
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
        }
    }
    EXIT_OK
}

fn parse_usage(file: &str, text: &str) -> Result<Vec<UsageRecord>, String> {
    parse_lines(file, text)
}

/// JSON Lines of one record type; blank lines skipped; errors name file and line.
pub(super) fn parse_lines<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<Vec<T>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                let m = e.to_string();
                let m = m.split(" at line ").next().unwrap_or(&m).to_string();
                format!("{file}:{}: {m}", i + 1)
            })
        })
        .collect()
}

/// Durations in tables read like the reasons beside them.
pub(super) use engine::decide::plan::human_duration as duration;

/// Widest a name column grows before its names are cut (with `…`).
const NAME_WIDTH: usize = 28;

/// The table's width: `$COLUMNS` where the shell exports it, else 120. Reasons wrap to it.
fn table_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(120)
}

/// `text` cut to `width` characters, ending in `…` when cut.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` broken into lines of at most `width` characters at spaces (a longer word gets a
/// line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    // A word wider than the column (a long job name) is cut into pieces that fit.
    let width = width.max(1);
    let pieces = text.split_whitespace().flat_map(|word| {
        let chars: Vec<char> = word.chars().collect();
        chars
            .chunks(width)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
    });
    for word in pieces {
        let fits = line.is_empty() || line.chars().count() + 1 + word.chars().count() <= width;
        if !fits {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// GPUs as people write them: `8`, `0.5`, `0.142`.
fn gpus(g: f64) -> String {
    let text = format!("{g:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn table(plan: &Plan, io: &mut Io<'_>) {
    let widest = |f: &dyn Fn(&engine::decide::plan::Decision) -> usize, header: &str| {
        plan.decisions
            .iter()
            .map(f)
            .chain(std::iter::once(header.len()))
            .max()
            .unwrap_or(0)
            .min(NAME_WIDTH)
    };
    let job_w = widest(&|d| d.job.chars().count(), "job");
    let team_w = widest(
        &|d| d.team.as_deref().map_or(1, |t| t.chars().count()),
        "team",
    );
    let tier_w = widest(
        &|d| d.tier.as_deref().map_or(1, |t| t.chars().count()),
        "tier",
    );
    // pos, job, team, tier, gpus, state, eta, then the reason.
    let reason_at = 4 + 2 + job_w + 1 + team_w + 1 + tier_w + 1 + 6 + 2 + 7 + 1 + 7 + 2;
    // Too narrow a terminal for a reason column: reasons go under their row instead.
    let stacked = table_width() < reason_at + 40;
    let (reason_at, reason_w) = if stacked {
        (6, table_width().saturating_sub(6))
    } else {
        (reason_at, table_width() - reason_at)
    };
    let _ = writeln!(
        io.stdout,
        "{:>4}  {:<job_w$} {:<team_w$} {:<tier_w$} {:>6}  {:<7} {:>7}{}",
        "pos",
        "job",
        "team",
        "tier",
        "gpus",
        "state",
        "eta",
        if stacked { "" } else { "  reason" }
    );
    for d in &plan.decisions {
        let state = match d.action {
            Action::Place if d.victims.is_empty() => "place",
            Action::Place => "preempt",
            Action::Queue => "queue",
            Action::Deny => "deny",
        };
        let (pos, eta, why) = match &d.reason {
            Some(r) => (
                r.position.map_or("-".into(), |p| p.to_string()),
                r.eta_s.map_or("-".into(), duration),
                format!(
                    "{}: {}",
                    serde_json::to_value(r.code)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    r.message
                ),
            ),
            None => {
                let nodes: Vec<&str> = d.placement.iter().map(|a| a.node.as_str()).collect();
                let mut dedup = nodes.clone();
                dedup.dedup();
                let mut text = format!("on {}", dedup.join(", "));
                if !d.victims.is_empty() {
                    text.push_str(&format!(" after preempting {}", d.victims.join(", ")));
                }
                if d.borrowing {
                    text.push_str(" (borrowed quota)");
                }
                ("-".into(), "-".into(), text)
            }
        };
        let mut lines = wrap(&why, reason_w).into_iter();
        let first = if stacked {
            String::new()
        } else {
            format!("  {}", lines.next().unwrap_or_default())
        };
        let _ = writeln!(
            io.stdout,
            "{pos:>4}  {:<job_w$} {:<team_w$} {:<tier_w$} {:>6}  {state:<7} {eta:>7}{first}",
            fit(&d.job, job_w),
            fit(d.team.as_deref().unwrap_or("-"), team_w),
            fit(d.tier.as_deref().unwrap_or("-"), tier_w),
            gpus(d.gpus),
        );
        for line in lines {
            let _ = writeln!(io.stdout, "{:reason_at$}{line}", "");
        }
        if let Some(unblock) = d.reason.as_ref().and_then(|r| r.unblock.as_ref()) {
            for (i, line) in wrap(unblock, reason_w.saturating_sub(2)).iter().enumerate() {
                let arrow = if i == 0 { "→ " } else { "  " };
                let _ = writeln!(io.stdout, "{:reason_at$}{arrow}{line}", "");
            }
        }
    }
    for p in &plan.preemptions {
        let _ = writeln!(
            io.stdout,
            "preempt {} for {} ({}; grace {}, {:.0} GPU-s of work lost: since its last checkpoint, and through the grace)",
            p.job,
            p.for_job,
            p.cause,
            duration(p.grace_s as i64),
            p.lost_gpu_s
        );
    }
    for s in &plan.scale {
        let pool = if s.pool.is_empty() {
            "-"
        } else {
            s.pool.as_str()
        };
        let _ = writeln!(io.stdout, "scale {pool} {:+}: {}", s.delta_nodes, s.reason);
    }
    for w in &plan.warm {
        let _ = writeln!(
            io.stdout,
            "warm {} → {} nodes: {}",
            w.pool, w.target_nodes, w.reason
        );
    }
    if let Some(r) = &plan.reservation {
        let _ = writeln!(
            io.stdout,
            "reserve {} for {} in {}",
            r.nodes.join(", "),
            r.job,
            duration(r.start_at - plan.now)
        );
    }
    let placed = plan
        .decisions
        .iter()
        .filter(|d| d.action == Action::Place)
        .count();
    let denied = plan
        .decisions
        .iter()
        .filter(|d| d.action == Action::Deny)
        .count();
    let _ = writeln!(
        io.stdout,
        "{placed} placed, {} queued, {denied} denied, {} preempted (policy {})",
        plan.decisions.len() - placed - denied,
        plan.preemptions.len(),
        plan.policy_revision
    );
}
