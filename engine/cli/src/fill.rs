//! `gantry simulate fill`: the FGD paper's packing experiment on openb CSVs, over one or
//! more seeds, with a summary table and optional JSON.

use super::{fail, Io, EXIT_OK};
use engine::core::packing::Strategy;
use engine::sim::fill::{self, FillConfig, FillResult};
use engine::sim::openb;
use files::{self, read_text as read};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct FillArgs {
    /// The openb node list, e.g. `openb_node_list_gpu_node.csv`.
    #[arg(long)]
    pub nodes: PathBuf,
    /// An openb pod list, e.g. `openb_pod_list_default.csv`.
    #[arg(long)]
    pub pods: PathBuf,
    /// Append pods sampled with replacement until the GPU request reaches this multiple of capacity.
    #[arg(long, default_value_t = 1.3)]
    pub inflate: f64,
    /// One seed, or a range `42..51` (inclusive).
    #[arg(long, alias = "seed", default_value = "42")]
    pub seeds: String,
    /// Packing strategy: least_fragmentation (default), fgd, best_fit, gpu_packing, spread, random.
    #[arg(long, conflicts_with = "policy")]
    pub packing: Option<String>,
    /// Take the packing strategy from this policy's `placement` block.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Write the metrics as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: &FillArgs, io: &mut Io<'_>) -> u8 {
    let Some(seeds) = parse_seeds(&args.seeds) else {
        return fail(
            io,
            format!(
                "`--seeds {}`: expected a number or a range like `42..51`",
                args.seeds
            ),
        );
    };
    if !(args.inflate.is_finite() && args.inflate > 0.0 && args.inflate <= 100.0) {
        return fail(
            io,
            format!(
                "`--inflate {}`: expected a factor above 0 and at most 100",
                args.inflate
            ),
        );
    }
    let strategy = match strategy(args, io) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let fleet = match read(&args.nodes)
        .and_then(|(name, text)| openb::parse_nodes(&name, &text).map_err(|e| e.to_string()))
    {
        Ok(f) => f,
        Err(e) => return fail(io, e),
    };
    let pods = match read(&args.pods)
        .and_then(|(name, text)| openb::parse_pods(&name, &text).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => return fail(io, e),
    };
    if !pods.iter().any(|p| p.request.num_gpu > 0) {
        return fail(
            io,
            format!("`{}` has no GPU pods; nothing to pack", args.pods.display()),
        );
    }
    let mut runs = Vec::new();
    for seed in seeds {
        let started = std::time::Instant::now();
        let result = fill::run(
            &fleet,
            &pods,
            FillConfig {
                inflate: args.inflate,
                seed,
                strategy,
            },
        );
        runs.push((result, started.elapsed().as_secs_f64()));
    }
    print_summary(&runs, strategy, io);
    if let Some(path) = &args.json {
        let json = to_json(&runs, strategy, args);
        let text = serde_json::to_string_pretty(&json).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            return fail(
                io,
                format!("cannot write `{}`: {}", path.display(), files::describe(&e)),
            );
        }
    }
    EXIT_OK
}

fn strategy(args: &FillArgs, io: &mut Io<'_>) -> Result<Strategy, u8> {
    if let Some(name) = &args.packing {
        return Strategy::from_name(name).ok_or_else(|| {
            fail(
                io,
                format!(
                    "unknown packing `{name}`; expected one of {}",
                    Strategy::NAMES.join(", ")
                ),
            )
        });
    }
    let Some(policy) = &args.policy else {
        return Ok(Strategy::LeastFragmentation);
    };
    let program = super::policy::load(policy, io)?;
    Ok(Strategy::from_policy(program.placement.packing))
}

fn parse_seeds(text: &str) -> Option<Vec<u64>> {
    match text.split_once("..") {
        Some((a, b)) => {
            let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            (a <= b && b - a < 10_000).then(|| (a..=b).collect())
        }
        None => text.trim().parse().ok().map(|s| vec![s]),
    }
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn at(r: &FillResult, bin: u32) -> f64 {
    r.allocation_ratio_pct
        .get(&bin)
        .copied()
        .unwrap_or(f64::NAN)
}

fn print_summary(runs: &[(FillResult, f64)], strategy: Strategy, io: &mut Io<'_>) {
    let _ = writeln!(io.stdout, "packing {strategy:?}");
    let _ = writeln!(
        io.stdout,
        "{:>6} {:>10} {:>10} {:>12} {:>8} {:>8} {:>8}",
        "seed", "alloc@100", "alloc@130", "fragratio@100", "placed", "failed", "wall_s"
    );
    for (r, wall) in runs {
        let _ = writeln!(
            io.stdout,
            "{:>6} {:>10.2} {:>10.2} {:>12.2} {:>8} {:>8} {:>8.2}",
            r.seed,
            at(r, 100),
            at(r, 130),
            r.frag_ratio_pct.get(&100).copied().unwrap_or(f64::NAN),
            r.placed,
            r.failed,
            wall
        );
    }
    if runs.len() > 1 {
        let (m100, s100) = mean_std(&runs.iter().map(|(r, _)| at(r, 100)).collect::<Vec<_>>());
        let (m130, s130) = mean_std(&runs.iter().map(|(r, _)| at(r, 130)).collect::<Vec<_>>());
        let _ = writeln!(
            io.stdout,
            "{:>6} {:>10} {:>10}",
            "",
            format!("{m100:.2}±{s100:.2}"),
            format!("{m130:.2}±{s130:.2}")
        );
    }
}

fn to_json(runs: &[(FillResult, f64)], strategy: Strategy, args: &FillArgs) -> serde_json::Value {
    let bins: Vec<u32> = runs
        .first()
        .map(|(r, _)| r.allocation_ratio_pct.keys().copied().collect())
        .unwrap_or_default();
    let summarise = |pick: &dyn Fn(&FillResult) -> &BTreeMap<u32, f64>| {
        let mut mean = serde_json::Map::new();
        let mut std = serde_json::Map::new();
        for b in &bins {
            let values: Vec<f64> = runs
                .iter()
                .filter_map(|(r, _)| pick(r).get(b).copied())
                .collect();
            let (m, s) = mean_std(&values);
            mean.insert(b.to_string(), serde_json::json!(m));
            std.insert(b.to_string(), serde_json::json!(s));
        }
        (
            serde_json::Value::Object(mean),
            serde_json::Value::Object(std),
        )
    };
    let (alloc, alloc_std) = summarise(&|r| &r.allocation_ratio_pct);
    let (frag_ratio, frag_ratio_std) = summarise(&|r| &r.frag_ratio_pct);
    let (frag, _) = summarise(&|r| &r.frag_pct);
    serde_json::json!({
        "trace": files::display_name(&args.pods),
        "nodes": files::display_name(&args.nodes),
        "packing": format!("{strategy:?}"),
        "inflate": args.inflate,
        "allocation_ratio_pct": alloc,
        "allocation_ratio_pct_std": alloc_std,
        "frag_ratio_pct": frag_ratio,
        "frag_ratio_pct_std": frag_ratio_std,
        "frag_pct": frag,
        "placed": runs.iter().map(|(r, _)| r.placed).sum::<usize>() as f64 / runs.len().max(1) as f64,
        "failed": runs.iter().map(|(r, _)| r.failed).sum::<usize>() as f64 / runs.len().max(1) as f64,
        "wall_s": runs.iter().map(|(_, w)| w).sum::<f64>(),
        "seeds": runs.iter().map(|(r, w)| serde_json::json!({
            "seed": r.seed,
            "allocation_ratio_pct": r.allocation_ratio_pct.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "frag_ratio_pct": r.frag_ratio_pct.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "placed": r.placed,
            "failed": r.failed,
            "wall_s": w,
        })).collect::<Vec<_>>(),
    })
}
