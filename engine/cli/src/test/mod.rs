//! `gantry test`: policy tests in `*.test.toml` files next to the policies. Each test gives
//! a small fleet and jobs, runs one decision cycle with the policy, and checks admission
//! outcomes, placements, reasons, victims and scale decisions. Failures show expected vs
//! actual with the test's file and line; `--format junit|json` for CI.

mod spec;

use super::{fail, Io, EXIT_FINDINGS, EXIT_OK};
use engine::core::fleet::Fleet;
use engine::core::mig::MigTable;
use engine::decide::snapshot::Snapshot;
use engine::inventory::jobs_file::{self, rfc3339_seconds};
use engine::inventory::{catalog, fleet_file};
use files::{self, read_text};
use lang::ir::Program;
use spec::{TestCase, TestFile};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum TestFormat {
    Human,
    Junit,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Test files (`*.test.toml`) or directories searched for them; defaults to
    /// `policies/` if it exists, else the current directory.
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = TestFormat::Human)]
    pub format: TestFormat,
}

/// One test's result; `error` marks a test that could not run (bad file, policy, fleet).
#[derive(Debug, serde::Serialize)]
struct Outcome {
    file: String,
    line: usize,
    name: String,
    passed: bool,
    error: bool,
    failures: Vec<String>,
}

pub fn run(args: &TestArgs, io: &mut Io<'_>) -> u8 {
    let paths = files::default_paths(&args.paths);
    let found = match files::find_files(&paths, ".test.toml") {
        Ok(f) => f,
        Err(e) => return fail(io, e.0),
    };
    if found.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return fail(
            io,
            format!(
                "no policy tests (`*.test.toml`) under {}; see the README's \"Policy tests\"",
                shown.join(", ")
            ),
        );
    }
    let mut outcomes = Vec::new();
    for file in &found {
        outcomes.extend(run_file(file, io));
    }
    let text = match args.format {
        TestFormat::Human => human(&outcomes),
        TestFormat::Junit => junit(&outcomes),
        TestFormat::Json => {
            let passed = outcomes.iter().filter(|o| o.passed).count();
            serde_json::to_string_pretty(&serde_json::json!({
                "passed": passed,
                "failed": outcomes.len() - passed,
                "tests": outcomes,
            }))
            .unwrap_or_default()
                + "\n"
        }
    };
    let _ = io.stdout.write_all(text.as_bytes());
    if outcomes.iter().all(|o| o.passed) {
        EXIT_OK
    } else {
        EXIT_FINDINGS
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

fn run_file(path: &Path, io: &mut Io<'_>) -> Vec<Outcome> {
    let name = path.display().to_string();
    let broken = |line: usize, message: String| {
        vec![Outcome {
            file: name.clone(),
            line,
            name: "(file)".into(),
            passed: false,
            error: true,
            failures: vec![message],
        }]
    };
    let text = match read_text(path) {
        Ok((_, t)) => t,
        Err(e) => return broken(1, e),
    };
    let file: TestFile = match toml::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            let line = e.span().map_or(1, |s| line_of(&text, s.start));
            return broken(line, e.message().to_string());
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let policy_path = dir.join(file.policy.as_deref().unwrap_or("."));
    let program = match super::policy::load(&policy_path, io) {
        Ok(p) => p,
        Err(_) => {
            return broken(
                1,
                format!(
                    "policy `{}` does not load (see above)",
                    policy_path.display()
                ),
            )
        }
    };
    let mut out = Vec::new();
    for case in &file.test {
        let line = line_of(&text, case.span().start);
        let t = case.get_ref();
        let (failures, error) = match run_case(&program, &file, t, dir, (&name, &text), line) {
            Ok(f) => (
                f.into_iter()
                    .map(|(l, m)| match l {
                        Some(l) => format!("{name}:{l}: {m}"),
                        None => m,
                    })
                    .collect(),
                false,
            ),
            Err(e) => (vec![e], true),
        };
        out.push(Outcome {
            file: name.clone(),
            line,
            name: t.name.clone(),
            passed: failures.is_empty(),
            error,
            failures,
        });
    }
    out
}

fn fleet_of(
    value: &toml::Value,
    dir: &Path,
    file: &str,
    program: &Program,
) -> Result<Fleet, String> {
    let models = catalog::merged(&program.gpu_models);
    match value {
        toml::Value::String(p) => {
            let (name, text) = read_text(&dir.join(p))?;
            fleet_file::parse(&name, &text, &models).map_err(|e| e.to_string())
        }
        toml::Value::Table(_) => {
            let text = toml::to_string(value).map_err(|e| e.to_string())?;
            fleet_file::parse(&format!("{file} (fleet).toml"), &text, &models)
                .map_err(|e| e.to_string())
        }
        _ => Err("`fleet` is a path to a fleet file or a table like the fleet file's".into()),
    }
}

fn time_of(value: &toml::Value) -> Option<i64> {
    match value {
        toml::Value::Integer(i) => Some(*i),
        toml::Value::String(s) => s.parse().ok().or_else(|| rfc3339_seconds(s)),
        toml::Value::Datetime(d) => rfc3339_seconds(&d.to_string()),
        _ => None,
    }
}

/// Runs one test; `Ok` with the failures (each with the line of its expectation, if any),
/// `Err` when the test cannot run.
fn run_case(
    program: &Program,
    file: &TestFile,
    t: &TestCase,
    dir: &Path,
    (name, text): (&str, &str),
    line: usize,
) -> Result<Vec<(Option<usize>, String)>, String> {
    let fleet = match t.fleet.as_ref().or(file.fleet.as_ref()) {
        Some(v) => fleet_of(v, dir, name, program)?,
        None => {
            return Err(
                "no fleet: give `fleet = \"fleet.toml\"` (a path from this file) at the top or in the test"
                    .into(),
            )
        }
    };
    let mut lines = String::new();
    for job in &t.jobs {
        let json = serde_json::to_string(job).map_err(|e| e.to_string())?;
        lines.push_str(&json);
        lines.push('\n');
    }
    let jobs = jobs_file::parse("jobs", &lines).map_err(|e| {
        let field = e
            .field
            .map(|f| format!("field `{f}`: "))
            .unwrap_or_default();
        format!("jobs[{}]: {field}{}", e.line.saturating_sub(1), e.message)
    })?;
    let now = match t.now.as_ref().or(file.now.as_ref()) {
        Some(v) => time_of(v).ok_or_else(|| {
            format!("`now = {v}` is not a time; give seconds or RFC 3339 in quotes")
        })?,
        None => jobs
            .iter()
            .flat_map(|j| [j.submitted_at, j.started_at, j.last_checkpoint_at])
            .flatten()
            .max()
            .unwrap_or(0),
    };
    let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &mig).map_err(|errors| {
        errors
            .iter()
            .map(|e| {
                format!(
                    "jobs[{}]: job `{}`: field `{}`: {}",
                    e.line.saturating_sub(1),
                    e.job,
                    e.field,
                    e.message
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let scale_state = match &t.state {
        None => Default::default(),
        Some(v) => serde_json::to_value(v)
            .and_then(serde_json::from_value)
            .map_err(|e| format!("`state`: {e}"))?,
    };
    let snapshot = Snapshot {
        scale_state,
        ..snapshot
    };
    let plan = engine::cycle::decide(program, &snapshot, now);
    let pool_of = |node: &str| {
        snapshot
            .fleet
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.pool.clone())
    };
    let mut failures = Vec::new();
    for e in &t.expect {
        let at = Some(line_of(text, e.span().start));
        let e = e.get_ref();
        match plan.decisions.iter().find(|d| d.job == e.job) {
            Some(d) => failures.extend(
                spec::check_decision(e, d, &pool_of)
                    .into_iter()
                    .map(|m| (at, m)),
            ),
            None => failures.push((
                at,
                format!(
                    "job `{}` has no decision: it is not in `jobs`, or it is running",
                    e.job
                ),
            )),
        }
    }
    failures.extend(
        spec::check_plan(t, &plan)
            .into_iter()
            .map(|m| (Some(line), m)),
    );
    Ok(failures)
}

fn human(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let mut file = "";
    for o in outcomes {
        if o.file != file {
            file = &o.file;
            out.push_str(&format!("{file}\n"));
        }
        if o.passed {
            out.push_str(&format!("  ok    {}\n", o.name));
        } else {
            let label = if o.error { "ERROR" } else { "FAIL " };
            out.push_str(&format!("  {label} {} ({}:{})\n", o.name, o.file, o.line));
            for f in &o.failures {
                out.push_str(&format!("        {f}\n"));
            }
        }
    }
    let passed = outcomes.iter().filter(|o| o.passed).count();
    out.push_str(&format!(
        "{} tests: {passed} passed, {} failed\n",
        outcomes.len(),
        outcomes.len() - passed
    ));
    out
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn junit(outcomes: &[Outcome]) -> String {
    let mut files: Vec<&str> = outcomes.iter().map(|o| o.file.as_str()).collect();
    files.dedup();
    let failed = |o: &&Outcome| !o.passed && !o.error;
    let errored = |o: &&Outcome| o.error;
    let outcomes: Vec<&Outcome> = outcomes.iter().collect();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"gantry test\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
        outcomes.len(),
        outcomes.iter().copied().filter(failed).count(),
        outcomes.iter().copied().filter(errored).count()
    );
    for file in files {
        let cases: Vec<&Outcome> = outcomes
            .iter()
            .copied()
            .filter(|o| o.file == file)
            .collect();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
            xml(file),
            cases.len(),
            cases.iter().copied().filter(failed).count(),
            cases.iter().copied().filter(errored).count()
        ));
        for o in cases {
            out.push_str(&format!(
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\"",
                xml(&o.name),
                xml(file),
                xml(file),
                o.line
            ));
            if o.passed {
                out.push_str("/>\n");
                continue;
            }
            let tag = if o.error { "error" } else { "failure" };
            out.push_str(&format!(
                ">\n      <{tag} message=\"{}\">{}</{tag}>\n    </testcase>\n",
                xml(o.failures.first().map_or("", String::as_str)),
                xml(&o.failures.join("\n"))
            ));
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
