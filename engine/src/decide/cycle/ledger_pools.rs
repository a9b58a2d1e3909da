//! The fleet's pools as the quota ledger numbers them ([`PoolIx`]), worked out once per
//! cycle from the placer's own numbering: the ledger's checks and charges read a node's
//! pool for every placement tried, and a replay runs a cycle per event on one fleet.

use crate::core::fleet::Fleet;
use crate::core::placer::Placer;
use crate::decide::quota::{Ledger, PoolIx};

/// Each node's pool, and the pools nodes are in each once (`None`: nodes in no pool), as
/// `ledger` numbers them.
pub(super) fn number(
    ledger: &Ledger,
    placer: &Placer<'_>,
    fleet: &Fleet,
) -> (Vec<Option<PoolIx>>, Vec<Option<PoolIx>>) {
    let fleet_pools = placer
        .pools()
        .map(|p| p.map(|p| ledger.pool_ix(p)))
        .collect();
    let mut by_number: Vec<Option<PoolIx>> = vec![None; placer.pool_numbers().count()];
    for (name, n) in placer.pool_numbers() {
        if let Some(slot) = usize::try_from(n).ok().and_then(|n| by_number.get_mut(n)) {
            *slot = Some(ledger.pool_ix(name));
        }
    }
    let node_pools: Vec<Option<PoolIx>> = placer
        .node_pool_numbers()
        .iter()
        .map(|p| {
            p.and_then(|n| usize::try_from(n).ok())
                .and_then(|n| by_number.get(n).copied().flatten())
        })
        .collect();
    debug_assert!(
        fleet.nodes.iter().zip(&node_pools).all(|(n, p)| n
            .pool
            .as_deref()
            .map(|name| ledger.pool_ix(name))
            == *p),
        "each node's pool numbered as by its name"
    );
    (node_pools, fleet_pools)
}
