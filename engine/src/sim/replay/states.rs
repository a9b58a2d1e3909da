//! The decision snapshot's job states, kept between cycles and brought up to date from
//! the jobs that changed.

use super::jobs::{Phase, Slot};
use super::Sim;
use crate::decide::snapshot::JobState;

impl Sim<'_> {
    /// Brings `snapshot.jobs` up to date where it lies: states of jobs that changed are
    /// rebuilt in their slot, those of jobs no longer active dropped, and new jobs
    /// appended (states are large; moving every one each cycle cost more than deciding).
    /// False, with nothing changed, when a new job would go before a kept one.
    pub(super) fn refresh_states_in_place(&mut self) -> bool {
        let last_kept = self.snapshot_tags.last().map(|t| t.0);
        // Active jobs without a state (both lists are in job order).
        let mut kept = self.snapshot_tags.iter().map(|t| t.0).peekable();
        let mut new = Vec::new();
        for &j in &self.active {
            while kept.next_if(|&k| k < j).is_some() {}
            if kept.next_if_eq(&j).is_none() {
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
        for (state, tag) in self.snapshot.jobs.iter_mut().zip(&mut self.snapshot_tags) {
            // Active means pending or running (a job leaves `active` as it ends or is denied).
            let job = self
                .jobs
                .get(tag.0)
                .and_then(Slot::live)
                .filter(|j| matches!(j.phase, Phase::Pending | Phase::Running(_)));
            let Some(job) = job else {
                keep.push(false);
                continue;
            };
            let current = (tag.0, job.revision, epoch);
            if *tag == current {
                if let Some(run) = state.running.as_mut() {
                    run.last_checkpoint_at = job.checkpoint_at(now);
                }
                keep.push(true);
                continue;
            }
            match job.state(&self.snapshot.fleet, &self.fleet_index, now) {
                Some(fresh) => {
                    *state = numbered(&mut self.states_built, fresh);
                    *tag = current;
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
                self.snapshot
                    .jobs
                    .push(numbered(&mut self.states_built, state));
                self.snapshot_tags.push((j, job.revision, epoch));
            }
        }
        true
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
            while reuse.peek().is_some_and(|(_, t)| t.0 < j) {
                reuse.next();
            }
            let current = (j, job.revision, self.fleet_epoch);
            let state = match reuse.next_if(|(_, t)| *t == current) {
                Some((mut state, _)) => {
                    if let Some(run) = state.running.as_mut() {
                        run.last_checkpoint_at = job.checkpoint_at(self.now);
                    }
                    Some(state)
                }
                None => job
                    .state(&self.snapshot.fleet, &self.fleet_index, self.now)
                    .map(|state| numbered(&mut self.states_built, state)),
            };
            if let Some(state) = state {
                states.push(state);
                tags.push(current);
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
