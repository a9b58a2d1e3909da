//! `gantry serve`: the admission webhook, scheduler extender, plan API, status, health and
//! metrics over HTTP or HTTPS (tokio, axum, hyper, rustls). One event loop handles a fixed
//! set of events — the policy directory changed (notify), an inventory tick (NVML or the
//! fleet file re-read; the certificate re-read if it changed), shutdown — so reloads never
//! race each other. An invalid or half-written policy never replaces the running one.

pub mod admission;
pub mod app;
pub mod decision_log;
pub mod extender;
pub mod json_errors;
pub mod listen;
pub mod metrics;
pub mod occupancy;
pub mod plan_worker;
pub mod pod;
pub mod quantity;
pub mod queue;
pub mod reload;
pub mod resources;
pub mod state;
pub mod tls;
pub mod trust;

use probe::{HostInfo, NvmlProbe};
use state::{
    AppState, ClusterConnector, ClusterOptions, FleetFile, InventorySource, NvmlInventory,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Changes closer together than this are one reload (editors write in several steps).
const DEBOUNCE: Duration = Duration::from_millis(150);
/// Cluster changes closer together than this are one inventory read.
const CLUSTER_DEBOUNCE: Duration = Duration::from_millis(100);

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
    /// `auto` (NVML when it loads, else the fleet file), `nvml`, `kubernetes` (the
    /// cluster's Nodes and Pods, watched; config from $KUBECONFIG, ~/.kube/config or the
    /// in-cluster service account), or a fleet file.
    #[arg(long, default_value = "auto")]
    pub inventory: String,
    /// Watch the cluster this kubeconfig points at (implies `--inventory kubernetes`).
    #[arg(long, conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch the cluster gantry runs in, with its pod's service account (implies
    /// `--inventory kubernetes`).
    #[arg(long)]
    pub in_cluster: bool,
    /// The node label naming a node's pool in the cluster view.
    #[arg(long, default_value = pod::POOL_LABEL)]
    pub pool_label: String,
    /// Run the queue: the webhook gates GPU pods (`gantry.dev/queue`) and this process
    /// places, preempts and explains them through the API server. Needs a cluster view.
    #[arg(long)]
    pub queue: bool,
    /// Gantry's own identity as the API server names it: only requests from it may set,
    /// change or remove gantry's keys on pods (the queue gate, assignments, preemption
    /// marks, the revision label). A pattern, `*` for any run of characters; repeat for
    /// several.
    #[arg(long = "controller-identity", default_value = trust::DEFAULT_CONTROLLER)]
    pub controller_identity: Vec<String>,
    /// Users or groups that may create GPU pods already bound to a node
    /// (`spec.nodeName`); everyone else's are denied. Repeat for several.
    #[arg(long = "may-bind-directly", default_value = trust::DEFAULT_DIRECT_BINDER)]
    pub may_bind_directly: Vec<String>,
    /// Users or groups that create pods for others (the Job and JobSet controllers):
    /// their pods' teams are bound by namespace alone. Repeat for several.
    #[arg(long = "workload-controller", default_value = trust::DEFAULT_WORKLOAD_CONTROLLER)]
    pub workload_controller: Vec<String>,
    /// With --queue, how the policy's scale-ups, warm pools and scale-downs reach the
    /// cluster: `placeholders` (low-priority pods sized to whole nodes that the cluster's
    /// autoscaler provisions for, and node annotations cluster-autoscaler and Karpenter
    /// honour), `provisioning-request` (the same, but scale-ups as cluster-autoscaler's
    /// atomic ProvisioningRequests; needs its CRD) or `none` (gantry leaves capacity to
    /// the autoscaler's own rules).
    #[arg(long, value_enum, default_value_t = ScaleThrough::Placeholders)]
    pub scale_through: ScaleThrough,
    /// With --queue, what decisions plan runtimes with: each pod's declared runtime
    /// (`gantry.dev/runtime`, else `activeDeadlineSeconds`), or for a pod with a deadline
    /// a prediction from its team's last finished jobs: the deadline times their mean
    /// ratio of actual runtime to deadline, as `gantry simulate --estimates predicted`.
    #[arg(long, default_value = "limits", value_parser = ["limits", "predicted"])]
    pub estimates: String,
    /// The image placeholder pods run (they never do anything).
    #[arg(long, default_value = "registry.k8s.io/pause:3.9")]
    pub placeholder_image: String,
    /// Seconds to wait for the first complete list of nodes and pods.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub sync_timeout: u64,
    /// The fleet file `auto` falls back to; default: `fleet.toml` in the policy directory.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    /// Seconds between inventory reads (NVML health, fleet file edits, certificate renewal).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub inventory_interval: u64,
    /// The node name for NVML inventory (default: $NODE_NAME, else the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    /// The pool NVML-read GPUs belong to.
    #[arg(long)]
    pub pool: Option<String>,
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// PEM certificate chain to serve HTTPS with (re-read when the file changes).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Show absolute paths and full policy errors (with source excerpts) in /v1/status;
    /// off by default, since anyone who can reach the port reads it.
    #[arg(long)]
    pub status_detail: bool,
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

/// How the queue drives the cluster's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleThrough {
    Placeholders,
    ProvisioningRequest,
    None,
}

impl ServeArgs {
    /// How to reach the cluster, when the inventory is the cluster view.
    pub fn cluster_options(&self) -> Option<ClusterOptions> {
        let wanted = self.kubeconfig.is_some() || self.in_cluster || self.inventory == "kubernetes";
        wanted.then(|| ClusterOptions {
            kubeconfig: self.kubeconfig.clone(),
            in_cluster: self.in_cluster,
            pool_label: self.pool_label.clone(),
            sync_timeout: Duration::from_secs(self.sync_timeout),
            watch_jobs: self.queue,
            placeholder_image: (self.queue && self.scale_through != ScaleThrough::None)
                .then(|| self.placeholder_image.clone()),
            provisioning_requests: self.queue
                && self.scale_through == ScaleThrough::ProvisioningRequest,
            predict_runtimes: self.queue && self.estimates == "predicted",
        })
    }
}

/// The inventory source: the cluster view when asked for (through `cluster`, which this
/// crate cannot build itself), else what `--inventory` names.
async fn source(
    args: &ServeArgs,
    cluster: Option<&dyn ClusterConnector>,
) -> Result<Arc<dyn InventorySource>, String> {
    let Some(options) = args.cluster_options() else {
        return inventory_source(args);
    };
    if !matches!(args.inventory.as_str(), "auto" | "kubernetes") {
        return Err(format!(
            "--inventory {} and a cluster view (--kubeconfig, --in-cluster) exclude each other",
            args.inventory
        ));
    }
    let Some(connector) = cluster else {
        return Err(
            "this build of gantry has no Kubernetes support; run the `gantry` binary".into(),
        );
    };
    connector.connect(&options).await
}

/// The inventory source `--inventory` names; `auto` says in the log why it fell back.
fn inventory_source(args: &ServeArgs) -> Result<Arc<dyn InventorySource>, String> {
    let fallback = args
        .fleet
        .clone()
        .unwrap_or_else(|| args.policy.join("fleet.toml"));
    let nvml = || {
        NvmlProbe::start(HostInfo::detect(args.node_name.as_deref())).map(|probe| {
            Arc::new(NvmlInventory {
                probe: Box::new(probe),
                pool: args.pool.clone(),
            }) as Arc<dyn InventorySource>
        })
    };
    match args.inventory.as_str() {
        "nvml" => nvml()
            .map_err(|e| format!("--inventory nvml: {e}; give a fleet file with --inventory FILE")),
        "auto" => match nvml() {
            Ok(source) => Ok(source),
            Err(error) => {
                tracing::info!(%error, fleet = %fallback.display(), "NVML is not available; using the fleet file");
                Ok(Arc::new(FleetFile(fallback)))
            }
        },
        path => Ok(Arc::new(FleetFile(PathBuf::from(path)))),
    }
}

/// Logs to standard error in `format` (the service and the node agent).
pub fn init_logs(format: LogFormat) {
    // kube's client logs a response body it cannot parse whole, at warn level, on every
    // retry (a broken 20 MiB list: hundreds of MB of log). Gantry logs those failures
    // itself, cut short (`cluster::bounded::brief`); kube's own lines stay at error.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=error"));
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

/// Runs the service until SIGINT or SIGTERM; `cluster` starts the cluster view when
/// the arguments ask for one.
pub fn run(args: &ServeArgs, cluster: Option<&dyn ClusterConnector>) -> Result<(), String> {
    if !args.listen.ip().is_loopback() && !args.insecure_http && args.tls_cert.is_none() {
        return Err(format!(
            "{} is not a loopback address: Kubernetes calls webhooks over HTTPS only. Give --tls-cert and --tls-key, or put a TLS proxy in front and pass --insecure-http",
            args.listen
        ));
    }
    if args.estimates == "predicted" && !args.queue {
        return Err(
            "--estimates predicted plans the queue's pods with predicted runtimes: it needs --queue"
                .into(),
        );
    }
    init_logs(args.log_format);
    let certificates = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(tls::Certificates::load(cert, key)?)),
        _ => None,
    };
    let tls_config = certificates.clone().map(tls::server_config).transpose()?;
    let mut state = AppState::new(Box::new(now));
    state.status_detail = args.status_detail;
    state.queue = args.queue;
    state.trust = trust::Trust {
        controllers: args.controller_identity.clone(),
        direct_binders: args.may_bind_directly.clone(),
        workload_controllers: args.workload_controller.clone(),
    };
    let state = Arc::new(state);
    state
        .reload_policy(&args.policy)
        .map_err(|e| format!("policy `{}`: {e}", args.policy.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let source = source(args, cluster).await?;
        state
            .refresh_inventory(source.as_ref())
            .map_err(|e| format!("inventory {}: {e}", source.name()))?;
        if args.queue {
            source.start_queue(state.clone())?;
        }
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let (policy_changed, changes) = tokio::sync::mpsc::unbounded_channel();
        let watch = reload::PolicyWatch::start(&args.policy, policy_changed)?;
        announce(&state, args, tls_config.is_some());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(listen::serve(
            listener,
            app::app(state.clone()),
            tls_config,
            listen::Deadlines::default(),
            async move {
                let mut stopped = stopped;
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        let events = Events {
            state: state.clone(),
            policy_dir: args.policy.clone(),
            source: Some(source),
            certificates,
            interval: Duration::from_secs(args.inventory_interval),
        };
        events.run(changes, Some(watch), shutdown()).await;
        let _ = stop.send(true);
        let _ = server.await;
        tracing::info!("shut down");
        Ok(())
    })
}

/// The start-up banner: three lines for a person, or one JSON log line with the same
/// facts under `--log-format json` (so the stream stays JSON).
fn announce(state: &AppState, args: &ServeArgs, https: bool) {
    let (Some(p), Some(i)) = (state.policy(), state.inventory()) else {
        return;
    };
    let scheme = if https { "https" } else { "http" };
    let insecure = if https { "k" } else { "" };
    if args.log_format == LogFormat::Json {
        tracing::info!(
            policy = %p.dir.display(),
            revision = %p.revision,
            files = p.files.len(),
            inventory = %i.source,
            nodes = i.fleet.nodes.len(),
            gpus = i.fleet.gpu_count(),
            listen = %format!("{scheme}://{}", args.listen),
            "serving"
        );
        return;
    }
    eprintln!(
        "gantry serve: policy {} ({}, {} files), inventory {} ({} nodes, {} GPUs)\nlistening on {scheme}://{}\n  try: curl -s{insecure} {scheme}://{}/v1/status",
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

/// Resolves on SIGINT or SIGTERM (the service and the node agent stop on either).
pub async fn shutdown() {
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

/// The events the service reacts to, one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    PolicyChanged,
    InventoryTick,
    /// The cluster view saw nodes or pods change.
    ClusterChanged,
    /// The policy directory was gone or replaced: look for it again.
    Rewatch,
    Shutdown,
}

/// What the event loop acts on.
pub struct Events {
    pub state: Arc<AppState>,
    pub policy_dir: PathBuf,
    /// `None`: the inventory stays as it is.
    pub source: Option<Arc<dyn InventorySource>>,
    pub certificates: Option<Arc<tls::Certificates>>,
    pub interval: Duration,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("policy_dir", &self.policy_dir)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Runs until `shutdown` resolves: a burst of file changes (debounced, then read until
    /// stable; see [`reload`]) reloads the policy; each tick re-hashes the policy files
    /// (reloading what the watcher missed) and re-reads the inventory and the
    /// certificate; a policy directory deleted and made again is watched again.
    pub async fn run(
        &self,
        mut changes: tokio::sync::mpsc::UnboundedReceiver<()>,
        mut watch: Option<reload::PolicyWatch>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is now; the inventory was just read
        let mut recheck = tokio::time::interval(reload::REWATCH_EVERY);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lost = false;
        let mut cluster = self.source.as_ref().and_then(|s| s.changes());
        loop {
            let event = tokio::select! {
                Some(()) = changes.recv() => Event::PolicyChanged,
                () = changed(&mut cluster) => Event::ClusterChanged,
                _ = ticks.tick() => Event::InventoryTick,
                _ = recheck.tick(), if lost => Event::Rewatch,
                () = &mut shutdown => Event::Shutdown,
            };
            match event {
                Event::PolicyChanged => {
                    // Let the burst settle, then drop what queued up meanwhile.
                    tokio::time::sleep(DEBOUNCE).await;
                    while changes.try_recv().is_ok() {}
                    if let Some(read) = reload::stable_read(&self.policy_dir, &mut changes).await {
                        self.install(read).await;
                    }
                }
                Event::InventoryTick => self.tick(&mut changes).await,
                Event::ClusterChanged => {
                    // A burst of watch events (a rollout, a node joining) is one read.
                    tokio::time::sleep(CLUSTER_DEBOUNCE).await;
                    self.refresh_inventory().await;
                }
                Event::Rewatch => {
                    if let Some(w) = watch.as_mut() {
                        w.rewatch();
                    }
                }
                Event::Shutdown => return,
            }
            lost = watch.as_ref().is_some_and(reload::PolicyWatch::lost);
        }
    }

    async fn install(&self, read: state::PolicyRead) {
        let (state, dir) = (self.state.clone(), self.policy_dir.clone());
        let result = tokio::task::spawn_blocking(move || state.reload_read(&dir, read)).await;
        match result {
            Ok(Ok(revision)) => tracing::info!(%revision, "policy reloaded"),
            Ok(Err(error)) => {
                tracing::error!(%error, "policy reload refused; the last good revision keeps serving");
            }
            Err(error) => tracing::error!(%error, "policy reload failed"),
        }
    }

    async fn tick(&self, changes: &mut tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (state, dir) = (self.state.clone(), self.policy_dir.clone());
        let new = tokio::task::spawn_blocking(move || state.is_new(&state::read_policy(&dir)))
            .await
            .unwrap_or(false);
        if new {
            if let Some(read) = reload::stable_read(&self.policy_dir, changes).await {
                if self.state.is_new(&read) {
                    tracing::info!("policy changed (found by the periodic check)");
                    self.install(read).await;
                }
            }
        }
        self.refresh_inventory().await;
        if let Some(certificates) = &self.certificates {
            match certificates.refresh() {
                Ok(false) => {}
                Ok(true) => {
                    self.state.metrics.tls_reload(true);
                    tracing::info!("TLS certificate reloaded");
                }
                Err(error) => {
                    self.state.metrics.tls_reload(false);
                    tracing::error!(%error, "TLS certificate changed but does not load; the current one keeps serving");
                }
            }
        }
    }
}

impl Events {
    async fn refresh_inventory(&self) {
        let Some(source) = &self.source else {
            return;
        };
        let (state, reader) = (self.state.clone(), source.clone());
        let result =
            tokio::task::spawn_blocking(move || state.refresh_inventory(reader.as_ref())).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(
                %error,
                source = %source.name(),
                "inventory read failed; the last good inventory stays in use"
            ),
            Err(error) => tracing::error!(%error, "inventory read failed"),
        }
    }
}

/// Resolves when the cluster view reports a change; never for a source without one
/// (or one whose watch ended).
async fn changed(cluster: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    match cluster {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *cluster = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Watches the policy directory and reloads it on change, with no inventory ticks: the
/// event loop with a fixed inventory, for tests and embedding. Runs until the runtime
/// stops.
pub fn watch(state: Arc<AppState>, dir: &Path) -> Result<(), String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = reload::PolicyWatch::start(dir, tx)?;
    let events = Events {
        state,
        policy_dir: dir.to_path_buf(),
        source: None,
        certificates: None,
        interval: Duration::from_secs(86_400),
    };
    tokio::spawn(async move { events.run(rx, Some(watch), std::future::pending()).await });
    Ok(())
}
