//! Pending demand in the shape of a pool's nodes. A job counts for a pool only if one of
//! its members fits an empty node of the pool's shape (GPU model, GPUs, CPU, memory), and
//! it counts in whole nodes: a gang takes `ceil(members / members per node)` nodes of its
//! own (a 16-GPU gang on 8-GPU nodes is two nodes, not 16 loose GPUs); single-member jobs
//! share nodes, counted by the fraction of a node each takes.

use crate::core::alloc::Request;
use crate::core::fleet::MILLI;
use crate::decide::snapshot::JobState;
use lang::ir::{GpuModel, NodeShape, Program};

/// A pool's node as new nodes would come: the policy's node shape.
#[derive(Debug, Clone)]
pub struct Shape<'a> {
    pub node: &'a NodeShape,
    pub model: Option<&'a GpuModel>,
}

impl<'a> Shape<'a> {
    pub fn of(program: &'a Program, pool: &str) -> Option<Shape<'a>> {
        let pool = program.pool(pool)?;
        let node = program.node_shape(&pool.node)?;
        Some(Shape {
            node,
            model: program.gpu_model(&node.gpu_model),
        })
    }

    /// How many members of `r` one empty node holds (0: it does not fit).
    pub fn members_per_node(&self, r: &Request) -> u64 {
        let model_ok = r.num_gpu == 0
            || r.models.is_empty()
            || self
                .model
                .is_some_and(|m| r.models.iter().any(|x| *x == m.id || *x == m.name));
        let vram_ok = r.vram_mib == 0 || self.model.is_some_and(|m| m.memory_mib >= r.vram_mib);
        let mig_ok = r.mig_profile.as_ref().is_none_or(|p| {
            self.model
                .is_some_and(|m| m.mig_profiles.iter().any(|x| x.name == *p))
        });
        if !(model_ok && vram_ok && mig_ok) {
            return 0;
        }
        let gpus = u64::from(self.node.gpus);
        let by_gpu = if r.num_gpu == 0 {
            u64::MAX
        } else if r.mig_profile.is_some() {
            // Instances of the profile per GPU, by slot width.
            let per_gpu = self.model.and_then(|m| {
                let p = m
                    .mig_profiles
                    .iter()
                    .find(|x| Some(&x.name) == r.mig_profile.as_ref())?;
                u64::from(m.mig_slots).checked_div(u64::from(p.width))
            });
            per_gpu.unwrap_or(0) * gpus / u64::from(r.num_gpu)
        } else if r.gpu_milli < MILLI {
            gpus * u64::from(MILLI / r.gpu_milli.max(1))
        } else {
            gpus / u64::from(r.num_gpu)
        };
        let per = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
        by_gpu
            .min(per(self.node.cpu_milli, r.cpu_milli))
            .min(per(self.node.memory_mib, r.memory_mib))
    }

    /// Nodes of this shape a job needs, if it fits one: whole nodes for a gang, a fraction
    /// of a node for a single member.
    pub fn nodes_for(&self, job: &JobState) -> Option<f64> {
        let per = self.members_per_node(&job.job.shape.member);
        if per == 0 {
            return None;
        }
        let members = u64::from(job.job.shape.members);
        Some(if members > 1 {
            members.div_ceil(per) as f64
        } else {
            1.0 / per as f64
        })
    }
}
