//! [`ViewKeeper`]: what the queue view reads of each pod and node, kept from cycle to
//! cycle and brought up to date from the caches' journals ([`crate::store::Cache::since`]):
//! a pod event reads that pod again, and the fleet is shared (one `Arc`, which the
//! `Decider` then knows at a glance) until a node or what a foreign pod holds changes.
//! The view is the one [`super::view`] builds of the same caches, field for field; debug
//! builds check that at every kept cycle.
//!
//! What is kept, and what throws it away:
//! - each pod's part (whether it is believed, its group, what it takes out of its node,
//!   why it is not queued): read again when the pod changes; all of them when the seal's
//!   key, the teams' namespace bindings or any owner Job change (an owner's size
//!   regroups its pods);
//! - the nodes' part (fleet, closed, interrupted, the name index): when any node changes;
//! - the fleet less what foreign and CPU-only pods hold: when the nodes' part or any
//!   pod's take-out changes.
//!
//! The jobs are grouped from the parts every cycle (a job is a copy the cycle may change;
//! keeping each group's jobs too doubled the view's memory and saved less than it cost),
//! and what depends on the clock (runtimes outlived, predictions, nominations) is
//! applied afresh, as a fresh view does.

use super::{group, is_foreign, take_out, QueueView, Trust, Unqueued, FOREIGN};
use crate::owners::{Membership, Owners};
use crate::pods::PodSeen;
use crate::store::{Since, Stores};
use engine::core::alloc::Request;
use engine::core::fleet::Fleet;
use engine::inventory::jobs_file::Job;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The queue view, kept between cycles.
#[derive(Debug, Default)]
pub struct ViewKeeper {
    kept: Option<Kept>,
}

#[derive(Debug)]
struct Kept {
    /// The caches read (nodes, pods, owner Jobs): another's generations mean nothing.
    caches: (u64, u64, Option<u64>),
    /// The inputs every pod's part read.
    seal: Option<crate::seal::Seal>,
    bindings: Bindings,
    owners_generation: Option<u64>,
    pods_generation: u64,
    nodes_generation: u64,
    nodes: NodesPart,
    /// Each pod's part, by key: the pods' cache's keys, no more, no fewer.
    pods: BTreeMap<String, PodPart>,
    /// The fleet less what foreign and CPU-only pods hold.
    fleet: Arc<Fleet>,
}

/// The teams' namespace bindings as `Trust::doubt` reads them: (team, default, namespaces)
/// when some team binds namespaces, else empty (nothing is doubted for its namespace).
type Bindings = Vec<(String, bool, Option<Vec<String>>)>;

fn bindings(trust: &Trust<'_>) -> Bindings {
    trust.program.map_or_else(Vec::new, |p| {
        p.teams
            .iter()
            .map(|t| (t.name.clone(), t.default, t.namespaces.clone()))
            .collect()
    })
}

/// What the nodes alone make of the view.
#[derive(Debug, Default)]
struct NodesPart {
    /// Nodes with GPUs, before foreign pods are taken out.
    fleet: Fleet,
    index: BTreeMap<String, usize>,
    /// Closed by the nodes themselves (cordoned, not Ready), by name.
    closed: BTreeMap<String, String>,
    interrupted: BTreeMap<usize, String>,
}

impl NodesPart {
    fn of(stores: &Stores) -> NodesPart {
        let mut part = NodesPart::default();
        (part.fleet, part.closed) = stores.gpu_nodes();
        part.index = part
            .fleet
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        for n in stores.nodes.objects().values() {
            if let (Some(why), Some(&i)) = (&n.interrupted, part.index.get(&n.node.name)) {
                part.interrupted.insert(i, why.clone());
            }
        }
        part
    }
}

/// What one pod makes of the view, apart from the jobs of its group.
#[derive(Debug, Clone, Default)]
struct PodPart {
    /// Why it is not queued (`InvalidLabels`, `TeamNotBound`).
    unqueued: Vec<Unqueued>,
    /// The pod as the view believes it, where that is not the pod as it is.
    doubted: Option<Box<PodSeen>>,
    /// GPUs it holds on a node, by (team, tier) as it says.
    bound: Option<((String, String), f64)>,
    /// Held GPUs of a pod gantry did not admit: a running job no one is charged for.
    foreign: Option<Box<Job>>,
    /// What it holds that the fleet loses: (node, one member's request).
    take_out: Option<Box<(String, Request)>>,
    /// Bound with requests gantry cannot read: the node (its pod key is the part's).
    unreadable_on: Option<String>,
    /// Gated, its owner Job not seen yet.
    owner_unseen: bool,
    /// Its group, and the size it says the group has.
    group: Option<(String, u32)>,
}

impl PodPart {
    fn of(key: &str, stored: &PodSeen, trust: &Trust<'_>, owners: &Owners<'_>) -> PodPart {
        let mut part = PodPart::default();
        if let (true, false, Some(error)) = (stored.gated, stored.terminating, &stored.asks_error) {
            part.unqueued.push(Unqueued::of(
                stored,
                "InvalidLabels",
                format!(
                    "gantry cannot queue this pod: {error}; fix the label (a gated pod's labels may change) and it is queued"
                ),
            ));
        }
        if let Some((copy, stranger)) = trust.doubt(stored) {
            if stranger && stored.gated && stored.asks.is_some() && !stored.terminating {
                let team = stored.asks.as_deref().and_then(|j| j.team.as_deref());
                part.unqueued.push(Unqueued::of(
                    stored,
                    "TeamNotBound",
                    format!(
                        "gantry does not queue this pod: team `{}` is not bound to namespace `{}` in the policy; use a team the namespace admits",
                        team.unwrap_or("(the default team)"),
                        stored.namespace
                    ),
                ));
            }
            part.doubted = Some(Box::new(copy));
        }
        if stored.placeholder.is_some() {
            // Holds a node for the autoscaler, not for work: any job may take its room.
            return part;
        }
        if let Some((node, _)) = &stored.unreadable {
            part.unreadable_on = Some(node.clone());
        }
        let p = part.doubted.as_deref().unwrap_or(stored);
        if let (Some(job), true, false) = (p.holds.as_deref(), p.node.is_some(), is_foreign(p)) {
            if p.holds_gpus() {
                let team_tier = (
                    job.team.clone().unwrap_or_default(),
                    job.tier.clone().unwrap_or_default(),
                );
                part.bound = Some((team_tier, serve::queue::member_gpus(job)));
            }
        }
        let holds_gpus = p.holds_gpus();
        if let (Some(job), Some(node)) = (p.holds.as_deref(), p.node.as_deref()) {
            if holds_gpus && is_foreign(p) && job.shape.member.mig_profile.is_none() {
                // Busy, not broken: it holds its GPUs as a running job of no team and no
                // tier of the policy's, which is never a victim and charges no one.
                let mut held = job.clone();
                held.id = key.to_string();
                held.team = Some(FOREIGN.into());
                held.tier = Some(FOREIGN.into());
                part.foreign = Some(Box::new(held));
                return part;
            }
            if is_foreign(p) || !holds_gpus {
                part.take_out = Some(Box::new((node.to_string(), job.shape.member.clone())));
                return part;
            }
        }
        let ours = p.holds.is_some() || p.assigned.is_some() || (p.gated && p.asks.is_some());
        if !ours || is_foreign(p) {
            return part;
        }
        part.group = match owners.membership(p) {
            Membership::Single => Some((key.to_string(), 1)),
            Membership::Gang(name, size) => Some((name, size)),
            Membership::OwnerUnseen(_) if p.holds.is_none() && p.assigned.is_none() => {
                part.owner_unseen = true;
                None
            }
            // Placed already: it holds what it holds, as a job of its own.
            Membership::OwnerUnseen(_) => Some((key.to_string(), 1)),
        };
        part
    }
}

impl ViewKeeper {
    /// The decision cycle's view of `stores`, as [`super::view`] builds it, from what the
    /// last call kept and what changed since.
    pub fn view(&mut self, stores: &Stores, trust: Trust<'_>) -> Result<QueueView, String> {
        stores.synced()?;
        let (program, now, predictions) = (trust.program, trust.now, trust.predictions);
        // Namespaces are checked only when some team is bound to them: most policies
        // bind none, and this runs for every pod that changed.
        let trust = Trust {
            program: trust
                .program
                .filter(|p| p.teams.iter().any(|t| t.namespaces.is_some())),
            ..trust
        };
        let bindings = bindings(&trust);
        let owners_generation = stores.jobs.as_ref().map(|c| c.generation());
        let caches = (
            stores.nodes.id(),
            stores.pods.id(),
            stores.jobs.as_ref().map(|c| c.id()),
        );
        let kept = self.kept.take().filter(|k| {
            k.caches == caches
                && k.owners_generation == owners_generation
                && k.bindings == bindings
                && match (&k.seal, trust.seal) {
                    (Some(a), Some(b)) => a.same_key(b),
                    (None, None) => true,
                    _ => false,
                }
        });
        #[cfg(debug_assertions)]
        let was_kept = kept.is_some();
        let mut kept = match kept {
            Some(k) => k,
            None => Kept {
                caches,
                seal: trust.seal.cloned(),
                bindings,
                owners_generation,
                // Everything is made afresh: no generation is behind the journal's start.
                pods_generation: u64::MAX,
                nodes_generation: u64::MAX,
                nodes: NodesPart::default(),
                pods: BTreeMap::new(),
                fleet: Arc::default(),
            },
        };
        let nodes_changed = kept.nodes_generation != stores.nodes.generation();
        if nodes_changed {
            kept.nodes = NodesPart::of(stores);
            kept.nodes_generation = stores.nodes.generation();
        }
        let owners = Owners::new(stores.jobs.as_ref().map(|c| c.objects()));
        let take_outs_changed = kept.update_pods(stores, &trust, &owners);
        if nodes_changed || take_outs_changed {
            kept.fleet = Arc::new(kept.fleet_less_take_outs());
        }
        let out = kept.assemble(stores, trust.seal);
        self.kept = Some(kept);
        let out = super::after_grouping(out, stores, trust.seal, program, now, predictions)?;
        #[cfg(debug_assertions)]
        if was_kept {
            let trust = Trust { program, ..trust };
            let fresh = ViewKeeper::default().view(stores, trust)?;
            debug_assert_eq!(
                format!("{out:?}"),
                format!("{fresh:?}"),
                "the kept view differs from a fresh one"
            );
        }
        Ok(out)
    }
}

impl Kept {
    /// Brings every pod's part up to date; whether any take-out changed.
    fn update_pods(&mut self, stores: &Stores, trust: &Trust<'_>, owners: &Owners<'_>) -> bool {
        let pods = stores.pods.objects();
        let since = stores.pods.since(self.pods_generation);
        self.pods_generation = stores.pods.generation();
        let changed = match since {
            Since::Nothing => return false,
            Since::Keys(keys) => keys,
            Since::Everything => {
                // In key order: built whole, without a search per pod.
                self.pods = pods
                    .iter()
                    .map(|(k, p)| (k.clone(), PodPart::of(k, p, trust, owners)))
                    .collect();
                return true;
            }
        };
        let mut take_outs_changed = false;
        for key in changed {
            let new = pods.get(key).map(|p| PodPart::of(key, p, trust, owners));
            let old = self.pods.get(key.as_str());
            take_outs_changed |= old.and_then(|o| o.take_out.as_deref())
                != new.as_ref().and_then(|n| n.take_out.as_deref());
            match new {
                Some(new) => self.pods.insert(key.clone(), new),
                None => self.pods.remove(key.as_str()),
            };
        }
        debug_assert!(
            self.pods.keys().eq(pods.keys()),
            "a pod's part for every pod"
        );
        take_outs_changed
    }

    /// The nodes' fleet less what foreign and CPU-only pods hold, taken out in pod order.
    fn fleet_less_take_outs(&self) -> Fleet {
        let mut fleet = self.nodes.fleet.clone();
        for part in self.pods.values() {
            if let Some((node, member)) = part.take_out.as_deref() {
                if let Some(&i) = self.nodes.index.get(node) {
                    take_out(&mut fleet, i, member);
                }
            }
        }
        fleet
    }

    /// The view before what depends on the clock: every part, in the order a fresh build
    /// makes them.
    fn assemble(&self, stores: &Stores, seal: Option<&crate::seal::Seal>) -> QueueView {
        let mut out = QueueView {
            fleet: Arc::clone(&self.fleet),
            seal: seal.cloned(),
            refused_evictions: stores.refused_evictions.clone(),
            interrupted: self.nodes.interrupted.clone(),
            ..QueueView::default()
        };
        // At most a job per pod: sized once rather than moved at each doubling.
        out.jobs.reserve_exact(self.pods.len());
        // Closed by its node, else by the first pod (in key order) gantry cannot read.
        let mut closed = self.nodes.closed.clone();
        let gpu_node = |name: &str| {
            stores
                .nodes
                .objects()
                .get(name)
                .is_some_and(crate::nodes::NodeSeen::has_gpus)
        };
        let mut bound: BTreeMap<&(String, String), f64> = BTreeMap::new();
        let mut groups: BTreeMap<&str, (u32, Vec<super::Member<'_>>)> = BTreeMap::new();
        for ((key, part), stored) in self.pods.iter().zip(stores.pods.objects().values()) {
            out.unqueued.extend(part.unqueued.iter().cloned());
            if let Some((id, size)) = &part.group {
                let entry = groups.entry(id.as_str()).or_insert((*size, Vec::new()));
                entry.0 = entry.0.max(*size);
                entry
                    .1
                    .push((key, part.doubted.as_deref().unwrap_or(stored)));
            }
            if let Some(node) = part.unreadable_on.as_ref().filter(|n| gpu_node(n)) {
                closed
                    .entry(node.clone())
                    .or_insert_with(|| crate::store::unreadable_closes(key));
            }
            if let Some((team_tier, gpus)) = &part.bound {
                *bound.entry(team_tier).or_insert(0.0) += gpus;
            }
            if let Some(job) = &part.foreign {
                out.jobs.push(Job::clone(job));
            }
            if part.owner_unseen {
                out.owner_unseen.push(key.clone());
            }
        }
        for (name, why) in closed {
            if let Some(&i) = self.nodes.index.get(&name) {
                out.closed.insert(i, why);
            }
        }
        out.bound = bound.into_iter().map(|(k, v)| (k.clone(), v)).collect();
        for (id, (size, mut pods)) in groups {
            pods.sort_by(|(_, a), (_, b)| a.name.cmp(&b.name));
            group(&mut out, id, &pods, size);
        }
        out.jobs.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }
}
