//! The `gantry` command line: argument parsing with clap and dispatch to the subcommands,
//! which read files and run the engine (the `engine` crate) or a shell beside it (`serve`,
//! `lsp`, `probe`); wall-clock timing lives here, not in the engine.
//! Every command returns an exit code: 0 ok, 1 findings or failures, 2 usage or I/O error.

mod agent;
mod check;
mod diff;
mod explain;
mod fill;
mod fmt;
mod inventory;
mod place;
mod plan;
pub(crate) mod policy;
mod queue;
mod safe_write;
mod simulate;
mod test;
mod trace;

use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

pub const EXIT_OK: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Output streams and terminal facts, passed in so tests can run commands in-process.
pub struct Io<'a> {
    pub stdout: Box<dyn Write + 'a>,
    pub stderr: Box<dyn Write + 'a>,
    /// Whether diagnostics may use colour.
    pub color: bool,
    /// Whether standard error is a terminal (progress bars instead of progress lines).
    pub interactive: bool,
    /// Standard input for `gantry fmt -`.
    pub stdin: Box<dyn std::io::Read + 'a>,
    /// Starts a Kubernetes cluster view for `serve` (the `gantry` binary passes the
    /// `cluster` crate's; without one, `serve --kubeconfig` says this build lacks it).
    pub cluster: Option<std::sync::Arc<dyn serve::state::ClusterConnector>>,
}

impl std::fmt::Debug for Io<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Io")
            .field("color", &self.color)
            .finish_non_exhaustive()
    }
}

impl<'a> Io<'a> {
    pub fn terminal(stdout: impl Write + 'a, stderr: impl Write + 'a) -> Io<'a> {
        use std::io::IsTerminal;
        let interactive = std::io::stderr().is_terminal();
        let color = interactive && std::env::var_os("NO_COLOR").is_none();
        Io {
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            color,
            interactive,
            stdin: Box::new(std::io::stdin()),
            cluster: None,
        }
    }

    /// Plain streams without colour, for tests.
    pub fn captured(stdout: &'a mut Vec<u8>, stderr: &'a mut Vec<u8>) -> Io<'a> {
        Io {
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            color: false,
            interactive: false,
            stdin: Box::new(std::io::empty()),
            cluster: None,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "gantry",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GANTRY_GIT_COMMIT"), ")"),
    about = "Check, format, test and explain Gantry GPU scheduling policies; plan, simulate and diff them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DiagnosticFormat {
    /// Rendered diagnostics with source excerpts.
    Human,
    /// One JSON object per diagnostic, one per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Type-check policies: each directory of `.gantry` files is one policy.
    Check {
        /// Policy files or directories (searched recursively); defaults to `policies/` if
        /// it exists, else the current directory.
        paths: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = DiagnosticFormat::Human)]
        format: DiagnosticFormat,
        /// Treat warnings as findings (exit 1).
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Rewrite policy files in the canonical style; `-` formats standard input to standard output.
    Fmt {
        /// Files or directories; defaults like `check`.
        paths: Vec<PathBuf>,
        /// Change nothing; show a diff and exit 1 if any file is not formatted.
        #[arg(long)]
        check: bool,
    },
    /// Replay a trace under a policy, event by event, through the same decisions as
    /// production; `simulate fill` runs the FGD packing experiment.
    Simulate(simulate::SimulateArgs),
    /// Print the long explanation of a diagnostic code, or list all codes.
    Explain {
        /// A code such as E0301.
        code: Option<String>,
    },
    /// Place jobs, in order, on a fleet file and show where each went or why it waits.
    Place(place::PlaceArgs),
    /// One decision cycle: admission, queue order, quotas, preemption, backfill; the plan
    /// with a reason for every job that waits.
    Plan(plan::PlanArgs),
    /// What GPUs gantry sees (NVML, a fleet file, or a saved NVML reading), printed in the
    /// fleet format.
    Inventory(inventory::InventoryArgs),
    /// The node agent (a DaemonSet on GPU nodes): publish this node's GPUs as NVML sees
    /// them (models, memory, NVLink islands, MIG instances, health) on its Node object.
    Agent(agent::AgentArgs),
    /// Serve the admission webhook, scheduler extender, plan API, status and metrics over
    /// HTTP or HTTPS, reloading the policy when its files change.
    Serve(serve::ServeArgs),
    /// The queue of a running `serve --queue`: waiting jobs in order with reason and ETA,
    /// then running jobs and their nodes.
    Queue(queue::QueueArgs),
    /// A language server over standard input and output (LSP), for editors.
    Lsp,
    /// Run policy tests (`*.test.toml` next to the policies): admission, placement,
    /// reasons, victims and scale decisions against expectations.
    Test(test::TestArgs),
    /// Replay one trace under two policies and report what changes (waits, utilization,
    /// preemptions, cost, jobs decided differently); `--fail-if` gates CI.
    Diff(diff::DiffArgs),
    /// Replay traces from real systems: `trace import --from slurm|kubernetes`.
    Trace(trace::TraceArgs),
}

/// Runs the CLI with `args` (including the program name) and returns the exit code.
pub fn run<I, T>(args: I, io: &mut Io<'_>) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let text = e.render().to_string();
            let _ = if e.use_stderr() {
                io.stderr.write_all(text.as_bytes())
            } else {
                io.stdout.write_all(text.as_bytes())
            };
            return code;
        }
    };
    let code = match cli.command {
        Command::Check {
            paths,
            format,
            deny_warnings,
        } => check::run(&paths, format, deny_warnings, io),
        Command::Fmt { paths, check } => fmt::run(&paths, check, io),
        Command::Explain { code } => explain::run(code.as_deref(), io),
        Command::Place(args) => place::run(&args, io),
        Command::Plan(args) => plan::run(&args, io),
        Command::Inventory(args) => inventory::run(&args, io),
        Command::Simulate(args) => simulate::run(&args, io),
        Command::Diff(args) => diff::run(&args, io),
        Command::Trace(args) => trace::run(&args, io),
        Command::Test(args) => test::run(&args, io),
        Command::Serve(args) => match serve::run(&args, io.cluster.as_deref()) {
            Ok(()) => EXIT_OK,
            Err(e) => fail(io, e),
        },
        Command::Queue(args) => queue::run(&args, io),
        Command::Agent(args) => agent::run(&args, io),
        Command::Lsp => match lsp::run() {
            Ok(()) => EXIT_OK,
            Err(e) => fail(io, e),
        },
    };
    let _ = io.stdout.flush();
    let _ = io.stderr.flush();
    code
}

/// Prints `gantry: message` to standard error.
fn fail(io: &mut Io<'_>, message: impl std::fmt::Display) -> u8 {
    let _ = writeln!(io.stderr, "gantry: {message}");
    EXIT_USAGE
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code")]
mod tests {
    #[test]
    fn predicted_estimates_without_the_queue_are_refused() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = crate::Io::captured(&mut out, &mut err);
        let code = crate::run(["gantry", "serve", "--estimates", "predicted"], &mut io);
        drop(io);
        assert_eq!(code, crate::EXIT_USAGE);
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("it needs --queue"), "{err}");
    }
}
