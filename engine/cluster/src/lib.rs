//! Gantry's view of a Kubernetes cluster. kube-runtime watchers list and watch Nodes and
//! Pods; each object is converted once, when its event arrives, into what the engine reads
//! (`nodes`: GPUs, pool, topology, whether it takes new work; `pods`: what a bound pod
//! holds); `store` keeps those by name like a reflector's store; `watch::Live` is the
//! engine's `InventorySource` over them and tells the service when anything changed.
//!
//! Kubernetes API use (all in a 1.28 API server; k8s-openapi's `v1_33` types are the
//! oldest it ships and are read only for fields 1.28 has):
//!
//! | resource | API | verbs | how |
//! |---|---|---|---|
//! | nodes | `v1` | list, watch | paginated list (`limit=500`, `continue`), then watch from the list's `resourceVersion` with `allowWatchBookmarks=true`; a `410 Gone` re-lists |
//! | pods | `v1` | list, watch | the same, all namespaces, `fieldSelector=status.phase!=Succeeded,status.phase!=Failed` |
//!
//! No streaming lists (`sendInitialEvents`, alpha in 1.28) and no watch-list feature gate.

pub mod agent;
pub mod api_writes;
pub mod bounded;
pub mod capacity;
pub mod capacity_writes;
pub mod controller;
pub mod enact;
pub mod events;
pub mod lease;
pub mod memory;
pub mod nodes;
pub mod nomination;
pub mod owners;
pub mod pods;
pub mod predictions;
pub mod priority_classes;
pub mod provreq;
pub mod queue;
pub mod seal;
pub mod seal_secret;
pub mod store;
pub mod teller;
pub mod telling;
pub mod watch;

use serve::state::{
    AgentOptions, AgentReader, ClusterConnector, ClusterOptions, Connecting, InventorySource,
    Running,
};
use std::sync::Arc;

/// Starts [`watch::Live`] for `gantry serve`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connector;

impl ClusterConnector for Connector {
    fn connect<'a>(&'a self, options: &'a ClusterOptions) -> Connecting<'a> {
        Box::pin(async move {
            let live = watch::Live::start(options).await?;
            Ok(Arc::new(live) as Arc<dyn InventorySource>)
        })
    }

    fn agent<'a>(&'a self, options: &'a AgentOptions, read: AgentReader) -> Running<'a> {
        Box::pin(async move {
            let client = agent::client(options).await?;
            agent::run(client, options, read).await
        })
    }
}
