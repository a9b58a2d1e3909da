//! The node agent's writes: each NVML reading becomes GPU Feature Discovery's labels and
//! gantry's annotations on the agent's own Node (`engine::inventory::nvml::publish`),
//! patched only when something differs and at most once per `min_patch_interval`.

use engine::inventory::nvml::publish::{self, Published};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Map, Value};
use serve::state::{AgentOptions, AgentReader};
use std::time::{Duration, Instant};

/// The field manager of the agent's patches.
pub const MANAGER: &str = "gantry-agent";

/// The JSON merge patch that brings `node` to `published`: labels and annotations that
/// differ, and the agent's own annotations that no longer apply removed. `None` when the
/// node already says it all.
pub fn patch_for(node: &Node, published: &Published) -> Option<Value> {
    let diff = |have: Option<&std::collections::BTreeMap<String, String>>,
                want: &std::collections::BTreeMap<String, String>,
                owned: &[&str]| {
        let mut out = Map::new();
        for (k, v) in want {
            if have.and_then(|h| h.get(k)) != Some(v) {
                out.insert(k.clone(), Value::String(v.clone()));
            }
        }
        for k in owned {
            if !want.contains_key(*k) && have.is_some_and(|h| h.contains_key(*k)) {
                out.insert((*k).to_string(), Value::Null);
            }
        }
        out
    };
    let labels = diff(node.metadata.labels.as_ref(), &published.labels, &[]);
    let annotations = diff(
        node.metadata.annotations.as_ref(),
        &published.annotations,
        publish::OWNED_ANNOTATIONS,
    );
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    Some(json!({ "metadata": metadata }))
}

/// What one interval did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Unchanged,
    Patched,
    /// A change came too soon after the last patch: published after a wait.
    TooSoon,
}

/// Publishes readings until it fails for good (or, with `once`, after one publish).
/// A failed reading or API call is logged and tried again at the next interval; with
/// `once` it is the error.
pub async fn run(
    client: Client,
    options: &AgentOptions,
    mut read: AgentReader,
) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client);
    let name = options.node_name.as_str();
    let mut last_patch: Option<Instant> = None;
    let mut ticks = tokio::time::interval(options.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let step = async {
            let reading = tokio::task::block_in_place(&mut read)?;
            let node = nodes.get(name).await.map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 404 => format!(
                    "node {name} does not exist: --node-name (or $NODE_NAME from the downward API's spec.nodeName) must name the node the agent runs on"
                ),
                kube::Error::Api(s) if s.code == 403 => format!(
                    "reading node {name} is forbidden ({}); the agent needs get and patch on nodes (examples/kubernetes/agent.yaml)",
                    s.message
                ),
                _ => format!("reading node {name}: {e}"),
            })?;
            let published = publish::published(&reading);
            let Some(patch) = patch_for(&node, &published) else {
                return Ok(Step::Unchanged);
            };
            if let Some(wait) = last_patch
                .map(|t| options.min_patch_interval.saturating_sub(t.elapsed()))
                .filter(|w| !w.is_zero())
            {
                // Too soon after the last patch: publish once the interval has passed,
                // from a fresh reading.
                tokio::time::sleep(wait).await;
                return Ok(Step::TooSoon);
            }
            let params = PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            };
            nodes
                .patch(name, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("patching node {name}: {}", crate::bounded::brief(&e)))?;
            tracing::info!(node = name, patch = %patch, "published the GPUs NVML sees");
            Ok(Step::Patched)
        };
        match step.await {
            Ok(Step::TooSoon) => ticks.reset_after(Duration::ZERO),
            Ok(done) => {
                if done == Step::Patched {
                    last_patch = Some(Instant::now());
                }
                if options.once {
                    return Ok(());
                }
            }
            Err(e) if options.once => return Err(e),
            Err(e) => {
                tracing::warn!(node = name, error = %e, "not published; tried again next interval")
            }
        }
    }
}

/// The client for the agent's options (its kubeconfig, or the service account).
pub async fn client(options: &AgentOptions) -> Result<Client, String> {
    let mut config =
        crate::watch::config(options.kubeconfig.as_deref(), options.in_cluster).await?;
    config.default_retry = false;
    crate::bounded::client(config)
}
