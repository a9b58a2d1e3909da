//! `gantry simulate`: replay a trace under a policy (with a summary table, JSON metrics
//! and an HTML report), or `simulate fill`, the FGD packing experiment.

use super::plan::{duration, parse_lines};
use super::{fail, fill, Io, EXIT_OK};
use engine::core::fleet::Fleet;
use engine::inventory::jobs_file::rfc3339_seconds;
use engine::inventory::{catalog, fleet_file};
use engine::sim::metrics::Metrics;
use engine::sim::predict::Estimates;
use engine::sim::replay::{self, Config, Progress};
use engine::sim::trace::{self, Trace};
use engine::sim::{openb, report};
use files::{self, read_text};
use lang::ir::Program;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimulateArgs {
    #[command(subcommand)]
    pub mode: Option<SimulateMode>,
    /// Policy directory or file.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub input: ReplayInput,
    /// Write the metrics as JSON here (`-`: standard output, instead of the table).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum SimulateMode {
    /// The FGD paper's fill experiment on Alibaba openb CSVs: place pods one by one, never
    /// remove, and report GPU allocation and fragmentation by percent of arrived workload.
    Fill(fill::FillArgs),
}

/// What a replay runs on besides the policy; shared by `simulate` and `diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayInput {
    /// Fleet file (JSON or TOML).
    #[arg(long, conflicts_with = "nodes")]
    pub fleet: Option<PathBuf>,
    /// An openb node list as the fleet (with an openb pod CSV as the trace).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// The trace: JSON Lines of jobs and node events, or a timed openb pod CSV (`.csv`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Stop at this time (seconds or RFC 3339); default: when the trace is done and
    /// nothing runs.
    #[arg(long)]
    pub until: Option<String>,
    /// Seconds between autoscaler ticks while work waits or nodes boot.
    #[arg(long, default_value_t = 60)]
    pub tick: u64,
    /// Past job starts for warm-pool sizes (JSON Lines of {at, pool, team, tier, gpus}).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Team usage before the trace, for fair share (JSON Lines of {team, at, gpu_s}).
    #[arg(long)]
    pub usage: Option<PathBuf>,
    /// What decisions plan runtimes with: each job's `runtime_s` (its limit or
    /// estimate), or a prediction from its user's (else its team's) last finished jobs:
    /// the limit times their mean ratio of actual runtime to limit.
    #[arg(long, default_value = "limits", value_parser = ["limits", "predicted"])]
    pub estimates: String,
}

/// A fleet, trace and configuration read and checked, ready to replay.
#[derive(Debug)]
pub struct Loaded {
    pub fleet: Fleet,
    pub trace: Trace,
    pub config: Config,
    pub trace_name: String,
}

pub fn run(args: &SimulateArgs, io: &mut Io<'_>) -> u8 {
    if let Some(SimulateMode::Fill(fill_args)) = &args.mode {
        return fill::run(fill_args, io);
    }
    let Some(policy) = &args.policy else {
        return fail(
            io,
            "`gantry simulate` needs --policy, --trace and --fleet (or --nodes for an openb node list); see `gantry simulate --help`",
        );
    };
    let (program, revision) = match super::policy::load_with_revision(policy, io) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut loaded = match load(&args.input, &program, io) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let config = Config {
        policy_revision: revision,
        ..loaded.config.clone()
    };
    let started = std::time::Instant::now();
    let metrics = match run_replay(&program, &mut loaded, &config, io) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let wall = started.elapsed().as_secs_f64();
    let _ = writeln!(
        io.stderr,
        "simulate: {} decision cycles in {wall:.2}s",
        metrics.cycles
    );
    let json = serde_json::to_string_pretty(&metrics).unwrap_or_default() + "\n";
    match &args.json {
        Some(p) if p.as_os_str() == "-" => {
            let _ = io.stdout.write_all(json.as_bytes());
        }
        other => {
            print_summary(&metrics, io);
            if let Some(path) = other {
                if let Err(e) = std::fs::write(path, &json) {
                    return fail(
                        io,
                        format!("cannot write `{}`: {}", path.display(), files::describe(&e)),
                    );
                }
            }
        }
    }
    if let Some(path) = &args.report {
        let title = format!("{} on {}", files::display_name(policy), loaded.trace_name);
        let html = report::render(&title, &metrics);
        if let Err(e) = std::fs::write(path, html) {
            return fail(
                io,
                format!("cannot write `{}`: {}", path.display(), files::describe(&e)),
            );
        }
    }
    EXIT_OK
}

/// Reads the fleet, trace and histories named by `input`.
pub fn load(input: &ReplayInput, program: &Program, io: &mut Io<'_>) -> Result<Loaded, u8> {
    let Some(trace_path) = &input.trace else {
        return Err(fail(
            io,
            "--trace is required: a JSON Lines trace or an openb pod CSV",
        ));
    };
    let models = catalog::merged(&program.gpu_models);
    let fleet = match (&input.fleet, &input.nodes) {
        (Some(path), _) => read_text(path).and_then(|(name, text)| {
            fleet_file::parse(&name, &text, &models).map_err(|e| e.to_string())
        }),
        (None, Some(path)) => read_text(path)
            .and_then(|(name, text)| openb::parse_nodes(&name, &text).map_err(|e| e.to_string())),
        (None, None) => Err("--fleet is required (or --nodes with an openb node list)".to_string()),
    }
    .map_err(|e| fail(io, e))?;
    let (trace_name, text) = read_text(trace_path).map_err(|e| fail(io, e))?;
    let is_csv = trace_path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let trace = if is_csv {
        openb::parse_timed_pods(&trace_name, &text)
            .map(trace::from_openb)
            .map_err(|e| {
                if e.message.contains("`creation_time`") {
                    format!("{e}; only openb lists with times can be replayed (the multigpu variants have none: use `gantry simulate fill` for them)")
                } else {
                    e.to_string()
                }
            })
    } else {
        trace::parse(&trace_name, &text).map_err(|e| e.to_string())
    }
    .map_err(|e| fail(io, e))?;
    let until = match &input.until {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .ok()
                .or_else(|| rfc3339_seconds(t))
                .ok_or_else(|| {
                    fail(
                        io,
                        format!("--until `{t}` is not a time; give seconds or RFC 3339"),
                    )
                })?,
        ),
    };
    if input.tick == 0 || input.tick > 86_400 {
        return Err(fail(
            io,
            format!("--tick {}: give 1 to 86400 seconds", input.tick),
        ));
    }
    let history = match &input.history {
        None => Vec::new(),
        Some(p) => read_lines(p).map_err(|e| fail(io, e))?,
    };
    let usage = match &input.usage {
        None => Vec::new(),
        Some(p) => read_lines(p).map_err(|e| fail(io, e))?,
    };
    Ok(Loaded {
        fleet,
        trace,
        config: Config {
            tick_s: i64::try_from(input.tick).unwrap_or(60),
            until,
            history,
            usage,
            policy_revision: String::new(),
            estimates: if input.estimates == "predicted" {
                Estimates::Predicted
            } else {
                Estimates::Limits
            },
        },
        trace_name: files::display_name(trace_path),
    })
}

fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    read_text(path).and_then(|(name, text)| parse_lines(&name, &text))
}

/// Replays with a progress bar on a terminal, or a line per tenth of the trace otherwise.
/// Replays `loaded`'s trace, which it takes (leaving it empty): a large trace is moved
/// into the replay rather than copied.
pub fn run_replay(
    program: &Program,
    loaded: &mut Loaded,
    config: &Config,
    io: &mut Io<'_>,
) -> Result<Metrics, u8> {
    let total = loaded.trace.jobs.len() as u64;
    let bar = io.interactive.then(|| {
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} jobs arrived · {msg}",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut last_tenth = 0;
    let mut lines: Vec<String> = Vec::new();
    let mut on_progress = |p: Progress| {
        if let Some(bar) = &bar {
            bar.set_position(p.arrived as u64);
            bar.set_message(format!("{} cycles", p.cycles));
        } else {
            let tenth = p.arrived * 10 / p.total.max(1);
            if tenth > last_tenth {
                last_tenth = tenth;
                lines.push(format!(
                    "simulate: {}0% of {} jobs arrived ({} decision cycles)",
                    tenth, p.total, p.cycles
                ));
            }
        }
    };
    let result = replay::replay(
        program,
        loaded.fleet.clone(),
        std::mem::take(&mut loaded.trace),
        config,
        &mut on_progress,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    for l in lines {
        let _ = writeln!(io.stderr, "{l}");
    }
    result.map_err(|e| {
        fail(
            io,
            format!("{}:{}: {}", loaded.trace_name, e.line, e.message),
        )
    })
}

fn when(t: i64) -> String {
    if t >= 1_000_000_000 {
        chrono::DateTime::from_timestamp(t, 0).map_or_else(
            || t.to_string(),
            |d| d.format("%Y-%m-%d %H:%M UTC").to_string(),
        )
    } else {
        format!("t={t}s")
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The human summary: jobs, utilization, pools, waits per tier, teams, preemptions.
pub fn print_summary(m: &Metrics, io: &mut Io<'_>) {
    let out = &mut io.stdout;
    let _ = writeln!(
        out,
        "simulated {} → {} ({}), {} decision cycles",
        when(m.start),
        when(m.end),
        duration(m.end - m.start),
        m.cycles
    );
    let j = &m.jobs;
    let _ = writeln!(
        out,
        "jobs: {} submitted, {} completed, {} running at the end, {} waiting, {} denied",
        j.submitted, j.completed, j.running_at_end, j.waiting_at_end, j.denied
    );
    let _ = writeln!(
        out,
        "GPUs: {} utilization ({:.1} of {:.1} GPU-hours), cost ${:.2}",
        pct(m.utilization),
        m.gpu_hours,
        m.gpu_hours_available,
        m.cost
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>7} {:>9} {:>11} {:>7} {:>7}",
        "pool", "GPU-h", "avail GPU-h", "util", "node-h", "cost", "+nodes", "-nodes"
    );
    for (name, p) in &m.pools {
        let _ = writeln!(
            out,
            "{name:<16} {:>10.1} {:>11.1} {:>7} {:>9.1} {:>11.2} {:>7} {:>7}",
            p.gpu_hours,
            p.gpu_hours_available,
            pct(p.utilization),
            p.node_hours,
            p.cost,
            p.nodes_added,
            p.nodes_removed
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "tier", "jobs", "started", "ttfg p50", "ttfg p95", "ttfg p99", "wait p95", "wait max"
    );
    let rows =
        std::iter::once(("(all)", &m.all)).chain(m.tiers.iter().map(|(k, v)| (k.as_str(), v)));
    for (name, w) in rows {
        if w.submitted == 0 && name != "(all)" {
            continue;
        }
        let t = &w.time_to_first_gpu_s;
        let q = &w.queue_wait_s;
        let _ = writeln!(
            out,
            "{name:<16} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
            w.submitted,
            w.started,
            duration(t.p50 as i64),
            duration(t.p95 as i64),
            duration(t.p99 as i64),
            duration(q.p95 as i64),
            duration(q.max as i64)
        );
    }
    if m.teams.keys().any(|k| k != "-") {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<16} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>9}",
            "team",
            "jobs",
            "ttfg p95",
            "GPU-h",
            "mean GPUs",
            "guaranteed",
            "of guar.",
            "cost",
            "preempted"
        );
        for (name, t) in &m.teams {
            let _ = writeln!(
                out,
                "{name:<16} {:>6} {:>9} {:>9.1} {:>9.2} {:>10.1} {:>9} {:>10.2} {:>9}",
                t.waits.submitted,
                duration(t.waits.time_to_first_gpu_s.p95 as i64),
                t.gpu_hours,
                t.mean_gpus,
                t.guaranteed_gpus,
                t.mean_of_guarantee.map_or("-".to_string(), pct),
                t.cost,
                t.preempted
            );
        }
    }
    let _ = writeln!(out);
    let p = &m.preemptions;
    let causes: Vec<String> = p.by_cause.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        out,
        "preemptions: {}{} · {:.2} GPU-hours lost · {} jobs stopped by node failures",
        p.count,
        if causes.is_empty() {
            String::new()
        } else {
            format!(" ({})", causes.join(", "))
        },
        p.lost_gpu_hours,
        p.node_failures
    );
    let e = &m.first_eta_error;
    if e.jobs > 0 {
        let _ = writeln!(
            out,
            "first ETAs{}: {} jobs given one · {} started then, {} earlier, {} later · off by {} at p50, {} at p95",
            if m.estimates == Estimates::Predicted {
                " (runtimes predicted)"
            } else {
                ""
            },
            e.jobs,
            e.exact,
            e.early,
            e.late,
            duration(e.abs_error_s.p50 as i64),
            duration(e.abs_error_s.p95 as i64)
        );
    }
    let up: i64 = m.scale_events.iter().map(|e| e.delta_nodes.max(0)).sum();
    let down: i64 = m.scale_events.iter().map(|e| (-e.delta_nodes).max(0)).sum();
    let _ = writeln!(
        out,
        "scaling: +{up} / -{down} nodes in {} scale events",
        m.scale_events.len()
    );
    if !m.denied_by_rule.is_empty() {
        let d: Vec<String> = m
            .denied_by_rule
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "denied by rule: {}", d.join(", "));
    }
    if !m.waiting_by_reason.is_empty() {
        let w: Vec<String> = m
            .waiting_by_reason
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "still waiting: {}", w.join(", "));
    }
    for n in &m.notes {
        let _ = writeln!(out, "note: {n}");
    }
}
