//! `gantry inventory`: what GPUs gantry sees, printed in the fleet format (JSON) with every
//! `count` and GPU shorthand expanded. `--source nvml` reads this machine through NVML;
//! `--source FILE` checks a fleet file; `--reading FILE` converts a recorded NVML reading
//! (what `--source nvml --raw` prints), which is how real-hardware fixtures are kept.

use super::{fail, Io, EXIT_OK};
use engine::inventory::nvml::{self, HostReading};
use engine::inventory::{catalog, fleet_file};
use files::read_text;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("from").required(true).args(["source", "reading"])))]
pub struct InventoryArgs {
    /// `nvml` for this machine's GPUs, or a fleet file (JSON or TOML) to check and expand.
    #[arg(long)]
    pub source: Option<String>,
    /// A recorded NVML reading (JSON, as `--source nvml --raw` prints) to convert.
    #[arg(long)]
    pub reading: Option<PathBuf>,
    /// With `--source nvml`: print the raw reading instead of the fleet.
    #[arg(long)]
    pub raw: bool,
    /// The node's name for NVML readings (default: $NODE_NAME, else the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    /// The pool to put an NVML-read node in.
    #[arg(long)]
    pub pool: Option<String>,
}

pub fn run(args: &InventoryArgs, io: &mut Io<'_>) -> u8 {
    let reading = match (&args.source, &args.reading) {
        (Some(source), None) if source == "nvml" => {
            match probe::NvmlProbe::start(probe::HostInfo::detect(args.node_name.as_deref()))
                .and_then(|p| p.read())
            {
                Ok(r) => r,
                Err(e) => return fail(io, format!("{e}\n  (on a machine without NVIDIA drivers, give a fleet file: --source fleet.toml)")),
            }
        }
        (Some(path), None) => {
            if args.raw {
                return fail(
                    io,
                    "--raw prints an NVML reading; use it with --source nvml",
                );
            }
            return match read_text(&PathBuf::from(path)).and_then(|(name, text)| {
                fleet_file::parse(&name, &text, catalog::stdlib_models()).map_err(|e| e.to_string())
            }) {
                Ok(fleet) => print(io, &fleet_file::to_json(&fleet)),
                Err(e) => fail(io, e),
            };
        }
        (_, Some(path)) => match read_reading(path) {
            Ok(r) => r,
            Err(e) => return fail(io, e),
        },
        (None, None) => return fail(io, "give --source nvml, --source FILE or --reading FILE"),
    };
    if args.raw {
        return print(io, &json!(reading));
    }
    let (fleet, notes) =
        nvml::fleet_from_reading(&reading, catalog::stdlib_models(), args.pool.as_deref());
    for n in &notes {
        let _ = writeln!(io.stderr, "note: {n}");
    }
    print(io, &fleet_file::to_json(&fleet))
}

/// A recorded NVML reading; errors name the file and the field.
pub fn read_reading(path: &std::path::Path) -> Result<HostReading, String> {
    let (name, text) = read_text(path)?;
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        format!(
            "{name}:{}: field `{}`: {} (an NVML reading, as `gantry inventory --source nvml --raw` prints)",
            e.inner().line(),
            e.path(),
            e.inner()
        )
    })
}

fn print(io: &mut Io<'_>, v: &serde_json::Value) -> u8 {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = writeln!(io.stdout, "{text}");
    EXIT_OK
}
