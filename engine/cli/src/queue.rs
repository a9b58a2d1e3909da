//! `gantry queue --server URL`: the queue of a running `serve --queue`, like `squeue` —
//! waiting jobs in order with their reason and ETA, then running jobs and their nodes.

use super::Io;
use serve::queue::{QueueReport, QueueRow};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// The gantry service: `http://HOST:PORT` or `https://HOST:PORT` (with `--cacert`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// The CA certificate (PEM) that signed the service's certificate, for https.
    #[arg(long)]
    pub cacert: Option<std::path::PathBuf>,
    /// Only this team's jobs.
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

/// The largest answer read (a queue of 100,000 jobs is about 30 MB of JSON).
const MAX_BODY: u64 = 256 * 1024 * 1024;

pub fn run(args: &QueueArgs, io: &mut Io<'_>) -> u8 {
    let body = match fetch(args) {
        Ok(b) => b,
        Err(e) => return super::fail(io, e),
    };
    let mut report: QueueReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return super::fail(io, format!("{}: not a queue ({e})", args.server)),
    };
    if let Some(team) = &args.team {
        report
            .jobs
            .retain(|r| r.team.as_deref() == Some(team.as_str()));
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Format::Table => table(&report),
    };
    let _ = io.stdout.write_all(text.as_bytes());
    super::EXIT_OK
}

fn cell(r: &QueueRow) -> [String; 8] {
    let gpus = if r.gpus.fract() == 0.0 {
        format!("{}", r.gpus)
    } else {
        format!("{:.2}", r.gpus)
    };
    [
        r.position.map_or("-".into(), |p| p.to_string()),
        r.job.clone(),
        r.team.clone().unwrap_or_else(|| "-".into()),
        r.tier.clone().unwrap_or_else(|| "-".into()),
        gpus,
        r.state.clone(),
        r.eta_s
            .map_or("-".into(), engine::decide::plan::human_duration),
        if r.nodes.is_empty() {
            r.reason.clone().unwrap_or_default()
        } else {
            r.nodes.join(",")
        },
    ]
}

/// Columns padded to their widest cell; the last (reason or nodes) runs on.
pub fn table(report: &QueueReport) -> String {
    let head = [
        "POS",
        "JOB",
        "TEAM",
        "TIER",
        "GPUS",
        "STATE",
        "ETA",
        "REASON / NODES",
    ];
    let rows: Vec<[String; 8]> = report.jobs.iter().map(cell).collect();
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 8]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i == 7 {
                s.push_str(c);
            } else if i == 0 || i == 4 {
                s.push_str(&format!("{c:>w$}  "));
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    for r in &rows {
        out.push_str(&line([
            &r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7],
        ]));
    }
    let waiting = report.jobs.iter().filter(|r| r.state != "running").count();
    out.push_str(&format!(
        "{waiting} waiting, {} running; policy {}{}\n",
        report.jobs.len() - waiting,
        report.revision,
        if report.leading {
            ""
        } else {
            " (from a replica that does not lead)"
        }
    ));
    out
}

/// GET `/v1/queue` over HTTP/1.1 (TLS for https), with timeouts.
fn fetch(args: &QueueArgs) -> Result<Vec<u8>, String> {
    let (tls, rest) = if let Some(r) = args.server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = args.server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!(
            "--server {}: give http://HOST:PORT or https://HOST:PORT",
            args.server
        ));
    };
    let authority = rest.trim_end_matches('/');
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let address = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    };
    let config = if tls { Some(tls_config(args)?) } else { None };
    let tcp = TcpStream::connect(&address).map_err(|e| format!("cannot reach {address}: {e}"))?;
    let timeout = Some(Duration::from_secs(30));
    let _ = tcp.set_read_timeout(timeout);
    let _ = tcp.set_write_timeout(timeout);
    let request = format!(
        "GET /v1/queue HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    let raw = if let Some(config) = config {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host}: {e}"))?;
        let conn = rustls::ClientConnection::new(config, name)
            .map_err(|e| format!("TLS to {address}: {e}"))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        exchange(&mut stream, &request, &address)?
    } else {
        let mut tcp = tcp;
        exchange(&mut tcp, &request, &address)?
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{address}: not an HTTP answer"))?;
    let (head, body) = raw.split_at(split);
    let body = body.get(4..).unwrap_or_default();
    let head = String::from_utf8_lossy(head);
    let status = head.split(' ').nth(1).unwrap_or("");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(format!(
            "{address}: chunked answers are not read; is this gantry?"
        ));
    }
    if status != "200" {
        let message = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        return Err(format!("{}/v1/queue: {status}: {message}", args.server));
    }
    Ok(body.to_vec())
}

fn exchange(stream: &mut impl ReadWrite, request: &str, address: &str) -> Result<Vec<u8>, String> {
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{address}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(MAX_BODY)
        .read_to_end(&mut raw)
        .map_err(|e| format!("{address}: {e}"))?;
    Ok(raw)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn tls_config(args: &QueueArgs) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let Some(path) = &args.cacert else {
        return Err("https needs --cacert: the CA that signed gantry's serving certificate (ca.crt of its TLS secret)".into());
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("--cacert {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}
