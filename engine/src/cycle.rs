//! One decision cycle as its callers run it: placement (`decide`), then autoscaling and
//! warm pools (`scale`) over what placement left waiting, on the snapshot placement
//! judged. The dependency is one way: `scale` reads `decide`'s plan and snapshot; `decide`
//! knows nothing of `scale`.

use crate::decide::plan::Plan;
use crate::decide::snapshot::Snapshot;
use crate::decide::{decide_placement, placement_story, Placement, PlacementDecider};
use lang::ir::Program;

/// One whole decision cycle: pure and deterministic.
pub fn decide(program: &Program, snapshot: &Snapshot, now: i64) -> Plan {
    with_scaling(program, decide_placement(program, snapshot, now), now)
}

/// [`decide`] for a caller that runs cycle after cycle over one fleet (the queue
/// controller, the replay): the placement keeps its indexes between cycles
/// ([`PlacementDecider`]); the plan is the one [`decide`] makes of the same inputs.
#[derive(Debug, Default)]
pub struct Decider {
    placement: PlacementDecider,
}

impl Decider {
    pub fn new() -> Decider {
        Decider::default()
    }

    pub fn decide(&mut self, program: &Program, snapshot: &Snapshot, now: i64) -> Plan {
        with_scaling(program, self.placement.decide(program, snapshot, now), now)
    }
}

/// Runs one cycle as [`decide`] does and tells what happened to job `id`, step by step
/// (`gantry plan --job ID`). `None` when no job has that id.
pub fn job_story(
    program: &Program,
    snapshot: &Snapshot,
    now: i64,
    id: &str,
) -> Option<(Plan, Vec<String>)> {
    let (placement, lines) = placement_story(program, snapshot, now, id)?;
    Some((with_scaling(program, placement, now), lines))
}

fn with_scaling(program: &Program, placement: Placement<'_>, now: i64) -> Plan {
    let Placement { mut plan, judged } = placement;
    crate::scale::apply(program, &judged, &mut plan, now);
    plan
}
