//! [`PlacementDecider`]: `decide_placement` for a caller that runs cycle after cycle over one fleet (the
//! queue controller, the replay). It keeps the placer's indexes and the running jobs'
//! allocation between cycles, keyed by the fleet and MIG table it was built for, and
//! brings them up to date from the snapshot each cycle; it remembers each job's team,
//! tier and shape (for the typical workload) by the revision the caller gave the job's
//! state (`JobState::revision`). The plan is the one `decide` makes of the same inputs,
//! byte for byte.

use super::{decide_kept, Carried, Placement};
use crate::core::fleet::Fleet;
use crate::core::mig::MigTable;
use crate::core::placer::PlacerState;
use crate::decide::snapshot::Snapshot;
use lang::ir::Program;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct PlacementDecider {
    kept: Option<Kept>,
}

/// What the last cycle left, and the fleet and MIG table its placer state was built for.
#[derive(Debug)]
struct Kept {
    fleet: Arc<Fleet>,
    mig: MigTable,
    carried: Carried,
}

impl PlacementDecider {
    pub fn new() -> PlacementDecider {
        PlacementDecider::default()
    }

    /// The placement [`super::decide_placement`] makes of the same inputs.
    pub fn decide<'s>(
        &mut self,
        program: &Program,
        snapshot: &'s Snapshot,
        now: i64,
    ) -> Placement<'s> {
        if super::cache::nothing_is_kept() {
            self.kept = None;
            return decide_kept(program, snapshot, now, None, None).0;
        }
        let (mig, carried) = match self.kept.take() {
            // The same fleet at a glance when the caller kept its `Arc`; else compared.
            Some(k)
                if (Arc::ptr_eq(&k.fleet, &snapshot.fleet) || k.fleet == snapshot.fleet)
                    && k.mig == snapshot.mig =>
            {
                (k.mig, k.carried)
            }
            // Another fleet: the placer starts afresh; jobs' teams and tiers still hold.
            k => {
                let (memo, typical, carry, buffers) = k
                    .map(|k| {
                        let c = k.carried;
                        (c.memo, c.typical, c.carry, c.buffers)
                    })
                    .unwrap_or_default();
                (
                    snapshot.mig.clone(),
                    Carried {
                        placer: PlacerState::new(&snapshot.fleet, &snapshot.mig),
                        memo,
                        typical,
                        carry,
                        capacity: None,
                        buffers,
                    },
                )
            }
        };
        let fleet = Arc::clone(&snapshot.fleet);
        let (placement, _, carried) = decide_kept(program, snapshot, now, None, Some(carried));
        self.kept = carried.map(|carried| Kept {
            fleet,
            mig,
            carried,
        });
        placement
    }
}
