//! MIG placement with NVIDIA's rules: a GPU in MIG mode has (usually 8) memory slots; an
//! instance of a profile occupies `width` consecutive slots and may start only at the
//! profile's listed slots (`nvidia-smi mig -lgipp`). The tables come from the policy's
//! `gpu` models, so the stdlib is the single source of them.

use lang::ir::{GpuModel, MigProfile};
use std::collections::BTreeMap;

/// Occupied slots of one MIG GPU, one bit per slot.
pub type SlotMask = u32;

/// MIG profiles per GPU model id (`H100-SXM5-80GB`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigTable {
    by_model: BTreeMap<String, Vec<MigProfile>>,
}

impl MigTable {
    pub fn from_models(models: &[GpuModel]) -> MigTable {
        MigTable {
            by_model: models
                .iter()
                .filter(|m| !m.mig_profiles.is_empty())
                .map(|m| (m.id.clone(), m.mig_profiles.clone()))
                .collect(),
        }
    }

    pub fn profiles(&self, model: &str) -> &[MigProfile] {
        self.by_model.get(model).map_or(&[], Vec::as_slice)
    }

    pub fn profile(&self, model: &str, name: &str) -> Option<&MigProfile> {
        self.profiles(model).iter().find(|p| p.name == name)
    }
}

/// The slots an instance of `profile` starting at `start` occupies.
pub fn mask(profile: &MigProfile, start: u32) -> SlotMask {
    let width = profile.width.min(32);
    let bits: SlotMask = if width >= 32 {
        SlotMask::MAX
    } else {
        (1 << width) - 1
    };
    bits.checked_shl(start).unwrap_or(0)
}

/// The starts where `profile` fits into a GPU with `used` slots taken.
pub fn free_starts(profile: &MigProfile, used: SlotMask) -> impl Iterator<Item = u32> + '_ {
    profile.starts.iter().copied().filter(move |s| {
        let m = mask(profile, *s);
        m != 0 && m & used == 0
    })
}

/// Where to start a new `profile` instance: of the allowed free starts, the one that leaves
/// the most room for later instances (each profile's remaining placements, weighted by
/// width), so small instances do not block the only start of a large one. Ties: lowest.
pub fn choose_start(profiles: &[MigProfile], profile: &MigProfile, used: SlotMask) -> Option<u32> {
    free_starts(profile, used)
        .map(|s| (room(profiles, used | mask(profile, s)), s))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, s)| s)
}

/// How many instances could still be placed, per profile, weighted by width.
pub fn room(profiles: &[MigProfile], used: SlotMask) -> u64 {
    profiles
        .iter()
        .map(|p| free_starts(p, used).count() as u64 * u64::from(p.width))
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code")]
mod tests {
    use super::*;

    fn h100() -> Vec<MigProfile> {
        let p = |name: &str, width, starts: &[u32]| MigProfile {
            name: name.into(),
            compute_slices: width,
            memory_mib: 0,
            width,
            starts: starts.to_vec(),
        };
        vec![
            p("1g.10gb", 1, &[0, 1, 2, 3, 4, 5, 6]),
            p("2g.20gb", 2, &[0, 2, 4]),
            p("3g.40gb", 4, &[0, 4]),
            p("4g.40gb", 4, &[0]),
            p("7g.80gb", 8, &[0]),
        ]
    }

    #[test]
    fn a_3g_after_a_4g_starts_at_slot_4() {
        let ps = h100();
        let four = ps.iter().find(|p| p.name == "4g.40gb").unwrap();
        let three = ps.iter().find(|p| p.name == "3g.40gb").unwrap();
        let at = choose_start(&ps, four, 0).unwrap();
        assert_eq!(at, 0);
        let used = mask(four, at);
        assert_eq!(choose_start(&ps, three, used), Some(4));
        let used = used | mask(three, 4);
        assert_eq!(choose_start(&ps, three, used), None, "the GPU is full");
    }

    #[test]
    fn a_first_3g_keeps_slot_0_for_a_4g() {
        let ps = h100();
        let three = ps.iter().find(|p| p.name == "3g.40gb").unwrap();
        assert_eq!(choose_start(&ps, three, 0), Some(4));
    }

    #[test]
    fn the_7g_needs_an_empty_gpu_and_1g_never_takes_slot_7() {
        let ps = h100();
        let seven = ps.iter().find(|p| p.name == "7g.80gb").unwrap();
        let one = ps.iter().find(|p| p.name == "1g.10gb").unwrap();
        assert_eq!(choose_start(&ps, seven, 0b1000_0000), None);
        let all_but_7: SlotMask = 0b0111_1111;
        assert_eq!(choose_start(&ps, one, all_but_7), None);
    }
}
