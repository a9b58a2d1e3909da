//! Placement speed: 1,000 nodes × 8 H100 (NVLink domains of 8 nodes, two islands per node)
//! and 5,000 pending jobs — 1-GPU, shares, 2/4/8-GPU jobs and 2×8 gangs that require one
//! NVLink domain — placed in order on a fresh cluster with Gantry's default packing.
//! Target: the whole pass under 50 ms on one core (DESIGN.md).

use criterion::{criterion_group, criterion_main, Criterion};

mod common;
use common::{fleet, shape};
use engine::core::alloc::Request;
use engine::core::frag::Workload;
use engine::core::gang::{self, JobShape};
use engine::core::mig::MigTable;
use engine::core::packing::Strategy;
use engine::core::placer::Placer;
use engine::core::rng::Rng;
use lang::ir::TopologyLevel;
use std::hint::black_box;

pub fn jobs(n: usize, seed: u64) -> Vec<JobShape> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let kind = rng.below(100);
            let (members, num_gpu, gpu_milli, topology) = match kind {
                0..=39 => (1, 1, 1000, None),
                40..=59 => (1, 1, 250 * (1 + rng.below(3) as u32), None),
                60..=74 => (1, 2 << rng.below(2), 1000, None),
                75..=89 => (1, 8, 1000, None),
                _ => (2, 8, 1000, Some(TopologyLevel::NvlinkDomain)),
            };
            shape(members, num_gpu, gpu_milli, topology)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let fleet = fleet(1000);
    let jobs = jobs(5000, 42);
    let members: Vec<Request> = jobs.iter().map(|j| j.member.clone()).collect();
    let workload = Workload::typical(&members);
    let mig = MigTable::default();
    let mut group = c.benchmark_group("placement");
    group.sample_size(20);
    group.bench_function("1000 nodes x 8 GPUs, 5000 jobs incl. gangs", |b| {
        b.iter(|| {
            let mut placer = Placer::new(&fleet, Strategy::LeastFragmentation, &workload, &mig, 0);
            let placed = jobs
                .iter()
                .filter(|j| gang::place_job(&mut placer, j).is_ok())
                .count();
            black_box(placed)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
