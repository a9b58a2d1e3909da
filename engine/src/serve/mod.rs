//! `gantry serve`: the admission webhook, plan API, status, health and metrics over HTTP
//! (tokio + axum), with the policy directory watched (notify) and reloaded atomically — an
//! invalid or half-written policy never replaces the running one.

pub mod admission;
pub mod app;
pub mod extender;
pub mod metrics;
pub mod pod;
pub mod state;

use state::{AppState, FleetFile, Inventory, InventorySource};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Changes closer together than this are one reload (editors write in several steps).
const DEBOUNCE: Duration = Duration::from_millis(150);

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The policy directory to serve and watch.
    #[arg(long, default_value = "policies/onprem-dgx")]
    pub policy: PathBuf,
    /// `auto` (NVML when it loads, else the fleet file), `nvml`, or a fleet file.
    #[arg(long, default_value = "auto")]
    pub inventory: String,
    /// The fleet file `auto` falls back to; default: `fleet.toml` in the policy directory.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve plain HTTP on a non-loopback address (Kubernetes calls webhooks over HTTPS
    /// only; use this behind a TLS-terminating proxy).
    #[arg(long)]
    pub insecure_http: bool,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The inventory source `--inventory` names; `auto` says in the log why it fell back.
fn inventory_source(args: &ServeArgs) -> Result<Box<dyn InventorySource>, String> {
    let fallback = args
        .fleet
        .clone()
        .unwrap_or_else(|| args.policy.join("fleet.toml"));
    match args.inventory.as_str() {
        "nvml" => Err("NVML support is not built into this gantry yet; give a fleet file with --inventory FILE".into()),
        "auto" => {
            tracing::warn!(fleet = %fallback.display(), "NVML is not available in this build; using the fleet file");
            Ok(Box::new(FleetFile(fallback)))
        }
        path => Ok(Box::new(FleetFile(PathBuf::from(path)))),
    }
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Runs the service until SIGINT or SIGTERM. Returns the exit code.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    if !args.listen.ip().is_loopback() && !args.insecure_http {
        return Err(format!(
            "{} is not a loopback address: Kubernetes calls webhooks over HTTPS only. TLS termination is not built into gantry yet; put a TLS proxy in front and pass --insecure-http",
            args.listen
        ));
    }
    init_logs(args.log_format);
    let state = Arc::new(AppState::new(Box::new(now)));
    state
        .reload_policy(&args.policy)
        .map_err(|e| format!("policy `{}`: {e}", args.policy.display()))?;
    let source = inventory_source(args)?;
    let fleet = source.read()?;
    state.set_inventory(Inventory {
        fleet: Arc::new(fleet),
        source: source.name(),
        read_at: now(),
        error: None,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(state, args))
}

async fn serve(state: Arc<AppState>, args: &ServeArgs) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let _watcher = watch(state.clone(), &args.policy)?;
    if let (Some(p), Some(i)) = (state.policy(), state.inventory()) {
        eprintln!(
            "gantry serve: policy {} ({}, {} files), inventory {} ({} nodes, {} GPUs)\nlistening on http://{}\n  try: curl -s http://{}/v1/status",
            p.dir.display(),
            p.revision,
            p.files.len(),
            i.source,
            i.fleet.nodes.len(),
            i.fleet.gpu_count(),
            args.listen,
            args.listen
        );
    }
    axum::serve(listener, app::app(state))
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| format!("server error: {e}"))?;
    tracing::info!("shut down");
    Ok(())
}

async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}

/// Watches the policy directory; each burst of changes (debounced) reloads it. The
/// watcher lives as long as the returned value.
pub fn watch(state: Arc<AppState>, dir: &Path) -> Result<notify::RecommendedWatcher, String> {
    use notify::Watcher;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files (as a reload does) is not a change.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })
    .map_err(|e| format!("cannot watch `{}`: {e}", dir.display()))?;
    watcher
        .watch(dir, notify::RecursiveMode::Recursive)
        .map_err(|e| format!("cannot watch `{}`: {e}", dir.display()))?;
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Let the burst settle, then drop what queued up meanwhile.
            tokio::time::sleep(DEBOUNCE).await;
            while rx.try_recv().is_ok() {}
            match state.reload_policy(&dir) {
                Ok(revision) => tracing::info!(%revision, "policy reloaded"),
                Err(error) => {
                    tracing::error!(%error, "policy reload refused; the last good revision keeps serving")
                }
            }
        }
    });
    Ok(watcher)
}
