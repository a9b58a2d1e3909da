//! The placer: allocation state plus an index that groups nodes into classes of identical
//! static kind and free resources. Nodes in a class score the same for any request, so a
//! choice costs one evaluation per class (memoised until the class changes), not per node:
//! a fleet of 1,000 identical empty nodes is one class. Equal scores go to the node that
//! comes first in the fleet.

use super::alloc::{ClusterState, NodeFree, Request};
use super::classes::ClassIndex;
use super::fleet::{Fleet, Node};
use super::frag::Workload;
use super::gang::{JobShape, Unplaced};
use super::group_free::GroupFree;
use super::mig::{self, MigTable};
use super::packing::{self, Context, OnNode, Score, Strategy};
use super::rng::Rng;
use lang::ir::TopologyLevel;
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// Where one member of a job goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub node: usize,
    pub on: OnNode,
}

/// Nodes by label value at one topology level.
type Groups = Vec<(String, Vec<usize>)>;

#[derive(Debug)]
pub struct Placer<'a> {
    fleet: &'a Fleet,
    ctx: Context<'a>,
    state: ClusterState,
    /// Each node's current class, kept in step with `state`.
    classes: ClassIndex,
    kind_of: Vec<u32>,
    /// Nodes grouped by label value, per topology level (the fleet is static); built on
    /// first use, as most cycles need none or one level.
    groups: BTreeMap<TopologyLevel, std::cell::OnceCell<Groups>>,
    /// Free resources of the empty fleet, for telling "never fits" from "not now" (set
    /// when the placer's state is first built).
    empty: std::cell::OnceCell<ClusterState>,
    mig_table: &'a MigTable,
    /// Why a job shape can never fit this fleet (`None`: it can), memoised per shape.
    pub(crate) verdicts: HashMap<JobShape, Option<Unplaced>>,
    /// Trial placements whose failure nobody reads: a job that does not fit now is not
    /// explained (what can never fit still is, memoised).
    pub quiet: bool,
    /// The caller works out the freest group's room itself (from an index it keeps): a
    /// job that must share one topology group and does not fit now gets an empty reason,
    /// which the caller completes with [`super::gang::group_short`].
    pub group_room_elsewhere: bool,
    /// Distinct requests seen, numbered, so class memos are indexed, not hashed.
    request_ids: HashMap<Request, usize>,
    /// Each node's pool as a number, and the numbers by pool name: a pool-restricted job
    /// checks nodes by number, not by comparing names.
    pool_of: std::sync::Arc<[Option<u32>]>,
    pool_ids: HashMap<String, u32>,
    /// Whether some node is in no pool.
    outside_pools: bool,
    /// Free GPUs per topology group, for the levels a gang has asked about, kept in step
    /// with the state: a bound that lets a gang pass over groups that cannot hold it
    /// without visiting their nodes.
    group_free: BTreeMap<TopologyLevel, GroupFree>,
    rng: Rng,
    /// Set on a placer made to be kept between cycles ([`Placer::resume`]).
    kept: Option<Kept>,
}

/// What a placer keeps between decision cycles over one fleet: the fleet's static indexes
/// and the allocation state holding the running jobs, with the classes. A cycle takes it
/// ([`Placer::resume`]), brings the running jobs up to date node by node
/// ([`Placer::take_running`]) and gives it back rewound to that point
/// ([`Placer::into_kept`]), so a cycle that differs from the last by a few jobs does not
/// rebuild the index of every node.
#[derive(Debug)]
pub struct PlacerState {
    state: ClusterState,
    classes: ClassIndex,
    kind_of: Vec<u32>,
    groups: BTreeMap<TopologyLevel, std::cell::OnceCell<Groups>>,
    empty: std::cell::OnceCell<ClusterState>,
    pool_of: std::sync::Arc<[Option<u32>]>,
    pool_ids: HashMap<String, u32>,
    /// Whether some node is in no pool.
    outside_pools: bool,
    /// Kept in step like the classes: which levels are tracked changes no choice and no
    /// message (the bound only skips groups that cannot hold a gang).
    group_free: BTreeMap<TopologyLevel, GroupFree>,
    held: Vec<HeldNode>,
    scratch: Scratch,
}

/// Names a running member across cycles: its job state's revision (`JobState::revision`:
/// one revision is one job and placement) and which member it is.
pub type MemberTag = (u64, u32);

/// One node's running members as a kept placer last took them, in snapshot order. The
/// tags lie apart from the members: each cycle matches every member's tag, and a member
/// is read only when its tag does not match.
#[derive(Debug, Default)]
struct HeldNode {
    tags: Vec<Option<MemberTag>>,
    members: Vec<(Request, OnNode)>,
}

/// A running member as [`Placer::take_running`] takes it: its tag, request and place.
pub type RunningMember<'r> = (Option<MemberTag>, &'r Request, &'r Choice);

/// How a node's running members compare with the last cycle's while they are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// None of this cycle's members is on it (yet).
    Unlisted,
    /// Every member so far agrees with the last cycle's, in order.
    Listed,
    /// One did not: the node is rebuilt.
    Changed,
}

/// Per-node lists [`Placer::take_running`] fills each cycle, kept for their room.
#[derive(Debug, Default)]
struct Scratch {
    matched: Vec<u32>,
    mark: Vec<Mark>,
    /// The journal's per-node flags, given back by [`Placer::into_kept`].
    seen: Vec<bool>,
}

/// A kept placer's bookkeeping during a cycle.
#[derive(Debug, Default)]
struct Kept {
    /// Each node's running members as last taken.
    held: Vec<HeldNode>,
    scratch: Scratch,
    /// Once [`Placer::take_running`] has run: each node's state before this cycle first
    /// changed it, for rewinding.
    journal: Option<Journal>,
}

/// Which nodes have changed, and each one's state before its first change.
type Journal = (Vec<bool>, Vec<(usize, NodeFree)>);

/// The static part of a node that placement reads (not its name, pool or labels): per GPU,
/// model, memory, NVLink island and MIG mode.
type Kind<'a> = Vec<(&'a str, u64, Option<u32>, bool)>;

fn kind_signature(n: &Node) -> Kind<'_> {
    n.gpus
        .iter()
        .map(|g| {
            (
                g.model.as_str(),
                g.memory_mib,
                g.nvlink_island,
                g.mig.is_some(),
            )
        })
        .collect()
}

impl PlacerState {
    /// The empty fleet's state and indexes.
    pub fn new(fleet: &Fleet, mig: &MigTable) -> PlacerState {
        // One pass over the fleet's node and GPU records (they lie all over the heap, and
        // a pass each for the state, the kinds and the pools read them from memory again).
        let count = fleet.nodes.len();
        let mut nodes = Vec::with_capacity(count);
        let mut kinds: BTreeMap<Kind, u32> = BTreeMap::new();
        let mut kind_of: Vec<u32> = Vec::with_capacity(count);
        let mut pool_ids: HashMap<String, u32> = HashMap::default();
        let mut pool_of: Vec<Option<u32>> = Vec::with_capacity(count);
        let mut classes = ClassIndex::new(count);
        for (i, n) in fleet.nodes.iter().enumerate() {
            let free = NodeFree::empty(n, mig);
            let next = kinds.len() as u32;
            let kind = *kinds.entry(kind_signature(n)).or_insert(next);
            classes.enter(i, kind, &free);
            nodes.push(free);
            kind_of.push(kind);
            pool_of.push(n.pool.as_ref().map(|p| match pool_ids.get(p) {
                Some(id) => *id,
                None => {
                    let id = pool_ids.len() as u32;
                    pool_ids.insert(p.clone(), id);
                    id
                }
            }));
        }
        let state = ClusterState { nodes };
        let pool_of: std::sync::Arc<[Option<u32>]> = pool_of.into();
        let outside_pools = pool_of.iter().any(Option::is_none);
        let groups = [
            TopologyLevel::Node,
            TopologyLevel::NvlinkDomain,
            TopologyLevel::Rack,
            TopologyLevel::Leaf,
        ]
        .into_iter()
        .map(|level| (level, std::cell::OnceCell::new()))
        .collect();
        // The empty fleet's state is the state before any job is held: copied now, while
        // it is at hand, rather than read again from the fleet's node and GPU records
        // (about 170,000 cache misses at 12,500 nodes) when preemption first asks.
        let empty = std::cell::OnceCell::from(state.clone());
        PlacerState {
            state,
            classes,
            kind_of,
            groups,
            empty,
            pool_of,
            pool_ids,
            outside_pools,
            group_free: BTreeMap::new(),
            held: Vec::new(),
            scratch: Scratch::default(),
        }
    }
}

impl<'a> Placer<'a> {
    pub fn new(
        fleet: &'a Fleet,
        strategy: Strategy,
        workload: &'a Workload,
        mig: &'a MigTable,
        seed: u64,
    ) -> Placer<'a> {
        let mut placer = Placer::resume(
            fleet,
            strategy,
            workload,
            mig,
            seed,
            PlacerState::new(fleet, mig),
        );
        placer.kept = None;
        placer
    }

    /// A placer over `kept`, which must have been made for this `fleet` and `mig` table
    /// ([`PlacerState::new`], or [`Placer::into_kept`] of a placer over them).
    pub fn resume(
        fleet: &'a Fleet,
        strategy: Strategy,
        workload: &'a Workload,
        mig: &'a MigTable,
        seed: u64,
        kept: PlacerState,
    ) -> Placer<'a> {
        let PlacerState {
            state,
            mut classes,
            kind_of,
            groups,
            empty,
            pool_of,
            pool_ids,
            outside_pools,
            group_free,
            held,
            scratch,
        } = kept;
        // Evaluations depend on the cycle's workload.
        for class in classes.iter_mut() {
            class.memo.clear();
            class.before = None;
        }
        classes.forget_emptied();
        Placer {
            empty,
            mig_table: mig,
            verdicts: HashMap::default(),
            quiet: false,
            group_room_elsewhere: false,
            request_ids: HashMap::default(),
            pool_of,
            pool_ids,
            outside_pools,
            group_free,
            groups,
            fleet,
            ctx: Context {
                strategy,
                workload,
                mig,
            },
            state,
            classes,
            kind_of,
            rng: Rng::new(seed),
            kept: Some(Kept {
                held,
                scratch,
                journal: None,
            }),
        }
    }

    /// Takes the running jobs' members (in snapshot order). A fresh placer commits them
    /// all; a kept one rebuilds only the nodes whose members differ from the last cycle's,
    /// each from empty in the same order, so the state equals a fresh build's. Changes
    /// after this are undone by [`Placer::into_kept`].
    pub fn take_running(&mut self, members: &[RunningMember<'_>]) {
        let Some(mut kept) = self.kept.take() else {
            self.commit_all(members.iter().map(|(_, r, c)| (*r, *c)));
            return;
        };
        let nodes = self.fleet.nodes.len();
        kept.held.resize_with(nodes, HeldNode::default);
        // Each node's members are matched in order against the last cycle's: a node
        // stays as it is while each next member agrees (one tag is one member as it was,
        // the caller's promise; without equal tags the members themselves are compared,
        // and the tags taken over if they agree) and none is left over.
        let scratch = &mut kept.scratch;
        scratch.matched.clear();
        scratch.matched.resize(nodes, 0);
        scratch.mark.clear();
        scratch.mark.resize(nodes, Mark::Unlisted);
        for (tag, r, c) in members {
            let (Some(mark), Some(at), Some(old)) = (
                scratch.mark.get_mut(c.node),
                scratch.matched.get_mut(c.node),
                kept.held.get_mut(c.node),
            ) else {
                continue;
            };
            if *mark == Mark::Changed {
                continue;
            }
            *mark = Mark::Listed;
            let i = *at as usize;
            match old.tags.get_mut(i) {
                Some(held) if held.is_some() && *held == *tag => *at += 1,
                Some(held)
                    if old
                        .members
                        .get(i)
                        .is_some_and(|(r0, on0)| same_member(r0, on0, r, &c.on)) =>
                {
                    *held = *tag;
                    *at += 1;
                }
                _ => *mark = Mark::Changed,
            }
        }
        // One pass over the nodes: a node whose members all agreed so far but fewer than
        // before changed too; a node with none now is emptied.
        let (mut any_changed, mut emptied) = (false, Vec::new());
        for (node, ((mark, matched), old)) in scratch
            .mark
            .iter_mut()
            .zip(&scratch.matched)
            .zip(&kept.held)
            .enumerate()
        {
            match *mark {
                Mark::Listed if *matched as usize == old.tags.len() => {}
                Mark::Listed | Mark::Changed => {
                    *mark = Mark::Changed;
                    any_changed = true;
                }
                Mark::Unlisted => {
                    if !old.tags.is_empty() {
                        emptied.push(node);
                    }
                }
            }
        }
        // Changed nodes' members, by node ascending (a stable sort: snapshot order within
        // one), each node rebuilt; then the emptied nodes.
        if any_changed {
            let mut changed: Vec<(usize, Option<MemberTag>, &Request, &OnNode)> = members
                .iter()
                .filter(|(_, _, c)| scratch.mark.get(c.node) == Some(&Mark::Changed))
                .map(|(t, r, c)| (c.node, *t, *r, &c.on))
                .collect();
            changed.sort_by_key(|m| m.0);
            for list in changed.chunk_by(|a, b| a.0 == b.0) {
                let Some((node, old)) = list
                    .first()
                    .and_then(|m| Some((m.0, kept.held.get_mut(m.0)?)))
                else {
                    continue;
                };
                old.tags.clear();
                old.tags.extend(list.iter().map(|m| m.1));
                old.members.clear();
                old.members.extend(
                    list.iter()
                        .map(|(_, _, r, on)| ((*r).clone(), (*on).clone())),
                );
                self.rebuild_node(node, list.iter().map(|(_, _, r, on)| (*r, *on)));
            }
        }
        for node in emptied {
            if let Some(old) = kept.held.get_mut(node) {
                old.tags.clear();
                old.members.clear();
            }
            self.rebuild_node(node, std::iter::empty());
        }
        let mut seen = std::mem::take(&mut kept.scratch.seen);
        seen.clear();
        seen.resize(nodes, false);
        kept.journal = Some((seen, Vec::new()));
        self.kept = Some(kept);
    }

    /// Sets `node` to empty and takes `members` on it.
    fn rebuild_node<'r>(
        &mut self,
        node: usize,
        members: impl Iterator<Item = (&'r Request, &'r OnNode)>,
    ) {
        if self.empty_state().nodes.get(node).is_none() {
            return;
        }
        self.leave(node);
        let (ctx, fleet) = (self.ctx, self.fleet);
        if let (Some(n), Some((empty, free))) =
            (fleet.nodes.get(node), self.empty_and_current(node))
        {
            free.copy_from(empty);
            for (r, on) in members {
                take_on(&ctx, n, free, r, on);
            }
        }
        self.enter(node);
    }

    /// What to keep for the next cycle over this fleet: the state as
    /// [`Placer::take_running`] left it (what this cycle placed or tried is undone).
    /// `None` for a placer not made to be kept.
    pub fn into_kept(mut self) -> Option<PlacerState> {
        let mut kept = self.kept.take()?;
        if let Some((seen, journal)) = kept.journal.take() {
            for (node, previous) in journal {
                self.undo(node, previous);
            }
            kept.scratch.seen = seen;
        }
        Some(PlacerState {
            state: self.state,
            classes: self.classes,
            kind_of: self.kind_of,
            groups: self.groups,
            empty: self.empty,
            pool_of: self.pool_of,
            pool_ids: self.pool_ids,
            outside_pools: self.outside_pools,
            group_free: self.group_free,
            held: kept.held,
            scratch: kept.scratch,
        })
    }

    pub fn fleet(&self) -> &'a Fleet {
        self.fleet
    }

    /// The fleet's pools, once each, in no set order (`None` when a node is in none).
    pub fn pools(&self) -> impl Iterator<Item = Option<&str>> + '_ {
        self.pool_ids
            .keys()
            .map(|p| Some(p.as_str()))
            .chain(self.outside_pools.then_some(None))
    }

    /// Each node's pool by the placer's number for it (see [`Placer::pool_numbers`]).
    pub fn node_pool_numbers(&self) -> &[Option<u32>] {
        &self.pool_of
    }

    /// The fleet's pool names with the placer's numbers for them.
    pub fn pool_numbers(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        self.pool_ids.iter().map(|(name, n)| (name.as_str(), *n))
    }

    /// Whether a node is in one of `pools` (any node when `pools` is empty), checked by
    /// pool number rather than by name. The predicate shares the placer's pool index, so
    /// it stays usable while the placer changes.
    pub fn in_pools(&self, pools: &[String]) -> impl Fn(usize) -> bool + 'static {
        let any = pools.is_empty();
        let numbers: Vec<u32> = pools
            .iter()
            .filter_map(|p| self.pool_ids.get(p).copied())
            .collect();
        let pool_of = self.pool_of.clone();
        move |node| {
            any || pool_of
                .get(node)
                .copied()
                .flatten()
                .is_some_and(|p| numbers.contains(&p))
        }
    }

    pub fn context(&self) -> Context<'a> {
        self.ctx
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    fn enter(&mut self, node: usize) {
        let (Some(kind), Some(free)) = (self.kind_of.get(node), self.state.nodes.get(node)) else {
            return;
        };
        self.classes.enter(node, *kind, free);
        self.count_group_free(node, true);
    }

    /// Adds (`entering`) or takes away the node's free GPUs in its groups' counts.
    fn count_group_free(&mut self, node: usize, entering: bool) {
        if self.group_free.is_empty() {
            return;
        }
        let Some(free) = self.state.nodes.get(node) else {
            return;
        };
        // Counted once for every level.
        let counts = super::group_free::free_counts(free);
        for gf in self.group_free.values_mut() {
            gf.update(node, counts, entering);
        }
    }

    /// Starts keeping free GPUs per group at `level` (once).
    pub fn track_group_free(&mut self, level: TopologyLevel) {
        if self.group_free.contains_key(&level) {
            return;
        }
        let gf = GroupFree::new(self.groups(level), &self.state.nodes);
        self.group_free.insert(level, gf);
    }

    /// At most how many members of `r` group `g` at `level` could hold now (`u64::MAX`
    /// when not tracked or not bounded by GPUs: MIG, no GPUs).
    pub fn group_room_bound(&self, level: TopologyLevel, g: usize, r: &Request) -> u64 {
        self.group_free
            .get(&level)
            .map_or(u64::MAX, |gf| gf.room_bound(g, r))
    }

    /// The groups at `level` whose bound for `r` is at least `members`, in group order
    /// (every group when the level is not tracked).
    pub fn groups_with_room(&self, level: TopologyLevel, r: &Request, members: u64) -> Vec<usize> {
        match self.group_free.get(&level) {
            Some(gf) => gf.candidates(r, members),
            None => (0..self.groups(level).len()).collect(),
        }
    }

    fn leave(&mut self, node: usize) {
        if let Some((seen, journal)) = self.kept.as_mut().and_then(|k| k.journal.as_mut()) {
            if let (Some(false), Some(free)) = (seen.get(node).copied(), self.state.nodes.get(node))
            {
                if let Some(s) = seen.get_mut(node) {
                    *s = true;
                }
                journal.push((node, free.clone()));
            }
        }
        self.count_group_free(node, false);
        self.classes.leave(node);
    }

    /// Nodes grouped by their label at `level` (`Node`: one group per node); nodes without
    /// the label are in no group.
    pub fn groups(&self, level: TopologyLevel) -> &[(String, Vec<usize>)] {
        let Some(cell) = self.groups.get(&level) else {
            return &[];
        };
        cell.get_or_init(|| {
            // Keys borrowed and sorted, each group's name copied once: a map of owned
            // names copied every node's label.
            let mut keyed: Vec<(&str, usize)> = self
                .fleet
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| Some((n.topology_key_ref(level)?, i)))
                .collect();
            keyed.sort_unstable();
            let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
            for (k, i) in keyed {
                match groups.last_mut() {
                    Some((name, nodes)) if name.as_str() == k => nodes.push(i),
                    _ => groups.push((k.to_string(), vec![i])),
                }
            }
            groups
        })
    }

    /// The free resources of the empty fleet.
    pub fn empty_state(&self) -> &ClusterState {
        self.empty
            .get_or_init(|| ClusterState::new(self.fleet, self.mig_table))
    }

    /// Node `node`'s empty and current free state, borrowed together (no copy of the
    /// empty one); `None` for a node the fleet does not have.
    fn empty_and_current(&mut self, node: usize) -> Option<(&NodeFree, &mut NodeFree)> {
        let (fleet, mig) = (self.fleet, self.mig_table);
        let empty = self.empty.get_or_init(|| ClusterState::new(fleet, mig));
        Some((empty.nodes.get(node)?, self.state.nodes.get_mut(node)?))
    }

    /// Every class with its free resources and nodes: for counting capacity without
    /// visiting every node.
    pub fn classes(&self) -> impl Iterator<Item = (&NodeFree, &BTreeSet<usize>)> {
        self.classes.iter().map(|c| (&c.free, &c.nodes))
    }

    /// At most how many members of `r` the free room of all nodes holds (per class, not
    /// per node).
    pub fn room_bound(&self, r: &Request) -> u64 {
        self.classes
            .iter()
            .filter_map(|c| {
                let node = self.fleet.nodes.get(*c.nodes.first()?)?;
                let slots = super::gang::member_slots(&self.ctx, node, &c.free, r);
                Some(slots.saturating_mul(c.nodes.len() as u64))
            })
            .fold(0u64, u64::saturating_add)
    }

    fn request_id(&mut self, req: &Request) -> usize {
        let next = self.request_ids.len();
        match self.request_ids.get(req) {
            Some(id) => *id,
            None => {
                self.request_ids.insert(req.clone(), next);
                next
            }
        }
    }

    /// The memoised evaluation of `req` on `node`'s class.
    fn evaluate_memo(&mut self, node: usize, req: &Request) -> Option<(Score, OnNode)> {
        let id = self.request_id(req);
        let ctx = self.ctx;
        let class = self.classes.of_mut(node)?;
        let n = self.fleet.nodes.get(node)?;
        evaluated(&ctx, n, class, id, req).cloned()
    }

    /// The best of a few given nodes (a topology group) for `req`; ties to the first.
    pub fn choose_among(&mut self, nodes: &[usize], req: &Request) -> Option<Choice> {
        let mut best: Option<((Score, Reverse<usize>), Choice)> = None;
        for &node in nodes {
            let Some((score, on)) = self.evaluate_memo(node, req) else {
                continue;
            };
            let rank = (score, Reverse(node));
            if best.as_ref().is_none_or(|(b, _)| rank > *b) {
                best = Some((rank, Choice { node, on }));
            }
        }
        best.map(|(_, c)| c)
    }

    /// The best node among those `allowed` for `req`, and where on it; `None` if none fits.
    pub fn choose(&mut self, req: &Request, allowed: &dyn Fn(usize) -> bool) -> Option<Choice> {
        let fleet = self.fleet;
        let ctx = self.ctx;
        if ctx.strategy == Strategy::Random && req.mig_profile.is_none() {
            let mut all = Vec::new();
            for class in self.classes.iter() {
                let Some(rep) = class.nodes.first().and_then(|i| fleet.nodes.get(*i)) else {
                    continue;
                };
                if packing::feasible(&ctx, rep, &class.free, req) {
                    all.extend(class.nodes.iter().copied().filter(|i| allowed(*i)));
                }
            }
            all.sort_unstable();
            let node = *all.get(self.rng.below(all.len()))?;
            let (free, n) = (self.state.nodes.get(node)?, fleet.nodes.get(node)?);
            let (_, on) = packing::score(&ctx, n, free, req, (0.0, 0.0));
            return Some(Choice { node, on });
        }
        let id = self.request_id(req);
        // The best rank and its class; its placement is copied once, at the end.
        let mut best: Option<((Score, Reverse<usize>), usize)> = None;
        for (slot, class) in self.classes.iter_mut_slots() {
            // Nodes of a class score the same: evaluated on any of them, and only a class
            // that fits is searched for its first allowed node (full classes are large).
            let lowest = class.first();
            let Some(node) = fleet.nodes.get(lowest) else {
                continue;
            };
            let Some(&(score, _)) = evaluated(&ctx, node, class, id, req) else {
                continue;
            };
            // Its rank is at most its lowest node's: a class that cannot beat the best so
            // far is not searched for an allowed node (most are not, and `allowed` is the
            // caller's closure).
            if best
                .as_ref()
                .is_some_and(|(b, _)| (score, Reverse(lowest)) <= *b)
            {
                continue;
            }
            // The class's first allowed node: mostly its lowest, read without its set.
            let first = if allowed(lowest) {
                lowest
            } else {
                match class
                    .nodes
                    .range(lowest.saturating_add(1)..)
                    .copied()
                    .find(|i| allowed(*i))
                {
                    Some(first) => first,
                    None => continue,
                }
            };
            let rank = (score, Reverse(first));
            if best.as_ref().is_none_or(|(b, _)| rank > *b) {
                best = Some((rank, slot));
            }
        }
        let ((_, Reverse(node)), slot) = best?;
        let on = self.classes.slot(slot)?.get(id)?.as_ref()?.1.clone();
        Some(Choice { node, on })
    }

    /// [`Placer::commit`], returning the node's previous state for [`Placer::undo`].
    pub fn commit_undoable(&mut self, req: &Request, choice: &Choice) -> Option<NodeFree> {
        let previous = self.state.nodes.get(choice.node)?.clone();
        self.commit(req, choice);
        Some(previous)
    }

    /// Takes `req` on the chosen node.
    pub fn commit(&mut self, req: &Request, choice: &Choice) {
        self.leave(choice.node);
        if let (Some(node), Some(free)) = (
            self.fleet.nodes.get(choice.node),
            self.state.nodes.get_mut(choice.node),
        ) {
            take_on(&self.ctx, node, free, req, &choice.on);
        }
        self.enter(choice.node);
    }

    /// Commits many members at once (e.g. the running jobs of a snapshot): each node
    /// leaves and re-enters the class index once, not once per member.
    pub fn commit_all<'r>(&mut self, members: impl IntoIterator<Item = (&'r Request, &'r Choice)>) {
        let mut touched = BTreeSet::new();
        for (req, choice) in members {
            if touched.insert(choice.node) {
                self.leave(choice.node);
            }
            if let (Some(node), Some(free)) = (
                self.fleet.nodes.get(choice.node),
                self.state.nodes.get_mut(choice.node),
            ) {
                take_on(&self.ctx, node, free, req, &choice.on);
            }
        }
        for node in touched {
            self.enter(node);
        }
    }

    /// Gives back what a member placed by `choice` holds (a running job that ends or is
    /// preempted); [`Placer::commit`] with the same choice takes it again.
    pub fn release(&mut self, req: &Request, choice: &Choice) {
        if self.empty_state().nodes.get(choice.node).is_none() {
            return;
        }
        self.leave(choice.node);
        let (ctx, fleet) = (self.ctx, self.fleet);
        if let (Some(node), Some((capacity, free))) = (
            fleet.nodes.get(choice.node),
            self.empty_and_current(choice.node),
        ) {
            give_on(&ctx, node, free, req, &choice.on, capacity);
        }
        self.enter(choice.node);
    }

    /// Puts a node back as it was before a commit.
    pub fn undo(&mut self, node: usize, previous: NodeFree) {
        self.leave(node);
        if let Some(free) = self.state.nodes.get_mut(node) {
            *free = previous;
        }
        self.enter(node);
    }
}

/// `r0 == r1 && on0 == on1`, with the short slices compared in a loop: called for every
/// running member each cycle, where a `memcmp` call per slice cost more than the compare.
fn same_member(r0: &Request, on0: &OnNode, r1: &Request, on1: &OnNode) -> bool {
    fn same<T: PartialEq>(a: &[T], b: &[T]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
    }
    // Named field by field, so a new field of `Request` cannot be missed here.
    let Request {
        cpu_milli,
        memory_mib,
        num_gpu,
        gpu_milli,
        models,
        vram_mib,
        mig_profile,
    } = r0;
    let OnNode { gpus, mig_starts } = on0;
    *num_gpu == r1.num_gpu
        && *gpu_milli == r1.gpu_milli
        && *cpu_milli == r1.cpu_milli
        && *memory_mib == r1.memory_mib
        && *vram_mib == r1.vram_mib
        && same(gpus, &on1.gpus)
        && same(mig_starts, &on1.mig_starts)
        && *mig_profile == r1.mig_profile
        && *models == r1.models
}

/// Takes `req` placed as `on` from a node's free resources (GPU shares or MIG slots).
pub fn take_on(ctx: &Context<'_>, node: &Node, free: &mut NodeFree, req: &Request, on: &OnNode) {
    free.take(req, &on.gpus);
    if let Some(name) = &req.mig_profile {
        for (gpu, start) in on.gpus.iter().zip(&on.mig_starts) {
            let model = node.gpus.get(*gpu).map(|g| g.model.as_str()).unwrap_or("");
            if let Some(p) = ctx.mig.profile(model, name) {
                free.take_mig(*gpu, mig::mask(p, *start));
            }
        }
    }
}

/// Where `req` (request `id`) would go on a node of `class` (any of them: they score the
/// same) and its score, if it fits; worked out once per class and kept in its memo.
/// Inlined: `choose` asks it for every class, and nearly always finds the memo filled.
#[inline(always)]
fn evaluated<'c>(
    ctx: &Context<'_>,
    node: &Node,
    class: &'c mut super::classes::Class,
    id: usize,
    req: &Request,
) -> Option<&'c (Score, OnNode)> {
    if class.get(id).is_none() {
        let value = packing::feasible(ctx, node, &class.free, req).then(|| {
            let before = *class
                .before
                .get_or_insert_with(|| packing::node_state(ctx, node, &class.free));
            packing::score(ctx, node, &class.free, req, before)
        });
        class.put(id, value);
    }
    class.get(id).and_then(Option::as_ref)
}

/// Gives back what [`take_on`] took, never beyond `capacity` (the empty node).
pub fn give_on(
    ctx: &Context<'_>,
    node: &Node,
    free: &mut NodeFree,
    req: &Request,
    on: &OnNode,
    capacity: &NodeFree,
) {
    free.give(req, &on.gpus, capacity);
    if let Some(name) = &req.mig_profile {
        for (gpu, start) in on.gpus.iter().zip(&on.mig_starts) {
            let model = node.gpus.get(*gpu).map(|g| g.model.as_str()).unwrap_or("");
            if let Some(p) = ctx.mig.profile(model, name) {
                free.give_mig(*gpu, mig::mask(p, *start));
            }
        }
    }
}
