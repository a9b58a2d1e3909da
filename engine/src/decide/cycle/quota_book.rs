//! Reservations that hold a team's own quota as well as GPUs. Where a team's own limit
//! binds (its burst, or its guarantee for a tier that runs only inside it), a promise of
//! GPUs alone is worth little: the team's later jobs take each GPU of quota as it frees,
//! and the reserved job never starts when it was told. So a reservation of a job whose
//! team has such a limit also books the quota: from its start to its expected end, the
//! team's running jobs (gone as they are expected to end) plus its other bookings leave
//! room for it under the limit. A later job of the team may start now only if, at every
//! booking's start while it runs, the team stays under the booking's limit (it returns
//! the quota in time). A job blocked by its own team's quota gets such a reservation too,
//! at the first time both its quota and its GPUs are free: its ETA is a reservation's.

use super::reserve::Landing;
use super::{Cycle, Reserved};
use crate::core::gang::JobShape;
use crate::decide::quota::PoolIx;
use crate::decide::snapshot::JobState;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Rounds of the search for a start where both the GPUs and the quota are free: each
/// round moves the start to the next time one of them allows.
const JOINT_ROUNDS: usize = 16;

/// One reservation's hold on its team's quota.
#[derive(Debug, Clone)]
pub(super) struct QuotaBooking {
    pub team: Option<usize>,
    pub job: String,
    pub start_at: i64,
    /// `None`: the job gives no runtime, so the booking never ends.
    pub ends_at: Option<i64>,
    pub milli: u64,
    /// The team's limit it was booked under (milli-GPUs).
    pub limit: u64,
    /// The pool that limit is for (a guarantee split over pools); `None`: the team's
    /// whole use.
    pub pool: Option<PoolIx>,
    /// The pool its nodes are in, where they are all in one.
    pub lands_in: Option<PoolIx>,
    /// The GPUs its reservation holds too, if any (conservative backfill's booking).
    pub nodes: BTreeSet<usize>,
}

impl QuotaBooking {
    fn active_at(&self, t: i64) -> bool {
        self.start_at <= t && self.ends_at.is_none_or(|e| t < e)
    }

    /// Whether it counts in its team's use in `pool` (`None`: the team's whole use).
    fn counts_in(&self, pool: Option<PoolIx>) -> bool {
        pool.is_none_or(|p| self.pool == Some(p) || self.lands_in == Some(p))
    }
}

/// What a job's quota is held to: a pool (`None`: the team's whole use) and the limit
/// there (milli-GPUs; `u64::MAX` where only the team's bookings there bind it).
pub(super) type Account = (Option<PoolIx>, u64);

#[derive(Debug, Default)]
pub(super) struct QuotaBookings {
    list: Vec<QuotaBooking>,
    /// Per team and pool (`None`: the team's whole use), its bookings made under a
    /// limit (the others only count as use).
    limited: BTreeMap<(Option<usize>, Option<PoolIx>), usize>,
    /// What a team's running jobs (in a pool) have freed by a time, while no holder has
    /// come or gone (holders, evictions) since: every job of a team with a booking asks
    /// it.
    freed: HashMap<(Option<usize>, Option<PoolIx>, i64), u64>,
    freed_at: (usize, u64),
    /// Teams one of whose jobs has waited this cycle (the first is the team's head).
    waited: BTreeSet<Option<usize>>,
}

impl QuotaBookings {
    pub fn push(&mut self, booking: QuotaBooking) {
        if booking.limit != u64::MAX {
            *self
                .limited
                .entry((booking.team, booking.pool))
                .or_default() += 1;
        }
        self.list.push(booking);
    }

    /// Whether a job of `team` that waits is the first of its team to wait this cycle
    /// (the head of its team's queue); called once for each job that waits.
    pub fn first_to_wait(&mut self, team: Option<usize>) -> bool {
        self.waited.insert(team)
    }

    /// Whether a booking of `team` holds quota during [`from`, `until`).
    pub fn held_during(&self, team: Option<usize>, from: i64, until: Option<i64>) -> bool {
        self.of_team(team)
            .any(|b| until.is_none_or(|u| b.start_at < u) && b.ends_at.is_none_or(|e| from < e))
    }

    /// Whether one of `team`'s bookings was made under a limit.
    pub fn has_limited(&self, team: Option<usize>) -> bool {
        self.limited_pools(team).next().is_some()
    }

    /// The pools (`None`: the team's whole use) `team` has bookings under a limit in.
    fn limited_pools(&self, team: Option<usize>) -> impl Iterator<Item = Option<PoolIx>> + '_ {
        self.limited
            .range((team, None)..=(team, Some(PoolIx::MAX)))
            .map(|((_, pool), _)| *pool)
    }

    /// The jobs of `team`'s bookings under a limit, at most `most` named.
    pub fn limited_jobs(&self, team: Option<usize>, most: usize) -> String {
        let jobs: Vec<&str> = self
            .of_team(team)
            .filter(|b| b.limit != u64::MAX)
            .map(|b| b.job.as_str())
            .collect();
        match jobs.len().checked_sub(most) {
            Some(more) if more > 0 => {
                format!(
                    "{} and {more} more",
                    jobs.iter()
                        .take(most)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            _ => jobs.join(", "),
        }
    }

    /// `job`'s booking, if it was made under a limit.
    pub fn limited_of_job(&self, job: &str) -> Option<&QuotaBooking> {
        self.list
            .iter()
            .find(|b| b.job == job && b.limit != u64::MAX)
    }

    fn of_team(&self, team: Option<usize>) -> impl Iterator<Item = &QuotaBooking> + '_ {
        self.list.iter().filter(move |b| b.team == team)
    }

    /// What `team`'s bookings hold at `t` in `pool` (`None`: in all), and the least
    /// limit among those booked under a limit there.
    fn at(&self, team: Option<usize>, pool: Option<PoolIx>, t: i64) -> (u64, Option<u64>) {
        self.of_team(team)
            .filter(|b| b.active_at(t) && b.counts_in(pool))
            .fold((0, None), |(sum, limit), b| {
                let own = (b.pool == pool).then_some(b.limit);
                (
                    sum + b.milli,
                    own.map_or(limit, |o| Some(limit.map_or(o, |l: u64| l.min(o)))),
                )
            })
    }
}

impl Cycle<'_> {
    /// The team's own limit a reservation of `js` (of `shape`) must stay under: its
    /// burst (the team's whole use), or, for a tier that runs only inside the guarantee,
    /// that guarantee: one total (an overall guarantee, or one in the only pool the fleet
    /// has), or, for a guarantee split over pools, the guarantee in the one pool the job
    /// can run in (the one its shape names, or the only pool its team is guaranteed
    /// GPUs in). A job that may run in several guaranteed pools is judged per pool where
    /// it lands, and not booked.
    pub(super) fn own_limit_of(&self, js: &JobState, shape: &JobShape) -> Option<Account> {
        let team = self.job_team(js);
        if !self.ledger.has_team(team) {
            return None;
        }
        let burst = self.ledger.burst(team);
        if self.inside_guarantee_only(js) {
            let below_burst = |g: u64| burst.map_or(g, |b| b.min(g));
            let named = self.ledger.named_pools(team);
            let one_total = !self.ledger.is_per_pool(team)
                || matches!(
                    (self.fleet_pools.as_slice(), named),
                    ([Some(fleet)], [named]) if fleet == named
                );
            if one_total {
                let guaranteed = self.ledger.usage(team).map_or(0, |(_, g)| g);
                return Some((None, below_burst(guaranteed)));
            }
            let pool = match shape.pools.as_slice() {
                [one] => Some(self.ledger.pool_ix(one)),
                [] => {
                    let mut guaranteed = named
                        .iter()
                        .copied()
                        .filter(|p| self.pool_guarantee(team, *p).1 > 0);
                    match (guaranteed.next(), guaranteed.next()) {
                        (Some(p), None) => Some(p),
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(p) = pool {
                return Some((Some(p), below_burst(self.pool_guarantee(team, p).1)));
            }
        }
        burst.map(|b| (None, b))
    }

    /// `team`'s (used, guaranteed) milli-GPUs in `pool`, for a guarantee split over pools.
    pub(super) fn pool_guarantee(&self, team: Option<usize>, pool: PoolIx) -> (u64, u64) {
        self.ledger
            .guaranteed_bucket_of(team, Some(pool))
            .and_then(|k| self.ledger.guaranteed_buckets(team).nth(k))
            .unwrap_or((0, 0))
    }

    /// What `js` is held to: its own limit, and every other pool (or the team's whole
    /// use) where its team's bookings made under a limit bind a job that may land
    /// there. Empty: nothing binds it.
    fn accounts_of(&self, js: &JobState, shape: &JobShape) -> Vec<Account> {
        let team = self.job_team(js);
        let own = self.own_limit_of(js, shape);
        let mut accounts: Vec<Account> = own.into_iter().collect();
        for pool in self.quota_bookings.limited_pools(team) {
            if own.is_some_and(|(p, _)| p == pool) || !self.may_land_in(shape, pool) {
                continue;
            }
            accounts.push((pool, u64::MAX));
        }
        accounts
    }

    /// Whether `shape` may land in `pool` (`None`: anywhere).
    fn may_land_in(&self, shape: &JobShape, pool: Option<PoolIx>) -> bool {
        match pool {
            None => true,
            Some(p) => {
                shape.pools.is_empty() || shape.pools.iter().any(|n| self.ledger.pool_ix(n) == p)
            }
        }
    }

    /// Milli-GPUs a holder holds in `pool` (`None`: everywhere).
    fn held_in(&self, h: usize, pool: Option<PoolIx>) -> u64 {
        let Some(x) = self.holders.get(h).filter(|x| !x.evicted) else {
            return 0;
        };
        let on = match pool {
            None => x.choices.len(),
            Some(p) => x
                .choices
                .iter()
                .filter(|c| self.node_pools.get(c.node).copied().flatten() == Some(p))
                .count(),
        };
        x.member_milli() * on as u64
    }

    /// Milli-GPUs `team` holds now in `pool` (`None`: everywhere).
    fn team_holds(&self, team: Option<usize>, pool: Option<PoolIx>) -> u64 {
        match pool {
            None => self.ledger.usage(team).map_or(0, |(u, _)| u),
            Some(p) => self.pool_guarantee(team, p).0,
        }
    }

    /// Milli-GPUs `team`'s running jobs hold at `t` in `pool` (`None`: everywhere) by
    /// their estimates.
    fn team_used_at(&mut self, team: Option<usize>, pool: Option<PoolIx>, t: i64) -> u64 {
        self.index_ends();
        let used = self.team_holds(team, pool);
        let version = (self.holders.len(), self.released);
        let memo = &mut self.quota_bookings;
        if memo.freed_at != version {
            memo.freed.clear();
            memo.freed_at = version;
        }
        if let Some(freed) = memo.freed.get(&(team, pool, t)) {
            return used.saturating_sub(*freed);
        }
        let Some(ends) = self.team_ends.get(&team) else {
            return used;
        };
        let freed: u64 = ends
            .range(..(t.saturating_add(1), 0))
            .map(|(_, h)| self.held_in(*h, pool))
            .sum();
        self.quota_bookings.freed.insert((team, pool, t), freed);
        used.saturating_sub(freed)
    }

    /// Whether `js`'s team's own limit and the team's bookings let it run from `start`
    /// for `runtime`, by the running jobs' estimates.
    pub(super) fn quota_fits_at(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        start: i64,
        runtime: Option<i64>,
    ) -> bool {
        let team = self.job_team(js);
        let need = js.gpu_milli();
        let end = runtime.map(|r| start + r);
        self.accounts_of(js, shape)
            .into_iter()
            .all(|acc| self.quota_fits(team, acc, need, start, end))
    }

    /// Whether `need` more for `team` stays under the account's limit (and under the
    /// limit of each of the team's bookings there it overlaps) from `start` to `end`:
    /// checked at `start` and at each booking's start within, the only times the team's
    /// use can grow.
    fn quota_fits(
        &mut self,
        team: Option<usize>,
        account: Account,
        need: u64,
        start: i64,
        end: Option<i64>,
    ) -> bool {
        self.quota_fits_knowing(team, account, need, (start, None), end)
    }

    /// [`Cycle::quota_fits`], given what the team's running jobs hold at `start` when the
    /// caller has summed it already (a team's thousands of ends are not summed again).
    fn quota_fits_knowing(
        &mut self,
        team: Option<usize>,
        (pool, limit): Account,
        need: u64,
        (start, used_at_start): (i64, Option<u64>),
        end: Option<i64>,
    ) -> bool {
        let mut points: Vec<i64> = self
            .quota_bookings
            .of_team(team)
            .filter(|b| b.counts_in(pool))
            .map(|b| b.start_at)
            .filter(|s| *s > start && end.is_none_or(|e| *s < e))
            .collect();
        points.push(start);
        points.into_iter().all(|p| {
            let (booked, held) = self.quota_bookings.at(team, pool, p);
            let limit = held.map_or(limit, |h| h.min(limit));
            let used = match used_at_start.filter(|_| p == start) {
                Some(used) => {
                    debug_assert_eq!(used, self.team_used_at(team, pool, p), "used at {p}");
                    used
                }
                None => self.team_used_at(team, pool, p),
            };
            used + booked + need <= limit
        })
    }

    /// The first time from `from` at which `need` more for `team` fits under the
    /// account's limit for `runtime`, by the running jobs' estimated ends and the team's
    /// bookings. `None` when it never does by the estimates (a job with no runtime holds
    /// on).
    ///
    /// The times tried are `from`, the team's running jobs' ends and its bookings' ends,
    /// in order. What the running jobs leave only grows with time, so the times where it
    /// alone is too little are a prefix, passed over while reading the team's ends in
    /// order: a team with thousands of jobs is not read whole for each reservation. Debug
    /// builds compare [`Cycle::quota_start_afresh`], which reads them all.
    fn quota_start(
        &mut self,
        team: Option<usize>,
        account: Account,
        need: u64,
        from: i64,
        runtime: Option<i64>,
    ) -> Option<i64> {
        let found = self.quota_start_in_order(team, account, need, from, runtime);
        debug_assert_eq!(
            found,
            self.quota_start_afresh(team, account, need, from, runtime),
            "quota start of team {team:?} from {from}"
        );
        found
    }

    fn quota_start_in_order(
        &mut self,
        team: Option<usize>,
        account: Account,
        need: u64,
        from: i64,
        runtime: Option<i64>,
    ) -> Option<i64> {
        use std::ops::Bound::{Excluded, Unbounded};
        let (pool, limit) = account;
        self.index_ends();
        let mut bookings: Vec<i64> = self
            .quota_bookings
            .of_team(team)
            .filter(|b| b.counts_in(pool))
            .filter_map(|b| b.ends_at)
            .filter(|e| *e > from)
            .collect();
        bookings.sort_unstable();
        bookings.dedup();
        let used_now = self.team_holds(team, pool);
        // Ends read so far: those at or before `read_to` (with what they free here).
        let mut freed = 0u64;
        let mut read_to: Option<(i64, usize)> = None;
        let mut t = from;
        let mut next_booking = 0usize;
        loop {
            // The ends up to `t`, and the first end after it that frees something here.
            let mut next_end = None;
            if let Some(ends) = self.team_ends.get(&team) {
                let lower = read_to.map_or(Unbounded, Excluded);
                for &(at, h) in ends.range((lower, Unbounded)) {
                    if at == i64::MAX {
                        break;
                    }
                    let milli = self.held_in(h, pool);
                    if milli == 0 {
                        read_to = Some((at, h));
                        continue;
                    }
                    if at > t {
                        next_end = Some(at);
                        break;
                    }
                    freed += milli;
                    read_to = Some((at, h));
                }
            }
            let used = used_now.saturating_sub(freed);
            let fits_running = used + need <= limit;
            if fits_running
                && self.quota_fits_knowing(
                    team,
                    account,
                    need,
                    (t, Some(used)),
                    runtime.map(|r| t + r),
                )
            {
                return Some(t);
            }
            // Where the running jobs alone leave too little, only their next end can
            // change that: bookings' ends before it are passed over.
            if !fits_running {
                t = next_end?;
                continue;
            }
            while bookings.get(next_booking).is_some_and(|b| *b <= t) {
                next_booking += 1;
            }
            let next_booking_end = bookings.get(next_booking).copied();
            t = next_end.into_iter().chain(next_booking_end).min()?;
        }
    }

    /// [`Cycle::quota_start`] reading all the team's running jobs' ends at once: the
    /// reference debug builds compare with.
    fn quota_start_afresh(
        &mut self,
        team: Option<usize>,
        account: Account,
        need: u64,
        from: i64,
        runtime: Option<i64>,
    ) -> Option<i64> {
        let (pool, limit) = account;
        self.index_ends();
        // The team's running jobs by expected end, with what each frees there.
        let ends: Vec<(i64, u64)> = self
            .team_ends
            .get(&team)
            .into_iter()
            .flatten()
            .filter(|(at, _)| *at < i64::MAX)
            .map(|(at, h)| (*at, self.held_in(*h, pool)))
            .filter(|(_, milli)| *milli > 0)
            .collect();
        let mut times: Vec<i64> = ends
            .iter()
            .map(|(at, _)| *at)
            .filter(|at| *at > from)
            .chain(
                self.quota_bookings
                    .of_team(team)
                    .filter(|b| b.counts_in(pool))
                    .filter_map(|b| b.ends_at)
                    .filter(|e| *e > from),
            )
            .collect();
        times.push(from);
        times.sort_unstable();
        times.dedup();
        // One pass over the ends: a time where the running jobs alone leave too little
        // is passed over without reading the bookings.
        let used_now = self.team_holds(team, pool);
        let (mut freed, mut k) = (0u64, 0usize);
        for t in times {
            while let Some((_, milli)) = ends.get(k).filter(|(at, _)| *at <= t) {
                freed += milli;
                k += 1;
            }
            if used_now.saturating_sub(freed) + need > limit {
                continue;
            }
            if self.quota_fits(team, account, need, t, runtime.map(|r| t + r)) {
                return Some(t);
            }
        }
        None
    }

    /// The earliest start of `js` where its GPUs (what bookings spare) and, if its team
    /// has an own limit, its quota are both free; where its members land then.
    pub(super) fn joint_start(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        runtime: Option<i64>,
    ) -> Option<(i64, Vec<Landing>)> {
        // Booked again for the start the last plan gave it, it keeps the nodes it was
        // booked on where they still hold it: moved to a node best fit now prefers
        // (others have started beside the bookings since), it took room the bookings after
        // it were promised. Booked for another time, conditions changed: best fit. The
        // start does not depend on the nodes preferred, only the landing does.
        let last = self.last_booking(js);
        let prefer = last.as_ref().map_or(&[][..], |(_, nodes)| nodes.as_slice());
        let found = self.joint_start_preferring(js, shape, runtime, prefer)?;
        match &last {
            Some((at, nodes)) if !nodes.is_empty() && *at != found.0 => {
                self.joint_start_preferring(js, shape, runtime, &[])
            }
            _ => Some(found),
        }
    }

    /// [`Cycle::joint_start`], its landing taking the nodes of `prefer` first.
    fn joint_start_preferring(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        runtime: Option<i64>,
        prefer: &[usize],
    ) -> Option<(i64, Vec<Landing>)> {
        let team = self.job_team(js);
        // Without a limit of its own, only its team's bookings under theirs bind it.
        let accounts = self.accounts_of(js, shape);
        if accounts.is_empty() {
            return self.earliest_start(shape, runtime, self.now, prefer);
        }
        let need = js.gpu_milli();
        let mut from = self.now;
        for _ in 0..JOINT_ROUNDS {
            let quota_at = self.quota_start_in_all(team, &accounts, need, from, runtime)?;
            let (start, landing) = self.earliest_start(shape, runtime, quota_at, prefer)?;
            let end = runtime.map(|r| start + r);
            if start == quota_at
                || accounts
                    .iter()
                    .all(|acc| self.quota_fits(team, *acc, need, start, end))
            {
                return Some((start, landing));
            }
            from = start;
        }
        None
    }

    /// The first time from `from` at which every account lets `need` more in for
    /// `runtime`: each account's first time from the latest so far, until none moves it.
    fn quota_start_in_all(
        &mut self,
        team: Option<usize>,
        accounts: &[Account],
        need: u64,
        from: i64,
        runtime: Option<i64>,
    ) -> Option<i64> {
        let mut at = from;
        for _ in 0..JOINT_ROUNDS {
            let mut moved = false;
            for acc in accounts {
                let t = self.quota_start(team, *acc, need, at, runtime)?;
                moved |= t != at;
                at = t;
            }
            if !moved {
                return Some(at);
            }
        }
        None
    }

    /// Seconds until `js` could start with its quota and GPUs both free, EASY's
    /// reservation holding its nodes: an estimate for a job that holds no reservation
    /// (`None` past the cycle's budget of estimates).
    pub(super) fn joint_eta(&mut self, js: &JobState, shape: &JobShape) -> Option<i64> {
        // An estimate's walk, counted against the cycle's budget of them.
        if self.eta_estimates >= super::explain::ETA_BUDGET {
            return None;
        }
        self.eta_estimates += 1;
        self.joint_start(js, shape, self.runtime(js))
            .map(|(start, _)| start - self.now)
            .filter(|eta| *eta > 0)
    }

    /// Books `need` of the team's quota for `js` (of `shape`) from `start`, with
    /// `nodes`, the GPUs its reservation holds: under its own limit if it has one; else
    /// as use only, which the team's other reservations under a limit count (a team
    /// outside the quotas books nothing).
    pub(super) fn book_quota(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        start: i64,
        ends_at: Option<i64>,
        nodes: BTreeSet<usize>,
    ) {
        let team = self.job_team(js);
        if !self.ledger.has_team(team) {
            return;
        }
        let (pool, limit) = self.own_limit_of(js, shape).unwrap_or((None, u64::MAX));
        let mut pools = nodes
            .iter()
            .map(|n| self.node_pools.get(*n).copied().flatten());
        let lands_in = match pools.next() {
            Some(first) if pools.all(|p| p == first) => first,
            _ => None,
        };
        self.quota_bookings.push(QuotaBooking {
            team,
            job: js.id().to_string(),
            start_at: start,
            ends_at,
            milli: js.gpu_milli(),
            limit,
            pool,
            lands_in,
            nodes,
        });
    }

    /// The reservation `js` (of `shape`) would break by starting now: one of its team's
    /// bookings, in a pool the job may land in, whose quota it would still hold when that
    /// booking starts (or when another of the team's bookings there starts while that
    /// one holds).
    pub(super) fn quota_promised_to_another(
        &mut self,
        js: &JobState,
        shape: &JobShape,
    ) -> Option<Reserved> {
        let team = self.job_team(js);
        if !self.quota_bookings.has_limited(team) {
            return None;
        }
        let need = js.gpu_milli();
        let end = self.runtime(js).map(|r| self.now + r);
        let pools: Vec<Option<PoolIx>> = self
            .quota_bookings
            .limited_pools(team)
            .filter(|p| self.may_land_in(shape, *p))
            .collect();
        for pool in pools {
            let overlapping: Vec<i64> = self
                .quota_bookings
                .of_team(team)
                .filter(|b| b.counts_in(pool))
                .filter(|b| b.start_at > self.now && end.is_none_or(|e| b.start_at < e))
                .map(|b| b.start_at)
                .collect();
            for at in overlapping {
                let (booked, Some(limit)) = self.quota_bookings.at(team, pool, at) else {
                    continue;
                };
                if self.team_used_at(team, pool, at) + booked + need > limit {
                    // The booking that set the least limit then is the one it would break.
                    let b = self
                        .quota_bookings
                        .of_team(team)
                        .filter(|b| b.active_at(at) && b.pool == pool)
                        .min_by_key(|b| (b.limit, b.start_at))?;
                    return Some(Reserved {
                        job: b.job.clone(),
                        start_at: b.start_at,
                        ends_at: b.ends_at,
                        nodes: b.nodes.clone(),
                        quota_of: Some(self.ledger.name(team).to_string()),
                    });
                }
            }
        }
        None
    }
}
