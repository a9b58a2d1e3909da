//! Embedding the decisions without the `gantry` command: a policy, a fleet and a queue as
//! text in, a plan out, through the `engine` crate alone (no runtime, server or NVML).
//! This is what a Slurm plugin, another controller or a notebook would do.
//!
//!     cargo run -p engine --example embed
//!
//! It decides `examples/plan`'s queue, which `gantry plan` shows in the README, and
//! prints each job's action and reason.

use engine::core::mig::MigTable;
use engine::decide::snapshot::Snapshot;
use engine::inventory::{catalog, fleet_file, jobs_file};
use std::process::ExitCode;

const POLICY: &str = include_str!("../../examples/plan/policy.gantry");
const FLEET: &str = include_str!("../../examples/plan/fleet.toml");
const JOBS: &str = include_str!("../../examples/plan/jobs.jsonl");

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    // The front end checks text it is given; its diagnostics carry file names and spans.
    let checked = lang::check(&[("policy.gantry".to_string(), POLICY.to_string())]);
    let program = checked.program.ok_or_else(|| {
        let first = checked.diagnostics.first().map(|d| d.message.clone());
        format!("the policy has errors: {}", first.unwrap_or_default())
    })?;
    // The readers parse text too: the embedding program decides where it comes from.
    let models = catalog::merged(&program.gpu_models);
    let fleet = fleet_file::parse("fleet.toml", FLEET, &models).map_err(|e| e.to_string())?;
    let jobs = jobs_file::parse("jobs.jsonl", JOBS).map_err(|e| e.to_string())?;
    // The clock is an input: here the latest time the queue mentions, as `gantry plan` takes.
    let now = jobs
        .iter()
        .flat_map(|j| [j.submitted_at, j.started_at, j.last_checkpoint_at])
        .flatten()
        .max()
        .unwrap_or(0);
    let mig = MigTable::from_models(&models);
    let snapshot = Snapshot::build(fleet, jobs, Vec::new(), &mig).map_err(|errors| {
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        all.join("; ")
    })?;
    // One whole decision cycle: placement, preemption, reservations, reasons, autoscaling.
    let plan = engine::cycle::decide(&program, &snapshot, now);
    for d in &plan.decisions {
        let why = d.reason.as_ref().map_or("", |r| r.message.as_str());
        println!("{:<16} {:?} {why}", d.job, d.action);
    }
    for p in &plan.preemptions {
        println!("preempt {} for {}", p.job, p.for_job);
    }
    Ok(())
}
