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
    /// Each policy team (by its index in `Program::teams`): its slot, if in fair share.
    slot_of_team: Vec<Option<usize>>,
    held: Vec<Resources>,
    history: Vec<Resources>,
    weight: Vec<f64>,
}

impl FairShares {
    pub fn new(
        program: &Program,
        capacity: Resources,
        usage: &[UsageRecord],
        now: i64,
    ) -> FairShares {
        let mut slots: BTreeMap<String, usize> = BTreeMap::new();
        let mut slot_of_team = vec![None; program.teams.len()];
        let mut weight = Vec::new();
        let mut half_life = Vec::new();
        for (i, team) in program.teams.iter().enumerate() {
            let cohort = team
                .cohort
                .as_ref()
                .and_then(|c| program.cohorts.iter().find(|x| &x.name == c));
            if let Some(c) = cohort.filter(|c| c.fair_share == FairShare::Drf) {
                // A name given twice (the checker forbids it) keeps the last one's figures.
                let slot = *slots.entry(team.name.clone()).or_insert_with(|| {
                    weight.push(0.0);
                    half_life.push(1.0);
                    weight.len() - 1
                });
                if let (Some(w), Some(h)) = (weight.get_mut(slot), half_life.get_mut(slot)) {
                    *w = team.weight.max(1e-9);
                    *h = c.half_life_s.max(1) as f64;
                }
                if let Some(s) = slot_of_team.get_mut(i) {
                    *s = Some(slot);
                }
            }
        }
        let mut history: Vec<Resources> = vec![[0.0; 3]; weight.len()];
        for u in usage {
            let Some(&slot) = slots.get(&u.team) else {
                continue;
            };
            let (Some(h), Some(e)) = (half_life.get(slot), history.get_mut(slot)) else {
                continue;
            };
            let age = (now - u.at).max(0) as f64;
            let factor = 0.5f64.powf(age / h) * std::f64::consts::LN_2 / h;
            // GPU-seconds to milli-GPU, CPU-seconds to milli-CPU.
            e[0] += u.gpu_s * 1000.0 * factor;
            e[1] += u.cpu_s * 1000.0 * factor;
            e[2] += u.memory_mib_s * factor;
        }
        FairShares {
            capacity,
            held: vec![[0.0; 3]; weight.len()],
            slot_of_team,
            history,
            weight,
        }
    }

    /// The team at index `team` of the policy's teams now holds `r` more (a running job,
    /// or one placed this cycle); an index past them is a team outside fair share.
    pub fn hold_team(&mut self, team: Option<usize>, r: Resources) {
        self.hold_slot(self.slot_of_team(team), r);
    }

    /// The slot of the team at index `team` of the policy's teams, for
    /// [`FairShares::hold_slot`] and [`FairShares::share_of_slot`]; `None` for a team
    /// outside fair share.
    pub fn slot_of_team(&self, team: Option<usize>) -> Option<usize> {
        team.and_then(|t| self.slot_of_team.get(t).copied().flatten())
    }

    pub fn hold_slot(&mut self, slot: Option<usize>, r: Resources) {
        if let Some(e) = slot.and_then(|s| self.held.get_mut(s)) {
            for (a, b) in e.iter_mut().zip(r) {
                *a += b;
            }
        }
    }

    /// The weighted dominant share of the team in `slot`; 0 for teams outside fair share.
    pub fn share_of_slot(&self, slot: Option<usize>) -> f64 {
        let Some(slot) = slot else {
            return 0.0;
        };
        let (Some(w), Some(held), Some(past)) = (
            self.weight.get(slot),
            self.held.get(slot),
            self.history.get(slot),
        ) else {
            return 0.0;
        };
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
