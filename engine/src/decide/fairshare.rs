//! Fair share: a team's weighted dominant-resource share (DRF) of the fleet, over what it
//! holds now plus its usage history decayed with the cohort's half-life. History counts as
//! the average allocation it amounts to: decayed resource-seconds divided by the mean life
//! of the decay (half-life / ln 2). Teams in cohorts with `fair_share = off`, and jobs
//! without a team, have share 0 and queue by submit time.

use super::snapshot::UsageRecord;
use lang::ir::{FairShare, Program};
use std::collections::BTreeMap;

/// GPU milli, CPU milli and memory MiB.
pub type Resources = [f64; 3];

#[derive(Debug, Clone)]
pub struct FairShares {
    capacity: Resources,
    held: BTreeMap<String, Resources>,
    history: BTreeMap<String, Resources>,
    weight: BTreeMap<String, f64>,
}

impl FairShares {
    pub fn new(
        program: &Program,
        capacity: Resources,
        usage: &[UsageRecord],
        now: i64,
    ) -> FairShares {
        let mut weight = BTreeMap::new();
        let mut half_life = BTreeMap::new();
        for team in &program.teams {
            let cohort = team
                .cohort
                .as_ref()
                .and_then(|c| program.cohorts.iter().find(|x| &x.name == c));
            if let Some(c) = cohort.filter(|c| c.fair_share == FairShare::Drf) {
                weight.insert(team.name.clone(), team.weight.max(1e-9));
                half_life.insert(team.name.clone(), c.half_life_s.max(1) as f64);
            }
        }
        let mut history: BTreeMap<String, Resources> = BTreeMap::new();
        for u in usage {
            let Some(h) = half_life.get(&u.team) else {
                continue;
            };
            let age = (now - u.at).max(0) as f64;
            let factor = 0.5f64.powf(age / h) * std::f64::consts::LN_2 / h;
            let e = history.entry(u.team.clone()).or_insert([0.0; 3]);
            // GPU-seconds to milli-GPU, CPU-seconds to milli-CPU.
            e[0] += u.gpu_s * 1000.0 * factor;
            e[1] += u.cpu_s * 1000.0 * factor;
            e[2] += u.memory_mib_s * factor;
        }
        FairShares {
            capacity,
            held: weight.keys().map(|t| (t.clone(), [0.0; 3])).collect(),
            history,
            weight,
        }
    }

    /// `team` now holds `r` more (a running job, or one placed this cycle).
    pub fn hold(&mut self, team: Option<&str>, r: Resources) {
        // `held` has an entry for every team in fair share, and only those.
        if let Some(e) = team.and_then(|t| self.held.get_mut(t)) {
            for (a, b) in e.iter_mut().zip(r) {
                *a += b;
            }
        }
    }

    /// The team's weighted dominant share; 0 for teams outside fair share.
    pub fn share(&self, team: Option<&str>) -> f64 {
        let Some(t) = team else { return 0.0 };
        let Some(w) = self.weight.get(t) else {
            return 0.0;
        };
        let zero = [0.0; 3];
        let held = self.held.get(t).unwrap_or(&zero);
        let past = self.history.get(t).unwrap_or(&zero);
        let dominant = held
            .iter()
            .zip(past)
            .zip(self.capacity)
            .filter(|(_, cap)| *cap > 0.0)
            .map(|((h, p), cap)| (h + p) / cap)
            .fold(0.0, f64::max);
        dominant / w
    }
}
