//! GPU fragmentation as FGD defines it (Weng et al., ATC'23): for a target workload of
//! typical pod shapes, the free GPU capacity of a node that those pods could not use.
//! A node's fragmentation for one shape is all its free GPU milli if the shape does not fit
//! (wrong model, too few GPUs, too little CPU), else the free milli of GPUs with less free
//! than the shape needs per GPU. The workload's fragmentation is the weighted sum.

use super::alloc::{NodeFree, Request};
use std::collections::BTreeMap;

/// Shapes covering this share of pods make up the target workload.
pub const TYPICAL_SHARE: f64 = 0.95;

/// Typical pod shapes with the same GPU request, their CPU requests sorted, so the share of
/// them a node's free CPU admits is one binary search.
#[derive(Debug, Clone)]
struct Group {
    num_gpu: u32,
    gpu_milli: u32,
    models: Vec<String>,
    cpus: Vec<u64>,
    /// `cum[i]` is the weight of the shapes with the `i` smallest CPU requests.
    cum: Vec<f64>,
}

impl Group {
    fn weight(&self) -> f64 {
        self.cum.last().copied().unwrap_or(0.0)
    }

    /// Weight of the shapes whose CPU request fits in `cpu_free`.
    fn weight_within_cpu(&self, cpu_free: u64) -> f64 {
        let n = self.cpus.partition_point(|c| *c <= cpu_free);
        self.cum.get(n).copied().unwrap_or(0.0)
    }
}

/// Whether two requests are one shape: equal in all but memory.
fn same_but_memory(a: &Request, b: &Request) -> bool {
    // Destructured, so a new field of `Request` must be placed here.
    let Request {
        cpu_milli,
        memory_mib: _,
        num_gpu,
        gpu_milli,
        models,
        vram_mib,
        mig_profile,
    } = a;
    *cpu_milli == b.cpu_milli
        && *num_gpu == b.num_gpu
        && *gpu_milli == b.gpu_milli
        && *vram_mib == b.vram_mib
        && *models == b.models
        && *mig_profile == b.mig_profile
}

/// Pods counted by shape (all but memory), with their memory summed: what
/// [`Workload::typical`] ranks. A shape keeps its number until [`ShapeTally::clear`], so
/// a caller that remembers a pod's shape number counts it again without comparing it.
#[derive(Debug, Clone, Default)]
pub struct ShapeTally {
    /// (shape with memory 0, pods, their memory summed), by number (first seen first).
    counts: Vec<(Request, u64, u64)>,
    /// Past [`ShapeTally::SCAN`] shapes, their numbers by shape.
    index: BTreeMap<Request, usize>,
    key: Request,
}

impl ShapeTally {
    /// Few shapes are found by a scan of the list (no copy, no ordered compare); more, by
    /// an ordered index.
    const SCAN: usize = 16;

    /// The number of `p`'s shape, added with no pods if it is new.
    pub fn shape_of(&mut self, p: &Request) -> usize {
        let found = if self.counts.len() <= Self::SCAN {
            self.counts
                .iter()
                .position(|(s, _, _)| same_but_memory(s, p))
        } else {
            self.key.clone_from(p);
            self.key.memory_mib = 0;
            self.index.get(&self.key).copied()
        };
        if let Some(i) = found {
            return i;
        }
        let shape = Request {
            memory_mib: 0,
            ..p.clone()
        };
        self.counts.push((shape, 0, 0));
        if self.counts.len() > Self::SCAN {
            if self.index.is_empty() {
                self.index.extend(
                    self.counts
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (c.0.clone(), i)),
                );
            } else if let Some((s, _, _)) = self.counts.last() {
                self.index.insert(s.clone(), self.counts.len() - 1);
            }
        }
        self.counts.len() - 1
    }

    /// Counts one pod of shape number `shape` asking for `memory_mib`.
    #[inline]
    pub fn count(&mut self, shape: usize, memory_mib: u64) {
        if let Some((_, count, memory)) = self.counts.get_mut(shape) {
            *count += 1;
            *memory = memory.saturating_add(memory_mib);
        }
    }

    /// Sets every count to zero; the shapes keep their numbers.
    pub fn clear_counts(&mut self) {
        for (_, count, memory) in &mut self.counts {
            *count = 0;
            *memory = 0;
        }
    }

    /// Forgets every shape.
    pub fn clear(&mut self) {
        self.counts.clear();
        self.index.clear();
    }

    /// How many shapes have a number.
    pub fn shapes(&self) -> usize {
        self.counts.len()
    }

    /// The typical shapes of the pods counted (see [`Workload::typical`]).
    pub fn workload(&self) -> Workload {
        let total: u64 = self.counts.iter().map(|(_, c, _)| c).sum();
        let mut ranked: Vec<(&Request, (u64, u64))> = self
            .counts
            .iter()
            .filter(|(_, c, _)| *c > 0)
            .map(|(s, c, m)| (s, (*c, *m)))
            .collect();
        // Most frequent first; equal counts in shape order, so the choice is deterministic.
        ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(b.0)));
        let mut covered = 0u64;
        let mut chosen = Vec::new();
        for (shape, (count, memory)) in ranked {
            if total > 0 && covered as f64 >= TYPICAL_SHARE * total as f64 {
                break;
            }
            covered += count;
            let mean_memory = memory / count.max(1);
            chosen.push((
                Request {
                    memory_mib: mean_memory,
                    ..shape.clone()
                },
                count,
            ));
        }
        let shapes: Vec<(Request, f64)> = chosen
            .into_iter()
            .map(|(s, c)| (s, c as f64 / covered.max(1) as f64))
            .collect();
        Workload::from_shapes(shapes)
    }
}

/// The target workload: typical pod shapes and their frequencies (summing to 1).
#[derive(Debug, Clone, Default)]
pub struct Workload {
    groups: Vec<Group>,
    /// The shapes themselves, most frequent first, for reports.
    pub shapes: Vec<(Request, f64)>,
}

impl Workload {
    /// The most frequent pod shapes (CPU, GPUs, milli per GPU, models) that together cover
    /// [`TYPICAL_SHARE`] of the pods, with renormalised frequencies. CPU-only pods are
    /// included, as in the FGD simulator: to them every idle GPU is fragmentation. Memory is
    /// not part of a shape (as in FGD); each shape carries its pods' mean memory, which only
    /// Gantry's memory-aware measures read.
    pub fn typical(pods: &[Request]) -> Workload {
        Workload::typical_of(pods)
    }

    /// [`Workload::typical`] over borrowed requests; only distinct shapes are copied.
    pub fn typical_of<'r>(pods: impl IntoIterator<Item = &'r Request>) -> Workload {
        let mut tally = ShapeTally::default();
        for p in pods {
            let shape = tally.shape_of(p);
            tally.count(shape, p.memory_mib);
        }
        tally.workload()
    }

    pub fn from_shapes(shapes: Vec<(Request, f64)>) -> Workload {
        /// GPUs, milli per GPU and models: what the GPU side of a fit depends on.
        type GpuShape = (u32, u32, Vec<String>);
        let mut by_gpu: BTreeMap<GpuShape, Vec<(u64, f64)>> = BTreeMap::new();
        for (s, w) in &shapes {
            by_gpu
                .entry((s.num_gpu, s.gpu_milli, s.models.clone()))
                .or_default()
                .push((s.cpu_milli, *w));
        }
        let groups = by_gpu
            .into_iter()
            .map(|((num_gpu, gpu_milli, models), mut cw)| {
                cw.sort_by_key(|a| a.0);
                let mut cum = vec![0.0];
                let mut acc = 0.0;
                for (_, w) in &cw {
                    acc += w;
                    cum.push(acc);
                }
                Group {
                    num_gpu,
                    gpu_milli,
                    models,
                    cpus: cw.into_iter().map(|(c, _)| c).collect(),
                    cum,
                }
            })
            .collect();
        Workload { groups, shapes }
    }

    /// Expected milli-GPUs of a node that a stream of pods of one typical shape could not
    /// use before the node runs out of GPUs, CPU or memory, weighted over the shapes. Unlike
    /// [`Workload::node_frag`], which asks whether one more pod fits, this counts GPUs
    /// that CPU or share sizes will strand as the node fills.
    pub fn node_stranding(&self, model: Option<&str>, free: &NodeFree) -> f64 {
        let left = free.gpu_milli_total() as f64;
        if left == 0.0 {
            return 0.0;
        }
        let mut frag = 0.0;
        for (s, w) in &self.shapes {
            if s.num_gpu == 0 || s.gpu_milli == 0 {
                frag += w * left;
                continue;
            }
            if !s.accepts_model(model) {
                frag += w * left;
                continue;
            }
            let by_gpu: u64 = if s.is_share() {
                free.gpu_milli
                    .iter()
                    .map(|g| u64::from(*g / s.gpu_milli))
                    .sum()
            } else {
                free.gpu_milli.iter().filter(|g| **g >= s.gpu_milli).count() as u64
                    / u64::from(s.num_gpu)
            };
            let by_cpu = free.cpu_milli.checked_div(s.cpu_milli).unwrap_or(u64::MAX);
            let by_memory = free
                .memory_mib
                .checked_div(s.memory_mib)
                .unwrap_or(u64::MAX);
            let usable = by_gpu.min(by_cpu).min(by_memory) * s.gpu_milli_total();
            frag += w * (left - usable as f64).max(0.0);
        }
        frag
    }

    /// [`Workload::node_frag`] where a shape also needs its mean memory to fit: a node whose
    /// memory is spent cannot use its GPUs either. Gantry's default packing scores by this;
    /// `fgd` keeps the paper's CPU-only fit.
    pub fn node_frag_memory_aware(&self, model: Option<&str>, free: &NodeFree) -> f64 {
        let left = free.gpu_milli_total() as f64;
        if left == 0.0 {
            return 0.0;
        }
        let mut frag = 0.0;
        for (s, w) in &self.shapes {
            let fits = s.num_gpu > 0
                && s.gpu_milli > 0
                && s.accepts_model(model)
                && s.cpu_milli <= free.cpu_milli
                && s.memory_mib <= free.memory_mib
                && free.gpu_milli.iter().filter(|x| **x >= s.gpu_milli).count()
                    >= s.num_gpu as usize;
            frag += w * if fits {
                free.gpu_milli
                    .iter()
                    .filter(|x| **x < s.gpu_milli)
                    .map(|x| f64::from(*x))
                    .sum::<f64>()
            } else {
                left
            };
        }
        frag
    }

    /// Expected fragmented milli-GPUs of a node with GPU `model` and free resources `free`.
    pub fn node_frag(&self, model: Option<&str>, free: &NodeFree) -> f64 {
        let left = free.gpu_milli_total() as f64;
        if left == 0.0 {
            return 0.0;
        }
        let mut frag = 0.0;
        for g in &self.groups {
            let w = g.weight();
            if g.num_gpu == 0 || g.gpu_milli == 0 {
                // A CPU-only pod uses no GPU: all of it is idle to that share of the load.
                frag += w * left;
                continue;
            }
            let accessible =
                g.models.is_empty() || model.is_some_and(|m| g.models.iter().any(|x| x == m));
            let gpus_fit =
                free.gpu_milli.iter().filter(|x| **x >= g.gpu_milli).count() >= g.num_gpu as usize;
            if !accessible || !gpus_fit {
                frag += w * left;
                continue;
            }
            let fits = g.weight_within_cpu(free.cpu_milli);
            let stranded: u64 = free
                .gpu_milli
                .iter()
                .filter(|x| **x < g.gpu_milli)
                .map(|x| u64::from(*x))
                .sum();
            frag += fits * stranded as f64 + (w - fits) * left;
        }
        frag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cpu: u64, num_gpu: u32, gpu_milli: u32) -> Request {
        Request {
            cpu_milli: cpu,
            memory_mib: 0,
            num_gpu,
            gpu_milli,
            models: Vec::new(),
            ..Request::default()
        }
    }

    #[test]
    fn typical_shapes_cover_95_percent_and_are_normalised() {
        let mut pods = vec![req(1000, 1, 500); 90];
        pods.extend(vec![req(2000, 1, 1000); 8]);
        pods.extend(vec![req(4000, 2, 1000); 2]);
        pods.push(req(1000, 0, 0));
        let w = Workload::typical(&pods);
        assert_eq!(w.shapes.len(), 2, "90% + 8% reach 95%");
        let sum: f64 = w.shapes.iter().map(|s| s.1).sum();
        assert!((sum - 1.0).abs() < 1e-9);
    }

    #[test]
    fn typical_shapes_are_the_same_past_the_scanned_few() {
        // 120 shapes (past the scan; 40 of 4 pods, 80 of 3), memory varying within a
        // shape, counts with ties.
        let mut pods = Vec::new();
        for i in 0..400u64 {
            let mut r = req(1000 * (i % 40), 1 + (i % 3) as u32, 1000);
            r.memory_mib = i;
            pods.push(r);
        }
        let w = Workload::typical(&pods);
        // The reference: counted by an ordered map of shapes, memory zeroed.
        let mut counts: BTreeMap<Request, (u64, u64)> = BTreeMap::new();
        for p in &pods {
            let e = counts
                .entry(Request {
                    memory_mib: 0,
                    ..p.clone()
                })
                .or_default();
            e.0 += 1;
            e.1 += p.memory_mib;
        }
        let mut ranked: Vec<_> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
        let want: Vec<(u64, u64)> = ranked
            .iter()
            .take(w.shapes.len())
            .map(|(s, (c, m))| (s.cpu_milli, m / c))
            .collect();
        let got: Vec<(u64, u64)> = w
            .shapes
            .iter()
            .map(|(s, _)| (s.cpu_milli, s.memory_mib))
            .collect();
        assert_eq!(got, want);
        assert_eq!(w.shapes.len(), 114, "40 x 4 + 74 x 3 pods reach 95% of 400");
    }

    #[test]
    fn stranding_counts_gpus_that_cpu_or_share_size_leave_unused() {
        let w = Workload::from_shapes(vec![(req(4000, 1, 1000), 1.0)]);
        let free = |cpu: u64, gpus: Vec<u32>| NodeFree {
            cpu_milli: cpu,
            memory_mib: 0,
            mig: vec![None; gpus.len()],
            vram_mib: vec![0; gpus.len()],
            gpu_milli: gpus,
        };
        // Four free GPUs but CPU for two pods: two GPUs are stranded.
        assert_eq!(w.node_stranding(None, &free(8000, vec![1000; 4])), 2000.0);
        // One pod fits, so FGD's one-pod view sees no fragmentation at all.
        assert_eq!(w.node_frag(None, &free(8000, vec![1000; 4])), 0.0);
        assert_eq!(
            w.node_stranding(None, &free(16_000, vec![1000, 1000, 400, 0])),
            400.0
        );
    }

    #[test]
    fn memory_aware_measures_count_gpus_that_spent_memory_strands() {
        let shape = Request {
            memory_mib: 16_384,
            ..req(1000, 1, 1000)
        };
        let w = Workload::from_shapes(vec![(shape, 1.0)]);
        let free = |memory_mib: u64| NodeFree {
            cpu_milli: 64_000,
            memory_mib,
            gpu_milli: vec![1000; 4],
            mig: vec![None; 4],
            vram_mib: vec![0; 4],
        };
        // Memory for two pods: two GPUs are stranded; with none, all four are fragmented.
        assert_eq!(w.node_stranding(None, &free(40_000)), 2000.0);
        assert_eq!(w.node_frag_memory_aware(None, &free(40_000)), 0.0);
        assert_eq!(w.node_frag_memory_aware(None, &free(8_000)), 4000.0);
        // FGD's own measure ignores memory.
        assert_eq!(w.node_frag(None, &free(8_000)), 0.0);
    }

    #[test]
    fn typical_shapes_carry_their_mean_memory() {
        let pods = vec![
            Request {
                memory_mib: 1000,
                ..req(1000, 1, 500)
            },
            Request {
                memory_mib: 3000,
                ..req(1000, 1, 500)
            },
        ];
        let w = Workload::typical(&pods);
        assert_eq!(w.shapes.len(), 1, "memory does not split a shape");
        assert_eq!(w.shapes.first().map(|s| s.0.memory_mib), Some(2000));
    }

    #[test]
    fn fragmentation_counts_gpus_a_shape_cannot_use() {
        let w = Workload::from_shapes(vec![(req(1000, 1, 500), 1.0)]);
        let free = NodeFree {
            cpu_milli: 8000,
            memory_mib: 0,
            gpu_milli: vec![1000, 300, 0, 600],
            mig: vec![None; 4],
            vram_mib: vec![0; 4],
        };
        // The 300 left on GPU 1 cannot host a 500-milli pod; 1000 and 600 can.
        assert_eq!(w.node_frag(None, &free), 300.0);
        let no_cpu = NodeFree {
            cpu_milli: 500,
            ..free.clone()
        };
        assert_eq!(w.node_frag(None, &no_cpu), 1900.0);
        let typed = Workload::from_shapes(vec![(
            Request {
                models: vec!["T4".into()],
                ..req(1000, 1, 500)
            },
            1.0,
        )]);
        assert_eq!(typed.node_frag(Some("V100M16"), &free), 1900.0);
        assert_eq!(typed.node_frag(Some("T4"), &free), 300.0);
    }
}
