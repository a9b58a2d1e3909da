//! Under conservative backfill, a job that starts now by preempting takes the victims and
//! nodes a booking of it made now would ([`Cycle::wait_now`], [`Cycle::reserved_victims`]),
//! as `place_as_booked` does for a job that needs no victims. The cycles before booked it
//! so, and the bookings after it counted on the room it leaves; the victim search,
//! cheapest victims first, may choose other nodes and take that room.

use super::explain::{GANG_WAIT_BUDGET, RESERVING_WAIT_BUDGET};
use super::preempt::Asker;
use super::{Cycle, Outcome};
use crate::core::gang::JobShape;
use crate::decide::snapshot::JobState;

/// What preempting as booked came to.
pub(super) enum AsBooked {
    Placed(Outcome),
    /// Room comes as soon without preempting (victims that end by themselves before
    /// their grace would be over): no victim is taken, as a booking would take none.
    Later,
    /// No booking would start it now by preempting: the victim search decides.
    Search,
}

impl<'a> Cycle<'a> {
    /// `js` placed by preempting as its booking would (under conservative backfill), if a
    /// booking of it made now would start now by preempting, and every rule allows it
    /// (each victim's, rule 3 over the set, the quota, the bookings so far, `within`).
    /// Other than `Placed`, the state is as it was.
    pub(super) fn preempt_as_booked(
        &mut self,
        js: &'a JobState,
        shape: &JobShape,
        within: &dyn Fn(usize) -> bool,
        asker: &Asker,
    ) -> AsBooked {
        // Bookings by preempting are as many as the reserving waits a cycle looks for.
        let gang = shape.members > 1;
        let (looks, gangs) = self.as_booked_looks;
        if looks >= RESERVING_WAIT_BUDGET || (gang && gangs >= GANG_WAIT_BUDGET) {
            return AsBooked::Search;
        }
        self.as_booked_looks = (looks + 1, gangs + usize::from(gang));
        let Some(wait) = self.wait_now(js, shape) else {
            return AsBooked::Search;
        };
        let runtime = self.runtime(js);
        if self
            .joint_start(js, shape, runtime)
            .is_some_and(|(start, _)| start <= wait.ready)
        {
            self.tell(js, |_| {
                "preemption: not now: room comes as soon without preempting".into()
            });
            return AsBooked::Later;
        }
        let (victims, _) = self.reserved_victims(js, shape, &wait);
        if victims.is_empty()
            || victims
                .iter()
                .any(|h| self.victim_rank(*h, asker).is_none())
        {
            return AsBooked::Search;
        }
        for h in &victims {
            self.release_holder(*h);
        }
        // The bookings are checked below, with the GPUs its victims free for them;
        // `within` checks them without (MIG members keep it: they go around held slots).
        let snapshot = self.snapshot;
        let open = |n: usize| {
            if shape.member.mig_profile.is_some() {
                within(n)
            } else {
                snapshot.takes_new(n)
            }
        };
        let (choices, fits) = self.take_landing(&wait.nodes, shape, &open);
        for c in &choices {
            self.placer.release(&shape.member, c);
        }
        let borrowing = if fits
            && self
                .violated_preempting(&shape.member, &choices, runtime, &victims)
                .is_none()
            && self.teams_taken_below_guarantee(&victims, asker).is_empty()
        {
            self.quota_allows_quietly(js, &choices)
        } else {
            None
        };
        let Some(borrowing) = borrowing else {
            self.restore_all(&victims);
            return AsBooked::Search;
        };
        self.tell(js, |c| {
            let names: Vec<String> = wait
                .nodes
                .iter()
                .filter_map(|l| c.node_name(l.node))
                .collect();
            format!(
                "preemption: as a booking of it would, on {} ({} victims)",
                names.join(", "),
                victims.len()
            )
        });
        AsBooked::Placed(self.evict_for(js, asker, victims, (choices, borrowing)))
    }
}
