//! The decision cycle itself; see the module docs of `decide`.

mod bookings;
mod cache;
mod decider;
mod explain;
mod gang_quota_wait;
mod holder_lists;
mod holding;
mod intake;
mod job_lookup;
mod ledger_pools;
mod lending_wait;
mod mig_hold;
mod names;
mod node_bits;
mod numbering;
mod placing;
mod preempt;
mod preempt_as_booked;
mod protected_wait;
mod queue_order;
mod quota_book;
mod quota_gate;
mod quota_victims;
mod reserve;
mod reserved_victims;
mod story;
mod test_switches;
mod victim_cost;
mod victim_reach;
mod walk_free;

#[doc(hidden)]
pub use cache::{keep_nothing, memos_off};
pub use decider::PlacementDecider;
#[doc(hidden)]
pub use holding::record_holders_at_once;
pub use intake::{default_job, invalid_job, unassigned_job};
pub use story::placement_story;
pub use victim_cost::{check_victim_indexes, find_victims_afresh};

use cache::{buffers, job_memo, running_carry, shape_memo, typical_memo};
use holding::Holder;
use job_memo::Resolved;

use super::admission::{admit, Admission};
use super::fairshare::{FairShares, Resources};
use super::plan::{
    Action, Assignment, Booked, BookedNode, Decision, EtaKind, Plan, Preemption, Reason,
    ReasonCode, Reservation, Routed,
};
use super::quota::{Ledger, PoolIx, QuotaBlock};
use super::snapshot::{JobState, Snapshot};
use crate::core::alloc::Request;
use crate::core::frag::Workload;
use crate::core::gang::{self, JobShape, Unplaced};
use crate::core::packing::Strategy;
use crate::core::placer::{Choice, Placer, PlacerState};
use lang::ir::Program;
use reserve::Reserved;
use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// (team, tier, used, guaranteed, need) milli-GPUs, and the pool they are in (`None`: all).
type GuaranteeBlockKey<'a> = (
    Option<usize>,
    Option<&'a str>,
    u64,
    u64,
    u64,
    Option<crate::decide::quota::PoolIx>,
);

/// Positions in the change logs: allocations (`Cycle::changed`) and standing
/// (`TeamReach::log`).
type LogMark = (usize, usize);

struct Cycle<'a> {
    program: &'a Program,
    snapshot: &'a Snapshot,
    now: i64,
    placer: Placer<'a>,
    ledger: Ledger,
    /// Each node's pool as the ledger numbers it.
    node_pools: Vec<Option<PoolIx>>,
    /// The pools nodes are in, each once, as the ledger numbers them (`None`: nodes in
    /// no pool).
    fleet_pools: Vec<Option<PoolIx>>,
    shares: FairShares,
    holders: Vec<Holder<'a>>,
    /// Each holder in brief, beside `holders` (see [`holding::Brief`]).
    briefs: Option<Vec<holding::Brief>>,
    /// Holder records not written yet (until [`Cycle::record_holders`]).
    unrecorded: holding::Unrecorded<'a>,
    /// Shared: explanations and ETAs read it for every blocked job, and a copy of its
    /// node set each time cost more than the read.
    reservation: Option<std::rc::Rc<Reserved>>,
    /// Per policy team, whether it borrowed once the running jobs were held: how long
    /// `max_lost` protects its jobs (`preempt::reclaim_bound`).
    borrowing_at_start: Vec<bool>,
    /// Nodes that take no new jobs (closed or interrupted), as bits.
    takes_none: std::rc::Rc<node_bits::NodeBits>,
    /// Conservative backfill's reservations (`reservation_depth` > 1), shared with the
    /// node checks of the job being placed.
    bookings: std::rc::Rc<bookings::Bookings>,
    /// Reservations' holds on their teams' quotas.
    quota_bookings: quota_book::QuotaBookings,
    /// Reservations the starvation bound added past the depth this cycle.
    starving_booked: usize,
    /// Running jobs' submit times by priority, sorted (for the starvation bound; on
    /// first use).
    running_submits: Option<BTreeMap<i64, Vec<i64>>>,
    /// Shapes and askers for which no victim set existed, with where the change logs
    /// ended then: while nothing has changed since, none exists still.
    no_victims: shape_memo::ShapeMemo<preempt::VictimlessKey, LogMark>,
    /// The nodes a team's standing reaches, for keeping cost indexes true.
    reach: victim_reach::TeamReach,
    /// Tests' reference: no kept cost index, victim memo or memo of shapes that did not
    /// fit is read ([`victim_cost::find_victims_afresh`]).
    victims_afresh: bool,
    /// Tests' reference: the caches within the cycle are off ([`cache::memos_off`]).
    memos_off: bool,
    /// Running jobs (preemption candidates) by node.
    holders_on: holder_lists::HolderLists,
    /// Running jobs rule 1 protects for a while, by node, and whether there are any.
    protected_on: holder_lists::HolderLists,
    /// Running jobs neither victims nor protected, by node (for waits; on first use).
    others_on: protected_wait::OthersOn,
    /// When cohorts can lend what a job needs, as running jobs end (memoised).
    lending_waits: lending_wait::LendingWaits,
    any_protected: bool,
    /// Holders with a runtime estimate by expected end, for earliest-start estimates.
    ends: BTreeSet<(i64, usize)>,
    /// Running jobs (preemption candidates) by team ([`Cycle::team_slot`]).
    holders_of: holder_lists::HolderLists,
    /// The same, each team's sorted for quota victim searches (on first use).
    quota_order: quota_victims::QuotaOrder,
    /// A quota victim search's node copies, reused from search to search.
    quota_gone: quota_victims::VictimsGone,
    /// Per team slot, its victim candidates not evicted, counted by tier priority: whether
    /// a team has one below a priority, without reading its holders.
    victim_tiers: Vec<Vec<(i64, u32)>>,
    /// Every holder by team index, by expected end (`i64::MAX`: no runtime estimate).
    team_ends: BTreeMap<Option<usize>, BTreeSet<(i64, usize)>>,
    /// While the running jobs are held in one batch: the ledger's derived figures and the
    /// `standing` of the teams marked in `usage_deferred` wait for [`Cycle::settle_running`].
    holding_batch: bool,
    /// Whether `ends` and `team_ends` hold every holder; built on first use
    /// ([`Cycle::index_ends`]), as most replay cycles never read them.
    ends_built: bool,
    usage_deferred: Vec<bool>,
    /// While the running jobs are held in one batch: each policy team's charges to one
    /// bucket (milli-GPUs, fair-share resources), made once when it is settled.
    batch_sums: Vec<Option<(u64, crate::decide::fairshare::Resources)>>,
    /// Each policy team's index, by name.
    team_index: names::NameIndex<'a, usize>,
    /// Each policy tier by name (read for every running job).
    tier_index: names::NameIndex<'a, usize>,
    /// Each policy team's usage (by index), kept in step with the ledger.
    standing: Vec<Standing>,
    /// Per node, a bit for each team with a victim candidate there (see
    /// `victim_cost::team_bit`); filled when an overlay cost index is first built.
    victim_teams: Vec<u64>,
    /// Per (member, pools, asker): each node's cheapest victim set, numbered in
    /// `cost_ids` so that a job's victim search hashes its key once.
    cost_ids: HashMap<victim_cost::CostKey, usize>,
    /// Numbers for the askers and the shapes' members and pools those keys hold.
    asker_numbers: numbering::AskerNumbers,
    member_pools: numbering::MemberPools,
    cost_indexes: Vec<victim_cost::CostIndex>,
    cost_scratch: victim_cost::CostScratch,
    /// Nodes whose allocation changed, in order; indexes remember how far they read.
    /// (The teams' standing changes are logged apart, in `reach`.)
    changed: Vec<usize>,
    /// Per node, the last [`Cycle::changed_since`] call that listed it, and that call.
    changed_marks: (Vec<u32>, u32),
    /// Evictions so far: free capacity grows only then (a victim tried and put back
    /// leaves the state as it was).
    released: u64,
    /// Shapes that did not fit, at which `released` count, and why; a shape that fitted
    /// only by delaying reserved jobs also at which allocation state (`changed.len()`):
    /// placements since may have left it no room at all, which its reason must say.
    unfit: shape_memo::ShapeMemo<UnfitKey, (u64, Option<usize>, Unplaced)>,
    /// Per queue shape number: why the gang can never be held at once, if it cannot
    /// (`explain.rs`; the fleet and the pools' maximums do not change within a cycle).
    gang_ceilings: HashMap<usize, Option<String>>,
    /// [`Cycle::guarantee_block`]'s messages by (team, tier, used, guaranteed,
    /// need).
    guarantee_blocks: HashMap<GuaranteeBlockKey<'a>, QuotaBlock>,
    /// Quota blocks written out for waiting jobs (message, unblock): jobs of one team and
    /// size left waiting by the same shortfall read the same words.
    quota_words: HashMap<QuotaBlock, (String, String)>,
    /// The lowest tier priority among preemptible running jobs: a job at or below it
    /// cannot preempt by priority.
    lowest_victim_priority: Option<i64>,
    eta_memo: shape_memo::ShapeMemo<explain::EtaKey, Option<i64>>,
    /// Room per shape for earliest-start estimates, kept up to date node by node (a cache,
    /// `cache/mod.rs`: each use catches up from `changed`; off with `memos_off`, when it
    /// is built afresh at each use, its walk memo with it).
    room_cache: HashMap<reserve::RoomKey, reserve::RoomIndex>,
    walk_scratch: walk_free::WalkScratch,
    flat_free: walk_free::FlatFree,
    /// What each holder gives back when it ends (built with `ends`).
    end_gives: walk_free::EndGives,
    /// The allocation state (`changed.len()`) the memo was filled at.
    eta_version: usize,
    eta_estimates: usize,
    /// Gangs whose wait for protected victims was worked out this cycle (each reads
    /// every node): the first ones in queue order, up to `explain::GANG_WAIT_BUDGET`.
    gang_waits: usize,
    /// Reservations that looked for a wait on protected victims this cycle, up to
    /// `explain::RESERVING_WAIT_BUDGET`.
    reserving_waits: usize,
    /// Jobs preemption could not place within the bookings that were looked at again
    /// without them this cycle, up to `preempt::BOOKED_LOOK_BUDGET`.
    booked_preempt_looks: usize,
    /// Jobs placed by preempting victims with a grace (by address): when their work
    /// starts, once the victims have stopped; their runtime counts from then.
    work_from: rustc_hash::FxHashMap<usize, i64>,
    /// Waits from now looked for to preempt as booked this cycle (all, and gangs'): as
    /// bounded as the reserving waits that make such bookings.
    as_booked_looks: (usize, usize),
    preemptions: Vec<Preemption>,
    /// The story of one job, when asked for (`gantry plan --job`).
    story: Option<story::Story>,
    /// Jobs' teams and tiers by revision, kept by a [`PlacementDecider`].
    memo: Option<job_memo::JobMemo>,
    /// The job being placed (its address in the snapshot) with its team and tier
    /// indexes: the placement reads them dozens of times (see `Cycle::job_team`).
    placing: Option<(usize, Option<usize>, Option<usize>)>,
    /// The running batch's charges, kept by a [`PlacementDecider`].
    carry: Option<running_carry::RunningCarry>,
    /// The running members for the placer (a buffer kept with the others in [`Carried`]).
    running: Vec<crate::core::placer::RunningMember<'a>>,
    /// Nodes by name, for the nodes jobs were booked on (built on first use).
    node_names: Option<HashMap<&'a str, usize>>,
}

/// A policy team's usage as the victim rules read it (a copy of the ledger's, so the hot
/// path needs no lookup by name).
#[derive(Debug, Clone, Copy, Default)]
struct Standing {
    borrowing: bool,
    used: u64,
    guaranteed: u64,
    /// Guarantees per pool: breaches need the ledger's buckets.
    per_pool: bool,
}

/// With bookings (reservations), how they stand to the job started now
/// (`Bookings::start_now_key`): it decides what they leave the job.
type UnfitKey = Option<(usize, usize)>;

/// What placing one job came to.
enum Outcome {
    Placed {
        choices: Vec<Choice>,
        victims: Vec<String>,
        borrowing: bool,
    },
    Blocked(Reason),
}

/// What placement decided, and the snapshot it judged: the caller's, or a copy with the
/// policy's default team and tier filled in and the jobs on noticed spot nodes queued
/// again. Autoscaling (the `scale` module) reads the plan and this snapshot.
#[derive(Debug)]
pub struct Placement<'s> {
    pub plan: Plan,
    pub judged: Cow<'s, Snapshot>,
}

/// The placement part of a decision cycle (no autoscaling: `cycle::decide` adds it).
pub fn decide_placement<'s>(program: &Program, snapshot: &'s Snapshot, now: i64) -> Placement<'s> {
    decide_with_story(program, snapshot, now, None).0
}

/// [`decide_placement`], telling `story`'s job's story as it goes.
fn decide_with_story<'s>(
    program: &Program,
    snapshot: &'s Snapshot,
    now: i64,
    story: Option<story::Story>,
) -> (Placement<'s>, Option<story::Story>) {
    let (placement, story, _) = decide_kept(program, snapshot, now, story, None);
    (placement, story)
}

/// What a [`super::PlacementDecider`] keeps from one cycle for the next.
#[derive(Debug)]
struct Carried {
    placer: PlacerState,
    memo: job_memo::JobMemo,
    typical: typical_memo::TypicalMemo,
    carry: running_carry::RunningCarry,
    /// The fleet's totals, summed on first use (the placer's fleet is the cycle's).
    capacity: Option<Capacity>,
    buffers: buffers::Buffers,
}

/// The fleet's totals: milli-GPUs, and GPUs, CPU and memory as fair share weighs them.
#[derive(Debug, Clone, Copy)]
struct Capacity {
    gpu_milli: u64,
    resources: Resources,
}

impl Capacity {
    fn of(fleet: &crate::core::fleet::Fleet) -> Capacity {
        let gpu_milli = fleet.gpu_milli_capacity();
        Capacity {
            gpu_milli,
            resources: [
                gpu_milli as f64,
                fleet.nodes.iter().map(|n| n.cpu_milli as f64).sum(),
                fleet.nodes.iter().map(|n| n.memory_mib as f64).sum(),
            ],
        }
    }
}

/// What a decision cycle works with besides its inputs: the story asked for and what
/// the last cycle left (see [`super::PlacementDecider`]).
fn decide_kept<'s>(
    program: &Program,
    snapshot: &'s Snapshot,
    now: i64,
    story: Option<story::Story>,
    kept: Option<Carried>,
) -> (Placement<'s>, Option<story::Story>, Option<Carried>) {
    let judged = match intake::with_defaults(program, snapshot) {
        Some(defaulted) => Cow::Owned(defaulted),
        None => Cow::Borrowed(snapshot),
    };
    intake::decide_defaulted(program, judged, now, story, kept)
}

/// Reads ahead in queue order so each job's records are in cache when its turn comes:
/// the queue is in no memory order, and each job sits behind a chain of pointers (its
/// queue entry, its state, its boxed record, its id's bytes). Each step of the chain
/// is read one job further ahead than the next, so no step waits on another.
fn touch_ahead(queue: &[queue_order::Queued], order: &[usize], at: usize, jobs: &[JobState]) {
    let queued = |ahead: usize| order.get(at + ahead).and_then(|q| queue.get(*q));
    let state = |ahead: usize| queued(ahead).and_then(|e| jobs.get(e.job));
    std::hint::black_box(queued(4).map(|e| e.job));
    std::hint::black_box(state(3).map(|js| js.member_milli));
    std::hint::black_box(state(2).map(|js| js.job.runtime_s));
    std::hint::black_box(state(1).and_then(|js| js.job.id.as_bytes().first().copied()));
}

/// Room for the running members (or their nodes) without reading every job first: most
/// jobs run one member; gangs run several. A list sized by jobs alone grew, copying
/// itself, every cycle.
fn members_hint(snapshot: &Snapshot) -> usize {
    snapshot.jobs.len() * 3 / 2
}

fn decide_cycle(
    program: &Program,
    snapshot: &Snapshot,
    now: i64,
    stops: Vec<Preemption>,
    story: Option<story::Story>,
    kept: Option<Carried>,
) -> (Plan, Option<story::Story>, Option<Carried>) {
    let fleet = &snapshot.fleet;
    let mut kept = kept;
    let workload = match kept.as_mut() {
        Some(k) => k.typical.workload(&snapshot.jobs),
        None => Workload::typical_of(snapshot.jobs.iter().map(|j| &j.job.shape.member)),
    };
    let strategy = Strategy::from_policy(program.placement.packing);
    let (placer, memo, typical, carry, capacity, buffers) = match kept {
        Some(Carried {
            placer,
            mut memo,
            typical,
            carry,
            capacity,
            buffers,
        }) => {
            let names_kept = memo.begin(program);
            (
                Placer::resume(fleet, strategy, &workload, &snapshot.mig, 0, placer),
                Some(memo),
                typical,
                Some((carry, names_kept)),
                capacity.unwrap_or_else(|| Capacity::of(fleet)),
                buffers,
            )
        }
        None => (
            Placer::new(fleet, strategy, &workload, &snapshot.mig, 0),
            None,
            typical_memo::TypicalMemo::default(),
            None,
            Capacity::of(fleet),
            buffers::Buffers::default(),
        ),
    };
    let buffers::Buffers {
        holders,
        running,
        mut holders_on,
        mut protected_on,
        mut holders_of,
        unrecorded,
    } = buffers;
    let mut holders = buffers::recycle(holders);
    holders.reserve(snapshot.jobs.len());
    holders_on.reset(fleet.nodes.len());
    protected_on.reset(fleet.nodes.len());
    holders_of.reset(program.teams.len() + 2);
    // The fleet's pools, each once, as the placer numbered them.
    let ledger = Ledger::new(program, capacity.gpu_milli, placer.pools().flatten());
    let (node_pools, fleet_pools) = ledger_pools::number(&ledger, &placer, fleet);
    let mut cycle = Cycle {
        program,
        snapshot,
        now,
        placer,
        ledger,
        node_pools,
        fleet_pools,
        shares: FairShares::new(program, capacity.resources, &snapshot.usage, now),
        holders,
        briefs: None,
        unrecorded: holding::Unrecorded::new(buffers::recycle(unrecorded)),
        reservation: None,
        borrowing_at_start: Vec::new(),
        takes_none: std::rc::Rc::new(node_bits::NodeBits::of(
            snapshot.closed.iter().chain(&snapshot.interrupted).copied(),
            fleet.nodes.len(),
        )),
        bookings: std::rc::Rc::default(),
        quota_bookings: quota_book::QuotaBookings::default(),
        starving_booked: 0,
        running_submits: None,
        no_victims: shape_memo::ShapeMemo::default(),
        victims_afresh: test_switches::is_on(test_switches::Switch::VictimsAfresh),
        memos_off: cache::memos_are_off(),
        reach: victim_reach::TeamReach::default(),
        lowest_victim_priority: None,
        holders_on,
        protected_on,
        others_on: protected_wait::OthersOn::default(),
        lending_waits: lending_wait::LendingWaits::default(),
        any_protected: false,
        ends: BTreeSet::new(),
        holders_of,
        quota_order: quota_victims::QuotaOrder::default(),
        quota_gone: quota_victims::VictimsGone::default(),
        victim_tiers: Vec::new(),
        team_ends: BTreeMap::new(),
        holding_batch: true,
        ends_built: false,
        usage_deferred: vec![false; program.teams.len()],
        batch_sums: vec![None; program.teams.len()],
        team_index: names::NameIndex::positions(program.teams.iter().map(|t| t.name.as_str())),
        tier_index: names::NameIndex::positions(program.tiers.iter().map(|t| t.name.as_str())),
        standing: vec![Standing::default(); program.teams.len()],
        victim_teams: Vec::new(),
        cost_ids: HashMap::default(),
        asker_numbers: numbering::AskerNumbers::default(),
        member_pools: numbering::MemberPools::default(),
        cost_indexes: Vec::new(),
        cost_scratch: victim_cost::CostScratch::default(),
        // Every running member is logged once.
        changed: Vec::with_capacity(members_hint(snapshot)),
        changed_marks: (vec![0; fleet.nodes.len()], 0),
        released: 0,
        unfit: shape_memo::ShapeMemo::default(),
        gang_ceilings: HashMap::default(),
        guarantee_blocks: HashMap::default(),
        quota_words: HashMap::default(),
        eta_memo: shape_memo::ShapeMemo::default(),
        room_cache: HashMap::default(),
        walk_scratch: walk_free::WalkScratch::default(),
        flat_free: walk_free::FlatFree::default(),
        end_gives: walk_free::EndGives::default(),
        eta_version: 0,
        eta_estimates: 0,
        gang_waits: 0,
        reserving_waits: 0,
        booked_preempt_looks: 0,
        work_from: rustc_hash::FxHashMap::default(),
        as_booked_looks: (0, 0),
        preemptions: stops,
        story,
        memo,
        placing: None,
        carry: None,
        running: buffers::recycle(running),
        node_names: None,
    };
    cycle.carry = carry.map(|(mut carry, names_kept)| {
        // Teams whose charges go to one bucket (guarantees not per pool) are carried.
        let carried_teams = (0..program.teams.len())
            .map(|t| !cycle.ledger.is_per_pool(Some(t)))
            .collect();
        carry.begin(carried_teams, names_kept);
        carry
    });
    let plan = cycle.run();
    let story = cycle.story.take();
    let memo = cycle.memo.take();
    let carry = cycle.carry.take();
    let buffers = buffers::Buffers {
        holders: buffers::recycle(std::mem::take(&mut cycle.holders)),
        running: buffers::recycle(std::mem::take(&mut cycle.running)),
        holders_on: std::mem::take(&mut cycle.holders_on),
        protected_on: std::mem::take(&mut cycle.protected_on),
        holders_of: std::mem::take(&mut cycle.holders_of),
        unrecorded: buffers::recycle(cycle.take_unrecorded_room()),
    };
    let kept = cycle.placer.into_kept().map(|placer| Carried {
        placer,
        memo: memo.unwrap_or_default(),
        typical,
        carry: carry.unwrap_or_default(),
        capacity: Some(capacity),
        buffers,
    });
    (plan, story, kept)
}

impl<'a> Cycle<'a> {
    fn run(&mut self) -> Plan {
        let snapshot = self.snapshot;
        // Running jobs first, held and committed in one batch. One pass reads each job
        // once (the members lie on the heap; a second pass read them from memory again).
        let mut running = std::mem::take(&mut self.running);
        running.reserve(members_hint(snapshot));
        let mut running_jobs = 0;
        for js in &snapshot.jobs {
            if let Some(r) = &js.running {
                for (i, c) in r.members.iter().enumerate() {
                    let tag = js.revision.map(|rev| (rev, i as u32));
                    running.push((tag, &js.job.shape.member, c));
                }
                self.hold_running(js, &r.members);
                running_jobs += 1;
            }
        }
        self.placer.take_running(&running);
        running.clear();
        self.running = running;
        self.settle_running();
        self.borrowing_at_start = (0..self.program.teams.len())
            .map(|t| self.ledger.is_borrowing(Some(t)))
            .collect();
        if test_switches::is_on(test_switches::Switch::RecordHoldersAtOnce) {
            self.record_holders();
        }
        let mut denied = Vec::new();
        let mut incomplete = Vec::new();
        // Sized up front: its entries are large, and growing it copied them again.
        let waiting = snapshot.jobs.len().saturating_sub(running_jobs);
        let mut queue: Vec<queue_order::Queued> = Vec::with_capacity(waiting);
        let mut shapes = queue_order::QueueShapes::default();
        for (k, js) in snapshot.jobs.iter().enumerate() {
            if js.running.is_some() {
                continue;
            }
            let program = self.program;
            let team_of = |name: &str| self.team_index.get(name).and_then(|i| program.teams.get(i));
            if let Some(reason) = intake::invalid_job_among(program, js, team_of) {
                self.tell(js, |_| format!("invalid: {}", reason.message));
                denied.push(self.decision(js, Action::Deny, Some(reason), &Admission::default()));
                continue;
            }
            self.tell_rules(js);
            let admission = admit(self.program, js, self.now);
            if let Some((rule, message)) = &admission.denied {
                let mut reason = Reason::new(
                    ReasonCode::DeniedByRule,
                    format!("denied by rule {rule}: {message}"),
                )
                .unblock(format!("change the job so rule {rule} no longer matches"));
                reason.rule = Some(rule.clone());
                denied.push(self.decision(js, Action::Deny, Some(reason), &admission));
                continue;
            }
            if let Some(reason) = unassigned_job(self.program, js) {
                self.tell(js, |_| format!("invalid: {}", reason.message));
                denied.push(self.decision(js, Action::Deny, Some(reason), &admission));
                continue;
            }
            if let Some(reason) = self.gang_incomplete(js) {
                self.tell(js, |_| format!("gang: {}", reason.message));
                incomplete.push(self.decision(js, Action::Queue, Some(reason), &admission));
                continue;
            }
            let shape = shapes.number(
                &js.job.shape,
                admission.routed.as_ref().map(|(_, pool)| pool.as_str()),
                &self.program.placement,
            );
            // Looked up here, in snapshot order, where the job's record is at hand.
            let resolved = self.resolve_ix(js);
            let priority = self.tier_at(resolved.1).map_or(0, |t| t.priority);
            queue.push(queue_order::Queued {
                job: k,
                // Most jobs match no rule: the queue's entries are read in no memory
                // order, and a default admission inline made each one larger.
                admission: (admission != Admission::default()).then(|| Box::new(admission)),
                shape,
                resolved,
                key: queue_order::OrderKey::of(js, priority, self.inside_guarantee_only(js)),
            });
        }
        let order = self.order(&queue);
        if let Some(at) = self.story.as_ref().and_then(|st| {
            order.iter().position(|q| {
                queue
                    .get(*q)
                    .and_then(|e| snapshot.jobs.get(e.job))
                    .is_some_and(|js| js.id() == st.job)
            })
        }) {
            let n = order.len();
            if let Some(st) = &mut self.story {
                st.lines.push(format!(
                    "queue: considered {} of {n} (tier priority, then jobs inside their team's guarantee, then the team with the lowest fair share, then submit time)",
                    at + 1
                ));
            }
        }
        let mut decisions = Vec::with_capacity(waiting);
        let no_admission = Admission::default();
        for (i, &q) in order.iter().enumerate() {
            touch_ahead(&queue, &order, i, &snapshot.jobs);
            let Some(queue_order::Queued {
                job,
                admission,
                shape: shape_no,
                resolved: (team, tier),
                ..
            }) = queue.get(q)
            else {
                continue;
            };
            let Some(shape) = shapes.list.get(*shape_no) else {
                continue;
            };
            let Some(js) = snapshot.jobs.get(*job) else {
                continue;
            };
            let admission = admission.as_deref().unwrap_or(&no_admission);
            self.placing = Some((job_address(js), *team, *tier));
            let outcome = self.place(js, *shape_no, shape);
            let decision = match outcome {
                Outcome::Placed {
                    choices,
                    victims,
                    borrowing,
                } => {
                    if !self.bookings.is_empty() {
                        let until = self.runtime(js).map(|r| self.work_starts(js) + r);
                        std::rc::Rc::make_mut(&mut self.bookings).started(
                            &shape.member,
                            &choices,
                            self.now,
                            until,
                        );
                    }
                    let mut d =
                        self.queued_decision(js, (*team, *tier), Action::Place, None, admission);
                    d.placement = self.assignments(&js.job.shape.member, &choices);
                    d.victims = victims;
                    d.borrowing = borrowing;
                    d
                }
                Outcome::Blocked(reason) => {
                    self.queued_decision(js, (*team, *tier), Action::Queue, Some(reason), admission)
                }
            };
            decisions.push(decision);
        }
        self.placing = None;
        // Gangs still waiting for members queue behind every job that could run.
        decisions.extend(incomplete);
        let mut position = 0;
        for d in &mut decisions {
            if let Some(r) = &mut d.reason {
                position += 1;
                r.position = Some(position);
            }
        }
        decisions.extend(denied);
        if let Some(st) = &mut self.story {
            let told = st.lines.last().is_some_and(|l| l.starts_with("outcome:"));
            if let Some(d) = decisions.iter().find(|d| d.job == st.job).filter(|_| !told) {
                st.lines.push(story::outcome(d));
            }
        }
        for r in decisions.iter_mut().filter_map(|d| d.reason.as_mut()) {
            if r.eta_s.is_some() {
                r.eta_kind = Some(if r.code == ReasonCode::Reserved {
                    EtaKind::Reservation
                } else {
                    EtaKind::Estimate
                });
            }
        }
        let reservations: Vec<Booked> = self
            .bookings
            .list
            .iter()
            .map(|b| Booked {
                job: b.job.clone(),
                start_at: b.start_at,
                end_at: b.ends_at,
                nodes: b
                    .nodes
                    .iter()
                    .filter_map(|(i, nb)| {
                        Some(BookedNode {
                            node: self.node_name(*i)?,
                            gpus: (nb.gpus != u64::MAX).then_some(nb.gpus),
                        })
                    })
                    .collect(),
            })
            .collect();
        // EASY's head reservation, else conservative backfill's first.
        let reservation = match (&self.reservation, reservations.first()) {
            (Some(r), _) => Some(Reservation {
                job: r.job.clone(),
                start_at: r.start_at,
                nodes: r.nodes.iter().filter_map(|i| self.node_name(*i)).collect(),
            }),
            (None, Some(b)) => Some(Reservation {
                job: b.job.clone(),
                start_at: b.start_at,
                nodes: b.nodes.iter().map(|n| n.node.clone()).collect(),
            }),
            (None, None) => None,
        };
        // Something waits that room could place: a protection that ends may let it
        // preempt. (Records are written if nothing read them: the plan must not depend
        // on when they were.)
        let may_preempt = decisions.iter().any(|d| {
            d.action == Action::Queue
                && d.reason.as_ref().is_some_and(|r| {
                    matches!(
                        r.code,
                        ReasonCode::NoCapacity
                            | ReasonCode::QuotaExhausted
                            | ReasonCode::Reserved
                            | ReasonCode::WaitingForReservation
                    )
                })
        });
        let protection_ends = if may_preempt && self.any_protected_now() {
            self.holders
                .iter()
                .filter(|x| !x.evicted)
                .filter_map(|x| x.protected())
                .map(|p| p.from)
                .filter(|t| *t > self.now)
                .min()
        } else {
            None
        };
        // Something waits: a running job whose runtime is an estimate nobody enforces
        // and that still runs at its estimated end is planned again from then (with its
        // limit, or no runtime), which moves what waits for it.
        let waits = decisions.iter().any(|d| d.action == Action::Queue);
        let estimate_passes = waits
            .then(|| {
                self.holders
                    .iter()
                    .filter(|x| !x.evicted && x.job.job.estimate_only)
                    .filter_map(|x| x.ends_at)
                    .filter(|t| *t > self.now)
                    .min()
            })
            .flatten();
        let next_decision_at = protection_ends.into_iter().chain(estimate_passes).min();
        Plan {
            policy_revision: String::new(),
            now: self.now,
            next_decision_at,
            decisions,
            preemptions: std::mem::take(&mut self.preemptions),
            reservation,
            reservations,
            scale: Vec::new(),
            warm: Vec::new(),
            state: None,
        }
    }

    fn node_name(&self, i: usize) -> Option<String> {
        self.snapshot.fleet.nodes.get(i).map(|n| n.name.clone())
    }

    /// The node's pool as the ledger numbers it.
    fn pool_of(&self, node: usize) -> Option<PoolIx> {
        self.node_pools.get(node).copied().flatten()
    }

    fn decision(
        &self,
        js: &JobState,
        action: Action,
        reason: Option<Reason>,
        admission: &Admission,
    ) -> Decision {
        self.decision_named(
            js,
            (js.job.team.clone(), js.job.tier.clone()),
            action,
            reason,
            admission,
        )
    }

    /// [`Cycle::decision`] for a queued job, whose team and tier are known by index: their
    /// names are the policy's (the same strings, read from the policy rather than from
    /// the job's record, which lies elsewhere on the heap).
    fn queued_decision(
        &self,
        js: &JobState,
        (team, tier): Resolved,
        action: Action,
        reason: Option<Reason>,
        admission: &Admission,
    ) -> Decision {
        let program = self.program;
        let team = match team.and_then(|t| program.teams.get(t)) {
            Some(t) => Some(t.name.clone()),
            None => js.job.team.clone(),
        };
        let tier = match tier.and_then(|t| program.tiers.get(t)) {
            Some(t) => Some(t.name.clone()),
            None => js.job.tier.clone(),
        };
        debug_assert_eq!(
            (&team, &tier),
            (&js.job.team, &js.job.tier),
            "a queued job's names"
        );
        self.decision_named(js, (team, tier), action, reason, admission)
    }

    fn decision_named(
        &self,
        js: &JobState,
        (team, tier): (Option<String>, Option<String>),
        action: Action,
        reason: Option<Reason>,
        admission: &Admission,
    ) -> Decision {
        Decision {
            job: js.id().to_string(),
            team,
            tier,
            gpus: js.gpu_milli() as f64 / 1000.0,
            action,
            placement: Vec::new(),
            victims: Vec::new(),
            borrowing: false,
            routed_to: admission.routed.as_ref().map(|(rule, pool)| Routed {
                pool: pool.clone(),
                rule: rule.clone(),
            }),
            annotations: admission.annotations.clone(),
            warnings: admission.warnings.clone(),
            reason,
        }
    }

    fn assignments(&self, member: &Request, choices: &[Choice]) -> Vec<Assignment> {
        choices
            .iter()
            .map(|c| Assignment {
                node: self.node_name(c.node).unwrap_or_default(),
                gpus: c
                    .on
                    .gpus
                    .iter()
                    .map(|g| {
                        self.snapshot
                            .fleet
                            .nodes
                            .get(c.node)
                            .and_then(|n| n.gpus.get(*g))
                            .map_or(*g as u32, |x| x.index)
                    })
                    .collect(),
                gpu_milli: member.gpu_milli,
                mig_starts: c.on.mig_starts.clone(),
            })
            .collect()
    }

    /// Charges per pool for a placement.
    fn charges(&self, member_milli: u64, choices: &[Choice]) -> Vec<(Option<PoolIx>, u64)> {
        choices
            .iter()
            .map(|c| (self.pool_of(c.node), member_milli))
            .collect()
    }

    fn resources(member: &Request, member_milli: u64, members: usize) -> Resources {
        let n = members as f64;
        [
            member_milli as f64 * n,
            member.cpu_milli as f64 * n,
            member.memory_mib as f64 * n,
        ]
    }

    /// Nodes whose allocation changed since position `seen` of the change log, once each.
    /// (In log order: the indexes that read them do not depend on the order.)
    fn changed_since(&mut self, seen: usize) -> Vec<usize> {
        self.changed_for(seen, None).0
    }

    /// [`Cycle::changed_since`], and with `standing` (a position in the standing log and
    /// an asker) the nodes where the teams' standing changes since may alter the asker's
    /// victim sets ([`victim_reach::TeamReach::nodes_since`]); and, apart, nodes (with a
    /// team) whose sets change only if they hold one of that team's jobs. For an asker
    /// with a team of its own (an overlay index), only nodes where that team may have
    /// victims.
    fn changed_for(
        &mut self,
        seen: usize,
        standing: Option<(usize, &preempt::Asker)>,
    ) -> (Vec<usize>, Vec<(usize, usize)>) {
        let log = self.changed.get(seen..).unwrap_or(&[]);
        let own = standing
            .map(|(_, asker)| asker.team)
            .filter(|t| *t != preempt::NO_OWN_VICTIMS)
            .map(victim_cost::team_bit);
        let victim_teams = &self.victim_teams;
        // Once each by a mark per node (a sort of the log cost more than the catch-up).
        let marks = &mut self.changed_marks;
        marks.1 = marks.1.wrapping_add(1);
        if marks.1 == 0 {
            marks.0.iter_mut().for_each(|m| *m = 0);
            marks.1 = 1;
        }
        let stamp = marks.1;
        if marks.0.len() < victim_teams.len() {
            marks.0.resize(victim_teams.len(), 0);
        }
        // Most nodes hold none of an overlay's team's jobs: said by one bit.
        let skipped =
            |n: usize| own.is_some_and(|bit| victim_teams.get(n).is_some_and(|b| b & bit == 0));
        let mut nodes = Vec::with_capacity(log.len());
        let mut add = |n: usize| {
            if skipped(n) {
                return;
            }
            if marks.0.len() <= n {
                marks.0.resize(n + 1, 0);
            }
            if let Some(m) = marks.0.get_mut(n).filter(|m| **m != stamp) {
                *m = stamp;
                nodes.push(n);
            }
        };
        log.iter().for_each(|n| add(*n));
        let mut if_held = Vec::new();
        if let Some((from, asker)) = standing {
            self.reach.nodes_since(from, asker, add, |n, team| {
                if !skipped(n) {
                    if_held.push((n, team));
                }
            });
        }
        // A node listed outright needs no look at what its set holds.
        if_held.retain(|(n, _)| marks.0.get(*n).is_none_or(|m| *m != stamp));
        (nodes, if_held)
    }

    /// Where the change logs end (allocations, standing), for [`Cycle::rewind`] and the
    /// memo of searches that found no victims.
    fn log_mark(&self) -> LogMark {
        (self.changed.len(), self.reach.log.len())
    }

    /// The running holders the victim rules may pick from, of one team index.
    fn holders_of(&self, team: Option<usize>) -> &[usize] {
        self.expect_records();
        self.team_slot(team)
            .map_or(&[], |slot| self.holders_of.get(slot))
    }
}

enum Blocked {
    Capacity(Unplaced),
    Quota(QuotaBlock),
    Reservation(Reserved),
}

impl Cycle<'_> {
    /// When a job placed this cycle starts its work: now, or once the victims it
    /// preempted have stopped.
    fn work_starts(&self, js: &JobState) -> i64 {
        self.work_from
            .get(&job_address(js))
            .copied()
            .unwrap_or(self.now)
    }
}

/// A job's address, which names it while the snapshot holding it is borrowed.
fn job_address(js: &JobState) -> usize {
    std::ptr::from_ref(js) as usize
}

/// Jobs without their own topology take the policy's required level, else its first
/// preferred level that groups nodes.
pub fn apply_policy_topology(shape: &mut JobShape, placement: &lang::ir::Placement) {
    use lang::ir::TopologyLevel;
    if shape.topology_required.is_none() && shape.topology_preferred.is_none() {
        shape.topology_required = placement.topology_required;
        shape.topology_preferred = placement
            .topology_preferred
            .iter()
            .copied()
            .find(|l| !matches!(l, TopologyLevel::NvlinkIsland | TopologyLevel::Any));
    }
}
