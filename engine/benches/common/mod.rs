//! What the engine benches share: a fleet of nodes of 8 H100 in NVLink domains of 8 nodes and
//! racks of 32, two NVLink islands of four GPUs per node.

#![allow(dead_code, reason = "each bench uses part of it")]

pub mod mix;

use engine::core::alloc::Request;
use engine::core::fleet::{Fleet, Gpu, Node};
use engine::core::gang::JobShape;
use lang::ir::TopologyLevel;
use std::collections::BTreeMap;

pub fn fleet(nodes: usize) -> Fleet {
    fleet_in_pools(nodes, |_| "train")
}

/// [`fleet`] with node `i` in pool `pool_of(i)`.
pub fn fleet_in_pools(nodes: usize, pool_of: impl Fn(usize) -> &'static str) -> Fleet {
    Fleet {
        nodes: (0..nodes)
            .map(|i| Node {
                name: format!("h100-{i}"),
                pool: Some(pool_of(i).into()),
                cpu_milli: 224_000,
                memory_mib: 2_097_152,
                labels: BTreeMap::from([
                    ("nvlink_domain".to_string(), format!("nvl-{}", i / 8)),
                    ("rack".to_string(), format!("rack-{}", i / 32)),
                ]),
                gpus: (0..8u32)
                    .map(|g| Gpu {
                        nvlink_island: Some(g / 4),
                        ..Gpu::new(g, "H100-SXM5-80GB", 81_559)
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The process's peak resident memory so far, in MiB (Linux; 0 elsewhere).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A bench job: `members` × `num_gpu` GPUs (or one share of `gpu_milli`), with CPU and
/// memory in proportion, optionally required to share one topology group.
pub fn shape(
    members: u32,
    num_gpu: u32,
    gpu_milli: u32,
    topology: Option<TopologyLevel>,
) -> JobShape {
    JobShape {
        members,
        member: Request {
            cpu_milli: 8_000 * u64::from(num_gpu),
            memory_mib: 65_536 * u64::from(num_gpu),
            num_gpu,
            gpu_milli,
            ..Request::default()
        },
        topology_required: topology,
        ..JobShape::default()
    }
}
