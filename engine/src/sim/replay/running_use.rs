//! What the running jobs use per second, by team, kept as jobs start and stop: fair
//! share's usage is charged at every event of a replay, and a pass over every running
//! job there cost as much as the decisions.

use super::jobs::SimJob;
use crate::decide::usage::Use;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct RunningUse {
    /// Per team: how many of its jobs run, and their rate summed.
    by_team: BTreeMap<String, (usize, [f64; 3])>,
}

/// A running job's use, kept past a change of its phase.
pub(super) type Taken = Option<(String, [f64; 3])>;

impl RunningUse {
    /// `job` started running.
    pub fn started(&mut self, job: &SimJob) {
        let Some(u) = job.usage() else {
            return;
        };
        let (n, sum) = self.by_team.entry(u.team.to_string()).or_default();
        *n += 1;
        for (s, r) in sum.iter_mut().zip(u.rate) {
            *s += r;
        }
    }

    /// What `job` uses now, to [`RunningUse::stopped`] once it has stopped.
    pub fn of(job: &SimJob) -> Taken {
        job.usage().map(|u| (u.team.to_string(), u.rate))
    }

    /// A job that used `taken` stopped running.
    pub fn stopped(&mut self, taken: Taken) {
        let Some((team, rate)) = taken else {
            return;
        };
        let Some((n, sum)) = self.by_team.get_mut(&team) else {
            return;
        };
        *n -= 1;
        // The last one gone leaves nothing, whatever float sums kept.
        if *n == 0 {
            self.by_team.remove(&team);
            return;
        }
        for (s, r) in sum.iter_mut().zip(rate) {
            *s = (*s - r).max(0.0);
        }
    }

    /// How many jobs of each team run (debug builds check it against the jobs).
    #[cfg(debug_assertions)]
    pub fn jobs_by_team(&self) -> BTreeMap<&str, usize> {
        self.by_team
            .iter()
            .map(|(team, (n, _))| (team.as_str(), *n))
            .collect()
    }

    pub fn uses(&self) -> impl Iterator<Item = Use<'_>> {
        self.by_team
            .iter()
            .map(|(team, (_, rate))| Use { team, rate: *rate })
    }
}
