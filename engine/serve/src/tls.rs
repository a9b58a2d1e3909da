//! TLS with rustls (ring provider). The certificate and key are PEM files; they are read
//! again when their modification times change (cert-manager renews them in place), and a
//! renewal that does not load keeps the current pair serving. A certificate outside its
//! validity period (expired, or not valid yet) does not load: at start it is an error, on
//! renewal the current pair keeps serving and the failure is counted and logged.

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// The certificate being served, swapped whole on a good reload.
#[derive(Debug)]
pub struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<SystemTime>)>,
}

fn modified(cert: &Path, key: &Path) -> Option<SystemTime> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some(m(cert)?.max(m(key)?))
}

/// Reads a PEM certificate chain and private key; errors name the file and say what was
/// expected.
pub fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let cert_pem =
        std::fs::read(cert).map_err(|e| format!("cannot read `{}`: {e}", cert.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("`{}`: not a PEM certificate chain: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "`{}` holds no certificate (expected -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    if let Some(leaf) = chain.first() {
        check_validity(cert, leaf, SystemTime::now())?;
    }
    let key_pem =
        std::fs::read(key).map_err(|e| format!("cannot read `{}`: {e}", key.display()))?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "`{}`: no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            key.display()
        )
    })?;
    let signing = ring::sign::any_supported_type(&private)
        .map_err(|e| format!("`{}`: unsupported private key: {e}", key.display()))?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|e| {
        format!(
            "`{}` and `{}` do not belong together: {e}",
            cert.display(),
            key.display()
        )
    })?;
    Ok(pair)
}

/// Refuses a leaf certificate that is expired or not valid yet at `now`.
fn check_validity(path: &Path, leaf: &CertificateDer<'_>, now: SystemTime) -> Result<(), String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| {
        format!(
            "`{}`: the certificate does not parse as X.509: {e}",
            path.display()
        )
    })?;
    let validity = parsed.validity();
    let (from, until) = (validity.not_before, validity.not_after);
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if now_s < from.timestamp() {
        return Err(format!(
            "`{}`: the certificate is not valid until {from} (check the clock, or wait for the issuer)",
            path.display()
        ));
    }
    if now_s > until.timestamp() {
        return Err(format!(
            "`{}`: the certificate expired at {until}; renew it (cert-manager: check the Certificate's status)",
            path.display()
        ));
    }
    Ok(())
}

impl Certificates {
    pub fn load(cert: &Path, key: &Path) -> Result<Certificates, String> {
        let pair = load_pair(cert, key)?;
        Ok(Certificates {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new((Arc::new(pair), modified(cert, key))),
        })
    }

    /// Reloads the pair if either file changed since the last load. `Ok(true)`: a new pair
    /// is serving; `Err`: the files changed but do not load (the old pair keeps serving).
    pub fn refresh(&self) -> Result<bool, String> {
        let seen = modified(&self.cert, &self.key);
        let unchanged = match self.current.read() {
            Ok(c) => c.1 == seen,
            Err(p) => p.into_inner().1 == seen,
        };
        if unchanged {
            return Ok(false);
        }
        let result = load_pair(&self.cert, &self.key);
        let mut slot = match self.current.write() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        // Remember the times either way, so a broken renewal is reported once.
        slot.1 = seen;
        slot.0 = Arc::new(result?);
        Ok(true)
    }

    fn get(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(c) => c.0.clone(),
            Err(p) => p.into_inner().0.clone(),
        }
    }
}

#[derive(Debug)]
struct Resolver(Arc<Certificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get())
    }
}

/// A server configuration (TLS 1.2 and 1.3, HTTP/1.1 by ALPN) serving `certificates`.
pub fn server_config(certificates: Arc<Certificates>) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(certificates)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
