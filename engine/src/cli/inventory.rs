//! `gantry inventory --source FILE`: reads a fleet file, checks it, and prints the fleet it
//! describes with every `count` and GPU shorthand expanded (the fleet format, as JSON).

use super::files::read_text;
use super::{fail, Io, EXIT_OK};
use crate::core::fleet::Fleet;
use crate::inventory::{catalog, fleet_file};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct InventoryArgs {
    /// A fleet file (JSON or TOML). Live NVML inventory is not built yet.
    #[arg(long)]
    pub source: PathBuf,
}

pub fn run(args: &InventoryArgs, io: &mut Io<'_>) -> u8 {
    let fleet = match read_text(&args.source).and_then(|(name, text)| {
        fleet_file::parse(&name, &text, catalog::stdlib_models()).map_err(|e| e.to_string())
    }) {
        Ok(f) => f,
        Err(e) => return fail(io, e),
    };
    let text = serde_json::to_string_pretty(&to_json(&fleet)).unwrap_or_default();
    let _ = writeln!(io.stdout, "{text}");
    EXIT_OK
}

pub fn to_json(fleet: &Fleet) -> serde_json::Value {
    let nodes: Vec<serde_json::Value> = fleet
        .nodes
        .iter()
        .map(|n| {
            let gpus: Vec<serde_json::Value> = n
                .gpus
                .iter()
                .map(|g| {
                    let mut v = json!({
                        "index": g.index, "model": g.model, "memory_mib": g.memory_mib, "healthy": g.healthy,
                    });
                    if let Some(u) = &g.uuid {
                        set(&mut v, "uuid", json!(u));
                    }
                    if let Some(i) = g.nvlink_island {
                        set(&mut v, "nvlink_island", json!(i));
                    }
                    if let Some(m) = &g.mig {
                        set(&mut v, "mig", m.iter().map(|i| json!({"profile": i.profile, "start": i.start})).collect::<Vec<_>>());
                    }
                    v
                })
                .collect();
            let mut v = json!({
                "name": n.name, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib, "gpus": gpus,
            });
            if let Some(p) = &n.pool {
                set(&mut v, "pool", json!(p));
            }
            if !n.labels.is_empty() {
                set(&mut v, "labels", json!(n.labels));
            }
            v
        })
        .collect();
    json!({ "nodes": nodes })
}

/// Adds `key` to a JSON object (a no-op on anything else).
fn set(v: &mut serde_json::Value, key: &str, value: impl Into<serde_json::Value>) {
    if let Some(o) = v.as_object_mut() {
        o.insert(key.to_string(), value.into());
    }
}
