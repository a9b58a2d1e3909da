//! The decision snapshot's job states, kept between cycles and brought up to date from
//! the jobs that changed.

use super::jobs::{last_checkpoint, next_checkpoint, Phase, Slot};
use super::Sim;
use crate::decide::snapshot::JobState;

/// What one of `snapshot.jobs` was built from, and when its last checkpoint next moves
/// (so a cycle reads only the states whose checkpoint did).
#[derive(Debug, Clone, Copy)]
pub(super) struct StateTag {
    job: usize,
    revision: u64,
    fleet_epoch: u64,
    next_checkpoint: i64,
}

impl StateTag {
    fn of(job: usize, revision: u64, fleet_epoch: u64, state: &JobState, now: i64) -> StateTag {
        let next_checkpoint = state.running.as_ref().map_or(i64::MAX, |run| {
            next_checkpoint(run.started_at, state.job.checkpoint_interval_s, now)
        });
        StateTag {
            job,
            revision,
            fleet_epoch,
            next_checkpoint,
        }
    }

    fn built_from(&self, job: usize, revision: u64, fleet_epoch: u64) -> bool {
        (self.job, self.revision, self.fleet_epoch) == (job, revision, fleet_epoch)
    }
}

/// Brings `state`'s last checkpoint (and `tag`'s next one) up to `now`.
fn checkpoint_to(state: &mut JobState, tag: &mut StateTag, now: i64) {
    if let Some(run) = state.running.as_mut() {
        let every = state.job.checkpoint_interval_s;
        run.last_checkpoint_at = last_checkpoint(run.started_at, every, now);
        tag.next_checkpoint = next_checkpoint(run.started_at, every, now);
    }
}

impl Sim<'_> {
    /// Brings `snapshot.jobs` up to date where it lies: states of jobs touched since the
    /// last cycle (`touched`, ascending) are rebuilt in their slot or dropped, and new
    /// jobs appended (states are large; moving every one each cycle cost more than
    /// deciding). An untouched job has not changed, so its state only has its last
    /// checkpoint brought up to now, without reading the job. False, with nothing
    /// changed, when a new job would go before a kept one.
    pub(super) fn refresh_states_in_place(&mut self, touched: &[usize]) -> bool {
        let last_kept = self.snapshot_tags.last().map(|t| t.job);
        // Touched active jobs without a state (both lists are in job order).
        let mut kept = self.snapshot_tags.iter().map(|t| t.job).peekable();
        let mut new = Vec::new();
        for &j in touched {
            while kept.next_if(|&k| k < j).is_some() {}
            if kept.next_if_eq(&j).is_none() && self.active.contains(&j) {
                new.push(j);
            }
        }
        if new
            .first()
            .is_some_and(|&j| last_kept.is_some_and(|l| j < l))
        {
            return false;
        }
        let (now, epoch) = (self.now, self.fleet_epoch);
        let mut keep = Vec::with_capacity(self.snapshot_tags.len());
        let mut touched = touched.iter().copied().peekable();
        for (state, tag) in self.snapshot.jobs.iter_mut().zip(&mut self.snapshot_tags) {
            while touched.next_if(|&j| j < tag.job).is_some() {}
            let untouched = touched.next_if_eq(&tag.job).is_none();
            if untouched && tag.fleet_epoch == epoch {
                if now >= tag.next_checkpoint {
                    checkpoint_to(state, tag, now);
                }
                keep.push(true);
                continue;
            }
            // Active means pending or running (a job leaves `active` as it ends or is denied).
            let job = self
                .jobs
                .get(tag.job)
                .and_then(Slot::live)
                .filter(|j| matches!(j.phase, Phase::Pending | Phase::Running(_)));
            let Some(job) = job else {
                keep.push(false);
                continue;
            };
            if tag.built_from(tag.job, job.revision, epoch) {
                checkpoint_to(state, tag, now);
                keep.push(true);
                continue;
            }
            match job.state(&self.snapshot.fleet, &self.fleet_index, now) {
                Some(fresh) => {
                    *state = numbered(&mut self.states_built, fresh);
                    *tag = StateTag::of(tag.job, job.revision, epoch, state, now);
                    keep.push(true);
                }
                None => keep.push(false),
            }
        }
        if keep.contains(&false) {
            let mut k = keep.iter();
            self.snapshot
                .jobs
                .retain(|_| k.next().copied().unwrap_or(false));
            let mut k = keep.iter();
            self.snapshot_tags
                .retain(|_| k.next().copied().unwrap_or(false));
        }
        for j in new {
            let Some(job) = self.jobs.get(j).and_then(Slot::live) else {
                continue;
            };
            if let Some(state) = job.state(&self.snapshot.fleet, &self.fleet_index, now) {
                let state = numbered(&mut self.states_built, state);
                self.snapshot_tags
                    .push(StateTag::of(j, job.revision, epoch, &state, now));
                self.snapshot.jobs.push(state);
            }
        }
        true
    }

    /// Debug builds check the kept states against the jobs: one current state for each
    /// active job that has one, in job order, with its last checkpoint as of now.
    #[cfg(debug_assertions)]
    pub(super) fn check_states(&self) {
        let mut tags = self
            .snapshot_tags
            .iter()
            .zip(&self.snapshot.jobs)
            .peekable();
        for &j in &self.active {
            let Some(job) = self.jobs.get(j).and_then(Slot::live) else {
                continue;
            };
            match tags.next_if(|(t, _)| t.job == j) {
                Some((tag, state)) => {
                    debug_assert!(
                        tag.built_from(j, job.revision, self.fleet_epoch),
                        "stale state"
                    );
                    debug_assert!(
                        self.now < tag.next_checkpoint,
                        "checkpoint of job {j} moved"
                    );
                    debug_assert_eq!(
                        state.running.as_ref().and_then(|r| r.last_checkpoint_at),
                        job.checkpoint_at(self.now),
                        "checkpoint of job {j}"
                    );
                }
                None => debug_assert!(
                    job.state(&self.snapshot.fleet, &self.fleet_index, self.now)
                        .is_none(),
                    "active job {j} has no state"
                ),
            }
        }
        debug_assert!(tags.next().is_none(), "a state of no active job");
    }

    /// `snapshot.jobs` made anew in job order, reusing the states of unchanged jobs.
    pub(super) fn rebuild_states(&mut self) {
        let old = std::mem::take(&mut self.snapshot.jobs);
        let old_tags = std::mem::take(&mut self.snapshot_tags);
        let mut reuse = old.into_iter().zip(old_tags).peekable();
        let mut states = Vec::with_capacity(self.active.len());
        let mut tags = Vec::with_capacity(self.active.len());
        for &j in &self.active {
            let Some(job) = self.jobs.get(j).and_then(Slot::live) else {
                continue;
            };
            while reuse.peek().is_some_and(|(_, t)| t.job < j) {
                reuse.next();
            }
            let state = match reuse
                .next_if(|(_, t)| t.built_from(j, job.revision, self.fleet_epoch))
            {
                Some((mut state, mut tag)) => {
                    checkpoint_to(&mut state, &mut tag, self.now);
                    Some((state, tag))
                }
                None => job
                    .state(&self.snapshot.fleet, &self.fleet_index, self.now)
                    .map(|state| {
                        let state = numbered(&mut self.states_built, state);
                        let tag = StateTag::of(j, job.revision, self.fleet_epoch, &state, self.now);
                        (state, tag)
                    }),
            };
            if let Some((state, tag)) = state {
                states.push(state);
                tags.push(tag);
            }
        }
        self.snapshot.jobs = states;
        self.snapshot_tags = tags;
    }
}

/// A newly built state, given the next number as its revision (`built` counts them), so
/// the decider can tell states apart without reading them.
fn numbered(built: &mut u64, mut state: JobState) -> JobState {
    *built += 1;
    state.revision = Some(*built);
    state
}
