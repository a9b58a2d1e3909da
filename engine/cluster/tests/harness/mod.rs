//! What the queue tests share: a two-node cluster on the in-process API server, a
//! policy with two lending teams, gated pods as the webhook leaves them, and one cycle
//! run the way the controller runs it.

#![allow(
    dead_code,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code; each test binary uses part of it"
)]

use crate::apiserver;
pub use crate::apiserver::{FakeApi, Kind};
use cluster::controller;
use cluster::enact::Action;
use cluster::watch::Live;
use serde_json::{json, Value};
use serve::state::{AppState, ClusterOptions, LoadedPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const NOW: i64 = 1_795_510_000;

pub const POLICY: &str = r#"
use std.nodes.{dgx_h100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 2 }

placement { gang = all_or_nothing; gang_timeout = 15m; packing = best_fit }

cohort lab {
  team alpha { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }
  team beta { guaranteed = 8 gpu in training; burst = 16 gpu; lend = 8 gpu }
}
"#;

pub fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gantry.dev/pool": "training", "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "capacity": {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
}

/// A GPU pod as the mutating webhook leaves it with `--queue`: labelled, gated.
pub fn gated(name: &str, team: &str, tier: &str, gpus: u32, gang: Option<(&str, u32)>) -> Value {
    let mut labels = json!({"gantry.dev/team": team, "gantry.dev/tier": tier,
                            "gantry.dev/policy-revision": "r1"});
    if let Some((g, n)) = gang {
        labels["gantry.dev/gang"] = json!(g);
        labels["gantry.dev/gang-size"] = json!(n.to_string());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-24T08:40:00Z", "labels": labels},
        "spec": {"schedulingGates": [{"name": "gantry.dev/queue"}],
                 "containers": [{"name": "main", "image": "trainer", "resources": {
                     "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus.to_string()},
                     "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}})
}

pub struct Harness {
    pub api: Arc<FakeApi>,
    /// The engine's memory as the leader keeps it.
    pub memory: cluster::memory::Memory,
    pub live: Live,
    pub client: kube::Client,
    pub policy: Arc<LoadedPolicy>,
    pub _dir: tempfile::TempDir,
}

pub async fn harness() -> Harness {
    harness_with(POLICY, None).await
}

/// [`harness`] with another policy, driving capacity with placeholders of
/// `placeholder_image` when given.
pub async fn harness_with(policy: &str, placeholder_image: Option<String>) -> Harness {
    harness_of(policy, placeholder_image, &["n0", "n1"]).await
}

/// [`harness_with`] on the 8-GPU nodes `nodes`.
pub async fn harness_of(
    policy: &str,
    placeholder_image: Option<String>,
    nodes: &[&str],
) -> Harness {
    let api = FakeApi::new();
    for n in nodes {
        api.apply(Kind::Nodes, node(n));
    }
    let url = api.serve().await;
    let client = kube::Client::try_from(apiserver::config(&url)).unwrap();
    let options = ClusterOptions {
        kubeconfig: None,
        in_cluster: false,
        pool_label: "gantry.dev/pool".into(),
        sync_timeout: Duration::from_secs(10),
        watch_jobs: true,
        placeholder_image,
        provisioning_requests: false,
        predict_runtimes: false,
    };
    let live = Live::with_client(client.clone(), url, &options)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.gantry"), policy).unwrap();
    let state = AppState::new(Box::new(|| NOW));
    state.reload_policy(dir.path()).unwrap();
    let memory = cluster::memory::Memory::default();
    // As the controller does once it has read the key's Secret: the view promises sealed
    // room only.
    live.stores().seal = Some(cluster::seal::Seal::generate().unwrap());
    Harness {
        api,
        memory,
        live,
        client,
        policy: state.policy().unwrap(),
        _dir: dir,
    }
}

impl Harness {
    /// Waits until the view holds every pod at the API server's version.
    pub async fn settle(&self) {
        for _ in 0..200 {
            let want: BTreeMap<String, String> = self
                .api
                .pods()
                .into_iter()
                .map(|(k, p)| {
                    (
                        k,
                        p["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect();
            let have: BTreeMap<String, String> = self
                .live
                .stores()
                .pods
                .objects()
                .iter()
                .map(|(k, p)| (k.clone(), p.resource_version.clone()))
                .collect();
            let jobs: Vec<String> = self.api.objects(Kind::Jobs).into_keys().collect();
            let jobs_seen: Vec<String> = self
                .live
                .stores()
                .jobs
                .as_ref()
                .map(|c| c.objects().keys().cloned().collect())
                .unwrap_or_default();
            if want == have && jobs == jobs_seen {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the view did not catch up with the API server");
    }

    /// One cycle: decide on the settled view and carry the actions out as the controller
    /// does. Returns the actions and how many succeeded.
    pub async fn cycle(&self) -> (Vec<Action>, usize) {
        self.cycle_at(NOW).await
    }

    /// [`Harness::cycle`] with the clock at `now`.
    pub async fn cycle_at(&self, now: i64) -> (Vec<Action>, usize) {
        self.settle().await;
        let (_, _, actions) =
            controller::cycle_with(&self.live.stores(), &self.policy, &self.memory, now).unwrap();
        let (done, refused) = controller::enact(&self.client, &actions, now, || true).await;
        self.live.stores().remember_evictions(&done, &refused);
        self.settle().await;
        (actions, done.len())
    }

    /// Runs the queue's controller loop as the only replica (it takes the Lease at once),
    /// on [`POLICY`] and `clock`, a cycle at least every `every`. Keep the folder.
    #[allow(dead_code, reason = "not every test binary runs the loop")]
    pub fn lead(
        &self,
        clock: impl Fn() -> i64 + Send + Sync + 'static,
        every: Duration,
    ) -> (Arc<AppState>, tempfile::TempDir) {
        self.lead_with(POLICY, clock, every)
    }

    /// [`Harness::lead`] on `policy`.
    #[allow(dead_code, reason = "not every test binary runs the loop")]
    pub fn lead_with(
        &self,
        policy: &str,
        clock: impl Fn() -> i64 + Send + Sync + 'static,
        every: Duration,
    ) -> (Arc<AppState>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.gantry"), policy).unwrap();
        let state = Arc::new(AppState::new(Box::new(clock)));
        state.reload_policy(dir.path()).unwrap();
        let election = cluster::lease::Election {
            duration: Duration::from_secs(2),
            renew: Duration::from_millis(200),
            ..cluster::lease::Election::new("gantry-system", "replica-a")
        };
        self.live.start_queue_with(state.clone(), election, every);
        (state, dir)
    }

    /// A best_effort gang `name` of `size` gated members (`name-0`, `name-1`, ...).
    pub fn gang(&self, name: &str, team: &str, size: u32, gpus: u32) {
        for m in 0..size {
            let pod = gated(
                &format!("{name}-{m}"),
                team,
                "best_effort",
                gpus,
                Some((name, size)),
            );
            self.api.apply(Kind::Pods, pod);
        }
    }

    pub fn pod(&self, name: &str) -> Value {
        self.api
            .get_object(Kind::Pods, &format!("ml/{name}"))
            .unwrap()
    }
}

pub fn kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| {
            let v = serde_json::to_value(a).unwrap();
            format!("{} {}", v["action"].as_str().unwrap(), a.pod().name)
        })
        .collect()
}

pub fn waiting(pod: &Value) -> Option<(String, String)> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "gantry.dev/Queued")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or("").into(),
                c["message"].as_str().unwrap_or("").into(),
            )
        })
}

/// A property test's number of cases: `n`, times `GANTRY_SOAK` when set (as the
/// workspace tests' `tests::cases`; this crate's tests cannot depend on that crate).
pub fn cases(n: u32) -> u32 {
    let soak = std::env::var("GANTRY_SOAK")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    n.saturating_mul(soak.unwrap_or(1).max(1))
}
