//! Load and reload measurements for `gantry serve` on loopback (BENCHMARKS.md):
//! AdmissionReview POSTs to `/mutate` over 32 keep-alive connections (p50, p99,
//! throughput, errors), then the time from writing a policy file to the new revision
//! being served. Start the server first:
//!
//! ```sh
//! cp -r policies/onprem-dgx /tmp/gantry-load && \
//!   cargo run --release -- serve --policy /tmp/gantry-load --listen 127.0.0.1:8090 &
//! cargo run --release -p serve --example serve_load -- 127.0.0.1:8090 /tmp/gantry-load
//! ```
//!
//! Over HTTPS: start the server with `--tls-cert C --tls-key K` (a certificate for
//! `localhost`) and add `--cacert C` here.
//!
//! With `--plans`, the admission load runs twice: alone, then with `/v1/plan` requests at
//! their limits (10,000 nodes, 80,000 GPUs, a body just under 1 MiB of jobs) sent back to
//! back on two more connections; it prints both p99s and their ratio (issue 16 asks for
//! admission within 2× of its p99 alone).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "a measurement tool"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
type Conn = Box<dyn Stream>;

/// A kept-alive connection, through TLS when `tls` is given.
async fn connect(addr: &str, tls: Option<&tokio_rustls::TlsConnector>) -> Conn {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    match tls {
        None => Box::new(tcp),
        Some(c) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Box::new(c.connect(name, tcp).await.unwrap())
        }
    }
}

fn tls_connector(cacert: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(cacert).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

const CONNECTIONS: usize = 32;
const PER_CONNECTION: usize = 2000;

/// One HTTP/1.1 request on a kept-alive connection; returns the status code and body.
async fn request(
    stream: &mut Conn,
    method: &str,
    path: &str,
    body: &[u8],
    buf: &mut Vec<u8>,
) -> (u16, Vec<u8>) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: gantry\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    buf.clear();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + length {
                let mut chunk = [0u8; 16384];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..end + 4 + length].to_vec();
            buf.drain(..end + 4 + length);
            return (status, body);
        }
        let mut chunk = [0u8; 16384];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let tls = args.iter().position(|a| a == "--cacert").map(|i| {
        let cert = args.get(i + 1).cloned().expect("--cacert PATH");
        args.drain(i..=i + 1);
        tls_connector(&cert)
    });
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8090".into());
    let plans = args.iter().any(|a| a == "--plans");
    args.retain(|a| a != "--plans");
    let policy_dir = args.get(2).cloned();
    let review = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/admission/gpu_pod.json"
    ))
    .unwrap();
    // Warm up.
    let mut s = connect(&addr, tls.as_ref()).await;
    let mut buf = Vec::new();
    for _ in 0..200 {
        assert_eq!(
            request(&mut s, "POST", "/mutate", &review, &mut buf)
                .await
                .0,
            200
        );
    }
    let alone = admission_load(&addr, tls.as_ref(), &review).await;
    if plans {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut hammers = Vec::new();
        for _ in 0..2 {
            let (addr, tls, stop) = (addr.clone(), tls.clone(), stop.clone());
            hammers.push(tokio::spawn(async move {
                plan_hammer(&addr, tls.as_ref(), &stop).await
            }));
        }
        // Let the first plans start computing.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let beside = admission_load(&addr, tls.as_ref(), &review).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut outcomes = std::collections::BTreeMap::new();
        for h in hammers {
            for (status, n) in h.await.unwrap() {
                *outcomes.entry(status).or_insert(0usize) += n;
            }
        }
        println!("/v1/plan answers while it ran, by status: {outcomes:?}");
        println!(
            "admission p99 with plans beside it / alone: {:.2}x",
            beside.as_secs_f64() / alone.as_secs_f64()
        );
    }
    let Some(dir) = policy_dir else { return };
    let file = std::path::Path::new(&dir).join("rules.gantry");
    let original = std::fs::read_to_string(&file).unwrap();
    let mut reloads = Vec::new();
    for k in 0..10 {
        let before = revision(&mut s, &mut buf).await;
        let t = Instant::now();
        std::fs::write(&file, format!("{original}# reload {k}\n")).unwrap();
        while revision(&mut s, &mut buf).await == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        reloads.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    std::fs::write(&file, original).unwrap();
    reloads.sort();
    println!(
        "hot reload, file write to new revision served (10 writes): median {:?}, max {:?}",
        reloads[5], reloads[9]
    );
}

/// AdmissionReviews over [`CONNECTIONS`] connections; prints the summary, returns p99.
async fn admission_load(
    addr: &str,
    tls: Option<&tokio_rustls::TlsConnector>,
    review: &[u8],
) -> Duration {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (addr, review, tls) = (addr.to_string(), review.to_vec(), tls.cloned());
        tasks.push(tokio::spawn(async move {
            let mut s = connect(&addr, tls.as_ref()).await;
            let mut buf = Vec::new();
            let mut times = Vec::with_capacity(PER_CONNECTION);
            let mut errors = 0;
            for _ in 0..PER_CONNECTION {
                let t = Instant::now();
                let (status, _) = request(&mut s, "POST", "/mutate", &review, &mut buf).await;
                times.push(t.elapsed());
                errors += usize::from(status != 200);
            }
            (times, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (times, e) = t.await.unwrap();
        all.extend(times);
        errors += e;
    }
    let wall = started.elapsed();
    all.sort();
    let pct = |p: f64| all[((p / 100.0 * all.len() as f64).ceil() as usize).saturating_sub(1)];
    println!(
        "{} AdmissionReviews over {CONNECTIONS} {} connections in {:.2}s: {:.0} req/s, p50 {:?}, p99 {:?}, max {:?}, errors {errors}",
        all.len(),
        if tls.is_some() { "HTTPS" } else { "HTTP" },
        wall.as_secs_f64(),
        all.len() as f64 / wall.as_secs_f64(),
        pct(50.0),
        pct(99.0),
        all.last().unwrap()
    );
    pct(99.0)
}

/// `/v1/plan` at its limits, back to back until `stop`; answers by status.
async fn plan_hammer(
    addr: &str,
    tls: Option<&tokio_rustls::TlsConnector>,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<(u16, usize)> {
    let jobs: Vec<String> = (0..5_500)
        .map(|i| {
            format!(
                r#"{{"id":"j{i}","team":"nlp","tier":"standard","gpus_per_member":{},"vram_mib":40000,"checkpoint_interval_s":900,"submitted_at":1794999000}}"#,
                1 << (i % 4)
            )
        })
        .collect();
    let body = format!(
        r#"{{"jobs":[{}],"fleet":{{"nodes":[{{"name":"n","count":10000,"cpu_milli":224000,"memory_mib":2000000,"gpus":{{"count":8,"model":"H100-SXM5-80GB"}}}}]}}}}"#,
        jobs.join(",")
    );
    assert!(body.len() < 1 << 20, "the body stays under the 1 MiB limit");
    let mut s = connect(addr, tls).await;
    let mut buf = Vec::new();
    let mut by_status: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (status, _) = request(&mut s, "POST", "/v1/plan", body.as_bytes(), &mut buf).await;
        *by_status.entry(status).or_insert(0) += 1;
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    by_status.into_iter().collect()
}

async fn revision(s: &mut Conn, buf: &mut Vec<u8>) -> String {
    let (_, body) = request(s, "GET", "/v1/status", b"", buf).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["policy"]["revision"].as_str().unwrap().to_string()
}
