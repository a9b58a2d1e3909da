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

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Nodes,
    Pods,
}

impl Kind {
    fn list_kind(self) -> &'static str {
        match self {
            Kind::Nodes => "NodeList",
            Kind::Pods => "PodList",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Kind::Nodes => "Node",
            Kind::Pods => "Pod",
        }
    }
    fn plural(self) -> &'static str {
        match self {
            Kind::Nodes => "nodes",
            Kind::Pods => "pods",
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
}

#[derive(Debug)]
pub struct FakeApi {
    inner: Mutex<Inner>,
    events: tokio::sync::broadcast::Sender<Logged>,
    /// Bumped to end every open watch (an API server restart, a load balancer timeout).
    hangup: tokio::sync::watch::Sender<u64>,
    pub bookmark_every: Duration,
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
        (Kind::Pods, Some(ns)) => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
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
            bookmark_every: Duration::from_millis(200),
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

    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Serves on a loopback port; returns the base URL.
    pub async fn serve(self: &Arc<Self>) -> String {
        let app = Router::new()
            .route("/api/v1/nodes", get(list_nodes))
            .route("/api/v1/pods", get(list_pods))
            .route("/api/v1/nodes/{name}", get(get_node))
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
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
            &json!({"kind": kind.list_kind(), "apiVersion": "v1", "metadata": metadata, "items": items}),
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
                    () = &mut deadline => return,
                    _ = hangup.changed() => return,
                    _ = ticks.tick(), if bookmarks => {
                        let mark = json!({"type": "BOOKMARK", "object": {
                            "kind": kind.kind(), "apiVersion": "v1",
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

fn json_response(code: StatusCode, v: &Value) -> Response {
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
    list_or_watch(&api, Kind::Nodes, &q)
}

async fn list_pods(
    State(api): State<Arc<FakeApi>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&api, Kind::Pods, &q)
}

fn list_or_watch(api: &Arc<FakeApi>, kind: Kind, q: &HashMap<String, String>) -> Response {
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        api.watch(kind, q)
    } else {
        api.list(kind, q)
    }
}

async fn get_node(State(api): State<Arc<FakeApi>>, Path(name): Path<String>) -> Response {
    api.get(Kind::Nodes, &name)
}

async fn get_pod(
    State(api): State<Arc<FakeApi>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    api.get(Kind::Pods, &format!("{ns}/{name}"))
}
