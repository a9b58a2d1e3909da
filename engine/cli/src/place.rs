//! `gantry place`: places a list of jobs, in order, on a fleet file with the policy's
//! placement (or `--packing`), and shows where each went or why it did not.

use super::{fail, Io, EXIT_OK};
use engine::core::alloc::Request;
use engine::core::frag::Workload;
use engine::core::gang::{self, JobShape};
use engine::core::mig::MigTable;
use engine::core::packing::Strategy;
use engine::core::placer::{Choice, Placer};
use engine::inventory::{catalog, fleet_file, jobs_file};
use files::read_text;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum PlaceFormat {
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct PlaceArgs {
    /// Fleet file (JSON or TOML).
    #[arg(long)]
    pub fleet: PathBuf,
    /// Jobs to place, in order (JSON array or JSON Lines).
    #[arg(long)]
    pub jobs: PathBuf,
    /// Take packing, topology defaults and GPU models from this policy.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Packing strategy: least_fragmentation (default), fgd, best_fit, gpu_packing, spread, random.
    #[arg(long, conflicts_with = "policy")]
    pub packing: Option<String>,
    #[arg(long, value_enum, default_value_t = PlaceFormat::Table)]
    pub format: PlaceFormat,
}

pub fn run(args: &PlaceArgs, io: &mut Io<'_>) -> u8 {
    let program = match &args.policy {
        Some(p) => match super::policy::load(p, io) {
            Ok(p) => Some(p),
            Err(code) => return code,
        },
        None => None,
    };
    let strategy = match (&args.packing, &program) {
        (Some(name), _) => match Strategy::from_name(name) {
            Some(s) => s,
            None => {
                return fail(
                    io,
                    format!(
                        "unknown packing `{name}`; expected one of {}",
                        Strategy::NAMES.join(", ")
                    ),
                )
            }
        },
        (None, Some(p)) => Strategy::from_policy(p.placement.packing),
        (None, None) => Strategy::LeastFragmentation,
    };
    let models = catalog::merged(program.as_ref().map_or(&[], |p| p.gpu_models.as_slice()));
    let fleet = match read_text(&args.fleet).and_then(|(name, text)| {
        fleet_file::parse(&name, &text, &models).map_err(|e| e.to_string())
    }) {
        Ok(f) => f,
        Err(e) => return fail(io, e),
    };
    let mut jobs = match read_text(&args.jobs)
        .and_then(|(name, text)| jobs_file::parse(&name, &text).map_err(|e| e.to_string()))
    {
        Ok(j) => j,
        Err(e) => return fail(io, e),
    };
    if let Some(p) = &program {
        for job in &mut jobs {
            apply_policy_topology(&mut job.shape, &p.placement);
        }
    }
    let mig = MigTable::from_models(&models);
    let members: Vec<Request> = jobs.iter().map(|j| j.shape.member.clone()).collect();
    let workload = Workload::typical(&members);
    let mut placer = Placer::new(&fleet, strategy, &workload, &mig, 0);
    let mut decisions = Vec::new();
    for job in &jobs {
        let outcome = gang::place_job(&mut placer, &job.shape);
        decisions.push((job, outcome));
    }
    match args.format {
        PlaceFormat::Json => {
            let list: Vec<serde_json::Value> = decisions
                .iter()
                .map(|(job, outcome)| match outcome {
                    Ok(choices) => json!({
                        "job": job.id,
                        "action": "place",
                        "placement": placement_json(&fleet, &job.shape, choices),
                    }),
                    Err(why) => json!({"job": job.id, "action": "queue", "reason": why}),
                })
                .collect();
            let text =
                serde_json::to_string_pretty(&json!({ "decisions": list })).unwrap_or_default();
            let _ = writeln!(io.stdout, "{text}");
        }
        PlaceFormat::Table => {
            let _ = writeln!(
                io.stdout,
                "{:<20} {:>9}  {:<6} where / why",
                "job", "gpus", "action"
            );
            for (job, outcome) in &decisions {
                let gpus = format!("{}×{}", job.shape.members, job.shape.member.num_gpu);
                let (action, detail) = match outcome {
                    Ok(choices) => ("place", where_text(&fleet, choices)),
                    Err(why) => ("queue", format!("{:?}: {}", why.code, why.message)),
                };
                let _ = writeln!(io.stdout, "{:<20} {gpus:>9}  {action:<6} {detail}", job.id);
            }
            let placed = decisions.iter().filter(|(_, o)| o.is_ok()).count();
            let _ = writeln!(
                io.stdout,
                "placed {placed} of {} jobs ({:?})",
                decisions.len(),
                strategy
            );
        }
    }
    EXIT_OK
}

/// Jobs without their own topology take the policy's required level, else its first
/// preferred level that groups nodes.
fn apply_policy_topology(shape: &mut JobShape, placement: &lang::ir::Placement) {
    if shape.topology_required.is_none() && shape.topology_preferred.is_none() {
        shape.topology_required = placement.topology_required;
        shape.topology_preferred = placement.topology_preferred.iter().copied().find(|l| {
            !matches!(
                l,
                lang::ir::TopologyLevel::NvlinkIsland | lang::ir::TopologyLevel::Any
            )
        });
    }
}

fn placement_json(
    fleet: &engine::core::fleet::Fleet,
    shape: &JobShape,
    choices: &[Choice],
) -> serde_json::Value {
    let items: Vec<serde_json::Value> = choices
        .iter()
        .map(|c| {
            let node = fleet.nodes.get(c.node);
            let gpu_index = |g: usize| {
                node.and_then(|n| n.gpus.get(g))
                    .map_or(g as u32, |x| x.index)
            };
            let mut v = json!({
                "node": node.map_or("", |n| n.name.as_str()),
                "gpus": c.on.gpus.iter().map(|g| gpu_index(*g)).collect::<Vec<_>>(),
                "gpu_milli": shape.member.gpu_milli,
            });
            if let Some(profile) = &shape.member.mig_profile {
                let mig: Vec<serde_json::Value> =
                    c.on.gpus
                        .iter()
                        .zip(&c.on.mig_starts)
                        .map(|(g, s)| json!({"gpu": gpu_index(*g), "profile": profile, "start": s}))
                        .collect();
                set(&mut v, "mig", mig);
            }
            v
        })
        .collect();
    serde_json::Value::Array(items)
}

fn where_text(fleet: &engine::core::fleet::Fleet, choices: &[Choice]) -> String {
    choices
        .iter()
        .map(|c| {
            let node = fleet.nodes.get(c.node);
            let gpus: Vec<String> =
                c.on.gpus
                    .iter()
                    .map(|g| {
                        node.and_then(|n| n.gpus.get(*g))
                            .map_or(*g as u32, |x| x.index)
                            .to_string()
                    })
                    .collect();
            format!(
                "{}[{}]",
                node.map_or("?", |n| n.name.as_str()),
                gpus.join(",")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Adds `key` to a JSON object (a no-op on anything else).
fn set(v: &mut serde_json::Value, key: &str, value: impl Into<serde_json::Value>) {
    if let Some(o) = v.as_object_mut() {
        o.insert(key.to_string(), value.into());
    }
}
