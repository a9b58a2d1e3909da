//! The view's caches: every node and every unfinished pod, already converted, kept by name
//! and updated by watch events the way a reflector's store is (a relist replaces the
//! whole cache at once, so a reader never sees half of one). Full API objects are not
//! kept: 50,000 pods would hold gigabytes the engine never reads.

use crate::nodes::NodeSeen;
use crate::owners::OwnerJob;
use crate::pods::PodSeen;
use engine::core::fleet::Fleet;
use serve::state::Seen;
use std::collections::BTreeMap;

/// One kind's cache: objects by key, the relist in progress, and which keys changed
/// lately (the journal a reader that keeps what it derived asks: [`Cache::since`]).
#[derive(Debug)]
pub struct Cache<T> {
    /// Changed only through [`Cache::apply`], which journals every change.
    objects: BTreeMap<String, T>,
    relist: Option<BTreeMap<String, T>>,
    /// A first complete list has been applied.
    pub synced: bool,
    /// Counts the changes readers saw.
    generation: u64,
    /// The keys changed since generation `journal_from`, one per change, in order.
    journal: Vec<String>,
    journal_from: u64,
    /// Tells this cache from any other, whose generations count something else.
    id: u64,
}

/// Each cache's id: a reader kept for one cache must not read another's generations.
static NEXT_CACHE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache {
            objects: BTreeMap::new(),
            relist: None,
            synced: false,
            generation: 0,
            journal: Vec::new(),
            journal_from: 0,
            id: NEXT_CACHE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// What changed in a cache since a reader last looked ([`Cache::since`]).
#[derive(Debug, PartialEq)]
pub enum Since<'a> {
    Nothing,
    /// These keys (repeats possible), each added, replaced or deleted.
    Keys(&'a [String]),
    /// Too much to list (a relist, or more changes than the journal keeps).
    Everything,
}

/// Journal entries kept beyond one per object: past that, a reader behind rebuilds
/// whole, which costs no more than reading that many changes.
const JOURNAL_SLACK: usize = 1024;

/// A watch event, converted: the watcher's `Event` without the API type.
#[derive(Debug)]
pub enum Change<T> {
    /// A (re)list starts.
    Init,
    InitApply(String, T),
    /// The list is complete: it replaces the cache.
    InitDone,
    Apply(String, T),
    Delete(String),
}

impl<T> Cache<T> {
    /// Applies one change; returns whether what readers see changed.
    pub fn apply(&mut self, change: Change<T>) -> bool {
        match change {
            Change::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Change::InitApply(key, value) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, value);
                false
            }
            Change::InitDone => {
                self.objects = self.relist.take().unwrap_or_default();
                self.synced = true;
                self.generation += 1;
                self.journal.clear();
                self.journal_from = self.generation;
                true
            }
            Change::Apply(key, value) => {
                self.objects.insert(key.clone(), value);
                self.journaled(key);
                true
            }
            Change::Delete(key) => {
                let gone = self.objects.remove(&key).is_some();
                if gone {
                    self.journaled(key);
                }
                gone
            }
        }
    }

    fn journaled(&mut self, key: String) {
        self.generation += 1;
        if self.journal.len() >= self.objects.len() + JOURNAL_SLACK {
            // Readers this far behind rebuild whole.
            self.journal.clear();
            self.journal_from = self.generation;
            return;
        }
        self.journal.push(key);
    }

    /// Every object, by key.
    pub fn objects(&self) -> &BTreeMap<String, T> {
        &self.objects
    }

    /// This cache, as told from every other in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cache's generation: pass it to [`Cache::since`] later.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What changed since the cache was at `generation`.
    pub fn since(&self, generation: u64) -> Since<'_> {
        if generation == self.generation {
            return Since::Nothing;
        }
        match generation
            .checked_sub(self.journal_from)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.journal.get(i..))
        {
            Some(keys) if generation < self.generation => Since::Keys(keys),
            _ => Since::Everything,
        }
    }
}

/// Every kind's cache.
#[derive(Debug, Default)]
pub struct Stores {
    pub nodes: Cache<NodeSeen>,
    pub pods: Cache<PodSeen>,
    /// `batch/v1` Jobs, watched for the queue's gang sizes (`None`: not watched).
    pub jobs: Option<Cache<OwnerJob>>,
    /// cluster-autoscaler's ProvisioningRequests (`--scale-through provisioning-request`).
    pub provreqs: Option<Cache<crate::provreq::ProvReqSeen>>,
    /// The assignment seal's key, once the queue's leader has read or made it: only an
    /// assignment whose seal verifies promises its pod room.
    pub seal: Option<crate::seal::Seal>,
    /// Evictions the API server refused, by pod: its words (a PodDisruptionBudget's name),
    /// shown in the preemptor's reason until the eviction goes through.
    pub refused_evictions: std::collections::BTreeMap<String, String>,
    /// What is wrong with the tiers' PriorityClasses (`crate::priority_classes`).
    pub class_notes: Vec<String>,
}

impl Stores {
    /// Remembers what became of the evictions just tried: refused ones with why, and
    /// forgets those that went through or whose pods are gone.
    pub fn remember_evictions(
        &mut self,
        done: &[crate::enact::Action],
        refused: &[(crate::enact::Action, String)],
    ) {
        use crate::enact::Action;
        let key = |a: &Action| format!("{}/{}", a.pod().namespace, a.pod().name);
        for a in done.iter().filter(|a| matches!(a, Action::Evict { .. })) {
            self.refused_evictions.remove(&key(a));
        }
        for (a, why) in refused {
            if matches!(a, Action::Evict { .. }) {
                self.refused_evictions.insert(key(a), why.clone());
            }
        }
        let pods = self.pods.objects();
        self.refused_evictions.retain(|k, _| pods.contains_key(k));
    }
}

impl Stores {
    /// `Err` until every watched kind's cache holds a complete first list.
    pub fn synced(&self) -> Result<(), String> {
        let unsynced: Vec<&str> = [
            (!self.nodes.synced).then_some("nodes"),
            (!self.pods.synced).then_some("pods"),
            self.jobs
                .as_ref()
                .is_some_and(|j| !j.synced)
                .then_some("jobs"),
            self.provreqs
                .as_ref()
                .is_some_and(|j| !j.synced)
                .then_some("provisioningrequests"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if unsynced.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "waiting for the first complete list of {}",
                unsynced.join(" and ")
            ))
        }
    }
}

impl Stores {
    /// The nodes with GPUs as the fleet, in name order, and those closed by themselves
    /// (cordoned, not Ready, a node-condition taint), with why.
    pub fn gpu_nodes(&self) -> (Fleet, BTreeMap<String, String>) {
        let mut fleet = Fleet::default();
        let mut closed = BTreeMap::new();
        let nodes = self.nodes.objects();
        fleet
            .nodes
            .reserve_exact(nodes.values().filter(|n| n.has_gpus()).count());
        for n in nodes.values().filter(|n| n.has_gpus()) {
            fleet.nodes.push(n.node.clone());
            if let Some(why) = &n.closed {
                closed.insert(n.node.name.clone(), why.clone());
            }
        }
        (fleet, closed)
    }
}

/// Why a node is closed by a pod bound there whose requests gantry cannot read: the
/// scheduler counts it, gantry cannot, so the node takes nothing new.
pub fn unreadable_closes(pod_key: &str) -> String {
    format!("pod {pod_key} holds resources gantry cannot read")
}

/// How many problems are listed by name in the notes; the rest are counted.
const NOTES_SHOWN: usize = 10;

impl Stores {
    /// The fleet (nodes with GPUs, by name), what runs on it, closed nodes and notes.
    /// `Err` until every watched kind's cache holds a complete first list.
    pub fn seen(&self) -> Result<Seen, String> {
        self.synced()?;
        let mut seen = Seen::default();
        // A node without GPUs is not in the fleet, but what was assumed of it (a GPU
        // count past the cap, an unreadable quantity) is still said.
        for n in self.nodes.objects().values() {
            seen.notes.extend(n.notes.iter().cloned());
        }
        (seen.fleet, seen.closed) = self.gpu_nodes();
        let gpu_node = |name: &str| {
            self.nodes
                .objects()
                .get(name)
                .is_some_and(NodeSeen::has_gpus)
        };
        let mut unreadable = Vec::new();
        for (key, p) in self.pods.objects() {
            if p.placeholder.is_some() {
                // Kube-scheduler preempts it for any real pod: its room is free.
                continue;
            }
            if let Some(job) = p.holds.as_deref() {
                if job.placement.iter().all(|m| gpu_node(&m.node)) {
                    seen.running.push(job.clone());
                }
            } else if let (Some(node), Some(job)) =
                (p.sealed_node(self.seal.as_ref()), p.asks.as_deref())
            {
                // Assigned by the queue, not bound yet: its capacity is promised, so no
                // other pod may take it (the extender lets the pod itself through).
                if gpu_node(node) && !p.terminating {
                    seen.assigned.insert(p.uid.clone(), node.to_string());
                    let mut promised = job.clone();
                    promised.shape.members = 1;
                    promised.placement = vec![engine::inventory::jobs_file::PlacedMember {
                        node: node.to_string(),
                        gpus: Vec::new(),
                        gpu_milli: None,
                        mig_starts: Vec::new(),
                    }];
                    seen.running.push(promised);
                }
            }
            if let Some((node, error)) = &p.unreadable {
                if gpu_node(node) {
                    unreadable.push(format!("pod {key} on {node}: {error}"));
                    // The scheduler counts this pod; gantry cannot: the node takes
                    // nothing new.
                    seen.closed
                        .entry(node.clone())
                        .or_insert_with(|| unreadable_closes(key));
                }
            }
        }
        if !unreadable.is_empty() {
            let more = unreadable.len().saturating_sub(NOTES_SHOWN);
            seen.notes.extend(unreadable.into_iter().take(NOTES_SHOWN));
            if more > 0 {
                seen.notes
                    .push(format!("{more} more bound pods with unreadable requests"));
            }
        }
        seen.notes.extend(self.class_notes.iter().cloned());
        Ok(seen)
    }
}
