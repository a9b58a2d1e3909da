//! The live view: kube-runtime watchers over Nodes and Pods feeding the caches in
//! [`crate::store`], and the engine's `InventorySource` over them.

use crate::nodes;
use crate::owners;
use crate::pods;
use crate::store::{Cache, Change, Stores};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Config};
use serve::state::{AppState, ClusterOptions, InventorySource, Seen};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Pods that hold nothing for good are not listed at all.
pub const POD_FIELDS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// A watch that is failing, by kind: the last error, for notes and the startup message.
type Failing = Arc<Mutex<Vec<(&'static str, String)>>>;

/// Nodes and pods of one cluster, watched.
pub struct Live {
    server: String,
    client: Client,
    stores: Arc<Mutex<Stores>>,
    changes: tokio::sync::watch::Receiver<u64>,
    failing: Failing,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The queue controller's last cycle (`serve --queue`).
    pub last_cycle: Arc<Mutex<crate::controller::LastCycle>>,
    leading: Mutex<Option<tokio::sync::watch::Receiver<bool>>>,
    pool_label: String,
    /// Placeholders' image when the queue drives the cluster's autoscaler.
    placeholder_image: Option<String>,
    /// The ProvisioningRequest API version scale-ups use, if they do.
    provisioning: Option<String>,
    /// Plan with predicted runtimes (`--estimates predicted`).
    predict_runtimes: bool,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for t in lock(&self.tasks).iter() {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The client configuration: a kubeconfig file, the in-cluster service account, or
/// kube's inference.
pub async fn config(
    kubeconfig: Option<&std::path::Path>,
    in_cluster: bool,
) -> Result<Config, String> {
    if let Some(path) = kubeconfig {
        let file = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
        return Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()));
    }
    if in_cluster {
        return Config::incluster().map_err(|e| {
            format!("--in-cluster: {e} (outside a pod, pass --kubeconfig PATH instead)")
        });
    }
    Config::infer().await.map_err(|e| {
        format!("no cluster configuration found ({e}); pass --kubeconfig PATH or run in a pod with --in-cluster")
    })
}

impl Live {
    /// Connects with `options` and waits for the first complete lists.
    pub async fn start(options: &ClusterOptions) -> Result<Live, String> {
        let mut config = config(options.kubeconfig.as_deref(), options.in_cluster).await?;
        // kube's client would retry a 429 up to 15 times with growing waits: a
        // PodDisruptionBudget refusing an eviction would stall a whole cycle for minutes.
        // Watches back off on their own and the queue retries next cycle.
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        let client = crate::bounded::client(config)?;
        Live::with_client(client, server, options).await
    }

    /// Starts the watches on `client` and waits (up to `options.sync_timeout`) until both
    /// kinds are listed.
    pub async fn with_client(
        client: Client,
        server: String,
        options: &ClusterOptions,
    ) -> Result<Live, String> {
        let stores = Arc::new(Mutex::new(Stores {
            jobs: options.watch_jobs.then(Cache::default),
            ..Stores::default()
        }));
        let (tx, changes) = tokio::sync::watch::channel(0u64);
        let tx = Arc::new(tx);
        let failing: Failing = Arc::default();
        let pool_label = options.pool_label.clone();
        let nodes_task = tokio::spawn(follow(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            "nodes",
            move |n: &Node| {
                let seen = nodes::node(n, &pool_label)?;
                Some((seen.node.name.clone(), seen))
            },
            |n: &Node| n.metadata.name.clone().unwrap_or_default(),
            |s: &mut Stores| &mut s.nodes,
            Shared {
                stores: stores.clone(),
                tx: tx.clone(),
                failing: failing.clone(),
            },
        ));
        let pods_task = tokio::spawn(follow(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields(POD_FIELDS),
            "pods",
            |p: &Pod| Some((pods::key(p), pods::pod(p))),
            pods::key,
            |s: &mut Stores| &mut s.pods,
            Shared {
                stores: stores.clone(),
                tx: tx.clone(),
                failing: failing.clone(),
            },
        ));
        let mut tasks = vec![nodes_task, pods_task];
        let provisioning = match (options.provisioning_requests, &options.placeholder_image) {
            (true, Some(_)) => Some(crate::provreq::discover(&client).await?),
            _ => None,
        };
        if let Some(version) = &provisioning {
            lock(&stores).provreqs = Some(Cache::default());
            let resource = crate::provreq::resource(version);
            tasks.push(tokio::spawn(follow(
                Api::<DynamicObject>::all_with(client.clone(), &resource),
                watcher::Config::default(),
                "provisioningrequests",
                |o: &DynamicObject| Some((crate::provreq::key(o), crate::provreq::seen(o))),
                crate::provreq::key,
                |s: &mut Stores| s.provreqs.get_or_insert_with(Cache::default),
                Shared {
                    stores: stores.clone(),
                    tx: tx.clone(),
                    failing: failing.clone(),
                },
            )));
        }
        if options.watch_jobs {
            tasks.push(tokio::spawn(follow(
                Api::<Job>::all(client.clone()),
                watcher::Config::default(),
                "jobs",
                |j: &Job| Some((owners::key(j), owners::job(j))),
                owners::key,
                |s: &mut Stores| s.jobs.get_or_insert_with(Cache::default),
                Shared {
                    stores: stores.clone(),
                    tx,
                    failing: failing.clone(),
                },
            )));
        }
        let live = Live {
            server,
            client,
            stores,
            changes,
            failing,
            tasks: Mutex::new(tasks),
            last_cycle: Arc::default(),
            leading: Mutex::new(None),
            pool_label: options.pool_label.clone(),
            placeholder_image: options.placeholder_image.clone(),
            provisioning: provisioning.map(|v| format!("{}/{v}", crate::provreq::GROUP)),
            predict_runtimes: options.predict_runtimes,
        };
        live.synced(options.sync_timeout).await?;
        Ok(live)
    }

    async fn synced(&self, timeout: Duration) -> Result<(), String> {
        let mut changes = self.changes.clone();
        let wait = async {
            loop {
                if lock(&self.stores).seen().is_ok() {
                    return;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        if tokio::time::timeout(timeout, wait).await.is_ok() {
            return Ok(());
        }
        let waiting = lock(&self.stores).seen().err().unwrap_or_default();
        let errors: Vec<String> = lock(&self.failing)
            .iter()
            .map(|(kind, e)| format!("{kind}: {e}"))
            .collect();
        let hint = if errors
            .iter()
            .any(|e| e.contains("403") || e.contains("orbidden"))
        {
            "; gantry needs get, list and watch on nodes and pods (examples/kubernetes/rbac.yaml), and with --queue on jobs.batch too (rbac-queue.yaml)"
        } else {
            ""
        };
        Err(format!(
            "{}: still {waiting} after {} s{}{hint}",
            self.server,
            timeout.as_secs(),
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({})", errors.join("; "))
            }
        ))
    }
}

/// What the watch tasks share with the view.
struct Shared {
    stores: Arc<Mutex<Stores>>,
    tx: Arc<tokio::sync::watch::Sender<u64>>,
    failing: Failing,
}

/// Follows one kind until the task is aborted: list, watch, re-list after a 410, backing
/// off on errors. Objects are converted outside the lock; each change is applied to the
/// cache under it, and readers are told.
async fn follow<K, T>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    convert: impl Fn(&K) -> Option<(String, T)>,
    key: impl Fn(&K) -> String,
    cache: fn(&mut Stores) -> &mut Cache<T>,
    shared: Shared,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(Event::Init) => Change::Init,
            Ok(Event::InitApply(o)) => match convert(&o) {
                Some((k, v)) => Change::InitApply(k, v),
                None => continue,
            },
            Ok(Event::InitDone) => Change::InitDone,
            Ok(Event::Apply(o)) => match convert(&o) {
                Some((k, v)) => Change::Apply(k, v),
                None => continue,
            },
            Ok(Event::Delete(o)) => Change::Delete(key(&o)),
            Err(e) => {
                let text = crate::bounded::brief(&e);
                tracing::warn!(kind, error = %text, "cluster watch failed; retrying with backoff");
                let mut failing = lock(&shared.failing);
                failing.retain(|(k, _)| *k != kind);
                failing.push((kind, text));
                continue;
            }
        };
        lock(&shared.failing).retain(|(k, _)| *k != kind);
        let changed = cache(&mut lock(&shared.stores)).apply(change);
        if changed {
            shared.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl InventorySource for Live {
    fn name(&self) -> String {
        format!("kubernetes:{}", self.server)
    }

    /// The caches as a fleet and running jobs. While a watch is failing the last state
    /// seen is kept, with a note saying so.
    fn read(&self) -> Result<Seen, String> {
        let mut seen = lock(&self.stores).seen()?;
        for (kind, error) in lock(&self.failing).iter() {
            seen.notes.push(format!(
                "the {kind} watch is failing, the view may be stale: {error}"
            ));
        }
        Ok(seen)
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changes.clone())
    }

    fn start_queue(&self, state: Arc<AppState>) -> Result<(), String> {
        let election = crate::lease::Election::new(
            &crate::lease::own_namespace(),
            &crate::lease::own_identity(),
        );
        self.start_queue_with(state, election, crate::controller::SAVE_EVERY);
        Ok(())
    }
}

impl Live {
    /// Runs the Lease election and the queue controller, which enacts only while leading
    /// and writes the engine's memory at most every `save_every`.
    pub fn start_queue_with(
        &self,
        state: Arc<AppState>,
        election: crate::lease::Election,
        save_every: std::time::Duration,
    ) {
        let namespace = election.namespace.clone();
        let (leader, leading) = tokio::sync::watch::channel(false);
        let elect = tokio::spawn(crate::lease::run(self.client.clone(), election, leader));
        let control = tokio::spawn(crate::controller::run(crate::controller::Queue {
            client: self.client.clone(),
            stores: self.stores.clone(),
            changes: self.changes.clone(),
            state,
            last: self.last_cycle.clone(),
            leader: leading.clone(),
            capacity: self
                .placeholder_image
                .clone()
                .map(|image| crate::capacity::Settings {
                    namespace: namespace.clone(),
                    pool_label: self.pool_label.clone(),
                    image,
                    provisioning: self.provisioning.clone(),
                }),
            namespace,
            save_every,
            predict_runtimes: self.predict_runtimes,
        }));
        *lock(&self.leading) = Some(leading);
        lock(&self.tasks).extend([elect, control]);
    }

    /// Whether this replica leads the queue (`None`: the queue is not running here).
    pub fn leading(&self) -> Option<bool> {
        lock(&self.leading).as_ref().map(|l| *l.borrow())
    }

    /// The caches, for a cycle computed outside the controller (tests, `/v1/queue`).
    pub fn stores(&self) -> MutexGuard<'_, Stores> {
        lock(&self.stores)
    }
}
