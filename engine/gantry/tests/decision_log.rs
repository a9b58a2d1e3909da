//! `gantry serve --log-format json` as an operator reads it: every line on stderr is one
//! JSON object (the start-up banner too), and every admission decision has its line under
//! the target `gantry::decision`, naming the pod, the rule, the result and the revision.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A POST over plain HTTP/1.1 on loopback; the status line.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_string()
}

#[test]
fn json_logs_are_json_only_with_a_line_per_admission_decision() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let policy = repo().join("policies/onprem-dgx");
    let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["serve", "--policy", policy.to_str().unwrap()])
        .args(["--listen", &addr.to_string(), "--log-format", "json"])
        .current_dir(repo())
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "gantry serve did not start listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for (fixture, path) in [
        ("denied_no_checkpoint.json", "/mutate"),
        ("gpu_pod.json", "/admit"),
        ("cpu_only.json", "/mutate"),
    ] {
        let body = std::fs::read(repo().join("tests/admission").join(fixture)).unwrap();
        let status = post(addr, path, &body);
        assert!(status.contains("200"), "{fixture}: {status}");
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = err
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "serving"),
        "the banner is a JSON line: {err}"
    );
    let decisions: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "gantry::decision")
        .map(|l| &l["fields"])
        .collect();
    // The CPU-only pod passes through untouched: a debug line, not shown at `info`.
    assert_eq!(decisions.len(), 2, "{err}");
    let deny = decisions[0];
    assert_eq!(deny["decision"], "admission");
    assert_eq!(deny["endpoint"], "mutate");
    assert_eq!(deny["result"], "deny");
    assert_eq!(deny["namespace"], "ml");
    assert_eq!(deny["pod"], "denied");
    assert_eq!(deny["rule"], "checkpoint_for_standard");
    assert!(deny["revision"].as_str().unwrap().starts_with("fnv1a:"));
    assert!(deny["detail"]
        .as_str()
        .unwrap()
        .contains("gantry.dev/checkpoint-interval"));
    let allow = decisions[1];
    assert_eq!(allow["endpoint"], "admit");
    assert_eq!(allow["result"], "allow");
    assert_eq!(allow["dropped"], 0);
}
