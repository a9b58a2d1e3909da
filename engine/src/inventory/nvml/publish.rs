//! What the node agent (`gantry agent`) publishes on its Node from an NVML reading: the
//! labels GPU Feature Discovery defines, under GFD's names and in GFD's format, and
//! gantry's own annotations for what GFD does not say (NVLink islands, unhealthy GPUs
//! with why, MIG instances). Pure, so a recorded reading is a test fixture.

use super::{islands, unhealthy_because, HostReading, MIB};
use std::collections::BTreeMap;

/// GFD's product label: NVML's name with `-` for spaces (`NVIDIA-H100-80GB-HBM3`).
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
pub const COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// GFD's memory label, in MiB.
pub const MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// NVLink island of each GPU by index, comma-separated (`0,0,0,0,1,1,1,1`).
pub const ISLANDS_ANNOTATION: &str = "gantry.dev/nvlink-islands";
/// Unhealthy GPUs by index with why: `3: XID 79; 5: 2 uncorrected ECC errors`.
pub const UNHEALTHY_ANNOTATION: &str = "gantry.dev/unhealthy-gpus";
/// MIG instances by GPU index: `7: 1g.10gb@0, 3g.40gb@4` (profile @ first slot).
pub const MIG_ANNOTATION: &str = "gantry.dev/mig-instances";
/// The annotations the agent owns: it removes them when they no longer apply.
pub const OWNED_ANNOTATIONS: &[&str] = &[ISLANDS_ANNOTATION, UNHEALTHY_ANNOTATION, MIG_ANNOTATION];

/// The most memory a GPU is believed to have (16 TiB, far above any GPU): a reading above
/// it (NVML has answered 2^64 − 1) publishes no memory label.
pub const MAX_GPU_MEMORY_MIB: u64 = 16 << 20;

/// A label value as GPU Feature Discovery cleans one: runs of white space become `-`,
/// characters a label value may not hold (anything but letters, digits, `-`, `_`, `.`)
/// are dropped, it starts and ends with a letter or digit, and it is at most 63
/// characters. `None` when nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let joined = raw.split_whitespace().collect::<Vec<_>>().join("-");
    let kept: String = joined
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect();
    let trimmed = kept.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// Labels and annotations for the node a reading describes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Published {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// What the agent publishes for `reading`. GPUs NVML could not name are counted but do
/// not name the product.
pub fn published(reading: &HostReading) -> Published {
    let mut out = Published::default();
    let devices = &reading.devices;
    if devices.is_empty() {
        return out;
    }
    out.labels
        .insert(COUNT_LABEL.into(), devices.len().to_string());
    if let Some(name) = devices
        .iter()
        .find_map(|d| d.name.as_deref())
        .and_then(label_value)
    {
        out.labels.insert(PRODUCT_LABEL.into(), name);
    }
    if let Some(mib) = devices
        .iter()
        .find_map(|d| d.memory_total_bytes)
        .map(|bytes| bytes / MIB)
        .filter(|mib| (1..=MAX_GPU_MEMORY_MIB).contains(mib))
    {
        out.labels.insert(MEMORY_LABEL.into(), mib.to_string());
    }
    let island_of = islands(devices);
    if island_of.iter().all(Option::is_some) {
        let list: Vec<String> = island_of.iter().flatten().map(u32::to_string).collect();
        out.annotations
            .insert(ISLANDS_ANNOTATION.into(), list.join(","));
    }
    let unhealthy: Vec<String> = devices
        .iter()
        .filter_map(|d| unhealthy_because(d).map(|why| format!("{}: {why}", d.index)))
        .collect();
    if !unhealthy.is_empty() {
        out.annotations
            .insert(UNHEALTHY_ANNOTATION.into(), unhealthy.join("; "));
    }
    let mig: Vec<String> = devices
        .iter()
        .filter(|d| d.mig_enabled)
        .map(|d| {
            let instances: Vec<String> = d
                .mig_instances
                .iter()
                .flatten()
                .map(|i| format!("{}@{}", i.profile, i.start))
                .collect();
            format!("{}: {}", d.index, instances.join(", "))
        })
        .collect();
    if !mig.is_empty() {
        out.annotations
            .insert(MIG_ANNOTATION.into(), mig.join("; "));
    }
    out
}

/// Reads [`UNHEALTHY_ANNOTATION`]: GPU index → why. Entries that do not parse are skipped.
pub fn parse_unhealthy(text: &str) -> BTreeMap<u32, String> {
    text.split(';')
        .filter_map(|e| {
            let (i, why) = e.split_once(':')?;
            Some((i.trim().parse().ok()?, why.trim().to_string()))
        })
        .collect()
}

/// Reads [`MIG_ANNOTATION`]: GPU index → instances (profile, first slot).
pub fn parse_mig(text: &str) -> BTreeMap<u32, Vec<(String, u32)>> {
    text.split(';')
        .filter_map(|e| {
            let (i, list) = e.split_once(':')?;
            let instances = list
                .split(',')
                .filter(|x| !x.trim().is_empty())
                .filter_map(|x| {
                    let (profile, start) = x.trim().split_once('@')?;
                    Some((profile.to_string(), start.parse().ok()?))
                })
                .collect();
            Some((i.trim().parse().ok()?, instances))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_cleaned_as_gfd_cleans_them() {
        assert_eq!(
            label_value(" NVIDIA H100 80GB HBM3 ").as_deref(),
            Some("NVIDIA-H100-80GB-HBM3")
        );
        assert_eq!(
            label_value("NVIDIA\nH100;rm -rf /").as_deref(),
            Some("NVIDIA-H100rm--rf")
        );
        let long = label_value(&"A".repeat(100)).unwrap_or_default();
        assert_eq!(long.len(), 63);
        assert_eq!(label_value(" ;; \t").as_deref(), None);
        assert_eq!(label_value("-._x_.-").as_deref(), Some("x"));
    }
}
