//! Property tests of the placement invariants over random fleets and jobs, for every
//! packing strategy: no GPU, share or MIG slot is given twice; capacity is never exceeded;
//! gangs are whole or absent (and an absent gang changes nothing); required topology,
//! pools, models and GPU memory always hold; the same inputs give the same placements.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Gpu, MigInstance, Node};
use engine::core::frag::Workload;
use engine::core::gang::{self, JobShape, Unplaced};
use engine::core::mig::{self, MigTable};
use engine::core::packing::Strategy as Packing;
use engine::core::placer::{Choice, Placer};
use engine::inventory::catalog;
use lang::ir::TopologyLevel;
use proptest::prelude::*;
use std::collections::BTreeMap;

const MODELS: [&str; 2] = ["H100-SXM5-80GB", "L4"];
const STRATEGIES: [Packing; 6] = [
    Packing::Random,
    Packing::BestFit,
    Packing::GpuPacking,
    Packing::Spread,
    Packing::Fgd,
    Packing::LeastFragmentation,
];

fn gpu_strategy() -> impl proptest::strategy::Strategy<Value = (bool, bool, Option<u32>)> {
    // (healthy, MIG mode, NVLink island)
    (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.15),
        prop::option::of(0u32..2),
    )
}

fn node_strategy(i: usize) -> impl proptest::strategy::Strategy<Value = Node> {
    (
        0usize..2,
        0u32..9,
        prop::collection::vec(gpu_strategy(), 8),
        4_000u64..128_000,
        65_536u64..1_048_576,
        prop::option::of(0u32..2),
        prop::option::of(0u32..3),
        prop::option::of(0u32..2),
        prop::bool::weighted(0.3),
    )
        .prop_map(move |(m, n, gpus, cpu, mem, domain, rack, pool, preused)| {
            let model = MODELS[m];
            let h100 = m == 0;
            let mut labels = BTreeMap::new();
            if let Some(d) = domain {
                labels.insert("nvlink_domain".to_string(), format!("d{d}"));
            }
            if let Some(r) = rack {
                labels.insert("rack".to_string(), format!("r{r}"));
            }
            Node {
                name: format!("n{i}"),
                pool: pool.map(|p| format!("p{p}")),
                cpu_milli: cpu,
                memory_mib: mem,
                labels,
                gpus: gpus
                    .into_iter()
                    .take(n as usize)
                    .enumerate()
                    .map(|(k, (healthy, mig_mode, island))| Gpu {
                        healthy,
                        nvlink_island: island,
                        mig: (h100 && mig_mode).then(|| {
                            if preused {
                                vec![MigInstance {
                                    profile: "1g.10gb".into(),
                                    start: 6,
                                }]
                            } else {
                                Vec::new()
                            }
                        }),
                        ..Gpu::new(k as u32, model, if h100 { 81_559 } else { 23_034 })
                    })
                    .collect(),
            }
        })
}

fn fleet_strategy() -> impl proptest::strategy::Strategy<Value = Fleet> {
    (1usize..9).prop_flat_map(|n| {
        (0..n)
            .map(node_strategy)
            .collect::<Vec<_>>()
            .prop_map(|nodes| Fleet { nodes })
    })
}

const PROFILES: [&str; 4] = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"];

fn level(k: u32) -> Option<TopologyLevel> {
    match k {
        0 => Some(TopologyLevel::Node),
        1 => Some(TopologyLevel::NvlinkDomain),
        2 => Some(TopologyLevel::Rack),
        _ => None,
    }
}

fn job_strategy() -> impl proptest::strategy::Strategy<Value = JobShape> {
    (
        1u32..4,
        prop_oneof![Just(1u32), Just(1), 0u32..9],
        prop::option::weighted(0.6, 1u32..1000),
        0u32..3,
        0u32..4,
        prop::option::of(0usize..4),
        0u64..16_000,
        0u64..32_768,
        prop::option::weighted(0.3, 0u32..2),
        (0u32..6, 0u32..6),
    )
        .prop_map(
            |(members, gpus, share, model, vram, mig_profile, cpu, mem, pool, (req, pref))| {
                let mig_profile = mig_profile
                    .filter(|_| gpus > 0 && gpus <= 2)
                    .map(|p| PROFILES[p].to_string());
                let share = share.filter(|_| gpus == 1 && mig_profile.is_none());
                JobShape {
                    members,
                    member: Request {
                        cpu_milli: cpu,
                        memory_mib: mem,
                        num_gpu: gpus,
                        gpu_milli: if gpus == 0 { 0 } else { share.unwrap_or(1000) },
                        models: match model {
                            1 => vec![MODELS[0].to_string()],
                            2 => vec![MODELS[1].to_string()],
                            _ => Vec::new(),
                        },
                        vram_mib: if vram == 3 { 40_000 } else { 0 },
                        mig_profile,
                    },
                    pools: pool.map(|p| vec![format!("p{p}")]).unwrap_or_default(),
                    topology_required: level(req),
                    topology_preferred: level(pref),
                }
            },
        )
}

type Outcome = Result<Vec<Choice>, Unplaced>;

fn run(fleet: &Fleet, jobs: &[JobShape], strategy: Packing, mig: &MigTable) -> Vec<Outcome> {
    let members: Vec<Request> = jobs.iter().map(|j| j.member.clone()).collect();
    let workload = Workload::typical(&members);
    let mut placer = Placer::new(fleet, strategy, &workload, mig, 7);
    let mut out = Vec::new();
    for job in jobs {
        let before = placer.state().clone();
        let outcome = gang::place_job(&mut placer, job);
        if outcome.is_err() {
            assert_eq!(
                &before,
                placer.state(),
                "an unplaced gang changed the cluster"
            );
        }
        out.push(outcome);
    }
    out
}

/// Replays the outcomes from an empty cluster and checks every invariant.
fn check(fleet: &Fleet, jobs: &[JobShape], outcomes: &[Outcome], mig: &MigTable) {
    let mut milli: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let mut whole: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let mut slots: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let mut cpu: BTreeMap<usize, u64> = BTreeMap::new();
    let mut mem: BTreeMap<usize, u64> = BTreeMap::new();
    for (ni, n) in fleet.nodes.iter().enumerate() {
        for (gi, g) in n.gpus.iter().enumerate() {
            for inst in g.mig.iter().flatten() {
                let p = mig.profile(&g.model, &inst.profile).unwrap();
                *slots.entry((ni, gi)).or_default() |= mig::mask(p, inst.start);
            }
        }
    }
    for (job, outcome) in jobs.iter().zip(outcomes) {
        let Ok(choices) = outcome else { continue };
        let r = &job.member;
        assert_eq!(choices.len(), job.members as usize, "gang not whole");
        if let Some(level) = job.topology_required.filter(|l| *l != TopologyLevel::Any) {
            let keys: Vec<Option<String>> = choices
                .iter()
                .map(|c| fleet.nodes[c.node].topology_key(level))
                .collect();
            assert!(
                keys[0].is_some(),
                "placed on a node without the required label"
            );
            assert!(
                keys.iter().all(|k| *k == keys[0]),
                "required {level:?} broken: {keys:?}"
            );
        }
        for c in choices {
            let node = &fleet.nodes[c.node];
            if !job.pools.is_empty() {
                assert!(
                    node.pool.as_ref().is_some_and(|p| job.pools.contains(p)),
                    "pool broken"
                );
            }
            assert!(r.accepts_model(node.gpu_model()), "model broken");
            *cpu.entry(c.node).or_default() += r.cpu_milli;
            *mem.entry(c.node).or_default() += r.memory_mib;
            let expected = if r.num_gpu == 0 {
                0
            } else {
                r.num_gpu as usize
            };
            assert_eq!(c.on.gpus.len(), expected, "wrong number of GPUs");
            for (k, g) in c.on.gpus.iter().enumerate() {
                let gpu = &node.gpus[*g];
                assert!(gpu.healthy, "placed on a failed GPU");
                assert!(
                    r.vram_mib == 0 || gpu.memory_mib >= r.vram_mib,
                    "VRAM broken"
                );
                if let Some(name) = &r.mig_profile {
                    assert!(gpu.mig.is_some(), "MIG instance on a GPU not in MIG mode");
                    let p = mig.profile(&gpu.model, name).unwrap();
                    let start = c.on.mig_starts[k];
                    assert!(
                        p.starts.contains(&start),
                        "start {start} not allowed for {name}"
                    );
                    let m = mig::mask(p, start);
                    let used = slots.entry((c.node, *g)).or_default();
                    assert_eq!(*used & m, 0, "MIG slot given twice");
                    *used |= m;
                } else {
                    assert!(gpu.mig.is_none(), "whole/share GPU request on a MIG GPU");
                    *milli.entry((c.node, *g)).or_default() += r.gpu_milli;
                    if r.gpu_milli == 1000 {
                        *whole.entry((c.node, *g)).or_default() += 1;
                    }
                }
            }
            if r.mig_profile.is_none() && r.gpu_milli == 1000 {
                let mut distinct = c.on.gpus.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(
                    distinct.len(),
                    c.on.gpus.len(),
                    "one member given a GPU twice"
                );
            }
        }
    }
    for ((n, g), m) in &milli {
        assert!(*m <= 1000, "GPU {n}/{g} given {m} milli");
        if whole.get(&(*n, *g)).copied().unwrap_or(0) > 0 {
            assert_eq!(*m, 1000, "a whole GPU shared");
        }
    }
    for (n, c) in &cpu {
        assert!(*c <= fleet.nodes[*n].cpu_milli, "CPU over capacity");
    }
    for (n, m) in &mem {
        assert!(*m <= fleet.nodes[*n].memory_mib, "memory over capacity");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(96), ..ProptestConfig::default() })]

    #[test]
    fn placements_keep_every_invariant(
        fleet in fleet_strategy(),
        jobs in prop::collection::vec(job_strategy(), 1..24),
        s in 0usize..6,
    ) {
        let mig = MigTable::from_models(catalog::stdlib_models());
        let strategy = STRATEGIES[s];
        let outcomes = run(&fleet, &jobs, strategy, &mig);
        check(&fleet, &jobs, &outcomes, &mig);
        prop_assert_eq!(outcomes, run(&fleet, &jobs, strategy, &mig), "not deterministic");
    }

    /// `Placer::choose` (classes of identical nodes, pruned by their best possible rank)
    /// picks what ranking every allowed node one by one picks (`choose_among`): the best
    /// score, then the lowest node. Checked before each placement of a random sequence,
    /// under a random mask of allowed nodes, for every deterministic strategy.
    #[test]
    fn choose_picks_the_best_allowed_node(
        fleet in fleet_strategy(),
        jobs in prop::collection::vec(job_strategy(), 1..24),
        masks in prop::collection::vec(any::<u64>(), 24),
        s in 1usize..6,
    ) {
        let mig = MigTable::from_models(catalog::stdlib_models());
        let members: Vec<Request> = jobs.iter().map(|j| j.member.clone()).collect();
        let workload = Workload::typical(&members);
        let mut placer = Placer::new(&fleet, STRATEGIES[s], &workload, &mig, 7);
        for (job, mask) in jobs.iter().zip(masks) {
            // Every node when the mask's low bits are all set, else those of its bits.
            let allowed = |i: usize| mask & 0b111 == 0b111 || mask >> (i % 64) & 1 == 1;
            let nodes: Vec<usize> = (0..fleet.nodes.len()).filter(|i| allowed(*i)).collect();
            let chosen = placer.choose(&job.member, &allowed);
            prop_assert_eq!(&chosen, &placer.choose_among(&nodes, &job.member));
            // The cluster fills up as the jobs are placed.
            let _ = gang::place_job(&mut placer, job);
        }
    }
}

/// Guards against a vacuous property: the generators must produce placed gangs, placed
/// shares, placed MIG instances and required-topology gangs, not only failures.
#[test]
fn the_generators_exercise_every_kind_of_placement() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mig = MigTable::from_models(catalog::stdlib_models());
    let mut runner = TestRunner::deterministic();
    let (mut gangs, mut shares, mut migs, mut topo, mut unplaced) = (0, 0, 0, 0, 0);
    for _ in 0..300 {
        let fleet = fleet_strategy().new_tree(&mut runner).unwrap().current();
        let jobs = prop::collection::vec(job_strategy(), 1..24)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let outcomes = run(&fleet, &jobs, Packing::LeastFragmentation, &mig);
        for (j, o) in jobs.iter().zip(&outcomes) {
            match o {
                Ok(_) if j.members > 1 => gangs += 1,
                Ok(_) if j.member.is_share() => shares += 1,
                Ok(_) if j.member.mig_profile.is_some() => migs += 1,
                Ok(_) => {}
                Err(_) => unplaced += 1,
            }
            if o.is_ok() && j.members > 1 && j.topology_required.is_some() {
                topo += 1;
            }
        }
    }
    assert!(
        gangs > 50 && shares > 30 && migs > 10 && topo > 20 && unplaced > 50,
        "gangs {gangs}, shares {shares}, mig {migs}, topology {topo}, unplaced {unplaced}"
    );
}
