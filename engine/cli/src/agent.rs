//! `gantry agent`: the node agent a DaemonSet runs on every GPU node. It reads the GPUs
//! through NVML (the same probe as `serve`'s inventory: models, memory, UUIDs, NVLink
//! islands, MIG mode and instances, health from XIDs and uncorrected ECC) and publishes
//! them on its own Node: GPU Feature Discovery's labels and gantry's annotations
//! (`engine::inventory::nvml::publish`), patching only what changed and at most once per
//! `--min-patch-interval`. Without NVML it stops with a message saying so.

use super::inventory::read_reading;
use super::{fail, Io, EXIT_OK};
use engine::inventory::nvml::{publish, HostReading};
use serde_json::json;
use serve::state::{AgentOptions, AgentReader};
use serve::LogFormat;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The node this agent runs on and publishes to (default: $NODE_NAME, which the
    /// DaemonSet sets from the downward API's spec.nodeName, else the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    /// A kubeconfig file (default: the in-cluster service account, else kube's lookup).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Use the pod's service account.
    #[arg(long)]
    pub in_cluster: bool,
    /// Seconds between NVML readings.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub interval: u64,
    /// At most one Node patch per this many seconds (a flapping GPU cannot flood the API
    /// server).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub min_patch_interval: u64,
    /// Publish a recorded NVML reading (`gantry inventory --source nvml --raw`), read
    /// again at every interval, instead of this machine's NVML.
    #[arg(long)]
    pub reading: Option<PathBuf>,
    /// Print the labels and annotations that would be published (JSON) and exit; no
    /// cluster is contacted.
    #[arg(long)]
    pub dry_run: bool,
    /// Publish once and exit.
    #[arg(long)]
    pub once: bool,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Where readings come from: a recorded file, or this machine's NVML.
fn reader(args: &AgentArgs, node: &str) -> Result<AgentReader, String> {
    if let Some(path) = args.reading.clone() {
        let node = node.to_string();
        return Ok(Box::new(move || {
            read_reading(&path).map(|mut r: HostReading| {
                r.node_name.clone_from(&node);
                r
            })
        }));
    }
    let probe = probe::NvmlProbe::start(probe::HostInfo::detect(Some(node))).map_err(|e| {
        format!(
            "NVML is not available on this machine ({e}). The agent runs on GPU nodes with the NVIDIA driver and container toolkit (examples/kubernetes/agent.yaml selects them); to try it without a GPU, give --reading FILE"
        )
    })?;
    Ok(Box::new(move || probe.read()))
}

pub fn run(args: &AgentArgs, io: &mut Io<'_>) -> u8 {
    let node = probe::HostInfo::detect(args.node_name.as_deref()).node_name;
    let mut read = match reader(args, &node) {
        Ok(r) => r,
        Err(e) => return fail(io, e),
    };
    if args.dry_run {
        return match read() {
            Ok(reading) => {
                let p = publish::published(&reading);
                let out = json!({"node": node, "labels": p.labels, "annotations": p.annotations});
                let _ = writeln!(
                    io.stdout,
                    "{}",
                    serde_json::to_string_pretty(&out).unwrap_or_default()
                );
                EXIT_OK
            }
            Err(e) => fail(io, e),
        };
    }
    let Some(cluster) = io.cluster.clone() else {
        return fail(io, "this build of gantry has no Kubernetes client");
    };
    serve::init_logs(args.log_format);
    let options = AgentOptions {
        kubeconfig: args.kubeconfig.clone(),
        in_cluster: args.in_cluster,
        node_name: node,
        interval: Duration::from_secs(args.interval),
        min_patch_interval: Duration::from_secs(args.min_patch_interval),
        once: args.once,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(io, format!("cannot start the runtime: {e}")),
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = cluster.agent(&options, read) => r,
            () = serve::shutdown() => Ok(()),
        }
    });
    match outcome {
        Ok(()) => EXIT_OK,
        Err(e) => fail(io, e),
    }
}
