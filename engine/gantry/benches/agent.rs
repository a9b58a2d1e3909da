//! The node agent's cost: `gantry agent` (the real binary) publishing a recorded 8-GPU
//! reading (`tests/nvml/dgx-h100.reading.json`) to the cluster crate's in-process API
//! server, one reading per second for 60 s — 60 cycles, thirty times the default rate.
//! Prints the process's CPU time and peak RSS, and per minute at the default 30 s
//! interval. A recorded reading stands for NVML (no GPU here), so NVML's own cost per
//! reading is not in it.
//!
//! `cargo bench -p gantry --bench agent`

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark code"
)]

#[path = "../../cluster/tests/apiserver/mod.rs"]
mod apiserver;

use apiserver::{FakeApi, Kind};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

const SECONDS: u64 = 60;

/// (user + system CPU seconds, peak RSS in KiB) of a running process.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of stat; here 0-based after the name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (ticks / 100.0, hwm)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let api = FakeApi::new();
    api.apply(
        Kind::Nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}, "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let url = api.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, apiserver::kubeconfig(&url)).unwrap();
    let reading = format!(
        "{}/../../tests/nvml/dgx-h100.reading.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args([
            "agent",
            "--node-name",
            "gpu-1",
            "--interval",
            "1",
            "--reading",
        ])
        .arg(&reading)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu_start, _) = usage(pid);
    tokio::time::sleep(Duration::from_secs(SECONDS)).await;
    let (cpu_end, hwm_kib) = usage(pid);
    let _ = child.kill();
    let _ = child.wait();
    let cycles = SECONDS as f64;
    let per_cycle_ms = (cpu_end - cpu_start) / cycles * 1000.0;
    println!(
        "{SECONDS} s at one reading per second: {:.3} CPU-s ({per_cycle_ms:.2} ms per reading), peak RSS {:.1} MiB, {} node patches",
        cpu_end - cpu_start,
        hwm_kib as f64 / 1024.0,
        api.writes().len()
    );
    println!(
        "per minute at the default 30 s interval: {:.1} CPU-ms (2 readings)",
        per_cycle_ms * 2.0
    );
}
