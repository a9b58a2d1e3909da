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
    /// The GPUs its reservation holds too, if any (conservative backfill's booking).
    pub nodes: BTreeSet<usize>,
}

impl QuotaBooking {
    fn active_at(&self, t: i64) -> bool {
        self.start_at <= t && self.ends_at.is_none_or(|e| t < e)
    }
}

#[derive(Debug, Default)]
pub(super) struct QuotaBookings {
    list: Vec<QuotaBooking>,
    /// Per team, its bookings made under a limit (the others only count as use).
    limited: BTreeMap<Option<usize>, usize>,
    /// What a team's running jobs have freed by a time, while no holder has come or
    /// gone (holders, evictions) since: every job of a team with a booking asks it.
    freed: HashMap<(Option<usize>, i64), u64>,
    freed_at: (usize, u64),
    /// Teams one of whose jobs has waited this cycle (the first is the team's head).
    waited: BTreeSet<Option<usize>>,
}

impl QuotaBookings {
    pub fn push(&mut self, booking: QuotaBooking) {
        if booking.limit != u64::MAX {
            *self.limited.entry(booking.team).or_default() += 1;
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
        self.limited.contains_key(&team)
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

    /// What `team`'s bookings hold at `t`, and the least limit among them.
    fn at(&self, team: Option<usize>, t: i64) -> (u64, Option<u64>) {
        self.of_team(team)
            .filter(|b| b.active_at(t))
            .fold((0, None), |(sum, limit), b| {
                (
                    sum + b.milli,
                    Some(limit.map_or(b.limit, |l: u64| l.min(b.limit))),
                )
            })
    }
}

impl Cycle<'_> {
    /// The team's own limit a reservation of `js` must stay under (milli-GPUs): its
    /// burst, or, for a tier that runs only inside the guarantee, that guarantee when it
    /// is one total: an overall guarantee, or one in the only pool the fleet has (other
    /// per-pool guarantees are judged per pool, and not booked).
    pub(super) fn own_limit_of(&self, js: &JobState) -> Option<u64> {
        let team = self.job_team(js);
        if !self.ledger.has_team(team) {
            return None;
        }
        let burst = self.ledger.burst(team);
        let one_total = !self.ledger.is_per_pool(team)
            || matches!(
                (self.fleet_pools.as_slice(), self.ledger.named_pools(team)),
                ([Some(fleet)], [named]) if fleet == named
            );
        if self.inside_guarantee_only(js) && one_total {
            let guaranteed = self.ledger.usage(team).map_or(0, |(_, g)| g);
            return Some(burst.map_or(guaranteed, |b| b.min(guaranteed)));
        }
        burst
    }

    /// Milli-GPUs `team`'s running jobs hold at `t` by their estimates.
    fn team_used_at(&mut self, team: Option<usize>, t: i64) -> u64 {
        self.index_ends();
        let used = self.ledger.usage(team).map_or(0, |(u, _)| u);
        let version = (self.holders.len(), self.released);
        let memo = &mut self.quota_bookings;
        if memo.freed_at != version {
            memo.freed.clear();
            memo.freed_at = version;
        }
        if let Some(freed) = memo.freed.get(&(team, t)) {
            return used.saturating_sub(*freed);
        }
        let Some(ends) = self.team_ends.get(&team) else {
            return used;
        };
        let freed: u64 = ends
            .range(..(t.saturating_add(1), 0))
            .filter_map(|(_, h)| self.holders.get(*h).filter(|x| !x.evicted))
            .map(|x| x.member_milli() * x.choices.len() as u64)
            .sum();
        self.quota_bookings.freed.insert((team, t), freed);
        used.saturating_sub(freed)
    }

    /// Whether `js`'s team's own limit and the team's bookings let it run from `start`
    /// for `runtime`, by the running jobs' estimates.
    pub(super) fn quota_fits_at(
        &mut self,
        js: &JobState,
        start: i64,
        runtime: Option<i64>,
    ) -> bool {
        let team = self.job_team(js);
        let limit = match self.own_limit_of(js) {
            Some(l) => l,
            None if self.quota_bookings.has_limited(team) => u64::MAX,
            None => return true,
        };
        self.quota_fits(
            team,
            js.gpu_milli(),
            limit,
            start,
            runtime.map(|r| start + r),
        )
    }

    /// Whether `need` more for `team` stays under `limit` (and under the limit of each
    /// of the team's bookings it overlaps) from `start` to `end`: checked at `start` and
    /// at each booking's start within, the only times the team's use can grow.
    fn quota_fits(
        &mut self,
        team: Option<usize>,
        need: u64,
        limit: u64,
        start: i64,
        end: Option<i64>,
    ) -> bool {
        let mut points: Vec<i64> = self
            .quota_bookings
            .of_team(team)
            .map(|b| b.start_at)
            .filter(|s| *s > start && end.is_none_or(|e| *s < e))
            .collect();
        points.push(start);
        points.into_iter().all(|p| {
            let (booked, held) = self.quota_bookings.at(team, p);
            let limit = held.map_or(limit, |h| h.min(limit));
            self.team_used_at(team, p) + booked + need <= limit
        })
    }

    /// The first time from `from` at which `need` more for `team` fits under `limit`
    /// for `runtime`, by the running jobs' estimated ends and the team's bookings.
    /// `None` when it never does by the estimates (a job with no runtime holds on).
    fn quota_start(
        &mut self,
        team: Option<usize>,
        need: u64,
        limit: u64,
        from: i64,
        runtime: Option<i64>,
    ) -> Option<i64> {
        self.index_ends();
        // The team's running jobs by expected end, with what each frees.
        let ends: Vec<(i64, u64)> = self
            .team_ends
            .get(&team)
            .into_iter()
            .flatten()
            .filter(|(at, _)| *at < i64::MAX)
            .filter_map(|(at, h)| {
                let x = self.holders.get(*h).filter(|x| !x.evicted)?;
                Some((*at, x.member_milli() * x.choices.len() as u64))
            })
            .collect();
        let mut times: Vec<i64> = ends
            .iter()
            .map(|(at, _)| *at)
            .filter(|at| *at > from)
            .chain(
                self.quota_bookings
                    .of_team(team)
                    .filter_map(|b| b.ends_at)
                    .filter(|e| *e > from),
            )
            .collect();
        times.push(from);
        times.sort_unstable();
        times.dedup();
        // One pass over the ends: a time where the running jobs alone leave too little
        // is passed over without reading the bookings.
        let used_now = self.ledger.usage(team).map_or(0, |(u, _)| u);
        let (mut freed, mut k) = (0u64, 0usize);
        for t in times {
            while let Some((_, milli)) = ends.get(k).filter(|(at, _)| *at <= t) {
                freed += milli;
                k += 1;
            }
            if used_now.saturating_sub(freed) + need > limit {
                continue;
            }
            if self.quota_fits(team, need, limit, t, runtime.map(|r| t + r)) {
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
        let limit = match self.own_limit_of(js) {
            Some(l) => l,
            None if self.quota_bookings.has_limited(team) => u64::MAX,
            None => return self.earliest_start(shape, runtime, self.now, prefer),
        };
        let need = js.gpu_milli();
        let mut from = self.now;
        for _ in 0..JOINT_ROUNDS {
            let quota_at = self.quota_start(team, need, limit, from, runtime)?;
            let (start, landing) = self.earliest_start(shape, runtime, quota_at, prefer)?;
            if start == quota_at
                || self.quota_fits(team, need, limit, start, runtime.map(|r| start + r))
            {
                return Some((start, landing));
            }
            from = start;
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

    /// Books `need` of the team's quota for `js` from `start`, with `nodes`, the GPUs
    /// its reservation holds: under its own limit if it has one; else as use only, which
    /// the team's other reservations under a limit count (a team outside the quotas
    /// books nothing).
    pub(super) fn book_quota(
        &mut self,
        js: &JobState,
        start: i64,
        ends_at: Option<i64>,
        nodes: BTreeSet<usize>,
    ) {
        let team = self.job_team(js);
        if !self.ledger.has_team(team) {
            return;
        }
        let limit = self.own_limit_of(js).unwrap_or(u64::MAX);
        self.quota_bookings.push(QuotaBooking {
            team,
            job: js.id().to_string(),
            start_at: start,
            ends_at,
            milli: js.gpu_milli(),
            limit,
            nodes,
        });
    }

    /// The reservation `js` would break by starting now: one of its team's bookings
    /// whose quota it would still hold when that booking starts (or when another of the
    /// team's bookings starts while that one holds).
    pub(super) fn quota_promised_to_another(&mut self, js: &JobState) -> Option<Reserved> {
        let team = self.job_team(js);
        if !self.quota_bookings.has_limited(team) {
            return None;
        }
        let need = js.gpu_milli();
        let end = self.runtime(js).map(|r| self.now + r);
        let overlapping: Vec<(i64, String)> = self
            .quota_bookings
            .of_team(team)
            .filter(|b| b.start_at > self.now && end.is_none_or(|e| b.start_at < e))
            .map(|b| (b.start_at, b.job.clone()))
            .collect();
        for (at, _) in overlapping {
            let (booked, Some(limit)) = self.quota_bookings.at(team, at) else {
                continue;
            };
            if self.team_used_at(team, at) + booked + need > limit {
                // The booking that set the least limit then is the one it would break.
                let b = self
                    .quota_bookings
                    .of_team(team)
                    .filter(|b| b.active_at(at))
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
        None
    }
}
