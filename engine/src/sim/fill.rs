//! The FGD paper's fill experiment: pods arrive one at a time (sorted by name, shuffled with
//! the seed, inflated by sampling with replacement until their GPU request reaches
//! `inflate` × capacity), each is placed or dropped, nothing leaves. After every pod the
//! arrived GPU request, as a percentage of capacity, may cross whole-percent bins; at each
//! crossing the allocation and fragmentation are recorded.

use crate::core::alloc::Request;
use crate::core::fleet::Fleet;
use crate::core::frag::Workload;
use crate::core::mig::MigTable;
use crate::core::packing::Strategy;
use crate::core::placer::Placer;
use crate::core::rng::Rng;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub request: Request,
}

#[derive(Debug, Clone, Copy)]
pub struct FillConfig {
    pub inflate: f64,
    pub seed: u64,
    pub strategy: Strategy,
}

/// Per-bin metrics of one run; bins are whole percents of arrived GPU request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FillResult {
    pub seed: u64,
    /// Allocated GPU milli / capacity, in percent.
    pub allocation_ratio_pct: BTreeMap<u32, f64>,
    /// Fragmented GPU milli / capacity, in percent.
    pub frag_pct: BTreeMap<u32, f64>,
    /// Fragmented GPU milli / free GPU milli, in percent (FGD's fragmentation ratio).
    pub frag_ratio_pct: BTreeMap<u32, f64>,
    pub arrived: usize,
    pub placed: usize,
    pub failed: usize,
}

/// The arrival order: sorted by name, shuffled, then inflated.
pub fn arrivals(pods: &[Pod], capacity_milli: u64, inflate: f64, rng: &mut Rng) -> Vec<Pod> {
    let mut order: Vec<Pod> = pods.to_vec();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    rng.shuffle(&mut order);
    let target = inflate * capacity_milli as f64;
    let mut total: f64 = order
        .iter()
        .map(|p| p.request.gpu_milli_total() as f64)
        .sum();
    let gpu_pods = pods.iter().any(|p| p.request.num_gpu > 0);
    let originals = order.len();
    let mut copy = 0usize;
    while gpu_pods && total < target && originals > 0 {
        let Some(p) = order.get(rng.below(originals)).cloned() else {
            break;
        };
        total += p.request.gpu_milli_total() as f64;
        copy += 1;
        order.push(Pod {
            name: format!("{}-inflated-{copy}", p.name),
            request: p.request,
        });
    }
    order
}

pub fn run(fleet: &Fleet, pods: &[Pod], cfg: FillConfig) -> FillResult {
    let mut rng = Rng::new(cfg.seed);
    let capacity = fleet.gpu_milli_capacity();
    let order = arrivals(pods, capacity, cfg.inflate, &mut rng);
    let requests: Vec<Request> = pods.iter().map(|p| p.request.clone()).collect();
    let workload = Workload::typical(&requests);

    let mig = MigTable::default();
    // Its own stream: the placer must not replay the draws that shuffled the pods.
    let mut placer = Placer::new(fleet, cfg.strategy, &workload, &mig, rng.next_u64());
    let mut result = FillResult {
        seed: cfg.seed,
        ..FillResult::default()
    };
    let (mut arrived_milli, mut allocated_milli) = (0u64, 0u64);
    let mut next_bin = 0u32;
    for pod in &order {
        result.arrived += 1;
        match placer.choose(&pod.request, &|_| true) {
            Some(choice) => {
                placer.commit(&pod.request, &choice);
                allocated_milli += pod.request.gpu_milli_total();
                result.placed += 1;
            }
            None => result.failed += 1,
        }
        arrived_milli += pod.request.gpu_milli_total();
        let arrived_pct = 100.0 * arrived_milli as f64 / capacity.max(1) as f64;
        if f64::from(next_bin) <= arrived_pct {
            let alloc = 100.0 * allocated_milli as f64 / capacity.max(1) as f64;
            let frag: f64 = fleet
                .nodes
                .iter()
                .zip(&placer.state().nodes)
                .map(|(n, free)| workload.node_frag(n.gpu_model(), free))
                .sum();
            let free = placer.state().gpu_milli_free().max(1) as f64;
            while f64::from(next_bin) <= arrived_pct {
                result.allocation_ratio_pct.insert(next_bin, alloc);
                result
                    .frag_pct
                    .insert(next_bin, 100.0 * frag / capacity.max(1) as f64);
                result.frag_ratio_pct.insert(next_bin, 100.0 * frag / free);
                next_bin += 1;
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fleet::Node;

    fn pod(name: &str, num_gpu: u32, gpu_milli: u32) -> Pod {
        Pod {
            name: name.into(),
            request: Request {
                cpu_milli: 1000,
                memory_mib: 1024,
                num_gpu,
                gpu_milli,
                models: Vec::new(),
                ..Request::default()
            },
        }
    }

    fn fleet() -> Fleet {
        Fleet {
            nodes: (0..4)
                .map(|i| Node::uniform(&format!("n{i}"), 64_000, 262_144, 8, "V100M16"))
                .collect(),
        }
    }

    #[test]
    fn inflation_reaches_the_target_request() {
        let pods: Vec<Pod> = (0..10).map(|i| pod(&format!("p{i}"), 1, 500)).collect();
        let order = arrivals(&pods, 32_000, 1.3, &mut Rng::new(7));
        let total: u64 = order.iter().map(|p| p.request.gpu_milli_total()).sum();
        assert!((41_600..41_600 + 500).contains(&total), "{total}");
    }

    #[test]
    fn every_strategy_respects_capacity_and_is_deterministic() {
        let pods: Vec<Pod> = (0..40)
            .map(|i| match i % 4 {
                0 => pod(&format!("p{i}"), 1, 300),
                1 => pod(&format!("p{i}"), 2, 1000),
                2 => pod(&format!("p{i}"), 1, 700),
                _ => pod(&format!("p{i}"), 4, 1000),
            })
            .collect();
        for strategy in [
            Strategy::Random,
            Strategy::BestFit,
            Strategy::GpuPacking,
            Strategy::Spread,
            Strategy::Fgd,
        ] {
            let cfg = FillConfig {
                inflate: 1.3,
                seed: 42,
                strategy,
            };
            let a = run(&fleet(), &pods, cfg);
            let b = run(&fleet(), &pods, cfg);
            assert_eq!(a, b, "{strategy:?} is not deterministic");
            let last = a
                .allocation_ratio_pct
                .values()
                .last()
                .copied()
                .unwrap_or(0.0);
            assert!(last <= 100.0 && last > 50.0, "{strategy:?}: {last}");
            assert_eq!(a.placed + a.failed, a.arrived);
            assert!(a.allocation_ratio_pct.contains_key(&130));
        }
    }
}
