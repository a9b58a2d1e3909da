//! [`TypicalMemo`]: the cycle's typical workload (`Workload::typical` of every job's
//! member shape), counted by a kept [`super::super::PlacementDecider`] from each job's shape number and
//! memory as remembered by revision, so an unchanged job's shape is not compared again.
//!
//! Stale when: a job's revision is new (its shape is counted again) or it is gone (its
//! count comes off). Off: [`super::keep_nothing`].

use super::seq_memo::SeqMemo;
use crate::core::frag::{ShapeTally, Workload};
use crate::decide::snapshot::JobState;

#[derive(Debug, Default)]
pub(in crate::decide::cycle) struct TypicalMemo {
    tally: ShapeTally,
    /// Each job's shape number in `tally` and member memory, by revision.
    shapes: SeqMemo<(u32, u64)>,
}

/// Shapes past which the tally starts afresh (they are never forgotten otherwise).
const MAX_SHAPES: usize = 4096;

impl TypicalMemo {
    /// `Workload::typical_of` over `jobs`' member shapes.
    pub fn workload(&mut self, jobs: &[JobState]) -> Workload {
        if self.tally.shapes() > MAX_SHAPES {
            self.tally.clear();
            self.shapes.forget();
        } else {
            self.shapes.begin();
        }
        self.tally.clear_counts();
        for js in jobs {
            let known = js.revision.and_then(|r| self.shapes.get(r));
            let (shape, memory) = match known {
                Some((shape, memory)) => (shape as usize, memory),
                None => {
                    let member = &js.job.shape.member;
                    let shape = self.tally.shape_of(member);
                    if let (Some(r), Ok(number)) = (js.revision, u32::try_from(shape)) {
                        self.shapes.insert(r, (number, member.memory_mib));
                    }
                    (shape, member.memory_mib)
                }
            };
            self.tally.count(shape, memory);
        }
        self.tally.workload()
    }
}

#[cfg(test)]
mod tests {
    use super::TypicalMemo;
    use crate::core::frag::Workload;
    use crate::core::rng::Rng;
    use crate::decide::snapshot::JobState;

    fn state(revision: u64, cpu_milli: u64, num_gpu: u32, memory_mib: u64) -> JobState {
        let mut job = crate::inventory::jobs_file::Job::default();
        job.shape.member.cpu_milli = cpu_milli;
        job.shape.member.num_gpu = num_gpu;
        job.shape.member.memory_mib = memory_mib;
        JobState {
            job: Box::new(job),
            running: None,
            member_milli: 0,
            revision: Some(revision),
        }
    }

    /// Cycle after cycle, with jobs going and coming (some without a revision) and
    /// more shapes than are kept, the workload is the one counted afresh.
    #[test]
    fn counts_what_a_fresh_count_counts() {
        let mut rng = Rng::new(7);
        let mut memo = TypicalMemo::default();
        let mut jobs: Vec<JobState> = Vec::new();
        let mut next = 0u64;
        for cycle in 0..300 {
            // Far more CPU sizes in the later cycles: past the shapes kept.
            let sizes = if cycle < 150 { 3 } else { 20_000 };
            jobs.retain(|_| rng.below(10) > 0);
            for _ in 0..rng.below(40) {
                next += 1;
                let mut js = state(
                    next,
                    1000 * (1 + rng.below(sizes) as u64),
                    1 << rng.below(4),
                    1024 * rng.below(64) as u64,
                );
                if rng.below(20) == 0 {
                    js.revision = None;
                }
                jobs.push(js);
            }
            let kept = memo.workload(&jobs);
            let fresh = Workload::typical_of(jobs.iter().map(|j| &j.job.shape.member));
            assert_eq!(kept.shapes, fresh.shapes, "cycle {cycle}");
        }
        assert!(memo.tally.shapes() <= super::MAX_SHAPES + 40);
    }
}
