//! Placing one job: the quota gate, then directly (the team's guaranteed pools first),
//! or by preempting, or not, with a reason; and the quota check of a placement found.

use super::quota_gate::Gate;
use super::reserve::Landing;
use super::{gang, story, Blocked, Cycle, Outcome, UnfitKey};
use crate::core::gang::{JobShape, Unplaced, UnplacedCode};
use crate::core::placer::Choice;
use crate::decide::quota::QuotaBlock;
use crate::decide::snapshot::JobState;

/// Why a job that fits now is not placed under conservative backfill.
const DELAYS_RESERVED: &str = "it fits now only by delaying reserved jobs";

/// How many overbooked nodes a placement is tried again without.
const OVERBOOKED_RETRIES: usize = 4;

/// Whether `why` a gang of `shape` did not fit counts the members free room holds (see
/// [`Cycle::gang_short_now`]).
fn counts_room(shape: &JobShape, why: &Unplaced) -> bool {
    shape.members > 1 && why.code == UnplacedCode::NoCapacity && why.message != DELAYS_RESERVED
}

impl<'a> Cycle<'a> {
    /// Places one job of shape number `shape_no` (see `queue_order::QueueShapes`): the
    /// quota gate first, then directly, or by preempting, or not (with a reason).
    pub(super) fn place(&mut self, js: &'a JobState, shape_no: usize, shape: &JobShape) -> Outcome {
        let runtime = self.runtime(js);
        let ends_at = runtime.map(|r| self.now + r);
        let takes_none = std::rc::Rc::clone(&self.takes_none);
        let bookings = std::rc::Rc::clone(&self.bookings);
        let (now, member) = (self.now, &shape.member);
        // Booked nodes a MIG member cannot fit around their held slots.
        let mig_blocked = if bookings.is_empty() {
            std::collections::BTreeSet::new()
        } else {
            self.mig_blocked_by_holds(member, ends_at)
        };
        #[cfg(debug_assertions)]
        let snapshot = self.snapshot;
        let respects = |node: usize| {
            let fast = !takes_none.has(node)
                && (!bookings.is_booked(node)
                    || (bookings.allows(node, member, now, ends_at)
                        && !mig_blocked.contains(&node)));
            // The set as the snapshot has it.
            #[cfg(debug_assertions)]
            debug_assert_eq!(
                fast,
                snapshot.takes_new(node)
                    && (!bookings.is_booked(node)
                        || (bookings.allows(node, member, now, ends_at)
                            && !mig_blocked.contains(&node))),
                "node check of node {node}"
            );
            fast
        };
        // With its shape, what decides the nodes it may take: bookings let a job through
        // by the bookings that start before it ends.
        let within_key: UnfitKey =
            (!bookings.is_empty()).then(|| bookings.start_now_key(now, self.runtime(js)));
        self.tell_quota(js);
        let blocked = match self.quota_gate(js, shape) {
            Err(Gate::Never(reason)) => {
                self.tell(js, |_| format!("quota gate: never: {}", reason.message));
                return Outcome::Blocked(self.gang_timeout(js, shape, reason));
            }
            Err(Gate::Later(blocked)) => {
                if let Blocked::Quota(q) = &blocked {
                    self.tell(js, |c| {
                        format!("quota gate: not now: {}", q.message(&c.ledger))
                    });
                }
                blocked
            }
            Ok(()) => {
                // Free capacity only grows when a running job is released; until then a
                // shape that did not fit still does not.
                let known = (!self.victims_afresh && !self.memos_off)
                    .then(|| self.unfit.get(shape_no, &within_key))
                    .flatten()
                    .filter(|(epoch, at, _)| {
                        *epoch == self.released && at.is_none_or(|at| at == self.changed.len())
                    })
                    .map(|(_, _, why)| why.clone());
                // Several members on one booked node may together take what one alone
                // could, and MIG members go around the slots a booking holds: either
                // failing, the placement would delay a reservation. It is tried again
                // without the node that would be overbooked (a few times at most).
                let mut avoid: Vec<usize> = Vec::new();
                let attempt = loop {
                    let within = |n: usize| respects(n) && !avoid.contains(&n);
                    let attempt = match &known {
                        // A gang's reason counts the members free room holds, which
                        // placements since may have lowered: counted again.
                        Some(why) if counts_room(shape, why) => {
                            Err(Blocked::Capacity(self.gang_short_now(shape)))
                        }
                        Some(why) => Err(Blocked::Capacity(why.clone())),
                        None => {
                            // Where a booking of it would land now, if it places there.
                            let landed = if avoid.is_empty() {
                                self.place_as_booked(js, shape, runtime, &within)
                            } else {
                                None
                            };
                            match landed {
                                Some(placed) => Ok(placed),
                                None => self.try_place_keeping(js, shape, &within, true),
                            }
                        }
                    };
                    let delays = || {
                        Err(Blocked::Capacity(Unplaced {
                            code: UnplacedCode::NoCapacity,
                            message: DELAYS_RESERVED.into(),
                        }))
                    };
                    match attempt {
                        Ok((mut choices, borrowing)) => {
                            let steered = self.steer_off_holds(member, &mut choices, ends_at);
                            let over = bookings.violated(member, &choices, now, ends_at);
                            if steered && over.is_none() {
                                break Ok((choices, borrowing));
                            }
                            for c in &choices {
                                self.placer.release(member, c);
                            }
                            match over {
                                Some(n) if steered && avoid.len() < OVERBOOKED_RETRIES => {
                                    avoid.push(n);
                                }
                                _ => break delays(),
                            }
                        }
                        Err(Blocked::Capacity(_)) if !avoid.is_empty() => break delays(),
                        other => break other,
                    }
                };
                if let Err(Blocked::Capacity(why)) = &attempt {
                    let at = (why.message == DELAYS_RESERVED).then_some(self.changed.len());
                    self.unfit
                        .insert(shape_no, within_key, (self.released, at, why.clone()));
                }
                self.tell(js, |c| story::attempt(c, &attempt));
                match attempt {
                    Ok((choices, borrowing)) => {
                        self.hold_committed(js, choices.clone().into());
                        return Outcome::Placed {
                            choices,
                            victims: Vec::new(),
                            borrowing,
                        };
                    }
                    Err(b) => self.reserved_for_another(js, shape, b),
                }
            }
        };
        // Preemption and explanations read the holders; a placement that fits at once
        // does not.
        self.record_holders();
        if let Some(done) = self.preempt(js, shape_no, shape, &blocked, &respects, within_key) {
            return done;
        }
        let blocked = self.held_by_booking(js, (shape_no, shape), blocked);
        let reason = self.explain(js, shape_no, shape, blocked);
        Outcome::Blocked(self.gang_timeout(js, shape, reason))
    }

    /// Places without preemption: the team's guaranteed pools first (per-pool quotas),
    /// then anywhere allowed; each placement must pass the quota check.
    pub(super) fn try_place(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
    ) -> Result<(Vec<Choice>, bool), Blocked> {
        self.try_place_keeping(js, shape, within, false)
    }

    /// Under conservative backfill, `shape` placed on the nodes a booking of it would take
    /// now ([`Cycle::landing_now`]), as many members on each as the booking counts, where
    /// they fit there and the quota allows (committed in the placer). The cycles before
    /// booked it so, and the bookings after it counted on the room it leaves.
    fn place_as_booked(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        runtime: Option<i64>,
        within: &dyn Fn(usize) -> bool,
    ) -> Option<(Vec<Choice>, bool)> {
        let prefer = self.booked_for_now(js);
        let landing = self.landing_now(shape, runtime, &prefer)?;
        let (choices, fits) = self.take_landing(&landing, shape, within);
        let borrowing = if fits {
            self.quota_allows(js, &choices).ok()
        } else {
            None
        };
        if borrowing.is_none() {
            for c in &choices {
                self.placer.release(&shape.member, c);
            }
        }
        Some((choices, borrowing?))
    }

    /// `shape`'s members on the nodes of `landing`, as many on each as it counts, where
    /// `within` lets them and they fit (committed in the placer, in order); whether all
    /// did.
    pub(super) fn take_landing(
        &mut self,
        landing: &[Landing],
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
    ) -> (Vec<Choice>, bool) {
        let mut choices: Vec<Choice> = Vec::new();
        for l in landing {
            for _ in 0..l.members {
                let chosen = within(l.node)
                    .then(|| self.placer.choose_among(&[l.node], &shape.member))
                    .flatten();
                let Some(c) = chosen else {
                    return (choices, false);
                };
                self.placer.commit(&shape.member, &c);
                choices.push(c);
            }
        }
        (choices, true)
    }

    /// [`Cycle::try_place`] for a trial whose failure is not shown: no explanation is
    /// worked out when it does not fit now.
    pub(super) fn try_place_quiet(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
    ) -> Option<(Vec<Choice>, bool)> {
        self.placer.quiet = true;
        let placed = self.try_place(js, shape, within).ok();
        self.placer.quiet = false;
        placed
    }

    /// [`Cycle::try_place`]; with `keep`, a placement found stays committed in the placer
    /// (the caller holds it with [`Cycle::hold_committed`]).
    pub(super) fn try_place_keeping(
        &mut self,
        js: &JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        keep: bool,
    ) -> Result<(Vec<Choice>, bool), Blocked> {
        let team = self.job_team(js);
        // The team's guaranteed pools it is still inside first: of those the job names,
        // or where it names none, all of them.
        let mut guaranteed_first = None;
        let named_first = !shape.pools.is_empty() && self.ledger.is_per_pool(team);
        if shape.pools.is_empty() || named_first {
            let pools: Vec<String> = self
                .ledger
                .guarantee_pools(team)
                .iter()
                .filter(|p| {
                    self.ledger
                        .within_guarantee(team, &[(Some(**p), js.gpu_milli())])
                })
                .filter_map(|p| self.ledger.pool_name(*p).map(str::to_string))
                .filter(|p| !named_first || shape.pools.contains(p))
                .collect();
            // Named pools all still inside: the job's own shape is the same trial.
            let narrower = !named_first || pools.len() < shape.pools.len();
            if !pools.is_empty() && narrower {
                guaranteed_first = Some(JobShape {
                    pools,
                    ..shape.clone()
                });
            }
        }
        let mut last: Option<Blocked> = None;
        for s in guaranteed_first.iter().chain(std::iter::once(shape)) {
            // A single member is chosen without being taken: most placements the quota
            // turns down are of one member, and taking and giving back cost more than
            // the choice.
            // The freest group's room comes from the cycle's room index, not a scan.
            self.placer.group_room_elsewhere = true;
            let (placed, committed) = match gang::choose_single(&mut self.placer, s, within) {
                Some(chosen) => (chosen, false),
                None => (gang::place_job_within(&mut self.placer, s, within), true),
            };
            self.placer.group_room_elsewhere = false;
            match placed {
                Ok(choices) => match self.quota_allows(js, &choices) {
                    Ok(borrowing) => {
                        if committed != keep {
                            for c in &choices {
                                if keep {
                                    self.placer.commit(&s.member, c);
                                } else {
                                    self.placer.release(&s.member, c);
                                }
                            }
                        }
                        return Ok((choices, borrowing));
                    }
                    Err(q) => {
                        if committed {
                            for c in &choices {
                                self.placer.release(&s.member, c);
                            }
                        }
                        last = Some(Blocked::Quota(q));
                    }
                },
                Err(mut u) => {
                    if let Some(level) = gang::required_grouping(s)
                        .filter(|_| u.code == UnplacedCode::NoCapacity && !self.placer.quiet)
                    {
                        u = gang::group_short(s, level, self.freest_group_room(s, level));
                        // Tests check the index against the placer's scan at every reason.
                        #[cfg(debug_assertions)]
                        debug_assert_eq!(u, gang::not_now_by_scan(&self.placer, s));
                    }
                    // The whole shape's reason over the guaranteed pools': it says what holds
                    // for any job of the shape (the memo of shapes that did not fit keeps
                    // it for all), not for the pools one team is inside.
                    if !matches!(last, Some(Blocked::Quota(_)))
                        || u.code != UnplacedCode::NoCapacity
                    {
                        last = Some(Blocked::Capacity(u));
                    }
                }
            }
        }
        Err(last.unwrap_or(Blocked::Capacity(Unplaced {
            code: UnplacedCode::NoCapacity,
            message: "no capacity".into(),
        })))
    }

    /// Why a gang of `shape` does not fit what is free now, as a placement that fails
    /// says it: how many members the free room (or the freest topology group) holds.
    pub(super) fn gang_short_now(&mut self, shape: &JobShape) -> Unplaced {
        match gang::required_grouping(shape) {
            Some(level) => gang::group_short(shape, level, self.freest_group_room(shape, level)),
            None => gang::not_now(&self.placer, shape, &self.placer.in_pools(&shape.pools)),
        }
    }

    /// Whether the team's quotas allow `js` on `choices`; if so, whether it borrows.
    pub(super) fn quota_allows(
        &mut self,
        js: &JobState,
        choices: &[Choice],
    ) -> Result<bool, QuotaBlock> {
        let charges = self.charges(js.member_milli, choices);
        self.quota_allows_charges(js, &charges)
    }

    /// [`Cycle::quota_allows`] for a trial whose refusal nobody reads: the same verdict,
    /// without writing why.
    pub(super) fn quota_allows_quietly(
        &mut self,
        js: &JobState,
        choices: &[Choice],
    ) -> Option<bool> {
        let quiet = std::mem::replace(&mut self.placer.quiet, true);
        let allowed = self.quota_allows(js, choices).ok();
        self.placer.quiet = quiet;
        allowed
    }
}
