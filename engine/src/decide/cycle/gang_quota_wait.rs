//! How long a gang its own team's quota holds waits: until its team's jobs it may
//! preempt (now, or as their protection ends) and its team's other jobs (as they end)
//! return the quota it needs, and the nodes it may use hold every member.

use super::preempt::Asker;
use super::protected_wait::{whole_gpus, Held, ProtectedWait, Wake};
use super::Cycle;
use crate::core::fleet::MILLI;
use crate::core::gang::JobShape;
use crate::decide::snapshot::JobState;
use rustc_hash::FxHashMap;

impl Cycle<'_> {
    /// A gang its own team's quota holds: the earliest time its team's jobs it may
    /// preempt (now, or as their protection ends) and its team's other jobs (as they
    /// end) return the quota it needs, each preempted one through its grace, and the
    /// nodes it may use hold every member: their whole GPUs free now, with those the
    /// team's jobs leave and those other teams' jobs leave as they end, counted node by
    /// node (for whole-GPU members; GPU shares and MIG instances as a total).
    pub(super) fn gang_quota_wait(
        &self,
        js: &JobState,
        shape: &JobShape,
        asker: &Asker,
        before: i64,
    ) -> Option<ProtectedWait> {
        let team = asker.team;
        // Counted against the team's whole use: for a limit in one pool, its burst.
        let limit = match self.own_limit_of(js, shape)? {
            (None, limit) => limit,
            (Some(_), _) => self.ledger.burst(team)?,
        };
        let used = self.ledger.usage(team).map_or(0, |(u, _)| u);
        let need = js.gpu_milli();
        let to_free = (used + need).checked_sub(limit).filter(|f| *f > 0)?;
        // (from, holder, what frees it then, grace).
        let mut order: Vec<(i64, usize, Option<Wake>, u64)> = Vec::new();
        for &(end, h) in self.team_ends.get(&team)? {
            let Some(holder) = self.holders.get(h).filter(|x| !x.evicted) else {
                continue;
            };
            if let Some(v) = holder
                .victim()
                .filter(|_| self.victim_rank(h, asker).is_some())
            {
                order.push((self.now, h, None, v.grace_s));
            } else if let Some(p) = holder
                .protected()
                .filter(|p| self.may_make_way(team, p.priority, asker).is_some())
                .filter(|p| p.from < end)
            {
                order.push((p.from, h, Some(Wake::Protection(p.why)), p.grace_s));
            } else if end != i64::MAX {
                order.push((end.max(self.now), h, Some(Wake::End(h)), 0));
            }
        }
        order.sort_unstable_by_key(|(from, h, _, _)| (*from, *h));
        let usable = self.may_wait_on(shape);
        let mut room = GangRoom::new(shape, need);
        for n in (0..self.snapshot.fleet.nodes.len()).filter(|n| matches!(usable(*n), Some(None))) {
            if let Some(free) = self.placer.state().nodes.get(n) {
                room.add(n, whole_gpus(free));
            }
        }
        // Other teams' jobs free room (not quota) as they end.
        let mut others = self
            .ends
            .iter()
            .filter(|(e, h)| {
                *e > self.now
                    && self
                        .holders
                        .get(*h)
                        .is_some_and(|x| !x.evicted && x.team_ix != team)
            })
            .peekable();
        // The team's jobs and the others', in the order they go (others first on a tie).
        let mut order = order.into_iter().peekable();
        let (mut freed, mut grace) = (0u64, 0u64);
        loop {
            if freed < to_free && order.peek().is_none() {
                return None;
            }
            let other_first = match (order.peek(), others.peek()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(t), Some(o)) => o.0 <= t.0,
            };
            let (at, why, x) = if other_first {
                let Some(&(end, o)) = others.next() else {
                    break;
                };
                let Some(x) = self.holders.get(o) else {
                    continue;
                };
                (end, Some(Wake::End(o)), x)
            } else {
                let Some((from, h, why, g)) = order.next() else {
                    break;
                };
                let Some(x) = self.holders.get(h) else {
                    continue;
                };
                freed += x.member_milli() * x.choices.len() as u64;
                grace = grace.max(g);
                (from, why, x)
            };
            if at >= before {
                return None;
            }
            room.give(x, &usable);
            if freed < to_free || !room.fits() {
                continue;
            }
            // Preemptible now suffices: something else holds it back.
            let why = why.filter(|_| at > self.now)?;
            let ready = at.saturating_add(grace as i64);
            return (ready < before).then(|| ProtectedWait {
                ready,
                node: x.choices.first().map_or(0, |c| c.node),
                why,
                at,
                nodes: Vec::new(),
            });
        }
        None
    }
}

/// How many members of a gang the nodes it may use hold, as jobs leave them: whole GPUs
/// node by node for whole-GPU members, else GPUs as a fleet total.
struct GangRoom {
    /// GPUs per member (`None`: shares or MIG instances, counted as a total).
    per: Option<u64>,
    /// Members it needs (per node), or GPUs (as a total).
    needs: u64,
    free: FxHashMap<usize, u64>,
    /// Members held (per node), or GPUs free in all (as a total).
    held: u64,
}

impl GangRoom {
    /// For `shape`, whose members need `need` milli-GPUs together.
    fn new(shape: &JobShape, need: u64) -> Self {
        let per = super::bookings::booked_gpus(&shape.member)
            .filter(|p| *p > 0 && shape.member.gpu_milli >= MILLI);
        GangRoom {
            per,
            needs: per.map_or(need / u64::from(MILLI), |_| u64::from(shape.members)),
            free: FxHashMap::default(),
            held: 0,
        }
    }

    fn add(&mut self, node: usize, gpus: u64) {
        let Some(per) = self.per else {
            self.held += gpus;
            return;
        };
        let was = self.free.get(&node).copied().unwrap_or(0);
        let now = was.saturating_add(gpus);
        self.free.insert(node, now);
        self.held += now / per - was / per;
    }

    /// What `holder` leaves on the nodes the gang may use (`usable`, unbooked): its
    /// whole GPUs there, or (counted as a total) its GPUs anywhere.
    fn give(
        &mut self,
        holder: &super::holding::Holder<'_>,
        usable: &dyn Fn(usize) -> Option<Option<Held>>,
    ) {
        if self.per.is_none() {
            let milli = holder.member_milli() * holder.choices.len() as u64;
            self.held += milli / u64::from(MILLI);
            return;
        }
        if holder.member_milli() < u64::from(MILLI) {
            return;
        }
        for c in holder.choices.iter() {
            if matches!(usable(c.node), Some(None)) {
                self.add(c.node, c.on.gpus.len() as u64);
            }
        }
    }

    fn fits(&self) -> bool {
        self.held >= self.needs
    }
}
