//! What the service holds: the policy being served (swapped whole on a good reload, kept
//! on a bad one), the last reload's outcome, the inventory and the metrics.

use super::metrics::Metrics;
use super::occupancy::Occupancy;
use engine::core::fleet::Fleet;
use engine::core::mig::MigTable;
use engine::inventory::jobs_file::Job;
use engine::inventory::nvml::{self, HostReading};
use engine::inventory::{catalog, fleet_file};
use lang::ir::Program;
use probe::NvmlProbe;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// A checked policy and where it came from.
#[derive(Debug)]
pub struct LoadedPolicy {
    pub program: Program,
    pub revision: String,
    pub files: Vec<String>,
    pub dir: PathBuf,
    pub loaded_at: i64,
    /// The commit of the directory's git repository, when it is in one.
    pub git_commit: Option<String>,
    pub mig: MigTable,
}

/// The policy files in `dir` as (name, text), unchecked, and their content hash.
/// A policy directory's files as (name, text) pairs and their content hash, or why they
/// could not be read.
pub type PolicyRead = Result<(Vec<(String, String)>, String), String>;

pub fn read_policy(dir: &Path) -> PolicyRead {
    let found = files::find_policies(&[dir.to_path_buf()]).map_err(|e| e.0)?;
    let chosen = files::one_policy(dir, found)?;
    let mut inputs = Vec::new();
    for f in &chosen.files {
        inputs.push(files::read_text(f)?);
    }
    let revision = files::content_hash(&inputs);
    Ok((inputs, revision))
}

/// Checks the policy in `dir`; the error is the rendered diagnostics (or why the files
/// could not be read).
pub fn load_policy(dir: &Path, now: i64) -> Result<LoadedPolicy, String> {
    let (inputs, revision) = read_policy(dir)?;
    check_policy(dir, inputs, revision, now)
}

fn check_policy(
    dir: &Path,
    inputs: Vec<(String, String)>,
    revision: String,
    now: i64,
) -> Result<LoadedPolicy, String> {
    let checked = lang::check(&inputs);
    let Some(program) = checked.program else {
        let rendered: String = checked
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.render(&checked.sources, false))
            .collect();
        return Err(format!(
            "the policy has errors, the last good one keeps serving:\n{rendered}"
        ));
    };
    let mig = MigTable::from_models(&catalog::merged(&program.gpu_models));
    Ok(LoadedPolicy {
        program,
        revision,
        files: inputs.into_iter().map(|(name, _)| name).collect(),
        dir: dir.to_path_buf(),
        loaded_at: now,
        git_commit: git_commit(dir),
        mig,
    })
}

fn git_commit(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What one read of an inventory source saw: the fleet, and notes on what was assumed or
/// could not be read (an NVML field refused, a GPU model gantry does not know).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub fleet: Fleet,
    pub notes: Vec<String>,
    /// What already runs on the fleet (bound pods of a cluster view), with node-level
    /// placements; empty for NVML and fleet files, which see no workload.
    pub running: Vec<Job>,
    /// Nodes that take nothing new, with why (cordoned, NotReady, a node-condition taint).
    pub closed: BTreeMap<String, String>,
    /// Assignments gantry's queue made and sealed, by pod uid: the node each pod's room is
    /// promised on. An assignment annotation not listed here is a pod author's, and the
    /// extender judges that pod like any other.
    pub assigned: BTreeMap<String, String>,
}

/// Where GPUs are seen: NVML on this machine, a fleet file, or a Kubernetes cluster.
pub trait InventorySource: Send + Sync {
    /// `nvml`, `file:PATH` or `kubernetes:SERVER`.
    fn name(&self) -> String;
    fn read(&self) -> Result<Seen, String>;
    /// For a source that knows when it changed (a cluster watch): a counter bumped on
    /// every change, so the service re-reads at once instead of at the next tick.
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// Starts running the queue over this source (`serve --queue`): only a cluster view
    /// can, since it needs the pods and a way to change them.
    fn start_queue(&self, _state: Arc<AppState>) -> Result<(), String> {
        Err(format!(
            "--queue needs a cluster view (--kubeconfig, --in-cluster or --inventory kubernetes), not {}",
            self.name()
        ))
    }
}

/// Starts a cluster view: the `cluster` crate's Kubernetes watches, kept out of this
/// crate so the engine builds and tests without the Kubernetes API types.
pub trait ClusterConnector: Send + Sync {
    /// Connects, lists nodes and pods, and returns the view once it holds a first
    /// complete list (or why it could not: no kubeconfig, refused by RBAC, timed out).
    fn connect<'a>(&'a self, options: &'a ClusterOptions) -> Connecting<'a>;
    /// Runs the node agent: publishes each reading on the Node `options` names.
    fn agent<'a>(&'a self, options: &'a AgentOptions, read: AgentReader) -> Running<'a> {
        let _ = (options, read);
        Box::pin(async { Err("this build of gantry has no Kubernetes client".to_string()) })
    }
}

/// The node agent's settings (`gantry agent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOptions {
    pub kubeconfig: Option<PathBuf>,
    pub in_cluster: bool,
    /// The Node it publishes to: its own.
    pub node_name: String,
    pub interval: std::time::Duration,
    pub min_patch_interval: std::time::Duration,
    /// Publish once and return.
    pub once: bool,
}

/// Where the agent's NVML readings come from.
pub type AgentReader =
    Box<dyn FnMut() -> Result<engine::inventory::nvml::HostReading, String> + Send>;

/// The node agent, running until it fails (or, with `once`, has published).
pub type Running<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// A cluster view on its way: resolves once the first lists are in.
pub type Connecting<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Arc<dyn InventorySource>, String>> + Send + 'a>,
>;

/// How to reach the cluster and read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// A kubeconfig file; `None` with `in_cluster` false means kube's own inference
    /// (`$KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    pub in_cluster: bool,
    /// The node label that names a node's pool.
    pub pool_label: String,
    /// How long to wait for the first complete list of nodes and pods.
    pub sync_timeout: std::time::Duration,
    /// Also watch `batch/v1` Jobs: the queue reads a Job's parallelism as its pods' gang
    /// size (`serve --queue`).
    pub watch_jobs: bool,
    /// With the queue: drive the cluster's autoscaler with placeholder pods of this image
    /// and node marks (`--scale-through placeholders`); `None` leaves capacity alone.
    pub placeholder_image: Option<String>,
    /// With placeholders: ask for scale-ups with cluster-autoscaler's ProvisioningRequest
    /// (atomic per request) instead of pending placeholder pods.
    pub provisioning_requests: bool,
    /// With the queue: plan jobs with runtimes predicted from their team's history
    /// instead of their limits (`--estimates predicted`).
    pub predict_runtimes: bool,
}

/// A fleet file as the inventory.
#[derive(Debug)]
pub struct FleetFile(pub PathBuf);

impl InventorySource for FleetFile {
    fn name(&self) -> String {
        format!("file:{}", self.0.display())
    }
    fn read(&self) -> Result<Seen, String> {
        let (name, text) = files::read_text(&self.0)?;
        let fleet =
            fleet_file::parse(&name, &text, catalog::stdlib_models()).map_err(|e| e.to_string())?;
        Ok(Seen {
            fleet,
            ..Seen::default()
        })
    }
}

/// Something that reads this host's GPUs: NVML, or a recorded reading in tests.
pub trait HostProbe: Send + Sync {
    fn read(&self) -> Result<HostReading, String>;
}

impl HostProbe for NvmlProbe {
    fn read(&self) -> Result<HostReading, String> {
        NvmlProbe::read(self)
    }
}

/// This host's GPUs, read live, as a one-node fleet.
pub struct NvmlInventory {
    pub probe: Box<dyn HostProbe>,
    pub pool: Option<String>,
}

impl std::fmt::Debug for NvmlInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlInventory")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl InventorySource for NvmlInventory {
    fn name(&self) -> String {
        "nvml".into()
    }
    fn read(&self) -> Result<Seen, String> {
        let reading = self.probe.read()?;
        let (fleet, notes) =
            nvml::fleet_from_reading(&reading, catalog::stdlib_models(), self.pool.as_deref());
        Ok(Seen {
            fleet,
            notes,
            ..Seen::default()
        })
    }
}

#[derive(Debug, Clone)]
pub struct Inventory {
    pub fleet: Arc<Fleet>,
    pub source: String,
    pub read_at: i64,
    /// The last read's error; the fleet is then the one from the last good read.
    pub error: Option<String>,
    pub notes: Vec<String>,
    /// Jobs running on the fleet (a cluster view's bound pods).
    pub running: Arc<Vec<Job>>,
    /// Nodes that take nothing new, with why.
    pub closed: Arc<BTreeMap<String, String>>,
    /// Sealed assignments by pod uid (see [`Seen::assigned`]).
    pub assigned: Arc<BTreeMap<String, String>>,
    /// Bumped whenever fleet, running jobs or closed nodes change: the key of the
    /// occupancy computed from them.
    pub generation: u64,
}

impl Inventory {
    pub fn gpus(&self) -> BTreeMap<(String, bool), u64> {
        let mut out = BTreeMap::new();
        for g in self.fleet.nodes.iter().flat_map(|n| &n.gpus) {
            *out.entry((g.model.clone(), g.healthy)).or_insert(0) += 1;
        }
        out
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadStatus {
    pub at: Option<i64>,
    pub ok: Option<bool>,
    pub error: Option<String>,
    /// The content hash of the files this reload read (none if they could not be read).
    pub revision: Option<String>,
}

pub type Clock = Box<dyn Fn() -> i64 + Send + Sync>;

pub struct AppState {
    pub policy: RwLock<Option<Arc<LoadedPolicy>>>,
    pub reload: Mutex<ReloadStatus>,
    pub inventory: RwLock<Option<Inventory>>,
    pub metrics: Metrics,
    pub clock: Clock,
    /// How long a request (its body included) may take before it is answered 408.
    pub request_deadline: std::time::Duration,
    /// One `/v1/plan` computation at a time, off the request workers (see `app::plan`).
    pub plan_slot: Arc<tokio::sync::Semaphore>,
    /// How long a `/v1/plan` computation may take before it is answered 503.
    pub plan_deadline: std::time::Duration,
    /// `/v1/status` with absolute paths and policy source excerpts (`--status-detail`).
    pub status_detail: bool,
    /// Gantry runs the queue: the webhook gates GPU pods and the controller places them.
    pub queue: bool,
    /// Whose admission requests may write gantry's keys, bind pods directly or create
    /// pods for others (`--controller-identity`, `--may-bind-directly`,
    /// `--workload-controller`).
    pub trust: super::trust::Trust,
    /// The queue controller's last cycle, for `/v1/queue` and the queue metrics.
    queue_report: RwLock<Option<Arc<super::queue::QueueReport>>>,
    /// The occupancy of the current inventory under the current policy, built on first
    /// use after either changes.
    occupancy: Mutex<Option<Arc<Occupancy>>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

impl AppState {
    pub fn new(clock: Clock) -> AppState {
        AppState {
            policy: RwLock::new(None),
            reload: Mutex::new(ReloadStatus::default()),
            inventory: RwLock::new(None),
            metrics: Metrics::default(),
            clock,
            request_deadline: super::app::REQUEST_DEADLINE,
            plan_slot: Arc::new(tokio::sync::Semaphore::new(1)),
            plan_deadline: super::app::PLAN_DEADLINE,
            status_detail: false,
            queue: false,
            trust: super::trust::Trust::default(),
            queue_report: RwLock::new(None),
            occupancy: Mutex::new(None),
        }
    }

    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    pub fn policy(&self) -> Option<Arc<LoadedPolicy>> {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn inventory(&self) -> Option<Inventory> {
        match self.inventory.read() {
            Ok(i) => i.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// What is free on `inventory` under `policy`: the cached occupancy when it was built
    /// for this inventory generation and policy revision, else a new one (built once;
    /// concurrent callers wait for it rather than building it again).
    pub fn occupancy(&self, policy: &LoadedPolicy, inventory: &Inventory) -> Arc<Occupancy> {
        let key = (inventory.generation, policy.revision.clone());
        let mut slot = match self.occupancy.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(o) = slot.as_ref().filter(|o| o.key == key) {
            return o.clone();
        }
        let built = Arc::new(Occupancy::build(
            key,
            &inventory.fleet,
            &inventory.running,
            &inventory.closed,
            &policy.mig,
        ));
        if !built.problems.is_empty() {
            tracing::warn!(
                problems = built.problems.len(),
                first = %built.problems.first().map(String::as_str).unwrap_or(""),
                "running pods that do not fit their node as gantry knows it; those nodes count as full"
            );
        }
        *slot = Some(built.clone());
        built
    }

    pub fn set_queue_report(&self, report: super::queue::QueueReport) {
        let report = Some(Arc::new(report));
        match self.queue_report.write() {
            Ok(mut slot) => *slot = report,
            Err(poisoned) => *poisoned.into_inner() = report,
        }
    }

    pub fn queue_report(&self) -> Option<Arc<super::queue::QueueReport>> {
        match self.queue_report.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_inventory(&self, inventory: Inventory) {
        match self.inventory.write() {
            Ok(mut slot) => *slot = Some(inventory),
            Err(poisoned) => *poisoned.into_inner() = Some(inventory),
        }
    }

    /// Reads `source` and makes what it saw the inventory. A failed read keeps the last
    /// good fleet and records the error (in status, log and metrics); before any good read
    /// there is no inventory and the service is not ready.
    pub fn refresh_inventory(&self, source: &dyn InventorySource) -> Result<(), String> {
        let now = self.now();
        let result = source.read();
        self.metrics.inventory_read(result.is_ok());
        let last = self.inventory();
        let seen = match (result, last.clone()) {
            (Ok(seen), _) => seen,
            (Err(e), Some(last)) => {
                let kept = Inventory {
                    error: Some(e.clone()),
                    ..last
                };
                self.set_inventory(kept);
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        // Unchanged parts keep the last read's allocation (pods change far more often
        // than nodes); any change starts a new generation.
        let same_fleet = last.as_ref().filter(|l| *l.fleet == seen.fleet);
        let same_running = last.as_ref().filter(|l| *l.running == seen.running);
        let same_closed = last.as_ref().filter(|l| *l.closed == seen.closed);
        let same_assigned = last.as_ref().filter(|l| *l.assigned == seen.assigned);
        let generation = last.as_ref().map_or(0, |l| l.generation);
        let unchanged = same_fleet.is_some() && same_running.is_some() && same_closed.is_some();
        if same_fleet.is_none() || last.as_ref().is_none_or(|l| l.notes != seen.notes) {
            for note in &seen.notes {
                tracing::warn!(%note, source = %source.name(), "inventory");
            }
        }
        let next = Inventory {
            fleet: same_fleet.map_or_else(|| Arc::new(seen.fleet), |l| l.fleet.clone()),
            source: source.name(),
            read_at: now,
            error: None,
            notes: seen.notes,
            running: same_running.map_or_else(|| Arc::new(seen.running), |l| l.running.clone()),
            closed: same_closed.map_or_else(|| Arc::new(seen.closed), |l| l.closed.clone()),
            assigned: same_assigned.map_or_else(|| Arc::new(seen.assigned), |l| l.assigned.clone()),
            generation: if unchanged {
                generation
            } else {
                generation + 1
            },
        };
        self.set_inventory(next);
        Ok(())
    }

    /// Loads the policy in `dir` and swaps it in if it checks; otherwise keeps the running
    /// one and records the error. Returns the outcome.
    pub fn reload_policy(&self, dir: &Path) -> Result<String, String> {
        self.reload_read(dir, read_policy(dir))
    }

    /// Whether `read` differs from the running policy and from the last refused attempt.
    pub fn is_new(&self, read: &PolicyRead) -> bool {
        let last = self.reload_status();
        let running = self.policy().map(|p| p.revision.clone());
        let unchanged = match read {
            Ok((_, hash)) => {
                running.as_ref() == Some(hash)
                    || (last.ok == Some(false) && last.revision.as_ref() == Some(hash))
            }
            Err(e) => last.ok == Some(false) && last.error.as_ref() == Some(e),
        };
        !unchanged
    }

    /// Checks and installs the policy `read` from `dir` (the last good one stays on error).
    pub fn reload_read(&self, dir: &Path, read: PolicyRead) -> Result<String, String> {
        let now = self.now();
        let tried = read.as_ref().ok().map(|(_, hash)| hash.clone());
        let result = read.and_then(|(inputs, revision)| check_policy(dir, inputs, revision, now));
        let status = ReloadStatus {
            at: Some(now),
            ok: Some(result.is_ok()),
            error: result.as_ref().err().cloned(),
            revision: tried,
        };
        match self.reload.lock() {
            Ok(mut r) => *r = status,
            Err(poisoned) => *poisoned.into_inner() = status,
        }
        self.metrics.reload(result.is_ok());
        let loaded = result?;
        let revision = loaded.revision.clone();
        let loaded = Some(Arc::new(loaded));
        match self.policy.write() {
            Ok(mut slot) => *slot = loaded,
            Err(poisoned) => *poisoned.into_inner() = loaded,
        }
        Ok(revision)
    }

    pub fn reload_status(&self) -> ReloadStatus {
        match self.reload.lock() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}
