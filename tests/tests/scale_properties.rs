//! Issue 53 #4 as a property: a scale-up never buys nodes that leave the waiting gangs it
//! was bought for unplaceable. Random gangs (and single jobs) that may run only in an
//! autoscaled pool wait; the pool's maximum and `max_spend` cap what may be bought. Where a
//! plan adds nodes, the same queue decided again with those nodes up and empty places a
//! job on them, and every gang placed there is whole; where the queue holds only gangs,
//! a gang is placed.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::core::fleet::{Fleet, Node};
use engine::decide::plan::Action;
use engine::inventory::jobs_file::Job;
use proptest::prelude::*;
use replay::{decide, job};

mod replay;

/// (the pool's maximum nodes, `max_spend` in nodes' worth (`None`: no cap), waiting jobs
/// as (members, GPUs per member)).
type Case = (u32, Option<u32>, Vec<(u32, u32)>);

fn case_strategy() -> impl Strategy<Value = Case> {
    let size = prop_oneof![Just(1u32), Just(2), Just(4), Just(8)];
    (
        1u32..8,
        prop::option::of(1u32..6),
        prop::collection::vec((prop_oneof![2 => Just(1u32), 3 => 2u32..5], size), 1..8),
    )
}

/// An 8-GPU node of `pool`.
fn node(name: &str, pool: &str) -> Node {
    let mut n = Node::uniform(name, 224_000, 2_097_152, 8, "H100-SXM5-80GB");
    n.pool = Some(pool.into());
    n
}

/// Job `i`, which may run only in the spot pool.
fn spot_job(i: usize, members: u32, gpus: u32) -> Job {
    let mut j = job(format!("j{i}"), "standard", members, gpus, 3600, i as i64);
    j.shape.pools = vec!["spot".into()];
    j
}

/// What one case saw: nodes bought, whether the queue held gangs only, and whether the
/// pool's maximum or the cap left some of the queue's nodes unbought.
#[derive(Debug, Clone, Copy)]
struct Seen {
    added: u64,
    gangs_only: bool,
    capped: bool,
}

/// Decides the case; where it scales the pool up, decides again with the new nodes up.
fn check(case: &Case) -> Result<Seen, TestCaseError> {
    let (max, cap, jobs) = case;
    // 40 $/h a node; a cap of k nodes' worth sits between k and k + 1 nodes.
    let spend = cap.map_or(String::new(), |k| {
        format!("\n  max_spend = {} $/h", k * 40 + 20)
    });
    let text = format!(
        "use std.nodes.{{dgx_h100}}\nuse std.tiers\n\
         pool base {{ capacity = on_demand; node = dgx_h100; nodes = 1; cost = 98 $/h }}\n\
         pool spot {{ capacity = spot; node = dgx_h100; nodes = 0..{max}; cost = 40 $/h; boot = 7m }}\n\
         autoscale spot {{\n  up when pending_nodes(fits = spot) > 0 nodes => add pending_nodes(fits = spot)\n  down when idle > 15m{spend}\n}}\n"
    );
    let program = lang::check(&[("p.gantry".to_string(), text.clone())])
        .program
        .unwrap_or_else(|| panic!("the policy checks:\n{text}"));
    let queue: Vec<Job> = jobs
        .iter()
        .enumerate()
        .map(|(i, (members, gpus))| spot_job(i, *members, *gpus))
        .collect();
    let fleet = Fleet {
        nodes: vec![node("base", "base")],
    };
    let (_, plan) = decide(&program, fleet.clone(), queue.clone(), 100_000);
    let added: i64 = plan
        .scale
        .iter()
        .filter(|s| s.pool == "spot")
        .map(|s| s.delta_nodes)
        .sum();
    prop_assert!(
        added <= i64::from(*max),
        "added {added} nodes to a pool of at most {max}"
    );
    if let Some(k) = cap {
        prop_assert!(
            added <= i64::from(*k),
            "added {added} nodes under a cap of {k} nodes' worth"
        );
    }
    let gangs_only = jobs.iter().all(|(members, _)| *members > 1);
    // Nodes the queue would take, each job on nodes of its own (an upper bound).
    let wanted: u64 = jobs
        .iter()
        .map(|(members, gpus)| u64::from(members * gpus).div_ceil(8))
        .sum();
    let limit = u64::from(*max).min(cap.map_or(u64::MAX, u64::from));
    let seen = Seen {
        added: u64::try_from(added).unwrap_or(0),
        gangs_only,
        capped: limit < wanted,
    };
    if added <= 0 {
        return Ok(seen);
    }
    let mut grown = fleet;
    grown
        .nodes
        .extend((0..added).map(|i| node(&format!("spot-{i}"), "spot")));
    let (_, after) = decide(&program, grown, queue.clone(), 100_000);
    let on_new: Vec<&str> = after
        .decisions
        .iter()
        .filter(|d| d.action == Action::Place)
        .filter(|d| d.placement.iter().any(|a| a.node.starts_with("spot-")))
        .map(|d| d.job.as_str())
        .collect();
    prop_assert!(
        !on_new.is_empty(),
        "{added} nodes were bought and nothing waiting is placed on them:\n{}\n{:?}",
        text,
        plan.scale
    );
    for d in after.decisions.iter().filter(|d| d.action == Action::Place) {
        let j = queue.iter().find(|j| j.id == d.job).unwrap();
        prop_assert_eq!(
            d.placement.len(),
            j.shape.members as usize,
            "{} whole",
            &d.job
        );
    }
    if gangs_only {
        prop_assert!(
            on_new
                .iter()
                .any(|id| { queue.iter().any(|j| j.id == *id && j.shape.members > 1) }),
            "{added} nodes bought for gangs and no gang is placed on them"
        );
    }
    Ok(seen)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn scale_ups_never_buy_nodes_a_waiting_gang_cannot_use(case in case_strategy()) {
        check(&case)?;
    }
}

/// Not vacuous: over a fixed run plans scale up, some for gangs alone, and the pool's
/// maximum or the cap binds both where some nodes are still bought and where none are.
#[test]
fn random_cases_scale_up_for_gangs() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut bought, mut for_gangs, mut capped_bought, mut capped_none) = (0, 0, 0, 0);
    for _ in 0..100 {
        let case = case_strategy().new_tree(&mut runner).unwrap().current();
        let s = check(&case).unwrap_or_else(|e| panic!("{case:?}: {e}"));
        bought += usize::from(s.added > 0);
        for_gangs += usize::from(s.added > 0 && s.gangs_only);
        capped_bought += usize::from(s.capped && s.added > 0);
        capped_none += usize::from(s.capped && s.added == 0);
    }
    eprintln!("{bought} scaled up, {for_gangs} for gangs alone; capped: {capped_bought} bought some, {capped_none} none");
    assert!(bought >= 10, "only {bought} plans scaled up");
    assert!(for_gangs >= 5, "only {for_gangs} scaled up for gangs alone");
    assert!(
        capped_bought >= 5,
        "only {capped_bought} capped plans bought some nodes"
    );
    assert!(capped_none >= 1, "no capped plan bought nothing");
}
