//! `gantry serve` over real sockets on loopback: HTTPS with rustls (a certificate made by
//! the test), certificate renewal, slow clients, the inventory tick, NVML readings and an
//! NVML that fails mid-run.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use engine::inventory::fleet_file;
use engine::inventory::nvml::{self, HostReading};
use serde_json::Value;
use serve::listen::{self, Deadlines};
use serve::state::{AppState, FleetFile, HostProbe, NvmlInventory};
use serve::{app::app, tls, Events};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gantry-net-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn loaded(deadline: Duration) -> Arc<AppState> {
    let mut state = AppState::new(Box::new(|| 1_795_000_000));
    state.request_deadline = deadline;
    let state = Arc::new(state);
    let dir = repo().join("policies/onprem-dgx");
    state.reload_policy(&dir).unwrap();
    state
        .refresh_inventory(&FleetFile(dir.join("fleet.toml")))
        .unwrap();
    state
}

/// A server on an ephemeral loopback port; dropping the sender stops it.
async fn start(
    state: Arc<AppState>,
    tls: Option<Arc<rustls::ServerConfig>>,
    deadlines: Deadlines,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listen::serve(listener, app(state), tls, deadlines, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// Writes a self-signed certificate for `localhost` and its key; returns the DER.
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    (cert, key, made.cert.der().to_vec())
}

/// [`certificate`] valid only from `from` until `until` (years, January 1st).
fn certificate_between(dir: &Path, name: &str, from: i32, until: i32) -> (PathBuf, PathBuf) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    let key_pair = rcgen::KeyPair::generate().unwrap();
    let made = params.self_signed(&key_pair).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, made.pem()).unwrap();
    std::fs::write(&key, key_pair.serialize_pem()).unwrap();
    (cert, key)
}

fn client(trusted: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.to_vec().into()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One HTTP/1.1 request with `Connection: close`; the status code and body.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

async fn https(
    addr: std::net::SocketAddr,
    trusted: &[u8],
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, String), std::io::Error> {
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let stream = client(trusted).connect(name, tcp).await?;
    Ok(exchange(stream, method, path, body).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_admission_and_renews_its_certificate() {
    let dir = scratch("tls");
    let (cert, key, first) = certificate(&dir, "serving");
    let certificates = Arc::new(tls::Certificates::load(&cert, &key).unwrap());
    let config = tls::server_config(certificates.clone()).unwrap();
    let (addr, _stop) = start(
        loaded(Duration::from_secs(5)),
        Some(config),
        Deadlines::default(),
    )
    .await;

    let review = std::fs::read(repo().join("tests/admission/gpu_pod.json")).unwrap();
    let (code, body) = https(addr, &first, "POST", "/mutate", &review)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["uid"], "gpu-pod");
    assert_eq!(answer["response"]["allowed"], true);

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = TcpStream::connect(addr).await.unwrap();
    let (code, _) = exchange(plain, "GET", "/healthz", b"").await;
    assert_eq!(code, 0, "plain HTTP must not be answered on the HTTPS port");

    // A renewal that does not load keeps the old certificate serving.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    assert!(certificates.refresh().is_err());
    assert_eq!(
        https(addr, &first, "GET", "/healthz", b"").await.unwrap().0,
        200
    );

    // An expired or not-yet-valid renewal keeps the old certificate serving too.
    for (from, until, why) in [(2001, 2002, "expired"), (2090, 2091, "not valid until")] {
        std::thread::sleep(Duration::from_millis(20));
        certificate_between(&dir, "serving", from, until);
        let error = certificates.refresh().unwrap_err();
        assert!(error.contains(why), "{error}");
        assert_eq!(
            https(addr, &first, "GET", "/healthz", b"").await.unwrap().0,
            200
        );
    }

    // A good renewal (new key pair) is served from the next handshake on.
    std::thread::sleep(Duration::from_millis(20));
    let (_, _, second) = certificate(&dir, "serving");
    assert!(certificates.refresh().unwrap());
    assert_eq!(
        https(addr, &second, "GET", "/healthz", b"")
            .await
            .unwrap()
            .0,
        200
    );
    assert!(
        https(addr, &first, "GET", "/healthz", b"").await.is_err(),
        "the old certificate is no longer served"
    );
    assert!(
        !certificates.refresh().unwrap(),
        "unchanged files are not reloaded"
    );
}

#[test]
fn bad_certificate_files_are_clear_errors() {
    let dir = scratch("tls-bad");
    let (cert, key, _) = certificate(&dir, "a");
    let (_, other_key, _) = certificate(&dir, "b");
    let missing = tls::Certificates::load(&dir.join("nope.crt"), &key).unwrap_err();
    assert!(missing.contains("cannot read"), "{missing}");
    let swapped = tls::Certificates::load(&key, &cert).unwrap_err();
    assert!(swapped.contains("certificate"), "{swapped}");
    let (old, old_key) = certificate_between(&dir, "old", 2001, 2002);
    let expired = tls::Certificates::load(&old, &old_key).unwrap_err();
    assert!(expired.contains("expired at"), "{expired}");
    let (early, early_key) = certificate_between(&dir, "early", 2090, 2091);
    let early = tls::Certificates::load(&early, &early_key).unwrap_err();
    assert!(early.contains("not valid until"), "{early}");
    let mismatched = tls::Certificates::load(&cert, &other_key).unwrap_err();
    assert!(
        mismatched.contains("do not belong together"),
        "{mismatched}"
    );
}

/// Issue 16, item 8: what hyper answers itself (a request it cannot parse, headers over
/// its limit) is JSON too, like every other error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_get_json_errors() {
    let (addr, _stop) = start(loaded(Duration::from_secs(5)), None, Deadlines::default()).await;
    // The request is written while the answer is read: a server that answers before
    // reading all of it (431) may close on a writer still writing.
    let raw = |bytes: Vec<u8>| async move {
        let (mut read, mut write) = TcpStream::connect(addr).await.unwrap().into_split();
        let writing = tokio::spawn(async move {
            let _ = write.write_all(&bytes).await;
            write
        });
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut out)).await;
        drop(writing.await);
        String::from_utf8_lossy(&out).into_owned()
    };
    let garbage = raw(b"GARBAGE\r\n\r\n".to_vec()).await;
    let big = raw([
        &b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "[..],
        &vec![b'a'; 500_000],
        b"\r\n\r\n",
    ]
    .concat())
    .await;
    for (answer, code) in [(garbage, "400"), (big, "431")] {
        assert!(answer.starts_with(&format!("HTTP/1.1 {code} ")), "{answer}");
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let v: Value = serde_json::from_str(body).unwrap();
        assert!(v["error"].is_string(), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let deadlines = Deadlines {
        handshake: Duration::from_millis(300),
        headers: Duration::from_millis(300),
        drain: Duration::from_secs(1),
    };
    let (addr, _stop) = start(loaded(Duration::from_millis(300)), None, deadlines).await;
    // Headers that never finish: the connection is closed.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"POST /admit HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "a client stuck in its headers must be cut off"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    // A body that never finishes: 408 with a JSON error.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(
        b"POST /admit HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"apiVe",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"error\""), "{answer}");
    // Meanwhile others are served.
    let ok = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(ok, "GET", "/healthz", b"").await.0, 200);
}

/// Readings handed out in turn; `None` is a failed read.
struct Scripted(Mutex<Vec<Option<HostReading>>>);

impl HostProbe for Scripted {
    fn read(&self) -> Result<HostReading, String> {
        let mut left = self.0.lock().unwrap();
        match left.remove(0) {
            Some(r) => Ok(r),
            None => Err("NVML: the GPU has fallen off the bus".into()),
        }
    }
}

fn reading(name: &str) -> HostReading {
    let path = repo().join("tests/nvml").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn nvml_readings_become_fleets() {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("tests/nvml"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".reading.json"))
        .collect();
    names.sort();
    assert!(names.len() >= 2);
    let models = engine::inventory::catalog::stdlib_models();
    for name in names {
        let (fleet, notes) = nvml::fleet_from_reading(&reading(&name), models, Some("training"));
        let json = fleet_file::to_json(&fleet);
        // What `gantry inventory` prints reads back as the same fleet.
        let again = fleet_file::parse("again.json", &json.to_string(), models).unwrap();
        assert_eq!(again, fleet, "{name}");
        insta::assert_snapshot!(
            format!("nvml_{}", name.trim_end_matches(".reading.json")),
            format!(
                "{}\n\nnotes:\n{}",
                serde_json::to_string_pretty(&json).unwrap(),
                notes.join("\n")
            )
        );
    }
    let (dgx, _) = nvml::fleet_from_reading(&reading("dgx-h100.reading.json"), models, None);
    let gpus = &dgx.nodes[0].gpus;
    assert!(
        gpus.iter().all(|g| g.nvlink_island == Some(0)),
        "NVSwitch: one island"
    );
    assert!(!gpus[3].healthy, "XID 79");
    assert!(gpus[5].healthy, "application XIDs only");
    let instances: Vec<(String, u32)> = gpus[7]
        .mig
        .as_ref()
        .unwrap()
        .iter()
        .map(|i| (i.profile.clone(), i.start))
        .collect();
    assert_eq!(
        instances,
        [("3g.40gb".to_string(), 4), ("1g.10gb".to_string(), 0)]
    );
    assert!(gpus.iter().all(|g| g.model == "H100-SXM5-80GB"));
    let (pcie, _) = nvml::fleet_from_reading(&reading("pcie-mixed.reading.json"), models, None);
    let islands: Vec<Option<u32>> = pcie.nodes[0].gpus.iter().map(|g| g.nvlink_island).collect();
    assert_eq!(&islands[..4], &[Some(0), Some(0), Some(1), Some(1)]);
    assert!(!pcie.nodes[0].gpus[2].healthy, "uncorrected ECC");
    assert!(!pcie.nodes[0].gpus[5].healthy, "unreadable");
    // Recorded on a lent H100 in a VM: pass-through hides NVLink, so no island, and the
    // memory NVML reports in bytes is what nvidia-smi prints in MiB.
    let (vm, notes) = nvml::fleet_from_reading(&reading("h100-sxm-vm.reading.json"), models, None);
    let gpu = &vm.nodes[0].gpus[..];
    assert_eq!(gpu.len(), 1);
    assert_eq!(gpu[0].model, "H100-SXM5-80GB");
    assert_eq!(gpu[0].memory_mib, 81_559);
    assert_eq!(gpu[0].nvlink_island, None);
    assert!(gpu[0].healthy && gpu[0].mig.is_none());
    assert!(notes.is_empty(), "{notes:?}");
    // Recorded on a lent H200 in a VM: NVML's 150,754,820,096 bytes are the 143,771 MiB
    // nvidia-smi printed there, and the stdlib names the model.
    let (h200, notes) = nvml::fleet_from_reading(&reading("h200-vm.reading.json"), models, None);
    let gpu = &h200.nodes[0].gpus[..];
    assert_eq!(gpu.len(), 1);
    assert_eq!(gpu[0].model, "H200-141GB");
    assert_eq!(gpu[0].memory_mib, 143_771);
    assert_eq!(gpu[0].nvlink_island, None);
    assert!(gpu[0].healthy && gpu[0].mig.is_none());
    assert!(notes.is_empty(), "{notes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvml_failing_mid_run_keeps_the_last_inventory_visible() {
    let state = loaded(Duration::from_secs(5));
    let source = NvmlInventory {
        probe: Box::new(Scripted(Mutex::new(vec![
            Some(reading("dgx-h100.reading.json")),
            None,
            Some(reading("pcie-mixed.reading.json")),
        ]))),
        pool: Some("training".into()),
    };
    state.refresh_inventory(&source).unwrap();
    let first = state.inventory().unwrap();
    assert_eq!(first.source, "nvml");
    assert_eq!(first.fleet.gpu_count(), 8);
    let error = state.refresh_inventory(&source).unwrap_err();
    assert!(error.contains("fallen off the bus"));
    let kept = state.inventory().unwrap();
    assert_eq!(kept.fleet, first.fleet, "the last good inventory stays");
    assert_eq!(kept.error.as_deref(), Some(error.as_str()));
    let (addr, _stop) = start(state.clone(), None, Deadlines::default()).await;
    let (_, status) = exchange(
        TcpStream::connect(addr).await.unwrap(),
        "GET",
        "/v1/status",
        b"",
    )
    .await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(status["inventory"]["error"]
        .as_str()
        .unwrap()
        .contains("fallen off"));
    let (_, metrics) = exchange(
        TcpStream::connect(addr).await.unwrap(),
        "GET",
        "/metrics",
        b"",
    )
    .await;
    assert!(
        metrics.contains("gantry_inventory_reads_total{result=\"failed\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("gantry_gpus{model=\"H100-SXM5-80GB\",health=\"unhealthy\"} 1"));
    // The next good read replaces it and clears the error.
    state.refresh_inventory(&source).unwrap();
    let now = state.inventory().unwrap();
    assert_eq!(now.fleet.gpu_count(), 6);
    assert!(now.error.is_none());
}

/// The event loop with a 100 ms tick and no watcher; send on the sender to stop it.
fn tick_every_100ms(
    state: Arc<AppState>,
    policy_dir: PathBuf,
    source: Option<Arc<dyn serve::state::InventorySource>>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let events = Events {
        state,
        policy_dir,
        source,
        certificates: None,
        interval: Duration::from_millis(100),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        // Kept open so the loop waits on ticks, not on a closed channel.
        let (_changes, rx) = tokio::sync::mpsc::unbounded_channel();
        events
            .run(rx, None, async {
                let _ = stopped.await;
            })
            .await;
    });
    (stop, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_tick_picks_up_fleet_file_edits() {
    let dir = scratch("tick");
    let fleet = dir.join("fleet.toml");
    let node = |gpus: u32| {
        format!("[[nodes]]\nname = \"n\"\ncpu_milli = 64000\nmemory_mib = 512000\ngpus = {{ count = {gpus}, model = \"H100-SXM5-80GB\" }}\n")
    };
    std::fs::write(&fleet, node(8)).unwrap();
    let state = Arc::new(AppState::new(Box::new(|| 1_795_000_000)));
    state
        .reload_policy(&repo().join("policies/onprem-dgx"))
        .unwrap();
    let source = Arc::new(FleetFile(fleet.clone()));
    state.refresh_inventory(source.as_ref()).unwrap();
    let (stop, running) = tick_every_100ms(
        state.clone(),
        repo().join("policies/onprem-dgx"),
        Some(source),
    );
    std::fs::write(&fleet, node(4)).unwrap();
    let started = Instant::now();
    while state.inventory().unwrap().fleet.gpu_count() != 4 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "tick never re-read the fleet"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A broken edit keeps the last good fleet and says why.
    std::fs::write(&fleet, "[[nodes]]\nname = 3\n").unwrap();
    while state.inventory().unwrap().error.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "tick never saw the broken file"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state.inventory().unwrap().fleet.gpu_count(), 4);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("the loop ends on shutdown")
        .unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_directory_that_disappears_and_returns() {
    let root = scratch("vanish");
    let dir = root.join("policy");
    copy_dir(&repo().join("policies/onprem-dgx"), &dir);
    let state = Arc::new(AppState::new(Box::new(|| 1_795_000_000)));
    let first = state.reload_policy(&dir).unwrap();
    let (stop, running) = tick_every_100ms(state.clone(), dir.clone(), None);
    let started = Instant::now();
    let wait = |what: &'static str, done: &dyn Fn() -> bool| {
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::fs::remove_dir_all(&dir).unwrap();
    wait("the tick never noticed the directory was gone", &|| {
        state.reload_status().ok == Some(false)
    });
    assert_eq!(
        state.policy().unwrap().revision,
        first,
        "the last good policy serves on"
    );
    let error = state.reload_status().error.unwrap();
    assert!(error.contains("policy"), "{error}");
    // Back, with one more rule: picked up by the periodic check, no watcher needed.
    copy_dir(&repo().join("policies/onprem-dgx"), &dir);
    let rules = dir.join("rules.gantry");
    let text = std::fs::read_to_string(&rules).unwrap();
    std::fs::write(
        &rules,
        format!("{text}rule big: warn if job.gpus > 32 gpu \"big job\"\n"),
    )
    .unwrap();
    wait("the tick never reloaded the returned directory", &|| {
        state.policy().unwrap().revision != first
    });
    assert_eq!(state.reload_status().ok, Some(true));
    stop.send(()).unwrap();
    running.await.unwrap();
}
