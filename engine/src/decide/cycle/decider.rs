//! [`Decider`]: `decide` for a caller that runs cycle after cycle over one fleet (the
//! queue controller, the replay). It keeps the placer's indexes and the running jobs'
//! allocation between cycles, keyed by the fleet and MIG table it was built for, and
//! brings them up to date from the snapshot each cycle; the plan is the one `decide`
//! makes of the same inputs, byte for byte.

use super::decide_kept;
use crate::core::fleet::Fleet;
use crate::core::mig::MigTable;
use crate::core::placer::PlacerState;
use crate::decide::plan::Plan;
use crate::decide::snapshot::Snapshot;
use lang::ir::Program;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct Decider {
    kept: Option<Kept>,
}

/// The placer state and the inputs it was built from.
#[derive(Debug)]
struct Kept {
    fleet: Arc<Fleet>,
    mig: MigTable,
    placer: PlacerState,
}

impl Decider {
    pub fn new() -> Decider {
        Decider::default()
    }

    /// The plan [`super::decide`] makes of the same inputs.
    pub fn decide(&mut self, program: &Program, snapshot: &Snapshot, now: i64) -> Plan {
        let (fleet, mig, placer) = match self.kept.take() {
            // The same fleet at a glance when the caller kept its `Arc`; else compared.
            Some(k)
                if (Arc::ptr_eq(&k.fleet, &snapshot.fleet) || k.fleet == snapshot.fleet)
                    && k.mig == snapshot.mig =>
            {
                (Arc::clone(&snapshot.fleet), k.mig, k.placer)
            }
            _ => (
                Arc::clone(&snapshot.fleet),
                snapshot.mig.clone(),
                PlacerState::new(&snapshot.fleet, &snapshot.mig),
            ),
        };
        let (plan, _, placer) = decide_kept(program, snapshot, now, None, Some(placer));
        self.kept = placer.map(|placer| Kept { fleet, mig, placer });
        plan
    }
}
