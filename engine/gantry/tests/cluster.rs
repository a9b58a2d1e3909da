//! `gantry serve --kubeconfig` as a user runs it, against the in-process API server of
//! the cluster crate's tests: it lists the cluster, becomes ready, answers the extender
//! from the bound pods, and follows a pod bound later without a restart.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

#[path = "../../cluster/tests/apiserver/mod.rs"]
mod apiserver;

use apiserver::{FakeApi, Kind};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 request; the status and the JSON body.
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, Value)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split(' ').nth(1)?.parse().ok()?;
    let json = out.split_once("\r\n\r\n").map(|(_, b)| b)?;
    Some((code, serde_json::from_str(json).unwrap_or(Value::Null)))
}

fn fixture(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/../cluster/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    list["items"].as_array().unwrap().clone()
}

const POLICY: &str = r#"
use std.nodes.{dgx_h100, dgx_a100}
use std.tiers

pool training { capacity = reserved; node = dgx_h100; nodes = 8 }
pool inference { capacity = reserved; node = dgx_h100; nodes = 1 }
pool notebooks { capacity = reserved; node = dgx_a100; nodes = 1 }

placement { packing = least_fragmentation }

team research { guaranteed = 16 gpu in training; burst = 40 gpu }
team serving { guaranteed = 4 gpu in inference }
team students { guaranteed = 4 gpu in notebooks }
"#;

/// `gantry serve --kubeconfig` (plus `extra`) on the test policy against `api`, once ready:
/// the process (killed on drop), its port, and the directory holding its files.
async fn serve(api: &std::sync::Arc<FakeApi>, extra: &[&str]) -> (Killed, u16, tempfile::TempDir) {
    let url = api.serve().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policy")).unwrap();
    std::fs::write(dir.path().join("policy/policy.gantry"), POLICY).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, apiserver::kubeconfig(&url)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Killed(
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("serve")
            .args(extra)
            .arg("--policy")
            .arg(dir.path().join("policy"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while http(port, "GET", "/readyz", "").is_none_or(|(c, _)| c != 200) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (server, port, dir)
}

fn filter(port: u16, gpus: u32, nodes: &[&str]) -> Value {
    let args = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "research", "labels": {"gantry.dev/team": "research"}},
                "spec": {"containers": [{"name": "main", "resources": {
                    "requests": {"nvidia.com/gpu": gpus.to_string()},
                    "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}},
        "NodeNames": nodes,
    });
    let (code, body) = http(port, "POST", "/extender/filter", &args.to_string()).unwrap();
    assert_eq!(code, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_follows_the_cluster() {
    let api = FakeApi::new();
    for n in fixture("nodes.json") {
        api.apply(Kind::Nodes, n);
    }
    for p in fixture("pods.json") {
        api.apply(Kind::Pods, p);
    }
    let (_server, port, _dir) = serve(&api, &[]).await;
    let (_, status) = http(port, "GET", "/v1/status", "").unwrap();
    assert!(
        status["inventory"]["source"]
            .as_str()
            .unwrap()
            .starts_with("kubernetes:"),
        "{status}"
    );
    assert_eq!(status["inventory"]["nodes"], 7, "{status}");
    assert_eq!(status["inventory"]["running_jobs"], 7, "{status}");
    assert_eq!(
        status["inventory"]["closed_nodes"]["train-3"],
        "cordoned (spec.unschedulable)"
    );

    // b200-0 is empty; train-0 is full.
    let r = filter(port, 8, &["train-0", "b200-0"]);
    assert_eq!(r["NodeNames"], json!(["b200-0"]), "{r}");
    // A pod bound to b200-0 later fills it: serve sees it without a restart.
    let mut pod = fixture("pods.json")
        .into_iter()
        .find(|p| p["metadata"]["name"] == "llama-70b-0")
        .unwrap();
    pod["metadata"]["name"] = json!("llama-70b-1");
    pod["spec"]["nodeName"] = json!("b200-0");
    api.apply(Kind::Pods, pod);
    let start = Instant::now();
    loop {
        let r = filter(port, 8, &["train-0", "b200-0"]);
        if r["NodeNames"] == json!([]) {
            assert!(
                r["FailedNodes"]["b200-0"]
                    .as_str()
                    .unwrap()
                    .contains("does not fit now"),
                "{r}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve did not follow the cluster: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gated(name: &str, gpus: u32, gang: Option<(&str, u32)>) -> Value {
    let mut labels = json!({"gantry.dev/team": "research", "gantry.dev/tier": "best_effort",
                            "gantry.dev/policy-revision": "r1"});
    if let Some((g, n)) = gang {
        labels["gantry.dev/gang"] = json!(g);
        labels["gantry.dev/gang-size"] = json!(n.to_string());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "research", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-24T08:00:00Z", "labels": labels},
        "spec": {"schedulingGates": [{"name": "gantry.dev/queue"}],
                 "nodeSelector": {"gantry.dev/pool": "training"},
                 "containers": [{"name": "main", "image": "trainer", "resources": {
                     "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus.to_string()},
                     "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}})
}

/// `serve --queue`: the controller's own loop places a gang whole on the two free H100
/// nodes and tells a pod that cannot fit why it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_queue() {
    let api = FakeApi::new();
    for n in fixture("nodes.json") {
        api.apply(Kind::Nodes, n);
    }
    let (_server, port, _dir) = serve(&api, &["--queue"]).await;
    // Training nodes with 8 free GPUs: train-0 and b200-0 (train-1 has 7 healthy, train-2
    // is not Ready, train-3 is cordoned). The 2×8 gang takes both; a third 8-GPU pod waits.
    api.apply(Kind::Pods, gated("g-0", 8, Some(("g", 2))));
    api.apply(Kind::Pods, gated("g-1", 8, Some(("g", 2))));
    api.apply(Kind::Pods, gated("solo", 8, None));
    let start = Instant::now();
    loop {
        api.bind_released();
        let pods = api.pods();
        let node = |p: &str| {
            pods[&format!("research/{p}")]["spec"]["nodeName"]
                .as_str()
                .map(str::to_string)
        };
        let why = pods["research/solo"]["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "gantry.dev/Queued").cloned());
        if let (Some(a), Some(b), Some(why)) = (node("g-0"), node("g-1"), why) {
            assert_ne!(a, b);
            assert!(
                pods["research/solo"]["spec"]["schedulingGates"].is_array(),
                "solo stays gated"
            );
            assert!(
                why["message"].as_str().unwrap().contains("queue position"),
                "{why}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the queue did not converge: {pods:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `gantry queue` shows it as an operator sees it, and /metrics per team and tier.
    let start = Instant::now();
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(["queue", "--server", &format!("http://127.0.0.1:{port}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let g_runs = text
            .lines()
            .any(|l| l.contains("research/g ") && l.contains(" running "));
        if out.status.success() && g_runs {
            let solo = text
                .lines()
                .find(|l| l.contains("research/solo"))
                .unwrap_or_default();
            assert!(
                solo.trim_start().starts_with('1') && solo.contains("no_capacity"),
                "{text}"
            );
            assert!(text.contains("1 waiting, 1 running"), "{text}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "gantry queue: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    for want in [
        "gantry_queue_pending_jobs{team=\"research\",tier=\"best_effort\"} 1",
        "gantry_gpus_in_use{team=\"research\",tier=\"best_effort\"} 16",
        "gantry_queue_leader 1",
        "gantry_queue_wait_seconds_count{team=\"research\",tier=\"best_effort\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} not in {metrics}");
    }
}

/// `gantry agent` as a DaemonSet runs it, on a recorded reading: one publish patches the
/// node with GFD's labels and gantry's annotations and exits 0; without NVML or a
/// reading it stops with a message saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_a_reading_on_its_node() {
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
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_gantry"))
                .arg("agent")
                .args(args)
                .output()
                .unwrap()
        })
    };
    let out = run(vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--reading".into(),
        reading.clone(),
        "--node-name".into(),
        "gpu-1".into(),
        "--once".into(),
    ])
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = api.get_object(Kind::Nodes, "gpu-1").unwrap();
    assert_eq!(node["metadata"]["labels"]["nvidia.com/gpu.count"], "8");
    assert_eq!(
        node["metadata"]["annotations"]["gantry.dev/mig-instances"],
        "7: 3g.40gb@4, 1g.10gb@0"
    );
    // A node that is not there: exit 2, named.
    let out = run(vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--reading".into(),
        reading,
        "--node-name".into(),
        "gpu-9".into(),
        "--once".into(),
    ])
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("node gpu-9 does not exist"));
    // No NVML on this machine and no reading: a clear stop.
    let out = run(vec!["--node-name".into(), "gpu-1".into()])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // (On a machine with NVML the agent gets further and stops for want of a cluster.)
    assert!(
        (stderr.contains("NVML is not available") && stderr.contains("--reading"))
            || stderr.contains("cluster configuration"),
        "{stderr}"
    );
}
