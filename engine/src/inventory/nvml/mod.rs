//! Live GPU inventory from NVML, as data. The `probe` crate talks to the driver through
//! nvml-wrapper on a thread of its own and returns a [`HostReading`] — plain data,
//! serialisable, so a reading from a real machine is a test fixture. [`node_from_reading`]
//! turns a reading into the fleet's [`Node`]; it is pure and runs in tests without a GPU.
pub mod publish;

use crate::core::fleet::{Fleet, Gpu, MigInstance, Node};
use lang::ir::GpuModel;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// XIDs that the application, not the GPU, causes (the NVIDIA device plugin's list): they do
/// not make a GPU unhealthy. Every other critical XID does.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// What NVML said about one GPU. Fields NVML could not read are `None` and named in
/// `errors`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceReading {
    pub index: u32,
    /// The product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    /// Current MIG mode.
    #[serde(default)]
    pub mig_enabled: bool,
    /// PCI bus ids at the far end of each active NVLink (another GPU, or an NVSwitch).
    #[serde(default)]
    pub nvlink_peers: Vec<String>,
    /// Indices of the other GPUs whose common PCIe ancestor is the board or one PCIe
    /// switch (NVML's `Internal` / `Single`).
    #[serde(default)]
    pub pcie_switch_peers: Vec<u32>,
    /// The GPU instances that exist on a MIG-mode GPU, as `nvidia-smi mig -lgi` lists them
    /// (nvml-wrapper has no safe call for them); `None` when they could not be listed.
    #[serde(default)]
    pub mig_instances: Option<Vec<MigInstanceReading>>,
    /// Volatile uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected: Option<u64>,
    /// Critical XIDs seen since gantry started watching.
    #[serde(default)]
    pub xids: Vec<u64>,
    #[serde(default)]
    pub errors: Vec<String>,
}

/// A GPU instance: its profile (`3g.40gb`) and first memory slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstanceReading {
    pub profile: String,
    pub start: u32,
}

/// The GPU instances per GPU index in the table `nvidia-smi mig -lgi` prints:
/// rows `| GPU  MIG <profile>  <profile id>  <instance id>  <start>:<size> |`. A `+me`
/// (media extensions) profile takes the same slots as its base profile.
pub fn parse_mig_instances(text: &str) -> BTreeMap<u32, Vec<MigInstanceReading>> {
    let mut out: BTreeMap<u32, Vec<MigInstanceReading>> = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split_whitespace().collect();
        let [gpu, "MIG", profile, _profile_id, _instance_id, placement] = cells.as_slice() else {
            continue;
        };
        let (Ok(gpu), Some(Ok(start))) = (
            gpu.parse::<u32>(),
            placement.split(':').next().map(str::parse::<u32>),
        ) else {
            continue;
        };
        let base = profile.split('+').next().unwrap_or(profile);
        out.entry(gpu).or_default().push(MigInstanceReading {
            profile: base.to_string(),
            start,
        });
    }
    out
}

/// One machine as NVML sees it, plus what the OS says about CPU and memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostReading {
    pub node_name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub devices: Vec<DeviceReading>,
    /// What could not be watched or read for the whole host (e.g. XID events unsupported).
    #[serde(default)]
    pub notes: Vec<String>,
}

const MIB: u64 = 1024 * 1024;

/// The catalog model for an NVML product name: the same `product`, the closest memory when
/// several share it. Unknown products keep NVML's name as the model, without `NVIDIA `.
pub fn model_for(
    name: &str,
    memory_mib: Option<u64>,
    models: &[GpuModel],
) -> (String, Option<u64>) {
    let matching = models.iter().filter(|m| {
        m.product
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case(name.trim()))
    });
    let best = matching.min_by_key(|m| memory_mib.map_or(0, |mem| m.memory_mib.abs_diff(mem)));
    match best {
        Some(m) => (m.id.clone(), Some(m.memory_mib)),
        None => (
            name.trim()
                .trim_start_matches("NVIDIA ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("-"),
            None,
        ),
    }
}

/// Groups GPUs joined by NVLink — directly, or through a shared NVSwitch — and, on a host
/// with no active NVLink at all, GPUs under one PCIe switch. Returns each GPU's island.
fn islands(devices: &[DeviceReading]) -> Vec<Option<u32>> {
    let n = devices.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while let Some(&p) = parent.get(i) {
            if p == i {
                break;
            }
            let grand = parent.get(p).copied().unwrap_or(p);
            if let Some(slot) = parent.get_mut(i) {
                *slot = grand;
            }
            i = p;
        }
        i
    }
    fn union(parent: &mut [usize], a: usize, b: usize) {
        let (ra, rb) = (root(parent, a), root(parent, b));
        if let Some(slot) = parent.get_mut(ra.max(rb)) {
            *slot = ra.min(rb);
        }
    }
    let nvlink = devices.iter().any(|d| !d.nvlink_peers.is_empty());
    let by_bus: BTreeMap<&str, usize> = devices
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((d.pci_bus_id.as_deref()?, i)))
        .collect();
    // A far end that is not a GPU here is a switch: the first GPU seen on it stands for it.
    let mut switches: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, d) in devices.iter().enumerate() {
        if nvlink {
            for peer in &d.nvlink_peers {
                let other = match by_bus.get(peer.as_str()) {
                    Some(j) => *j,
                    None => *switches.entry(peer.as_str()).or_insert(i),
                };
                union(&mut parent, i, other);
            }
        } else {
            for peer in &d.pcie_switch_peers {
                if let Some(j) = devices.iter().position(|x| x.index == *peer) {
                    union(&mut parent, i, j);
                }
            }
        }
    }
    let roots: Vec<usize> = (0..n).map(|i| root(&mut parent, i)).collect();
    let grouped = roots
        .iter()
        .any(|r| roots.iter().filter(|x| *x == r).count() > 1);
    if !grouped {
        return vec![None; n];
    }
    // Number islands in order of their first GPU.
    let mut numbers: BTreeMap<usize, u32> = BTreeMap::new();
    roots
        .iter()
        .map(|r| {
            let next = numbers.len() as u32;
            Some(*numbers.entry(*r).or_insert(next))
        })
        .collect()
}

/// Why a GPU is not healthy, if it is not: a critical XID, uncorrected ECC errors, or NVML
/// failing to read it.
pub fn unhealthy_because(d: &DeviceReading) -> Option<String> {
    if let Some(x) = d.xids.iter().find(|x| !APPLICATION_XIDS.contains(x)) {
        return Some(format!("XID {x}"));
    }
    if let Some(n) = d.ecc_uncorrected.filter(|n| *n > 0) {
        return Some(format!("{n} uncorrected ECC errors"));
    }
    if d.name.is_none() {
        return Some("NVML could not read the device".into());
    }
    None
}

/// The node a reading describes, and notes on what was assumed.
pub fn node_from_reading(
    reading: &HostReading,
    models: &[GpuModel],
    pool: Option<&str>,
) -> (Node, Vec<String>) {
    let mut notes = reading.notes.clone();
    let island_of = islands(&reading.devices);
    let mut gpus = Vec::new();
    for (d, island) in reading.devices.iter().zip(island_of) {
        let memory = d.memory_total_bytes.map(|b| b / MIB);
        let name = d.name.as_deref().unwrap_or("unknown");
        let (model, catalog_memory) = model_for(name, memory, models);
        if catalog_memory.is_none() && d.name.is_some() {
            notes.push(format!(
                "GPU {}: `{name}` is not a model gantry knows; it is `{model}` with NVML's memory (add a `gpu` model with product = \"{name}\" for MIG profiles)",
                d.index
            ));
        }
        let healthy = match unhealthy_because(d) {
            None => true,
            Some(why) => {
                notes.push(format!("GPU {} is unhealthy: {why}", d.index));
                false
            }
        };
        for e in &d.errors {
            notes.push(format!("GPU {}: {e}", d.index));
        }
        let profiles = models
            .iter()
            .find(|m| m.id == model)
            .map_or(&[][..], |m| m.mig_profiles.as_slice());
        let knows_mig = !profiles.is_empty();
        let mut mig_healthy = true;
        let mig = match (d.mig_enabled, knows_mig) {
            (true, true) => match &d.mig_instances {
                None => {
                    notes.push(format!(
                        "GPU {} is in MIG mode but its instances could not be listed (nvidia-smi mig -lgi), so all slots count as free",
                        d.index
                    ));
                    Some(Vec::new())
                }
                Some(list) => {
                    let mut kept = Vec::new();
                    for i in list {
                        if profiles.iter().any(|p| p.name == i.profile) {
                            kept.push(MigInstance {
                                profile: i.profile.clone(),
                                start: i.start,
                            });
                        } else {
                            notes.push(format!(
                                "GPU {} has a MIG instance of profile {} that gantry does not know for {model}; the GPU is left out of placement",
                                d.index, i.profile
                            ));
                            mig_healthy = false;
                        }
                    }
                    Some(kept)
                }
            },
            (true, false) => {
                notes.push(format!(
                    "GPU {} is in MIG mode but gantry knows no MIG profiles for `{model}`; it is left out of placement",
                    d.index
                ));
                None
            }
            (false, _) => None,
        };
        gpus.push(Gpu {
            index: d.index,
            uuid: d.uuid.clone(),
            pci_bus_id: d.pci_bus_id.clone(),
            memory_mib: memory.or(catalog_memory).unwrap_or(0),
            model,
            nvlink_island: island,
            // A MIG GPU whose profiles are unknown cannot be placed on safely.
            healthy: healthy && mig_healthy && (knows_mig || !d.mig_enabled),
            mig,
        });
    }
    // A GPU NVML cannot open is most likely the same model as its neighbours; it stays in
    // the fleet (unhealthy) so it is counted and shown. With no neighbour to go by it is
    // left out.
    let template = reading
        .devices
        .iter()
        .zip(&gpus)
        .find(|(d, _)| d.name.is_some())
        .map(|(_, g)| (g.model.clone(), g.memory_mib));
    let mut kept = Vec::new();
    for (d, mut g) in reading.devices.iter().zip(gpus) {
        if d.name.is_none() {
            let Some((model, memory)) = &template else {
                notes.push(format!(
                    "GPU {} is left out: nothing about it could be read",
                    d.index
                ));
                continue;
            };
            g.model.clone_from(model);
            g.memory_mib = *memory;
        }
        kept.push(g);
    }
    let gpus = kept;
    let node = Node {
        name: reading.node_name.clone(),
        pool: pool.map(str::to_string),
        cpu_milli: reading.cpu_milli,
        memory_mib: reading.memory_mib,
        labels: BTreeMap::new(),
        gpus,
    };
    (node, notes)
}

/// The one-node fleet of a reading.
pub fn fleet_from_reading(
    reading: &HostReading,
    models: &[GpuModel],
    pool: Option<&str>,
) -> (Fleet, Vec<String>) {
    let (node, notes) = node_from_reading(reading, models, pool);
    (Fleet { nodes: vec![node] }, notes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, reason = "test code")]
    use super::*;

    fn gpu(index: u32, bus: &str, peers: &[&str]) -> DeviceReading {
        DeviceReading {
            index,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            memory_total_bytes: Some(81_559 * MIB),
            pci_bus_id: Some(bus.into()),
            nvlink_peers: peers.iter().map(|p| (*p).to_string()).collect(),
            ..DeviceReading::default()
        }
    }

    #[test]
    fn nvswitch_makes_one_island_and_direct_links_pairs() {
        let switched = [
            gpu(0, "0:18", &["sw:1", "sw:2"]),
            gpu(1, "0:2a", &["sw:2", "sw:1"]),
            gpu(2, "0:3a", &["sw:1"]),
        ];
        assert_eq!(islands(&switched), vec![Some(0), Some(0), Some(0)]);
        // NVLink bridges in pairs (H100 NVL): 0-1 and 2-3.
        let bridged = [
            gpu(0, "a", &["b"]),
            gpu(1, "b", &["a"]),
            gpu(2, "c", &["d"]),
            gpu(3, "d", &["c"]),
        ];
        assert_eq!(islands(&bridged), vec![Some(0), Some(0), Some(1), Some(1)]);
        // No NVLink: PCIe switches group them.
        let mut pcie = [gpu(0, "a", &[]), gpu(1, "b", &[]), gpu(2, "c", &[])];
        pcie[0].pcie_switch_peers = vec![1];
        pcie[1].pcie_switch_peers = vec![0];
        assert_eq!(islands(&pcie), vec![Some(0), Some(0), Some(1)]);
        // Nothing joined: no islands at all.
        assert_eq!(
            islands(&[gpu(0, "a", &[]), gpu(1, "b", &[])]),
            vec![None, None]
        );
    }

    #[test]
    fn mig_instances_from_nvidia_smi() {
        let text = "\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.10gb          19        9          6:1     |
+-------------------------------------------------------+
|   0  MIG 3g.40gb           9        2          0:4     |
+-------------------------------------------------------+
|   1  MIG 1g.10gb+me       20       13          2:1     |
+-------------------------------------------------------+
";
        let got = parse_mig_instances(text);
        let at = |gpu: u32| -> Vec<(String, u32)> {
            got.get(&gpu)
                .map(|v| v.iter().map(|i| (i.profile.clone(), i.start)).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            at(0),
            vec![("1g.10gb".to_string(), 6), ("3g.40gb".to_string(), 0)]
        );
        assert_eq!(at(1), vec![("1g.10gb".to_string(), 2)]);
        assert!(parse_mig_instances("No MIG-enabled devices found.").is_empty());
    }

    #[test]
    fn health_follows_xids_and_ecc() {
        let mut d = gpu(0, "a", &[]);
        assert_eq!(unhealthy_because(&d), None);
        d.xids = vec![13, 43];
        assert_eq!(unhealthy_because(&d), None, "application XIDs");
        d.xids.push(79);
        assert_eq!(unhealthy_because(&d).as_deref(), Some("XID 79"));
        d.xids.clear();
        d.ecc_uncorrected = Some(2);
        assert!(unhealthy_because(&d).unwrap_or_default().contains("ECC"));
    }

    #[test]
    fn models_come_from_the_catalog_by_product_name() {
        let models = crate::inventory::catalog::stdlib_models();
        assert_eq!(
            model_for("NVIDIA H100 80GB HBM3", Some(81_559), models).0,
            "H100-SXM5-80GB"
        );
        assert_eq!(
            model_for("NVIDIA H200", Some(143_771), models).0,
            "H200-141GB"
        );
        assert_eq!(
            model_for("NVIDIA RTX 6000 Ada Generation", None, models).0,
            "RTX-6000-Ada-Generation"
        );
    }
}
