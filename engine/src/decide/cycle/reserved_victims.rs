//! The victims a reservation by preempting counts on, and the GPUs they free for the
//! bookings beside it: what later bookings, and the cycle that starts it
//! (`preempt_as_booked.rs`), take as its victims.

use super::bookings::Booking;
use super::preempt::Asker;
use super::protected_wait::{whole_gpus, Look, ProtectedWait, Step};
use super::Cycle;
use crate::core::alloc::NodeFree;
use crate::core::fleet::MILLI;
use crate::core::gang::{member_slots, JobShape};
use crate::core::placer::{give_on, take_on};
use crate::decide::snapshot::JobState;

impl Cycle<'_> {
    /// The jobs a reservation that starts by preempting (`wait`) stops then on the nodes
    /// where it lands: on each, the jobs that end by `wait.at` gone, then the victims it
    /// may take by then, in the order they may go, until the node holds the members it
    /// lands there; then, as preemption prunes a node's set, each
    /// earlier victim the members do not need is taken back (latest first). Room counts
    /// what the bookings so far leave spare then (called before its own is made), with
    /// the GPUs its victims free for them. Later bookings count on the room of these
    /// victims only. With them, each node's whole free GPUs then (these victims gone).
    pub(super) fn reserved_victims(
        &self,
        js: &JobState,
        shape: &JobShape,
        wait: &ProtectedWait,
    ) -> (Vec<usize>, Vec<(usize, u64)>) {
        let asker = Asker::new(self.job_team(js), self.priority(js), self.reclaimable(js));
        let runtime = self.runtime(js);
        let until = runtime.map(|r| wait.ready.saturating_add(r));
        let ctx = self.placer.context();
        let mut victims = Vec::new();
        let mut whole_then = Vec::new();
        for landing in &wait.nodes {
            let n = landing.node;
            let (Some(node), Some(capacity), Some(now_free)) = (
                self.snapshot.fleet.nodes.get(n),
                self.placer.empty_state().nodes.get(n),
                self.placer.state().nodes.get(n),
            ) else {
                continue;
            };
            let raw = |free: &NodeFree| member_slots(&ctx, node, free, &shape.member);
            let look = Look {
                asker: &asker,
                own_only: false,
                measure: &raw,
                enough: u64::MAX,
                ending: Some(self.others_on.on(n)),
                before: wait.at.saturating_add(1),
                booked: None,
                member: &shape.member,
                runtime,
            };
            let (_, steps) = self.timeline(n, &look);
            let room = |free: &NodeFree, taken: &[usize]| {
                let gone: Vec<(usize, i64)> = taken.iter().map(|h| (*h, wait.ready)).collect();
                let freed = |b: &Booking| self.freed_for_bookings(n, &gone, b);
                self.bookings.cap_freeing(
                    n,
                    (raw(free), whole_gpus(free)),
                    &shape.member,
                    (wait.at, until),
                    &freed,
                )
            };
            let on_node = |h: usize| {
                self.holders.get(h).into_iter().flat_map(move |x| {
                    x.choices
                        .iter()
                        .filter(move |c| c.node == n)
                        .map(move |c| (x.member(), &c.on))
                })
            };
            let mut free = now_free.clone();
            let mut taken: Vec<usize> = Vec::new();
            // Jobs that end by its start leave their room at no cost: first, whatever
            // their place in time (the victims' order does not depend on them).
            let (ends, preempted): (Vec<&Step>, Vec<&Step>) =
                steps.iter().partition(|s| !s.preempted);
            for s in ends.into_iter().chain(preempted) {
                let Some(h) = s.holder else {
                    continue;
                };
                for (m, on) in on_node(h) {
                    give_on(&ctx, node, &mut free, m, on, capacity);
                }
                if s.preempted {
                    taken.push(h);
                }
                if room(&free, &taken) >= landing.members {
                    break;
                }
            }
            let Some(&last) = taken.last() else {
                whole_then.push((n, whole_gpus(&free)));
                continue;
            };
            let mut set = taken.clone();
            for &h in taken.iter().rev().skip(1) {
                for (m, on) in on_node(h) {
                    take_on(&ctx, node, &mut free, m, on);
                }
                set.retain(|x| *x != h);
                if room(&free, &set) < landing.members {
                    for (m, on) in on_node(h) {
                        give_on(&ctx, node, &mut free, m, on, capacity);
                    }
                    set.push(h);
                }
            }
            let kept: Vec<usize> = taken.iter().copied().filter(|h| set.contains(h)).collect();
            debug_assert_eq!(kept.last(), Some(&last));
            victims.extend(kept);
            whole_then.push((n, whole_gpus(&free)));
        }
        (victims, whole_then)
    }

    /// Whole GPUs on node `n` that victims `gone` (each with when it stops) free for
    /// booking `b` and that it counted busy: those of victims stopped by its start that
    /// were to run past it, not its own. Shares count none (a shared GPU may stay taken).
    pub(super) fn freed_for_bookings(&self, n: usize, gone: &[(usize, i64)], b: &Booking) -> u64 {
        let t = b.held_from;
        gone.iter()
            .filter(|(h, stops)| *stops <= t && !b.victims.contains(h))
            .filter_map(|(h, _)| self.holders.get(*h))
            .filter(|x| x.ends_at.is_none_or(|e| e > t) && x.member_milli() >= u64::from(MILLI))
            .flat_map(|x| x.choices.iter().filter(|c| c.node == n))
            .map(|c| c.on.gpus.len() as u64)
            .sum()
    }

    /// When holder `h`, preempted now, has stopped: after its grace.
    pub(super) fn stops_if_preempted_now(&self, h: usize) -> i64 {
        let grace = self
            .holders
            .get(h)
            .and_then(|x| x.victim())
            .map_or(0, |v| v.grace_s);
        self.now.saturating_add(grace as i64)
    }

    /// Victims that stop at `at` (each with its grace, when `at` is `None`: preempted
    /// now): the bookings their GPUs free count them free at their start.
    pub(super) fn free_for_bookings(&mut self, victims: &[usize], at: Option<i64>) {
        if self.bookings.is_empty() {
            return;
        }
        let mut freed = Vec::new();
        for (h, x) in victims
            .iter()
            .filter_map(|h| Some((*h, self.holders.get(*h)?)))
        {
            if x.member_milli() < u64::from(MILLI) {
                continue;
            }
            let stops = at.unwrap_or_else(|| self.stops_if_preempted_now(h));
            for c in x.choices.iter() {
                freed.push((c.node, (h, c.on.gpus.len() as u64), stops, x.ends_at));
            }
        }
        let bookings = std::rc::Rc::make_mut(&mut self.bookings);
        for (n, gpus, stops, until) in freed {
            bookings.freed(n, gpus, stops, until);
        }
    }

    /// The first node where `choices` of a job of `runtime` started now take more than
    /// the bookings leave spare, once `victims`, preempted now, stop (each within its
    /// grace; its work starts once the last has).
    pub(super) fn violated_preempting(
        &self,
        member: &crate::core::alloc::Request,
        choices: &[crate::core::placer::Choice],
        runtime: Option<i64>,
        victims: &[usize],
    ) -> Option<usize> {
        if self.bookings.is_empty() {
            return None;
        }
        let gone: Vec<(usize, i64)> = victims
            .iter()
            .map(|h| (*h, self.stops_if_preempted_now(*h)))
            .collect();
        let work_from = gone.iter().map(|(_, t)| *t).max().unwrap_or(self.now);
        let until = runtime.map(|r| work_from.saturating_add(r));
        let freed = |n: usize, b: &Booking| self.freed_for_bookings(n, &gone, b);
        self.bookings
            .violated_freeing(member, choices, (self.now, until), &freed)
    }
}
