//! `gantry trace import`: a replay trace from a real system's records — a Slurm
//! accounting export or Kubernetes pod listings — for `gantry simulate` and `gantry diff`
//! to replay a team's real week in CI.

use super::Io;
use engine::sim::import::{kubernetes, slurm, Imported, Mapping};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TraceCommand {
    /// Turn a Slurm accounting export or Kubernetes pod listings into a replay trace
    /// (JSON Lines of jobs, in submit order).
    Import(ImportArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum Source {
    /// `sacct --parsable2` output with JobID, Submit, Start, End, NNodes and AllocTRES
    /// (plus Account, User, QOS, Partition for names).
    Slurm,
    /// `kubectl get pods -A -o json` listings, oldest first.
    Kubernetes,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    #[arg(long, value_enum)]
    pub from: Source,
    /// The export file (Slurm), or the listings in time order (Kubernetes).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// A TOML file renaming the source's names: `[teams]` (Slurm account or user, or
    /// namespace), `[tiers]` (QOS or partition, or priority class), `[pools]` (partition),
    /// `[defaults]` (`team`, `tier`).
    #[arg(long)]
    pub map: Option<PathBuf>,
    /// Where to write the trace (standard output when absent).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

pub fn run(args: &TraceArgs, io: &mut Io<'_>) -> u8 {
    let TraceCommand::Import(args) = &args.command;
    match import_files(args) {
        Ok(mut imported) => {
            let trace = imported.to_jsonl();
            let written = match &args.output {
                Some(path) => std::fs::write(path, &trace)
                    .map_err(|e| format!("cannot write {}: {e}", path.display())),
                None => io
                    .stdout
                    .write_all(trace.as_bytes())
                    .map_err(|e| e.to_string()),
            };
            if let Err(e) = written {
                return super::fail(io, e);
            }
            for note in &imported.notes {
                let _ = writeln!(io.stderr, "note: {note}");
            }
            let skipped: Vec<String> = imported
                .skipped
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect();
            let _ = writeln!(
                io.stderr,
                "imported {} jobs{}",
                imported.jobs.len(),
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!("; left out: {}", skipped.join(", "))
                }
            );
            super::EXIT_OK
        }
        Err(e) => super::fail(io, e),
    }
}

fn read(path: &PathBuf) -> Result<(String, String), String> {
    let name = path.display().to_string();
    std::fs::read_to_string(path)
        .map(|text| (name.clone(), text))
        .map_err(|e| format!("cannot read {name}: {e}"))
}

fn import_files(args: &ImportArgs) -> Result<Imported, String> {
    let map = match &args.map {
        Some(path) => {
            let (name, text) = read(path)?;
            Mapping::parse(&name, &text)?
        }
        None => Mapping::default(),
    };
    let files: Vec<(String, String)> = args.files.iter().map(read).collect::<Result<_, _>>()?;
    match args.from {
        Source::Slurm => slurm::import_files(&files, &map),
        Source::Kubernetes => kubernetes::import(&files, &map),
    }
}
