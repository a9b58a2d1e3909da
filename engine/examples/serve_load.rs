//! Load and reload measurements for `gantry serve` on loopback (BENCHMARKS.md):
//! AdmissionReview POSTs to `/mutate` over 32 keep-alive connections (p50, p99,
//! throughput, errors), then the time from writing a policy file to the new revision
//! being served. Start the server first:
//!
//! ```sh
//! cp -r policies/onprem-dgx /tmp/gantry-load && \
//!   cargo run --release -- serve --policy /tmp/gantry-load --listen 127.0.0.1:8090 &
//! cargo run --release -p engine --example serve_load -- 127.0.0.1:8090 /tmp/gantry-load
//! ```
//!
//! Over HTTPS: start the server with `--tls-cert C --tls-key K` (a certificate for
//! `localhost`) and add `--cacert C` here.

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
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (addr, review, tls) = (addr.clone(), review.clone(), tls.clone());
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

async fn revision(s: &mut Conn, buf: &mut Vec<u8>) -> String {
    let (_, body) = request(s, "GET", "/v1/status", b"", buf).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["policy"]["revision"].as_str().unwrap().to_string()
}
