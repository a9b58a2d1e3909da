//! A live NVML reading checked against `nvidia-smi`, a second reader of the same driver.
//! It needs an NVIDIA GPU, so it is ignored by default; on a GPU machine run
//! `cargo test -p tests --test nvml_live -- --ignored` (a session with a lent GPU ran it
//! there; `tests/nvml/README.md` says what it saw).

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code"
)]

use engine::inventory::catalog;
use engine::inventory::nvml;
use std::process::Command;

/// `nvidia-smi`'s view of each GPU, in its own index order (NVML's).
#[derive(Debug)]
struct SmiGpu {
    index: u32,
    name: String,
    uuid: String,
    pci_bus_id: String,
    memory_mib: u64,
    mig_enabled: bool,
}

fn nvidia_smi() -> Vec<SmiGpu> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,name,uuid,pci.bus_id,memory.total,mig.mode.current",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .expect("nvidia-smi runs");
    assert!(out.status.success(), "nvidia-smi failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            assert_eq!(f.len(), 6, "nvidia-smi row: {line}");
            SmiGpu {
                index: f[0].parse().unwrap(),
                name: f[1].to_string(),
                uuid: f[2].to_string(),
                pci_bus_id: f[3].to_string(),
                memory_mib: f[4].parse().unwrap(),
                mig_enabled: f[5] == "Enabled",
            }
        })
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU, its driver and nvidia-smi"]
fn a_live_reading_agrees_with_nvidia_smi() {
    let probe = probe::NvmlProbe::start(probe::HostInfo::detect(Some("live"))).expect("NVML loads");
    let reading = probe.read().expect("NVML reads");
    let smi = nvidia_smi();
    assert!(!smi.is_empty(), "no GPU listed");
    assert_eq!(reading.devices.len(), smi.len(), "{reading:#?}\n{smi:#?}");
    for (d, s) in reading.devices.iter().zip(&smi) {
        assert_eq!(d.index, s.index);
        assert!(d.errors.is_empty(), "GPU {}: {:?}", d.index, d.errors);
        assert_eq!(d.name.as_deref(), Some(s.name.as_str()));
        assert_eq!(d.uuid.as_deref(), Some(s.uuid.as_str()));
        assert_eq!(
            d.pci_bus_id.as_deref().map(str::to_ascii_uppercase),
            Some(s.pci_bus_id.to_ascii_uppercase())
        );
        assert_eq!(
            d.memory_total_bytes.map(|b| b / (1024 * 1024)),
            Some(s.memory_mib)
        );
        assert_eq!(d.mig_enabled, s.mig_enabled);
    }
    // The fleet gantry makes of it holds every GPU with nvidia-smi's memory.
    let (fleet, _) = nvml::fleet_from_reading(&reading, catalog::stdlib_models(), None);
    let gpus = &fleet.nodes[0].gpus;
    assert_eq!(gpus.len(), smi.len());
    for (g, s) in gpus.iter().zip(&smi) {
        assert_eq!(g.memory_mib, s.memory_mib, "GPU {}", s.index);
        assert_eq!(g.uuid.as_deref(), Some(s.uuid.as_str()));
    }
    // A second read through the same probe sees the same GPUs.
    let again = probe.read().expect("NVML reads again");
    assert_eq!(again.devices, reading.devices);
}
