//! Reasons and ETAs for jobs that are not placed. An ETA is a real estimate or absent:
//! it comes from the running jobs' runtime estimates on the state the job was judged on
//! (never a memo from an earlier state), counts reserved GPUs only once the reserving job
//! is expected to end, is never "now" for a job that was not placed, and for a job held
//! by its own team's quota comes from that team's running jobs.

use super::preempt::Protection;
use super::protected_wait::{ProtectedWait, Wake};
use super::{Blocked, Cycle, Reserved};
use crate::core::gang::{JobShape, UnplacedCode};
use crate::decide::plan::{human_duration, wall_time, Reason, ReasonCode};
use crate::decide::snapshot::JobState;

/// Earliest-start estimates per cycle; beyond it `eta_s` is absent.
pub(super) const ETA_BUDGET: usize = 64;
/// Gangs per cycle whose wait for victims across the fleet is worked out (each reads
/// every node's jobs); the heads of the queue come first.
pub(super) const GANG_WAIT_BUDGET: usize = 4;
/// Reservations per cycle that look whether preempting protected victims starts them
/// sooner than jobs ending (each reads the nodes where jobs are protected).
pub(super) const RESERVING_WAIT_BUDGET: usize = 64;

/// Which budget a search for a protected wait counts against.
#[derive(Clone, Copy)]
enum Budget {
    Estimates,
    Reserving,
}

/// Beside the shape: the reservation it waits behind (start, end) and, with bookings, how
/// many there are and the job's runtime; the memo is cleared when the allocation state
/// changes.
pub(super) type EtaKey = (Option<(i64, Option<i64>)>, Option<(usize, Option<i64>)>);

impl Cycle<'_> {
    /// The moment `at` as a reason says it: in a plan, `relative` of the time from now
    /// (or since, for a moment past) as `8m55s`; where the text is kept and must not count
    /// down (`Snapshot::wall_clock`), `absolute` of `2026-11-28T14:05Z`.
    pub(super) fn moment(
        &self,
        at: i64,
        relative: impl FnOnce(String) -> String,
        absolute: impl FnOnce(String) -> String,
    ) -> String {
        if self.snapshot.wall_clock {
            absolute(wall_time(at))
        } else {
            relative(human_duration(
                at.abs_diff(self.now).try_into().unwrap_or(i64::MAX),
            ))
        }
    }

    /// `in 8m55s`, or `at 2026-11-28T14:05Z` on the wall clock.
    fn when(&self, at: i64) -> String {
        self.moment(at, |d| format!("in {d}"), |t| format!("at {t}"))
    }

    /// `in about 8m55s`, or `by about 2026-11-28T14:05Z` on the wall clock.
    pub(super) fn about(&self, at: i64) -> String {
        self.moment(at, |d| format!("in about {d}"), |t| format!("by about {t}"))
    }

    /// For a gang: why the pools it may use can never hold all of its members at once,
    /// even empty and grown to their maximum nodes (Slurm refuses such a job at submit).
    /// `None` when they can, or when a pool it may use has no node to measure yet.
    fn gang_over_ceiling(&self, shape: &JobShape) -> Option<String> {
        let members = u64::from(shape.members);
        if members < 2 {
            return None;
        }
        let ctx = self.placer.context();
        let fleet = &self.snapshot.fleet;
        let empty = self.placer.empty_state();
        let allowed = self.placer.in_pools(&shape.pools);
        // Per pool the policy defines: nodes present and the most members one holds.
        let mut pools: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
        let mut fixed = 0u64;
        for (i, n) in fleet.nodes.iter().enumerate().filter(|(i, _)| allowed(*i)) {
            let slots = empty.nodes.get(i).map_or(0, |f| {
                crate::core::gang::member_slots(&ctx, n, f, &shape.member)
            });
            match n.pool.as_deref().filter(|p| self.program.pool(p).is_some()) {
                Some(p) => {
                    let e = pools.entry(p).or_default();
                    e.0 += 1;
                    e.1 = e.1.max(slots);
                }
                None => fixed = fixed.saturating_add(slots),
            }
        }
        let mut ceiling = fixed;
        for pool in &self.program.pools {
            if !(shape.pools.is_empty() || shape.pools.contains(&pool.name)) {
                continue;
            }
            let (present, per_node) = pools.get(pool.name.as_str()).copied().unwrap_or((0, 0));
            let most = u64::from(pool.max_nodes).max(present);
            if present == 0 && most > 0 {
                return None; // no node of its shape to measure
            }
            ceiling = ceiling.saturating_add(most.saturating_mul(per_node));
        }
        (ceiling < members).then(|| {
            let pools = if shape.pools.is_empty() {
                String::new()
            } else {
                format!(" in {}", shape.pools.join(", "))
            };
            format!(
                "needs {members} members at once; every node it may use{pools}, empty and at each pool's maximum nodes, holds at most {ceiling}"
            )
        })
    }

    /// The reason for a job that stays blocked, with its ETA and what would unblock it.
    pub(super) fn explain(
        &mut self,
        js: &JobState,
        shape_no: usize,
        shape: &JobShape,
        blocked: Blocked,
    ) -> Reason {
        self.expect_records();
        let team_head = self.quota_bookings.first_to_wait(self.job_team(js));
        match blocked {
            Blocked::Capacity(u) => {
                let code = match u.code {
                    UnplacedCode::NoSuchModel => ReasonCode::NoSuchModel,
                    UnplacedCode::NeverFits => ReasonCode::NeverFits,
                    UnplacedCode::TopologyUnsatisfiable => ReasonCode::TopologyUnsatisfiable,
                    UnplacedCode::NoCapacity => ReasonCode::NoCapacity,
                };
                let over = match (code, shape.members > 1) {
                    (ReasonCode::NoCapacity, true) => {
                        if self.memos_off || !self.gang_ceilings.contains_key(&shape_no) {
                            let why = self.gang_over_ceiling(shape);
                            self.gang_ceilings.insert(shape_no, why);
                        }
                        self.gang_ceilings.get(&shape_no).cloned().flatten()
                    }
                    _ => None,
                };
                let too_wide = over.is_some();
                let (code, message) = match over {
                    Some(why) => (ReasonCode::NeverFits, why),
                    None => (code, u.message),
                };
                let r = Reason::new(code, message);
                match code {
                    ReasonCode::NoCapacity => {
                        let r = self.capacity_reason(js, shape_no, shape, r);
                        self.reclaim_comes_later(js, r)
                    }
                    ReasonCode::NoSuchModel => r.unblock(
                        "add a node with an allowed model to an allowed pool, or widen `models`/`pools`",
                    ),
                    ReasonCode::TopologyUnsatisfiable => r.unblock(
                        "relax the topology requirement or label more nodes into one group",
                    ),
                    ReasonCode::NeverFits if too_wide => r.unblock(
                        "raise a pool's maximum nodes (`nodes = MIN..MAX`) or split the gang",
                    ),
                    _ => r.unblock("shrink the members or add a larger node shape"),
                }
            }
            Blocked::Quota(q) => {
                let (message, unblock) = self.quota_words(&q);
                let mut r = Reason::new(ReasonCode::QuotaExhausted, message);
                r.eta_s = q
                    .own_to_free
                    .and_then(|m| self.own_release_eta(js.job.team.as_deref(), m));
                let own_limit = q.own_to_free.is_some();
                if !own_limit {
                    return self.lending_reason(js, shape, r, unblock);
                }
                let mut unblock = match r.eta_s {
                    Some(eta) => format!(
                        "{} ({}, by their runtime estimates)",
                        unblock,
                        self.about(self.now + eta)
                    ),
                    None => unblock,
                };
                // Its own team's running jobs hold it: it may hold the team's quota,
                // where that is one limit (its whole use, or its use in the one pool of a
                // guarantee split over pools it runs in).
                if own_limit && self.own_limit_of(js, shape).is_some() {
                    let held = self.hold_reservation(js, shape, &r.message, team_head);
                    if let Some(mut reserved) = held {
                        reserved.held_by_quota = true;
                        return reserved;
                    }
                    // Without one, it starts only once its team's reservations no
                    // longer need that quota, and GPUs are free: the later binds.
                    let team = self.job_team(js);
                    if self.quota_bookings.has_limited(team) {
                        let joint = self.joint_eta(js, shape);
                        if joint != r.eta_s {
                            unblock = format!(
                                "fits {}, when the quota {} frees is no longer held for its reservations ({}) and GPUs are free (by the running jobs' estimates)",
                                joint.map_or("later".to_string(), |e| self.about(self.now + e)),
                                self.ledger.name(team),
                                self.quota_bookings.limited_jobs(team, 3)
                            );
                            r.eta_s = joint;
                        }
                    } else if r.eta_s.is_some() {
                        // The quota freed, it still needs GPUs: the later binds (free
                        // GPUs only grow as jobs end, so the later of the two is when
                        // both are free; the capacity walk is memoised per shape).
                        let gpus_at = self.eta(shape_no, shape, self.runtime(js));
                        if let Some(joint) = gpus_at.filter(|j| r.eta_s.is_some_and(|e| *j > e)) {
                            unblock = format!(
                                "{unblock}; GPUs for it are free only {}, when running jobs end (by their runtime estimates)",
                                self.about(self.now + joint)
                            );
                            r.eta_s = Some(joint);
                        }
                    }
                }
                let r = r.unblock(unblock);
                if own_limit {
                    self.protected_reason(js, shape, r, true)
                } else {
                    r
                }
            }
            Blocked::Reservation(res) if res.quota_of.is_some() => {
                self.waiting_for_quota(js, shape, &res)
            }
            Blocked::Reservation(res) => {
                let mut r = Reason::new(
                    ReasonCode::WaitingForReservation,
                    format!(
                        "it fits only on GPUs reserved for {} from {}, and {}",
                        res.job,
                        self.moment(res.start_at, |d| format!("{d} from now"), |t| t),
                        self.runs_for(js)
                    ),
                )
                .unblock(format!(
                    "fits once {} is done with those GPUs, or now with {}",
                    res.job,
                    self.runtime_before(res.start_at)
                ));
                // Conservative backfill books a start for this job too.
                if !self.bookings.is_empty() {
                    if let Some(reserved) = self.hold_reservation(js, shape, &r.message, false) {
                        return reserved;
                    }
                }
                r.eta_s = self.eta(shape_no, shape, self.runtime(js));
                r
            }
        }
    }

    /// Why a job waits for a reservation of its team's quota (`res`): it would still
    /// hold the quota when the reserved job starts. Conservative backfill books it
    /// too; otherwise its ETA is its earliest start with the quota and GPUs both free.
    fn waiting_for_quota(&mut self, js: &JobState, shape: &JobShape, res: &Reserved) -> Reason {
        let team = res.quota_of.as_deref().unwrap_or("-");
        let mut r = Reason::new(
            ReasonCode::WaitingForReservation,
            format!(
                "team {team}'s quota from {} is reserved for {}, and {}",
                self.moment(res.start_at, |d| format!("{d} from now"), |t| t),
                res.job,
                self.runs_for(js)
            ),
        )
        .unblock(format!(
            "fits once {} has started, or now with {}",
            res.job,
            self.runtime_before(res.start_at)
        ));
        r.held_by_quota = true;
        if !self.bookings.is_empty() {
            if let Some(mut reserved) = self.hold_reservation(js, shape, &r.message, false) {
                reserved.held_by_quota = true;
                return reserved;
            }
        }
        r.eta_s = self.joint_eta(js, shape);
        r
    }

    /// A runtime that ends before `at`, as a reason says it.
    fn runtime_before(&self, at: i64) -> String {
        if self.snapshot.wall_clock {
            format!("a runtime that ends by {}", wall_time(at))
        } else {
            format!("a runtime under {}", human_duration(at - self.now))
        }
    }

    /// How long `js` would run, as a reason says it.
    fn runs_for(&self, js: &JobState) -> String {
        match (js.job.runtime_s, self.runtime(js)) {
            (Some(rt), _) => format!("it would run for {}", human_duration(rt as i64)),
            (None, Some(rt)) => format!(
                "it would run for {} (the policy's default runtime)",
                human_duration(rt)
            ),
            (None, None) => "it has no runtime estimate".to_string(),
        }
    }

    /// A no-capacity reason with an ETA, holding the reservation if this is the head
    /// blocked job.
    fn capacity_reason(
        &mut self,
        js: &JobState,
        shape_no: usize,
        shape: &JobShape,
        mut r: Reason,
    ) -> Reason {
        if let Some(reserved) = self.hold_reservation(js, shape, &r.message, false) {
            return reserved;
        }
        r.eta_s = self.eta(shape_no, shape, self.runtime(js));
        r.unblock = Some(match r.eta_s {
            Some(eta) => format!(
                "fits {}, when running jobs end (by their runtime estimates)",
                self.about(self.now + eta)
            ),
            None => "fits when running jobs free capacity of this shape (no estimate: some of them give no runtime, or too many shapes wait)".to_string(),
        });
        self.protected_reason(js, shape, r, false)
    }

    /// `r`, saying so when `js` might reclaim from teams that borrow only by jobs this
    /// cycle placed (a reclaim waits until they run: `preempt.rs`, rule 3).
    fn reclaim_comes_later(&self, js: &JobState, mut r: Reason) -> Reason {
        if r.code != ReasonCode::NoCapacity {
            return r;
        }
        let names: Vec<&str> = self
            .borrowing_since_start(js)
            .iter()
            .filter_map(|t| self.program.teams.get(*t))
            .map(|t| t.name.as_str())
            .collect();
        if names.is_empty() {
            return r;
        }
        let (they, borrow) = if names.len() == 1 {
            ("it", "borrows")
        } else {
            ("them", "borrow")
        };
        r.message.push_str(&format!(
            "; {} {borrow} only by jobs placed this cycle, so nothing is reclaimed from {they} yet: once those run, a later cycle may reclaim for this job",
            names.join(", ")
        ));
        r
    }

    /// A `reserved` reason when `js` gets a reservation (see [`Cycle::reserve`]).
    fn hold_reservation(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        why: &str,
        quota_blocked: bool,
    ) -> Option<Reason> {
        let (start, starving, preempting) = self.reserve(js, shape, quota_blocked)?;
        let names: Vec<String> = match self.bookings.list.last().filter(|b| b.job == js.id()) {
            // Conservative backfill books GPUs per node.
            Some(b) => b
                .nodes
                .iter()
                .filter_map(|(i, nb)| {
                    let name = self.node_name(*i)?;
                    Some(match nb.gpus {
                        u64::MAX => format!("{name} (whole node)"),
                        1 => format!("{name} (1 GPU)"),
                        g => format!("{name} ({g} GPUs)"),
                    })
                })
                .collect(),
            None => self
                .reservation
                .iter()
                .filter(|res| res.job == js.id())
                .flat_map(|res| res.nodes.iter())
                .filter_map(|i| self.node_name(*i))
                .collect(),
        };
        let team = self
            .quota_bookings
            .limited_of_job(js.id())
            .map(|q| self.ledger.name(q.team).to_string());
        let quota = team.as_ref().map(|t| format!("team {t}'s quota"));
        let what = if starving {
            "a reservation past the policy's depth (the starvation bound: it has waited `reserve_after_wait` or been overtaken by `reserve_after_overtaken` later jobs)"
        } else {
            "the reservation"
        };
        let held = match (names.is_empty(), &quota) {
            (false, Some(q)) => format!("{what} on {} and {q}", names.join(", ")),
            (false, None) => format!("{what} on {}", names.join(", ")),
            (true, Some(q)) => format!(
                "{q} (not GPUs: under EASY backfill only the first job that waits holds GPUs)"
            ),
            (true, None) => what.to_string(),
        };
        let unblock = match (names.is_empty(), &team) {
            (true, Some(t)) => format!("starts when {t}'s running jobs have returned the quota it needs and GPUs are free; {t}'s later jobs start first only if they end by then"),
            (false, Some(t)) => format!("starts when {t}'s running jobs have returned the quota it needs and the running jobs on the reserved nodes end; later jobs start first only if they end by then"),
            _ => "starts when the running jobs on the reserved nodes end; smaller jobs backfill around it only if they end first".to_string(),
        };
        let mut reserved = match preempting {
            Some(w) => {
                let (message, unblock) = self.protected_words(js, &w);
                Reason::new(
                    ReasonCode::Reserved,
                    format!(
                        "{why}; it holds {held} to start {}: {message}",
                        self.when(start)
                    ),
                )
                .unblock(format!(
                    "{unblock}; later jobs start there first only if they end by then"
                ))
            }
            None => Reason::new(
                ReasonCode::Reserved,
                format!(
                    "{why}; it holds {held}, free {} by the running jobs' estimates",
                    self.when(start)
                ),
            )
            .unblock(unblock),
        };
        reserved.eta_s = Some(start - self.now);
        Some(reserved)
    }

    /// Says why preemption was not used when jobs it may take are protected for a while
    /// (rule 1), or (for a gang) jobs it may not take hold nodes it needs until they end,
    /// and takes the earlier ETA.
    fn protected_reason(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        mut r: Reason,
        own_only: bool,
    ) -> Reason {
        let before = r.eta_s.map(|e| self.now + e);
        let Some(wait) = self.budgeted_protected_wait(js, shape, own_only, before) else {
            return r;
        };
        // Its team's quota (and the team's quota bookings) must let it start then too.
        // A wait on its own team's jobs frees the quota it needs as it frees room, but
        // not what the team's reservations hold then.
        let runtime = self.runtime(js);
        let quota_holds = if own_only {
            let until = runtime.map(|r| wait.ready.saturating_add(r));
            !self
                .quota_bookings
                .held_during(self.job_team(js), wait.ready, until)
        } else {
            self.quota_fits_at(js, shape, wait.ready, runtime)
        };
        if !quota_holds {
            return r;
        }
        let (message, unblock) = self.protected_words(js, &wait);
        let wait = wait.ready - self.now;
        r.message = format!("{}; {message}", r.message);
        if r.eta_s.is_none_or(|e| wait < e) {
            r.eta_s = Some(wait);
            r.unblock = Some(unblock);
        }
        r
    }

    /// [`Cycle::protected_wait`] for a reason, within the cycle's budgets of estimates
    /// and gang waits (every search counts, found or not).
    pub(super) fn budgeted_protected_wait(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        own_only: bool,
        before: Option<i64>,
    ) -> Option<ProtectedWait> {
        if self.eta_estimates >= ETA_BUDGET {
            return None;
        }
        self.counted_protected_wait(js, shape, own_only, before, Budget::Estimates)
    }

    /// [`Cycle::protected_wait`] for a reservation, within the cycle's budgets of
    /// reservation waits and gang waits: not of estimates, so the estimates of the jobs
    /// behind a reservation do not change with whether it looked.
    pub(super) fn reserving_protected_wait(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        before: i64,
    ) -> Option<ProtectedWait> {
        if self.reserving_waits >= RESERVING_WAIT_BUDGET {
            return None;
        }
        self.counted_protected_wait(js, shape, false, Some(before), Budget::Reserving)
    }

    /// [`Cycle::protected_wait`] where protected or reclaimable jobs exist, counted
    /// against `budget` and, for a gang, the budget of gang waits.
    fn counted_protected_wait(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        own_only: bool,
        before: Option<i64>,
        budget: Budget,
    ) -> Option<ProtectedWait> {
        let gang = shape.members > 1;
        if gang && self.gang_waits >= GANG_WAIT_BUDGET {
            return None;
        }
        // Victims preemptible now may free room once a job it may not preempt ends
        // (a gang's on some nodes, jobs ending on others).
        let may_wait = self.any_protected
            || self
                .lowest_victim_priority
                .is_some_and(|p| p < self.priority(js))
            || !self.reclaimable(js).is_empty();
        if !may_wait {
            return None;
        }
        match budget {
            Budget::Estimates => self.eta_estimates += 1,
            Budget::Reserving => self.reserving_waits += 1,
        }
        if gang {
            self.gang_waits += 1;
        }
        if own_only {
            // A gang's quota wait reads the team's jobs by end.
            self.index_ends();
        }
        self.read_others_on();
        self.protected_wait(js, shape, own_only, before)
    }

    /// What a reason says of a wait for protected victims (`w`): why, and what unblocks.
    pub(super) fn protected_words(&self, js: &JobState, w: &ProtectedWait) -> (String, String) {
        let ProtectedWait {
            ready,
            node: node_ix,
            why,
            at,
            ..
        } = *w;
        let node = self.node_name(node_ix).unwrap_or_default();
        // Preempted then, victims keep their GPUs through their grace: the ETA counts it.
        let stopping = |what: &str| {
            if ready > at {
                format!(
                    ", then {what} within their grace ({})",
                    human_duration(ready - at)
                )
            } else {
                String::new()
            }
        };
        match why {
            Wake::Protection(why) => {
                let whose = self.whose_protected(js, node_ix);
                let until = self.protection_ends(why, at);
                (
                    format!(
                        "{whose} on {node} it may preempt are protected now and become preemptible {until}{}",
                        stopping("stop")
                    ),
                    format!("preempts them on {node} {until}"),
                )
            }
            Wake::End(h) => {
                let job = self.holders.get(h).map_or("", |x| x.id());
                let team = self
                    .holders
                    .get(h)
                    .and_then(|x| x.job.job.team.as_deref())
                    .map(|t| format!(" of team {t}"))
                    .unwrap_or_default();
                let until = self.about(at);
                (
                    format!(
                        "{job}{team} on {node}, which it may not preempt, ends {until} (by its runtime estimate){}",
                        stopping("the jobs it preempts stop")
                    ),
                    format!("preempts what it needs once {job} on {node} ends, {until}"),
                )
            }
            Wake::Now => (
                format!(
                    "the jobs on {node} it may preempt are preemptible now{}",
                    stopping("stop")
                ),
                format!("preempts them on {node} now"),
            ),
            Wake::Booked(b) => {
                let job = self.bookings.list.get(b).map_or("", |x| x.job.as_str());
                let until = self.about(at);
                (
                    format!(
                        "{node} is reserved for {job} until it ends {until} (by its runtime estimate){}",
                        stopping("the jobs it preempts stop")
                    ),
                    format!("preempts what it needs on {node} once {job} ends, {until}"),
                )
            }
        }
    }

    /// Whose jobs on node `n` are protected, as a reason says it: reclaim takes
    /// borrowers' jobs whatever their tier, "lower-priority" only when that is what they
    /// are.
    fn whose_protected(&self, js: &JobState, n: usize) -> &'static str {
        let asker = self.priority(js);
        let (lower, not_lower) =
            self.protected_on.get(n).iter().fold((0, 0), |(l, o), h| {
                match self.holders.get(*h).and_then(|x| x.protected()) {
                    Some(p) if p.priority < asker => (l + 1, o),
                    Some(_) => (l, o + 1),
                    None => (l, o),
                }
            });
        match (lower, not_lower) {
            (_, 0) => "the lower-priority jobs",
            (0, _) => "the borrowing teams' jobs",
            _ => "the jobs",
        }
    }

    /// When a protection ends, as a reason says it.
    fn protection_ends(&self, why: Protection, at: i64) -> String {
        match why {
            Protection::Checkpoint => format!("after their next checkpoint {}", self.when(at)),
            Protection::ReclaimWithin => format!(
                "{}, when the reclaim_within their tier gives a borrower past max_lost is over",
                self.when(at)
            ),
            Protection::MinRuntime => {
                format!("once past their tier's min_runtime {}", self.when(at))
            }
        }
    }

    /// Seconds until `shape` could start by the running jobs' estimates, with the
    /// reservation's GPUs counted only from the reserving job's expected end. Memoised
    /// per shape while the allocation state is unchanged.
    fn eta(&mut self, shape_no: usize, shape: &JobShape, runtime: Option<i64>) -> Option<i64> {
        if self.eta_version != self.changed.len() {
            self.eta_memo.clear();
            self.eta_version = self.changed.len();
        }
        // EASY's reservation is held in the walk; conservative backfill's bookings (and
        // the starvation bound's) are in every walk, so the estimate then depends on the
        // job's runtime and on how many are booked.
        let res = self.reservation.clone();
        let booked = !self.bookings.is_empty();
        let key: EtaKey = (
            res.as_ref().map(|r| (r.start_at, r.ends_at)),
            booked.then(|| {
                (
                    self.bookings.len(),
                    self.bookings.runtime_seen(self.now, runtime),
                )
            }),
        );
        // With the memos off, a hit is worked out again, as the memo's own answer
        // was: counted against the budget once, as with the memos on.
        match self.eta_memo.get(shape_no, &key) {
            Some(hit) if !self.memos_off => return *hit,
            Some(_) => {}
            None if self.eta_estimates >= ETA_BUDGET => return None,
            None => self.eta_estimates += 1,
        }
        // Room now means something other than capacity holds the job: no estimate.
        let eta = self
            .earliest_start(shape, runtime, self.now, &[])
            .map(|(t, _)| t - self.now)
            .filter(|eta| *eta > 0);
        self.eta_memo.insert(shape_no, key, eta);
        eta
    }

    /// A gang not all of whose members have arrived waits for them without a place in
    /// the queue; past the policy's `gang_timeout` (from its submit time) it is requeued,
    /// as Kueue requeues a workload whose pods are not ready in time: the reason says so.
    pub(super) fn gang_incomplete(&self, js: &JobState) -> Option<Reason> {
        let present = js.job.members_present?;
        let members = js.job.shape.members;
        let waited = js.job.submitted_at.map(|s| self.now - s);
        let timeout = self.program.placement.gang_timeout_s;
        let verb = if present == 1 { "has" } else { "have" };
        let arrived = format!("{present} of its {members} members {verb} arrived");
        let mut r = match (waited, timeout) {
            (Some(w), Some(t)) if w > t as i64 => {
                let mut r = Reason::new(
                    ReasonCode::GangIncomplete,
                    format!(
                        "requeued: only {arrived} {}, past the {} gang timeout",
                        self.moment(
                            self.now - w,
                            |d| format!("after {d}"),
                            |t| format!("since {t}")
                        ),
                        human_duration(t as i64)
                    ),
                );
                r.gang_timeout_exceeded = true;
                r
            }
            _ => Reason::new(
                ReasonCode::GangIncomplete,
                format!("{arrived}; a gang is placed only whole"),
            ),
        };
        let missing = members - present;
        r.unblock = Some(format!(
            "submit the other {missing} member{}, or shrink the gang",
            if missing == 1 { "" } else { "s" }
        ));
        Some(r)
    }

    /// Marks a gang that has waited past the policy's `gang_timeout`.
    pub(super) fn gang_timeout(&self, js: &JobState, shape: &JobShape, mut r: Reason) -> Reason {
        if shape.members <= 1 {
            return r;
        }
        let (Some(timeout), Some(sub)) =
            (self.program.placement.gang_timeout_s, js.job.submitted_at)
        else {
            return r;
        };
        let waited = self.now - sub;
        if waited > timeout as i64 {
            r.gang_timeout_exceeded = true;
            r.message = format!(
                "{} (gang waiting {}, past the {} gang timeout)",
                r.message,
                self.moment(sub, |d| d, |t| format!("since {t}")),
                human_duration(timeout as i64)
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use crate::decide::plan::human_duration;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(500), "8m20s");
        assert_eq!(human_duration(1680), "28m");
        assert_eq!(human_duration(8500), "2h21m");
        assert_eq!(human_duration(7200), "2h");
        assert_eq!(human_duration(7 * 86_400), "7d");
        assert_eq!(human_duration(100_000), "1d03h");
        assert_eq!(human_duration(-5), "0s");
    }
}
