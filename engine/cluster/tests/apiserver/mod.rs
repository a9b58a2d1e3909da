//! An in-process stand-in for kube-apiserver that speaks the real wire format for the
//! endpoints gantry's cluster view uses: `GET /api/v1/{nodes,pods}` as a paginated list
//! (`limit`, `continue`, the list's `resourceVersion`, items without `kind`) or, with
//! `watch=true`, a stream of newline-delimited watch events from a `resourceVersion`
//! (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` when `allowWatchBookmarks=true`, `ERROR`
//! with a 410 Status for a compacted version), `fieldSelector` on pods (`status.phase`,
//! `spec.nodeName`, with objects leaving the selector sent as `DELETED` as the real
//! server does), `timeoutSeconds`, a 403 Status for a kind the caller may not read, and
//! `GET` of one object. Objects are fed in as real-format JSON.

#![allow(dead_code, reason = "each test binary uses part of it")]

mod lifecycle;
pub mod rbac;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Router;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Nodes,
    Pods,
    /// `batch/v1` Jobs (the queue reads their parallelism for gang sizes).
    Jobs,
    /// cluster-autoscaler's `autoscaling.x-k8s.io/v1` ProvisioningRequests (served only
    /// after `serve_provisioning_requests`, as if its CRD were installed).
    ProvisioningRequests,
    PodTemplates,
    /// `scheduling.k8s.io/v1` PriorityClasses (read: each tier's is checked).
    PriorityClasses,
}

impl Kind {
    fn list_kind(self) -> &'static str {
        match self {
            Kind::Nodes => "NodeList",
            Kind::Pods => "PodList",
            Kind::Jobs => "JobList",
            Kind::ProvisioningRequests => "ProvisioningRequestList",
            Kind::PodTemplates => "PodTemplateList",
            Kind::PriorityClasses => "PriorityClassList",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Kind::Nodes => "Node",
            Kind::Pods => "Pod",
            Kind::Jobs => "Job",
            Kind::ProvisioningRequests => "ProvisioningRequest",
            Kind::PodTemplates => "PodTemplate",
            Kind::PriorityClasses => "PriorityClass",
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Kind::Nodes => "nodes",
            Kind::Pods => "pods",
            Kind::Jobs => "jobs",
            Kind::ProvisioningRequests => "provisioningrequests",
            Kind::PodTemplates => "podtemplates",
            Kind::PriorityClasses => "priorityclasses",
        }
    }
    fn api_version(self) -> &'static str {
        match self {
            Kind::Jobs => "batch/v1",
            Kind::ProvisioningRequests => "autoscaling.x-k8s.io/v1",
            Kind::PriorityClasses => "scheduling.k8s.io/v1",
            _ => "v1",
        }
    }
}

/// One change, as the event log keeps it: the object before and after.
#[derive(Debug, Clone)]
struct Logged {
    rv: u64,
    kind: Kind,
    before: Option<Value>,
    after: Option<Value>,
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    objects: BTreeMap<(Kind, String), Value>,
    log: Vec<Logged>,
    /// Watches from versions before this are answered 410 Gone.
    oldest: u64,
    /// (kind, resourceVersion) of every watch request, in order.
    watches: Vec<(Kind, String)>,
    /// (kind, limit, continue given) of every list request.
    lists: Vec<(Kind, Option<usize>, bool)>,
    forbidden: BTreeSet<Kind>,
    /// Events created, in order.
    events: Vec<Value>,
    /// Leases by `namespace/name`.
    leases: BTreeMap<String, Value>,
    /// ConfigMaps by `namespace/name`.
    config_maps: BTreeMap<String, Value>,
    /// Secrets by `namespace/name`.
    secrets: BTreeMap<String, Value>,
    /// Every write: (verb, path).
    writes: Vec<(String, String)>,
    /// Writes refused on purpose after this many more succeed (a crash mid-enactment).
    fail_after: Option<usize>,
    /// Every request: (method, path, whether `watch=true`).
    requests: Vec<(String, String, bool)>,
    /// The ProvisioningRequest CRD is installed.
    pub(crate) provisioning: bool,
    /// Faults for the next requests whose path contains a text, in order.
    faults: Vec<(String, Fault)>,
    /// Each pod whose last gate was removed, and when.
    releases: Vec<(String, std::time::Instant)>,
}

/// A broken answer for one request (see [`FakeApi::fault`]).
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status with a Status body (500, 409, 503, ...).
    Status(u16),
    /// No answer for this long (a client times out first).
    Hang(Duration),
    /// A 200 whose body is this many bytes of one line that is not JSON.
    Garbage(usize),
    /// A 500 whose body is this many bytes of plain text.
    LongError(usize),
}

#[derive(Debug)]
pub struct FakeApi {
    inner: Mutex<Inner>,
    events: tokio::sync::broadcast::Sender<Logged>,
    /// Bumped to end every open watch (an API server restart, a load balancer timeout).
    hangup: tokio::sync::watch::Sender<u64>,
    paused: tokio::sync::watch::Sender<bool>,
    pub bookmark_every: Duration,
    /// Held across a patch's read, merge and write: the API server applies concurrent
    /// patches to one object one after the other, never losing one.
    patching: Mutex<()>,
}

/// The cluster view's options for tests: Nodes and Pods only, the default pool label.
pub fn view_options(timeout: Duration) -> serve::state::ClusterOptions {
    serve::state::ClusterOptions {
        kubeconfig: None,
        in_cluster: false,
        pool_label: "gantry.dev/pool".into(),
        sync_timeout: timeout,
        watch_jobs: false,
        placeholder_image: None,
        provisioning_requests: false,
        predict_runtimes: false,
    }
}

/// A kubeconfig file's text pointing at `url`, with no credentials.
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\ncurrent-context: fake\nusers:\n- name: tester\n  user: {{}}\n"
    )
}

/// A client configuration for `url`, with kube's retries off as `Live::start` sets them.
pub fn config(url: &str) -> kube::Config {
    let mut c = kube::Config::new(url.parse().unwrap_or_default());
    c.default_retry = false;
    c
}

fn key_of(kind: Kind, obj: &Value) -> String {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match (
        kind,
        obj.pointer("/metadata/namespace").and_then(Value::as_str),
    ) {
        (_, Some(ns)) if kind != Kind::Nodes => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A field selector: `a=b`, `a==b`, `a!=b` terms joined by commas.
fn matches(selector: Option<&str>, obj: &Value) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    selector.split(',').all(|term| {
        let (field, want, equal) = if let Some((f, v)) = term.split_once("!=") {
            (f, v, false)
        } else if let Some((f, v)) = term.split_once("==") {
            (f, v, true)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, v, true)
        } else {
            return false;
        };
        let pointer = format!("/{}", field.trim().replace('.', "/"));
        let have = obj.pointer(&pointer).and_then(Value::as_str).unwrap_or("");
        (have == want.trim()) == equal
    })
}

impl FakeApi {
    pub fn new() -> Arc<FakeApi> {
        Arc::new(FakeApi {
            inner: Mutex::new(Inner {
                rv: 100,
                ..Inner::default()
            }),
            events: tokio::sync::broadcast::channel(100_000).0,
            hangup: tokio::sync::watch::channel(0).0,
            paused: tokio::sync::watch::channel(false).0,
            bookmark_every: Duration::from_millis(200),
            patching: Mutex::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates or replaces an object (a new resourceVersion, an ADDED or MODIFIED event).
    pub fn apply(&self, kind: Kind, mut obj: Value) -> u64 {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let key = (kind, key_of(kind, &obj));
        let before = inner.objects.insert(key, obj.clone());
        let logged = Logged {
            rv,
            kind,
            before,
            after: Some(obj),
        };
        inner.log.push(logged.clone());
        let _ = self.events.send(logged);
        rv
    }

    /// The object stored under `key`, if any.
    pub fn get_object(&self, kind: Kind, key: &str) -> Option<Value> {
        self.lock().objects.get(&(kind, key.to_string())).cloned()
    }

    /// Changes an object in place with `f`.
    pub fn update(&self, kind: Kind, key: &str, f: impl FnOnce(&mut Value)) {
        let _one_at_a_time = self.patching.lock().unwrap_or_else(|p| p.into_inner());
        let mut obj = self
            .lock()
            .objects
            .get(&(kind, key.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no {key}"));
        f(&mut obj);
        self.apply(kind, obj);
    }

    pub fn delete(&self, kind: Kind, key: &str) {
        let mut inner = self.lock();
        let Some(before) = inner.objects.remove(&(kind, key.to_string())) else {
            return;
        };
        inner.rv += 1;
        let rv = inner.rv;
        let logged = Logged {
            rv,
            kind,
            before: Some(before),
            after: None,
        };
        inner.log.push(logged.clone());
        let _ = self.events.send(logged);
    }

    /// Forgets the event log, as etcd compaction does: older versions get 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.log.clear();
        inner.oldest = inner.rv;
    }

    /// Holds new watch requests until [`FakeApi::resume`] (the server is down).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Ends every open watch.
    pub fn hang_up(&self) {
        self.hangup.send_modify(|n| *n += 1);
    }

    pub fn forbid(&self, kind: Kind) {
        self.lock().forbidden.insert(kind);
    }

    pub fn allow(&self, kind: Kind) {
        self.lock().forbidden.remove(&kind);
    }

    pub fn watches(&self) -> Vec<(Kind, String)> {
        self.lock().watches.clone()
    }

    pub fn lists(&self) -> Vec<(Kind, Option<usize>, bool)> {
        self.lock().lists.clone()
    }

    pub fn config_map(&self, key: &str) -> Option<Value> {
        self.lock().config_maps.get(key).cloned()
    }

    pub fn secret(&self, key: &str) -> Option<Value> {
        self.lock().secrets.get(key).cloned()
    }

    pub fn lease(&self, key: &str) -> Option<Value> {
        self.lock().leases.get(key).cloned()
    }

    pub fn events(&self) -> Vec<Value> {
        self.lock().events.clone()
    }

    /// Drops every Event, as their TTL does (an hour by default).
    #[allow(dead_code, reason = "not every test binary lets Events expire")]
    pub fn expire_events(&self) {
        self.lock().events.clear();
    }

    pub fn writes(&self) -> Vec<(String, String)> {
        self.lock().writes.clone()
    }

    /// How many writes so far.
    #[allow(dead_code, reason = "for the refill bench")]
    pub fn write_count(&self) -> usize {
        self.lock().writes.len()
    }

    /// Each pod released (its last gate removed) so far, and when.
    #[allow(dead_code, reason = "for the refill bench")]
    pub fn releases(&self) -> Vec<(String, std::time::Instant)> {
        self.lock().releases.clone()
    }

    /// Serves `autoscaling.x-k8s.io/v1` ProvisioningRequests from now on.
    pub fn serve_provisioning_requests(&self) {
        self.lock().provisioning = true;
    }

    pub(crate) fn provisioning_served(&self) -> bool {
        self.lock().provisioning
    }

    /// Every request served: (method, path, whether it was a watch).
    pub fn requests(&self) -> Vec<(String, String, bool)> {
        self.lock().requests.clone()
    }

    /// The next request whose URI (path and query) contains every `*`-separated part of
    /// `pattern` gets `fault` instead of its answer; faults queued for one pattern are
    /// used in order.
    pub fn fault(&self, pattern: &str, fault: Fault) {
        self.lock().faults.push((pattern.to_string(), fault));
    }

    /// Stores a ConfigMap as if it had been created (`namespace/name`).
    pub fn set_config_map(&self, key: &str, cm: Value) {
        let mut inner = self.lock();
        inner.rv += 1;
        inner.config_maps.insert(key.to_string(), cm);
    }

    /// Faults queued and not used yet.
    pub fn faults_left(&self) -> usize {
        self.lock().faults.len()
    }

    /// After `n` more writes succeed, refuse every write (409) until `heal`.
    pub fn fail_after(&self, n: usize) {
        self.lock().fail_after = Some(n);
    }

    pub fn heal(&self) {
        self.lock().fail_after = None;
    }

    /// Pods of the store, by key.
    pub fn pods(&self) -> BTreeMap<String, Value> {
        self.objects(Kind::Pods)
    }

    /// Objects of one kind, by key.
    pub fn objects(&self, kind: Kind) -> BTreeMap<String, Value> {
        self.lock()
            .objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, key), o)| (key.clone(), o.clone()))
            .collect()
    }

    /// What kube-scheduler would do for a released pod in these tests: bind every pod with
    /// no node, no gates and a required `metadata.name` to that node. Returns how many.
    pub fn bind_released(&self) -> usize {
        self.bind_released_at("2026-11-24T08:00:00Z")
    }

    /// [`FakeApi::bind_released`], bound at `at` (RFC 3339).
    pub fn bind_released_at(&self, at: &str) -> usize {
        let mut bound = 0;
        for (key, p) in self.pods() {
            let gated = p["spec"]["schedulingGates"]
                .as_array()
                .is_some_and(|g| !g.is_empty());
            if p["spec"]["nodeName"].is_string() || gated {
                continue;
            }
            let node = p
                .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(node) = node {
                self.update(Kind::Pods, &key, |p| {
                    p["spec"]["nodeName"] = json!(node);
                    // A binding sets PodScheduled and keeps the other conditions.
                    let mut conditions: Vec<Value> = p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|c| c["type"] != "PodScheduled")
                        .cloned()
                        .collect();
                    conditions.push(json!({"type": "PodScheduled", "status": "True",
                        "lastTransitionTime": at}));
                    p["status"] = json!({"phase": "Pending", "conditions": conditions});
                });
                bound += 1;
            }
        }
        bound
    }

    /// Deletes pods whose deletion has begun (no kubelet here to finish it).
    pub fn finish_deletions(&self) -> usize {
        let going: Vec<String> = self
            .pods()
            .into_iter()
            .filter(|(_, p)| p["metadata"]["deletionTimestamp"].is_string())
            .map(|(k, _)| k)
            .collect();
        for k in &going {
            self.delete(Kind::Pods, k);
        }
        going.len()
    }

    /// Counts a write; `Err` when writes are being refused.
    #[allow(
        clippy::result_large_err,
        reason = "test code; the error is the response"
    )]
    pub(crate) fn write(&self, verb: &str, path: String) -> Result<(), Response> {
        let mut inner = self.lock();
        match inner.fail_after {
            Some(0) => {
                // Not a status a client retries: the writer stops here, as if it died.
                return Err(json_response(
                    StatusCode::CONFLICT,
                    &status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again"),
                ));
            }
            Some(n) => inner.fail_after = Some(n - 1),
            None => {}
        }
        inner.writes.push((verb.to_string(), path));
        Ok(())
    }

    /// A JSON merge patch (or, for `status`, a strategic merge of `status.conditions` by
    /// type and a merge of `metadata`) with the API server's checks on gated pods: a uid in the patch is a
    /// precondition; a gate cannot be added; node affinity may change only while gated.
    fn patch_pod(&self, key: &str, patch: &Value, status_only: bool) -> Response {
        let _one_at_a_time = self.patching.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut pod) = self.get_object(Kind::Pods, key) else {
            return json_response(
                StatusCode::NOT_FOUND,
                &status(404, "NotFound", &format!("pods \"{key}\" not found")),
            );
        };
        if let Some(uid) = patch.pointer("/metadata/uid").and_then(Value::as_str) {
            if pod["metadata"]["uid"].as_str() != Some(uid) {
                return json_response(
                    StatusCode::CONFLICT,
                    &status(409, "Conflict", "Precondition failed: UID in precondition"),
                );
            }
        }
        let before = pod.clone();
        if status_only {
            let mut conditions = pod["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for c in patch
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match conditions.iter_mut().find(|x| x["type"] == c["type"]) {
                    Some(x) => json_patch::merge(x, c),
                    None => conditions.push(c.clone()),
                }
            }
            pod["status"]["conditions"] = Value::Array(conditions);
            // A pod's status endpoint takes metadata changes too, all but its owners
            // (kubernetes/kubernetes#92022); its spec it keeps.
            if let Some(meta) = patch.get("metadata") {
                let mut meta = meta.clone();
                if let Some(m) = meta.as_object_mut() {
                    m.remove("ownerReferences");
                }
                json_patch::merge(&mut pod["metadata"], &meta);
            }
        } else {
            json_patch::merge(&mut pod, patch);
        }
        let gates = |p: &Value| -> Vec<Value> {
            p["spec"]["schedulingGates"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let was_gated = !gates(&before).is_empty();
        if gates(&pod).iter().any(|g| !gates(&before).contains(g)) {
            return json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                &status(
                    422,
                    "Invalid",
                    "spec.schedulingGates: Forbidden: only deletion is allowed",
                ),
            );
        }
        if before["spec"]["affinity"] != pod["spec"]["affinity"] && !was_gated {
            return json_response(StatusCode::UNPROCESSABLE_ENTITY, &status(422, "Invalid", "spec: Forbidden: pod updates may not change fields other than ... (affinity only while gated)"));
        }
        if was_gated && gates(&pod).is_empty() {
            self.lock()
                .releases
                .push((key.to_string(), std::time::Instant::now()));
        }
        self.apply(Kind::Pods, pod.clone());
        json_response(
            StatusCode::OK,
            &self.get_object(Kind::Pods, key).unwrap_or(pod),
        )
    }

    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Serves on a loopback port; returns the base URL.
    pub async fn serve(self: &Arc<Self>) -> String {
        let app = Router::new()
            .route("/api/v1/nodes", get(list_nodes))
            .route("/api/v1/pods", get(list_pods))
            .route(
                "/api/v1/nodes/{name}",
                get(get_node).patch(lifecycle::patch_node),
            )
            .route("/api/v1/namespaces/{ns}/pods", post(lifecycle::create_pod))
            .route("/apis/batch/v1/jobs", get(list_jobs))
            .route(
                "/apis/autoscaling.x-k8s.io",
                get(lifecycle::provisioning_group),
            )
            .route(
                "/apis/autoscaling.x-k8s.io/v1/provisioningrequests",
                get(lifecycle::list_provisioning_requests),
            )
            .route(
                "/apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests",
                post(lifecycle::create_provisioning_request),
            )
            .route(
                "/apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests/{name}",
                axum::routing::delete(lifecycle::delete_provisioning_request),
            )
            .route(
                "/api/v1/namespaces/{ns}/podtemplates",
                post(lifecycle::create_pod_template),
            )
            .route(
                "/api/v1/namespaces/{ns}/podtemplates/{name}",
                axum::routing::delete(lifecycle::delete_pod_template),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(get_pod).patch(patch_pod).delete(lifecycle::delete_pod),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/status",
                patch(patch_pod_status),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/eviction",
                post(evict_pod),
            )
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .route(
                "/api/v1/namespaces/{ns}/events/{name}",
                get(get_event).patch(patch_event),
            )
            .route(
                "/apis/scheduling.k8s.io/v1/priorityclasses/{name}",
                get(get_priority_class),
            )
            .route("/api/v1/namespaces/{ns}/secrets", post(create_secret))
            .route("/api/v1/namespaces/{ns}/secrets/{name}", get(get_secret))
            .route(
                "/api/v1/namespaces/{ns}/configmaps/{name}",
                get(get_config_map).patch(apply_config_map),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(create_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(replace_lease),
            )
            .layer(axum::middleware::from_fn_with_state(self.clone(), record))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }

    fn list(&self, kind: Kind, q: &HashMap<String, String>) -> Response {
        let mut inner = self.lock();
        let limit = q
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0);
        let after = q.get("continue").cloned();
        inner.lists.push((kind, limit, after.is_some()));
        if inner.forbidden.contains(&kind) {
            return forbidden(kind, "list");
        }
        let selector = q.get("fieldSelector").map(String::as_str);
        let mut items: Vec<(&String, &Value)> = inner
            .objects
            .iter()
            .filter(|((k, _), o)| *k == kind && matches(selector, o))
            .map(|((_, key), o)| (key, o))
            .collect();
        if let Some(after) = &after {
            items.retain(|(key, _)| key.as_str() > after.as_str());
        }
        let remaining = limit.map_or(0, |l| items.len().saturating_sub(l));
        if let Some(l) = limit {
            items.truncate(l);
        }
        let mut metadata = json!({"resourceVersion": inner.rv.to_string()});
        if remaining > 0 {
            if let Some((last, _)) = items.last() {
                metadata["continue"] = Value::String((*last).clone());
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        let items: Vec<Value> = items
            .into_iter()
            .map(|(_, o)| {
                let mut o = o.clone();
                // The real server leaves kind and apiVersion out of list items.
                if let Some(m) = o.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        json_response(
            StatusCode::OK,
            &json!({"kind": kind.list_kind(), "apiVersion": kind.api_version(), "metadata": metadata, "items": items}),
        )
    }

    fn watch(self: &Arc<Self>, kind: Kind, q: &HashMap<String, String>) -> Response {
        let from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let selector = q.get("fieldSelector").cloned();
        let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(Duration::from_secs(290), Duration::from_secs);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
        let mut hangup = self.hangup.subscribe();
        let (backlog, mut live, gone, current) = {
            let mut inner = self.lock();
            inner
                .watches
                .push((kind, q.get("resourceVersion").cloned().unwrap_or_default()));
            if inner.forbidden.contains(&kind) {
                return forbidden(kind, "watch");
            }
            let live = self.events.subscribe();
            let gone = from < inner.oldest;
            let backlog: Vec<Logged> = inner
                .log
                .iter()
                .filter(|l| l.kind == kind && l.rv > from)
                .cloned()
                .collect();
            (backlog, live, gone, inner.rv)
        };
        let every = self.bookmark_every;
        tokio::spawn(async move {
            let send = |v: Value| {
                let tx = tx.clone();
                async move {
                    let mut line = serde_json::to_vec(&v).unwrap_or_default();
                    line.push(b'\n');
                    tx.send(Bytes::from(line)).await.is_ok()
                }
            };
            if gone {
                let message = format!("too old resource version: {from} ({current})");
                send(json!({"type": "ERROR", "object": status(410, "Expired", &message)})).await;
                return;
            }
            let mut last = from;
            // Every change up to `current` was in the backlog or is of another kind, so a
            // bookmark may say `current`; later ones come through `live`, in order.
            let mut seen = current.max(from);
            for l in backlog {
                last = l.rv;
                if let Some(e) = event(&l, selector.as_deref()) {
                    if !send(e).await {
                        return;
                    }
                }
            }
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                tokio::select! {
                    // A hang-up wins over events already queued, as a dropped connection does.
                    biased;
                    _ = hangup.changed() => return,
                    () = &mut deadline => return,
                    _ = ticks.tick(), if bookmarks => {
                        let mark = json!({"type": "BOOKMARK", "object": {
                            "kind": kind.kind(), "apiVersion": kind.api_version(),
                            "metadata": {"resourceVersion": seen.max(last).to_string()}}});
                        if !send(mark).await { return; }
                    }
                    got = live.recv() => match got {
                        Ok(l) if l.kind != kind => seen = seen.max(l.rv),
                        Ok(l) if l.rv > last => {
                            seen = seen.max(l.rv);
                            last = l.rv;
                            if let Some(e) = event(&l, selector.as_deref()) {
                                if !send(e).await { return; }
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    },
                }
            }
        });
        let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
        }));
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }

    fn get(&self, kind: Kind, key: &str) -> Response {
        let inner = self.lock();
        if inner.forbidden.contains(&kind) {
            return forbidden(kind, "get");
        }
        match inner.objects.get(&(kind, key.to_string())) {
            Some(o) => json_response(StatusCode::OK, o),
            None => json_response(
                StatusCode::NOT_FOUND,
                &status(
                    404,
                    "NotFound",
                    &format!("{} \"{key}\" not found", kind.plural()),
                ),
            ),
        }
    }
}

/// The watch event a watcher with `selector` sees for one change, if any.
fn event(l: &Logged, selector: Option<&str>) -> Option<Value> {
    let was = l.before.as_ref().filter(|o| matches(selector, o));
    let is = l.after.as_ref().filter(|o| matches(selector, o));
    let (kind, obj) = match (was, is) {
        (None, Some(o)) => ("ADDED", o.clone()),
        (Some(_), Some(o)) => ("MODIFIED", o.clone()),
        (Some(_), None) => ("DELETED", l.after.clone().or_else(|| l.before.clone())?),
        (None, None) => return None,
    };
    let mut obj = obj;
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(l.rv.to_string()));
    }
    Some(json!({"type": kind, "object": obj}))
}

pub(crate) fn json_response(code: StatusCode, v: &Value) -> Response {
    (code, [("content-type", "application/json")], v.to_string()).into_response()
}

fn forbidden(kind: Kind, verb: &str) -> Response {
    let message = format!(
        "{} is forbidden: User \"system:serviceaccount:gantry:gantry\" cannot {verb} resource \"{}\" in API group \"\" at the cluster scope",
        kind.plural(),
        kind.plural()
    );
    json_response(StatusCode::FORBIDDEN, &status(403, "Forbidden", &message))
}

async fn list_nodes(
    State(api): State<Arc<FakeApi>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&api, Kind::Nodes, &q).await
}

async fn list_pods(
    State(api): State<Arc<FakeApi>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&api, Kind::Pods, &q).await
}

/// Notes every request, for the RBAC coverage test.
async fn record(
    State(api): State<Arc<FakeApi>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let path = request.uri().path().to_string();
    let uri = request.uri().to_string();
    let fault = {
        let mut inner = api.lock();
        inner
            .requests
            .push((request.method().to_string(), path.clone(), watch));
        let at = inner
            .faults
            .iter()
            .position(|(p, _)| p.split('*').all(|part| uri.contains(part)));
        at.map(|i| inner.faults.remove(i).1)
    };
    match fault {
        None => next.run(request).await,
        Some(Fault::Status(code)) => {
            let status_code =
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            json_response(
                status_code,
                &status(code, "InternalError", "injected fault"),
            )
        }
        Some(Fault::Hang(d)) => {
            tokio::time::sleep(d).await;
            json_response(
                StatusCode::GATEWAY_TIMEOUT,
                &status(504, "Timeout", "injected hang"),
            )
        }
        Some(Fault::Garbage(n)) => axum::response::IntoResponse::into_response((
            StatusCode::OK,
            [("content-type", "application/json")],
            "x".repeat(n),
        )),
        Some(Fault::LongError(n)) => axum::response::IntoResponse::into_response((
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            "e".repeat(n),
        )),
    }
}

async fn list_jobs(
    State(api): State<Arc<FakeApi>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&api, Kind::Jobs, &q).await
}

pub(crate) async fn list_or_watch(
    api: &Arc<FakeApi>,
    kind: Kind,
    q: &HashMap<String, String>,
) -> Response {
    let mut paused = api.paused.subscribe();
    let _ = paused.wait_for(|p| !*p).await;
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        api.watch(kind, q)
    } else {
        api.list(kind, q)
    }
}

async fn patch_pod(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PATCH", format!("pods/{ns}/{name}")) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    api.patch_pod(&format!("{ns}/{name}"), &patch, false)
}

async fn patch_pod_status(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PATCH", format!("pods/{ns}/{name}/status")) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    api.patch_pod(&format!("{ns}/{name}"), &patch, true)
}

/// `policy/v1` Eviction: an unbound pod, or one with no grace, goes at once; a bound one
/// starts terminating (there is no kubelet to finish: see `finish_deletions`).
async fn evict_pod(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("POST", format!("pods/{ns}/{name}/eviction")) {
        return r;
    }
    let eviction: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if eviction["apiVersion"] != "policy/v1" || eviction["kind"] != "Eviction" {
        return json_response(
            StatusCode::BAD_REQUEST,
            &status(400, "BadRequest", "not a policy/v1 Eviction"),
        );
    }
    let key = format!("{ns}/{name}");
    let Some(pod) = api.get_object(Kind::Pods, &key) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("pods \"{name}\" not found")),
        );
    };
    if pod["metadata"]["labels"]["pdb"] == "block" {
        // As the API server words it: the budget is named only in the cause.
        let mut refused = status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        refused["details"] = json!({"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget trainers-pdb needs 1 healthy pods and has 1 currently"}]});
        return json_response(StatusCode::TOO_MANY_REQUESTS, &refused);
    }
    let grace = eviction
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(30);
    if grace == 0 || !pod["spec"]["nodeName"].is_string() {
        api.delete(Kind::Pods, &key);
    } else if !pod["metadata"]["deletionTimestamp"].is_string() {
        api.update(Kind::Pods, &key, |p| {
            p["metadata"]["deletionTimestamp"] = json!("2026-11-24T08:00:00Z");
            p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        });
    }
    json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

async fn create_event(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("POST", format!("events/{ns}")) {
        return r;
    }
    let mut event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if event["involvedObject"]["kind"].as_str().is_none() || event["reason"].as_str().is_none() {
        return json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            &status(422, "Invalid", "involvedObject and reason are required"),
        );
    }
    let mut inner = api.lock();
    let n = inner.events.len();
    if let Some(prefix) = event["metadata"]["generateName"]
        .as_str()
        .map(str::to_string)
    {
        event["metadata"]["name"] = json!(format!("{prefix}{n:05}"));
    }
    let name = event["metadata"]["name"].as_str().unwrap_or("").to_string();
    if find_event(&inner.events, &ns, &name).is_some() {
        return json_response(
            StatusCode::CONFLICT,
            &status(
                409,
                "AlreadyExists",
                &format!("events \"{name}\" already exists"),
            ),
        );
    }
    event["metadata"]["namespace"] = json!(ns);
    inner.events.push(event.clone());
    json_response(StatusCode::CREATED, &event)
}

fn find_event(events: &[Value], ns: &str, name: &str) -> Option<usize> {
    events
        .iter()
        .position(|e| e["metadata"]["namespace"] == ns && e["metadata"]["name"] == name)
}

fn event_not_found(name: &str) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &status(404, "NotFound", &format!("events \"{name}\" not found")),
    )
}

async fn get_event(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let inner = api.lock();
    match find_event(&inner.events, &ns, &name).and_then(|i| inner.events.get(i)) {
        Some(e) => json_response(StatusCode::OK, e),
        None => event_not_found(&name),
    }
}

/// A JSON merge patch of an Event (a series' count, time and message).
async fn patch_event(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PATCH", format!("events/{ns}/{name}")) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut inner = api.lock();
    let Some(i) = find_event(&inner.events, &ns, &name) else {
        return event_not_found(&name);
    };
    let event = &mut inner.events[i];
    json_patch::merge(event, &patch);
    json_response(StatusCode::OK, event)
}

async fn get_config_map(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.config_map(&format!("{ns}/{name}")) {
        Some(c) => json_response(StatusCode::OK, &c),
        None => json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("configmaps \"{name}\" not found")),
        ),
    }
}

async fn get_secret(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.secret(&format!("{ns}/{name}")) {
        Some(s) => json_response(StatusCode::OK, &s),
        None => json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", &format!("secrets \"{name}\" not found")),
        ),
    }
}

/// Creates a Secret; 409 AlreadyExists when one has its name, as the API server answers.
async fn create_secret(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let mut secret: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = secret["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Err(r) = api.write("POST", format!("secrets/{ns}/{name}")) {
        return r;
    }
    let mut inner = api.lock();
    let key = format!("{ns}/{name}");
    if inner.secrets.contains_key(&key) {
        return json_response(
            StatusCode::CONFLICT,
            &status(
                409,
                "AlreadyExists",
                &format!("secrets \"{name}\" already exists"),
            ),
        );
    }
    inner.rv += 1;
    secret["metadata"]["namespace"] = json!(ns);
    secret["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
    secret["metadata"]["uid"] = json!(format!("secret-uid-{}", inner.rv));
    inner.secrets.insert(key, secret.clone());
    json_response(StatusCode::CREATED, &secret)
}

/// Server-side apply (`application/apply-patch+yaml`, JSON being YAML): creates the
/// ConfigMap or sets the fields the patch names.
async fn apply_config_map(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PATCH", format!("configmaps/{ns}/{name}")) {
        return r;
    }
    let apply = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    if !apply || !q.contains_key("fieldManager") {
        return json_response(
            StatusCode::BAD_REQUEST,
            &status(
                400,
                "BadRequest",
                "expected server-side apply with a fieldManager",
            ),
        );
    }
    let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut inner = api.lock();
    let key = format!("{ns}/{name}");
    let mut cm = inner.config_maps.get(&key).cloned().unwrap_or_else(|| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}})
    });
    json_patch::merge(&mut cm, &patch);
    inner.rv += 1;
    cm["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
    inner.config_maps.insert(key, cm.clone());
    json_response(StatusCode::OK, &cm)
}

async fn get_lease(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.lease(&format!("{ns}/{name}")) {
        Some(l) => json_response(StatusCode::OK, &l),
        None => json_response(
            StatusCode::NOT_FOUND,
            &status(
                404,
                "NotFound",
                &format!("leases.coordination.k8s.io \"{name}\" not found"),
            ),
        ),
    }
}

/// Creates a Lease; 409 AlreadyExists when another candidate made it first.
async fn create_lease(
    State(api): State<Arc<FakeApi>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("POST", format!("leases/{ns}")) {
        return r;
    }
    let mut lease: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = lease["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut inner = api.lock();
    let key = format!("{ns}/{name}");
    if inner.leases.contains_key(&key) {
        return json_response(
            StatusCode::CONFLICT,
            &status(
                409,
                "AlreadyExists",
                &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            ),
        );
    }
    inner.rv += 1;
    lease["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
    lease["metadata"]["namespace"] = json!(ns);
    inner.leases.insert(key, lease.clone());
    json_response(StatusCode::CREATED, &lease)
}

/// Replaces a Lease only at the resourceVersion the writer read (409 Conflict otherwise).
async fn replace_lease(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Err(r) = api.write("PUT", format!("leases/{ns}/{name}")) {
        return r;
    }
    let mut lease: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut inner = api.lock();
    let key = format!("{ns}/{name}");
    let Some(current) = inner.leases.get(&key) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "lease not found"),
        );
    };
    if current["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] {
        return json_response(
            StatusCode::CONFLICT,
            &status(409, "Conflict", "Operation cannot be fulfilled on leases.coordination.k8s.io: the object has been modified"),
        );
    }
    inner.rv += 1;
    lease["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
    inner.leases.insert(key, lease.clone());
    json_response(StatusCode::OK, &lease)
}

async fn get_node(State(api): State<Arc<FakeApi>>, Path(name): Path<String>) -> Response {
    api.get(Kind::Nodes, &name)
}

async fn get_priority_class(State(api): State<Arc<FakeApi>>, Path(name): Path<String>) -> Response {
    api.get(Kind::PriorityClasses, &name)
}

async fn get_pod(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    api.get(Kind::Pods, &format!("{ns}/{name}"))
}
