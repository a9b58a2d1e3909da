//! The host's GPUs read through NVML (nvml-wrapper), into the engine's plain
//! `HostReading` (`engine::inventory::nvml` turns a reading into a fleet node). One thread
//! owns the library handle and the XID event set (both borrow-bound to it), waits for
//! critical XID events between reads, and answers read requests over a channel, so
//! callers never block on the driver for long and never touch NVML from two threads.

use engine::inventory::nvml::{DeviceReading, HostReading, MigInstanceReading};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TopologyLevel};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::Nvml;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

/// NVML allows up to 18 NVLinks per GPU (NVML_NVLINK_MAX_LINKS).
const MAX_LINKS: u32 = 18;
/// How long the thread waits for an XID event before looking for read requests.
const EVENT_WAIT_MS: u32 = 200;
/// How long a caller waits for a reading before calling NVML stuck.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

type Reply = mpsc::Sender<Result<HostReading, String>>;

/// What the OS says about this host, which NVML does not know.
#[derive(Debug, Clone)]
pub struct HostInfo {
    pub node_name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

impl HostInfo {
    /// `name`, else `$NODE_NAME` (the Kubernetes downward API), else the hostname; CPUs
    /// this process may use; memory from `/proc/meminfo`.
    pub fn detect(name: Option<&str>) -> HostInfo {
        let node_name = name
            .map(str::to_string)
            .or_else(|| std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()))
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "localhost".into());
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kib| kib / 1024);
        HostInfo {
            node_name,
            cpu_milli: cpus as u64 * 1000,
            memory_mib,
        }
    }
}

/// A running NVML thread. Dropping it stops the thread at its next wake-up.
#[derive(Debug)]
pub struct NvmlProbe {
    requests: mpsc::Sender<Reply>,
}

impl NvmlProbe {
    /// Loads NVML and starts watching for XID events; `Err` says why NVML is unusable
    /// (no library, no driver, no permission).
    pub fn start(host: HostInfo) -> Result<NvmlProbe, String> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (requests, incoming) = mpsc::channel::<Reply>();
        std::thread::Builder::new()
            .name("gantry-nvml".into())
            .spawn(move || {
                let nvml = match Nvml::init() {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("NVML did not load: {e}")));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                serve(&nvml, &host, &incoming);
            })
            .map_err(|e| format!("cannot start the NVML thread: {e}"))?;
        match ready_rx.recv_timeout(READ_TIMEOUT) {
            Ok(Ok(())) => Ok(NvmlProbe { requests }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("NVML did not initialise in time".into()),
        }
    }

    /// A fresh reading of every GPU (XIDs seen since the probe started included).
    pub fn read(&self) -> Result<HostReading, String> {
        let (tx, rx) = mpsc::channel();
        self.requests
            .send(tx)
            .map_err(|_| "the NVML thread has stopped".to_string())?;
        rx.recv_timeout(READ_TIMEOUT)
            .map_err(|_| "NVML did not answer in time".to_string())?
    }
}

/// The thread's loop: collect XIDs, answer reads, stop when every sender is gone.
fn serve(nvml: &Nvml, host: &HostInfo, incoming: &mpsc::Receiver<Reply>) {
    let mut xids: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let (mut events, mut notes) = watch_xids(nvml);
    loop {
        if let Some(set) = &events {
            // Answer a waiting read before blocking on the driver: a one-shot reader
            // (`gantry inventory`, the first read of `serve` and `agent`) has asked by now
            // and would otherwise sit out a whole wait.
            match incoming.try_recv() {
                Ok(reply) => {
                    let _ = reply.send(read(nvml, host, &xids, &notes));
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
            match set.wait(EVENT_WAIT_MS) {
                Ok(event) => {
                    if let (Ok(uuid), Some(xid)) = (event.device.uuid(), event.event_data) {
                        let code = match xid {
                            XidError::Value(v) => v,
                            XidError::Unknown => 0,
                        };
                        tracing::warn!(gpu = %uuid, xid = code, "critical XID event");
                        xids.entry(uuid).or_default().push(code);
                    }
                }
                Err(NvmlError::Timeout) => {}
                Err(e) => {
                    notes.push(format!("XID events stopped: {e}"));
                    events = None;
                }
            }
        } else {
            match incoming.recv() {
                Ok(reply) => {
                    let _ = reply.send(read(nvml, host, &xids, &notes));
                }
                Err(_) => return,
            }
        }
    }
}

/// An event set for critical XIDs on every GPU that supports them, and notes on those
/// that do not.
fn watch_xids(nvml: &Nvml) -> (Option<EventSet<'_>>, Vec<String>) {
    let mut notes = Vec::new();
    let count = nvml.device_count().unwrap_or(0);
    let mut set = match nvml.create_event_set() {
        Ok(s) => Some(s),
        Err(e) => {
            notes.push(format!("XID events are not watched: {e}"));
            return (None, notes);
        }
    };
    for i in 0..count {
        let Some(current) = set.take() else { break };
        let Ok(device) = nvml.device_by_index(i) else {
            set = Some(current);
            continue;
        };
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, current) {
            Ok(s) => set = Some(s),
            Err(e) => {
                notes.push(format!("GPU {i}: XID events are not watched: {}", e.error));
                set = nvml.create_event_set().ok();
            }
        }
    }
    (set, notes)
}

fn read(
    nvml: &Nvml,
    host: &HostInfo,
    xids: &BTreeMap<String, Vec<u64>>,
    notes: &[String],
) -> Result<HostReading, String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML cannot count GPUs: {e}"))?;
    let mut devices: Vec<DeviceReading> =
        (0..count).map(|i| device(nvml, i, count, xids)).collect();
    if devices.iter().any(|d| d.mig_enabled) {
        let listed = list_mig_instances();
        for d in devices.iter_mut().filter(|d| d.mig_enabled) {
            d.mig_instances = listed
                .as_ref()
                .map(|all| all.get(&d.index).cloned().unwrap_or_default());
        }
    }
    Ok(HostReading {
        node_name: host.node_name.clone(),
        cpu_milli: host.cpu_milli,
        memory_mib: host.memory_mib,
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        devices,
        notes: notes.to_vec(),
    })
}

/// The GPU instances per GPU from `nvidia-smi mig -lgi`; `None` when it cannot run.
fn list_mig_instances() -> Option<BTreeMap<u32, Vec<MigInstanceReading>>> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["mig", "-lgi"])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "No GPU instances found" exits non-zero but is an answer: no instances.
    if !out.status.success() && !text.contains("No GPU instances found") {
        return None;
    }
    Some(engine::inventory::nvml::parse_mig_instances(&text))
}

/// One GPU; each field NVML refuses is left out and named in `errors` (NotSupported is
/// normal for some fields on some GPUs and is not an error).
fn device(nvml: &Nvml, index: u32, count: u32, xids: &BTreeMap<String, Vec<u64>>) -> DeviceReading {
    let mut r = DeviceReading {
        index,
        ..DeviceReading::default()
    };
    let d = match nvml.device_by_index(index) {
        Ok(d) => d,
        Err(e) => {
            r.errors.push(format!("cannot open the device: {e}"));
            return r;
        }
    };
    fn keep<T>(errors: &mut Vec<String>, what: &str, v: Result<T, NvmlError>) -> Option<T> {
        match v {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                errors.push(format!("{what}: {e}"));
                None
            }
        }
    }
    r.name = keep(&mut r.errors, "name", d.name());
    r.memory_total_bytes = keep(&mut r.errors, "memory", d.memory_info()).map(|m| m.total);
    r.uuid = keep(&mut r.errors, "uuid", d.uuid());
    r.pci_bus_id = keep(&mut r.errors, "pci", d.pci_info()).map(|p| p.bus_id);
    r.mig_enabled = keep(&mut r.errors, "mig mode", d.mig_mode()).is_some_and(|m| m.current == 1);
    r.ecc_uncorrected = keep(
        &mut r.errors,
        "ecc",
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
    );
    for link in 0..MAX_LINKS {
        let wrapper = d.link_wrapper_for(link);
        match wrapper.is_active() {
            Ok(true) => {
                if let Ok(peer) = wrapper.remote_pci_info() {
                    r.nvlink_peers.push(peer.bus_id);
                }
            }
            Ok(false) => {}
            // Past the last link, or no NVLink on this GPU.
            Err(_) => break,
        }
    }
    for other in (0..count).filter(|j| *j != index) {
        let Ok(o) = nvml.device_by_index(other) else {
            continue;
        };
        if matches!(
            d.topology_common_ancestor(o),
            Ok(TopologyLevel::Internal | TopologyLevel::Single)
        ) {
            r.pcie_switch_peers.push(other);
        }
    }
    if let Some(seen) = r.uuid.as_ref().and_then(|u| xids.get(u)) {
        r.xids.clone_from(seen);
    }
    r
}
