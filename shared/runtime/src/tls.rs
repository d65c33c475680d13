//! The coordinator's private CA. On first start the coordinator creates a CA and a
//! server certificate signed by it; edges are given the CA certificate and verify
//! the coordinator against it, so no public CA or DNS name is needed.
//!
//! The CA key is kept beside the certificate so that client certificates for
//! edges can be issued from the same CA ([`crate::identity::Authority`]). The
//! CA lives [`CA_DAYS`] days and may sign only leaves (path length 0); the
//! server certificate lives [`crate::identity::LEAF_DAYS`] days and is
//! renewed on start once fewer than [`RENEW_DAYS`] are left.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA certificate, handed to edges (`--ca`).
pub const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca-key.pem";
const SERVER_CERT_FILE: &str = "server.pem";
const SERVER_KEY_FILE: &str = "server-key.pem";
/// The next CA while a rotation is under way ([`begin_rotation`]).
const NEXT_CA_CERT_FILE: &str = "ca-next.pem";
const NEXT_CA_KEY_FILE: &str = "ca-next-key.pem";
/// The server certificate's expiry (Unix ms), written beside it.
const SERVER_EXPIRY_FILE: &str = "server.expires";
/// The CA's distinguished name; the issuer of every certificate it signs.
const CA_NAME: &str = "tidemill coordinator CA";

/// Days the CA certificate is valid.
pub const CA_DAYS: i64 = 3_650;
/// A leaf certificate with fewer days than this left is renewed.
pub const RENEW_DAYS: i64 = 30;

/// Why the PKI could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The CA file a node was told to trust cannot be read.
    #[error(
        "cannot read the CA certificate {path}: {source}; give the coordinator's ca.pem (in its data dir) with --ca or `ca`, or leave both out: a joined node keeps the CA it joined with in its data dir"
    )]
    CaFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error(
        "{path} holds no valid PEM {what}: {detail}; give the CA file the coordinator wrote to its data dir"
    )]
    Pem {
        /// The file.
        path: PathBuf,
        /// `certificate` or `private key`.
        what: &'static str,
        /// The parser's complaint.
        detail: String,
    },
    /// The data dir has a CA certificate but not the rest of the PKI.
    #[error(
        "{dir} has {CA_CERT_FILE} but not {missing}; restore it from backup, or delete {CA_CERT_FILE} to create a new CA (every edge then needs the new {CA_CERT_FILE})"
    )]
    Incomplete {
        /// The data dir.
        dir: PathBuf,
        /// The missing file.
        missing: &'static str,
    },
    /// Certificate generation failed.
    #[error("cannot generate certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificates or settings.
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The coordinator's certificate chain and key, ready for a TLS server.
#[derive(Debug)]
pub struct ServerIdentity {
    /// The server certificate followed by the CA certificate.
    pub chain: Vec<CertificateDer<'static>>,
    /// The server's private key.
    pub key: PrivateKeyDer<'static>,
    /// Where the CA certificate lies, to hand to edges.
    pub ca_path: PathBuf,
    /// The CAs whose certificates clients may present: the CA, and the next
    /// one while a rotation is under way.
    pub client_roots: Vec<CertificateDer<'static>>,
}

/// Loads the PKI from `dir`, creating a CA and a server certificate valid for
/// `names` (DNS names or IP addresses) on first start, and renewing the server
/// certificate when fewer than [`RENEW_DAYS`] days of it are left at `now_ms`.
pub fn load_or_create(
    dir: &Path,
    names: &[String],
    now_ms: i64,
) -> Result<ServerIdentity, TlsError> {
    let ca_path = dir.join(CA_CERT_FILE);
    if !ca_path.exists() {
        create(dir, names, now_ms)?;
    }
    for missing in [SERVER_CERT_FILE, SERVER_KEY_FILE, CA_KEY_FILE] {
        if !dir.join(missing).exists() {
            return Err(TlsError::Incomplete {
                dir: dir.to_owned(),
                missing,
            });
        }
    }
    let expires_ms = std::fs::read_to_string(dir.join(SERVER_EXPIRY_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    if expires_ms.is_none_or(|e| e - now_ms < RENEW_DAYS * 86_400_000) {
        let (params, key) = ca_signer(dir)?;
        issue_server(dir, names, &Issuer::new(params, key), now_ms)?;
        tracing::info!(dir = %dir.display(), ?names, "renewed the server certificate");
    }
    let mut chain = read_certs(&dir.join(SERVER_CERT_FILE))?;
    chain.extend(read_certs(&ca_path)?);
    let key_path = dir.join(SERVER_KEY_FILE);
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| TlsError::Pem {
        path: key_path.clone(),
        what: "private key",
        detail: e.to_string(),
    })?;
    Ok(ServerIdentity {
        client_roots: trusted_cas(dir)?,
        chain,
        key,
        ca_path,
    })
}

/// The CA certificates clients are checked against: the CA, then the next
/// one while a rotation is under way.
pub fn trusted_cas(dir: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut cas = read_certs(&dir.join(CA_CERT_FILE))?;
    if rotating(dir) {
        cas.extend(read_certs(&dir.join(NEXT_CA_CERT_FILE))?);
    }
    Ok(cas)
}

/// Whether a CA rotation is under way in `dir`.
pub fn rotating(dir: &Path) -> bool {
    dir.join(NEXT_CA_CERT_FILE).exists()
}

/// Starts a CA rotation: makes the next CA, which from now on signs the
/// certificates nodes get at joins and renewals, while clients of either CA
/// are accepted and the server keeps its certificate from the current one.
/// Does nothing if a rotation is under way.
pub fn begin_rotation(dir: &Path, now_ms: i64) -> Result<(), TlsError> {
    if rotating(dir) {
        return Ok(());
    }
    let key = KeyPair::generate()?;
    let cert = ca_params(now_ms)?.self_signed(&key)?;
    write_private(&dir.join(NEXT_CA_KEY_FILE), key.serialize_pem().as_bytes())?;
    write_file(&dir.join(NEXT_CA_CERT_FILE), cert.pem().as_bytes(), 0o644)?;
    tracing::info!(dir = %dir.display(), "CA rotation begun: a new CA signs from now on");
    Ok(())
}

/// Ends a CA rotation: the next CA becomes the CA, signs a new server
/// certificate for `names`, and the old one is kept as ca-retired-<ms>.pem
/// (with its key) but trusted no more.
pub fn finish_rotation(dir: &Path, names: &[String], now_ms: i64) -> Result<(), TlsError> {
    if !rotating(dir) {
        return Err(TlsError::Io {
            path: dir.join(NEXT_CA_CERT_FILE),
            source: std::io::Error::other("no CA rotation is under way; begin one first"),
        });
    }
    let rename = |from: &str, to: String| {
        std::fs::rename(dir.join(from), dir.join(&to)).map_err(|source| TlsError::Io {
            path: dir.join(from),
            source,
        })
    };
    rename(CA_KEY_FILE, format!("ca-retired-{now_ms}-key.pem"))?;
    rename(CA_CERT_FILE, format!("ca-retired-{now_ms}.pem"))?;
    rename(NEXT_CA_KEY_FILE, CA_KEY_FILE.to_string())?;
    rename(NEXT_CA_CERT_FILE, CA_CERT_FILE.to_string())?;
    let (params, key) = ca_signer(dir)?;
    issue_server(dir, names, &Issuer::new(params, key), now_ms)?;
    tracing::info!(dir = %dir.display(), "CA rotation finished: the new CA is the only one trusted");
    Ok(())
}

/// The CA's parameters and key, to sign with: the same name and key as the
/// CA certificate, so what they sign chains to it.
pub(crate) fn ca_signer(dir: &Path) -> Result<(CertificateParams, KeyPair), TlsError> {
    ca_signer_from(&dir.join(CA_KEY_FILE))
}

/// The signer of the CA whose key is at `path`.
fn ca_signer_from(path: &Path) -> Result<(CertificateParams, KeyPair), TlsError> {
    let path = path.to_path_buf();
    let pem = std::fs::read_to_string(&path).map_err(|source| TlsError::Io {
        path: path.clone(),
        source,
    })?;
    let key = KeyPair::from_pem(&pem).map_err(|e| TlsError::Pem {
        path,
        what: "private key",
        detail: e.to_string(),
    })?;
    Ok((ca_params(0)?, key))
}

fn ca_params(now_ms: i64) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, now_ms, CA_DAYS);
    Ok(params)
}

/// Makes `params` valid from a day before `now_ms` (clock skew) until `days`
/// days after it; returns the end, in Unix ms.
pub(crate) fn set_validity(params: &mut CertificateParams, now_ms: i64, days: i64) -> i64 {
    let day = |ms: i64| {
        let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
        use chrono::Datelike;
        rcgen::date_time_ymd(t.year(), t.month() as u8, t.day() as u8)
    };
    let not_after_ms = now_ms + days * 86_400_000;
    params.not_before = day(now_ms - 86_400_000);
    params.not_after = day(not_after_ms);
    not_after_ms
}

/// A certificate in PEM.
/// The signer of the CA that issues node certificates now: the next CA
/// while a rotation is under way, else the CA; with its certificate.
pub(crate) fn issuing_ca(
    dir: &Path,
) -> Result<(CertificateParams, KeyPair, CertificateDer<'static>), TlsError> {
    let (key, cert) = if rotating(dir) {
        (NEXT_CA_KEY_FILE, NEXT_CA_CERT_FILE)
    } else {
        (CA_KEY_FILE, CA_CERT_FILE)
    };
    let (params, signer) = ca_signer_from(&dir.join(key))?;
    Ok((params, signer, read_certs(&dir.join(cert))?.remove(0)))
}

pub(crate) fn cert_pem(cert: &CertificateDer<'_>) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec()))
}

/// Reads every certificate in a PEM file, refusing a file with none.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_err = |detail: String| TlsError::Pem {
        path: path.to_owned(),
        what: "certificate",
        detail,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| match e {
            rustls::pki_types::pem::Error::Io(source) => TlsError::Io {
                path: path.to_owned(),
                source,
            },
            other => pem_err(other.to_string()),
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_err("no CERTIFICATE block".into()));
    }
    Ok(certs)
}

fn create(dir: &Path, names: &[String], now_ms: i64) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let ca_key = KeyPair::generate()?;
    let params = ca_params(now_ms)?;
    let ca_cert = params.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    issue_server(dir, names, &Issuer::new(params, ca_key), now_ms)?;
    // The CA certificate is written last: its presence means the set is complete.
    write_private(&dir.join(CA_KEY_FILE), ca_key_pem.as_bytes())?;
    write_file(&dir.join(CA_CERT_FILE), ca_cert.pem().as_bytes(), 0o644)?;
    tracing::info!(dir = %dir.display(), ?names, "created a new CA and server certificate");
    Ok(())
}

fn issue_server(
    dir: &Path,
    names: &[String],
    issuer: &Issuer<'_, KeyPair>,
    now_ms: i64,
) -> Result<(), TlsError> {
    let server_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "tidemill coordinator");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let expires_ms = set_validity(&mut params, now_ms, crate::identity::LEAF_DAYS);
    let cert = params.signed_by(&server_key, issuer)?;
    write_private(
        &dir.join(SERVER_KEY_FILE),
        server_key.serialize_pem().as_bytes(),
    )?;
    write_file(&dir.join(SERVER_CERT_FILE), cert.pem().as_bytes(), 0o644)?;
    write_file(
        &dir.join(SERVER_EXPIRY_FILE),
        expires_ms.to_string().as_bytes(),
        0o644,
    )
}

/// Writes a secret readable only by its owner, atomically.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), TlsError> {
    write_file(path, contents, 0o600)
}

/// Writes through a temporary file and a rename, so a crash leaves either the old
/// file or the new one.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(contents).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn the_server_certificate_is_renewed_when_near_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["localhost".to_string()];
        let first = load_or_create(dir.path(), &names, NOW).unwrap();
        let later = NOW + (crate::identity::LEAF_DAYS - RENEW_DAYS - 1) * 86_400_000;
        assert_eq!(
            load_or_create(dir.path(), &names, later).unwrap().chain,
            first.chain
        );
        let near = NOW + (crate::identity::LEAF_DAYS - RENEW_DAYS + 1) * 86_400_000;
        let renewed = load_or_create(dir.path(), &names, near).unwrap();
        assert_ne!(renewed.chain[0], first.chain[0]);
        assert_eq!(renewed.chain[1], first.chain[1], "the CA stays");
        let expiry = std::fs::read_to_string(dir.path().join(SERVER_EXPIRY_FILE)).unwrap();
        assert_eq!(
            expiry.parse::<i64>().unwrap(),
            near + crate::identity::LEAF_DAYS * 86_400_000
        );
    }

    #[test]
    fn creates_once_then_reloads_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let first = load_or_create(dir.path(), &names, NOW).unwrap();
        let second = load_or_create(dir.path(), &names, NOW).unwrap();
        assert_eq!(first.chain, second.chain);
        assert_eq!(first.chain.len(), 2);
        let mode = std::fs::metadata(dir.path().join(CA_KEY_FILE)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
    }

    #[test]
    fn refuses_a_partial_pki_and_names_the_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path(), &["localhost".into()], NOW).unwrap();
        std::fs::remove_file(dir.path().join(SERVER_KEY_FILE)).unwrap();
        let err = load_or_create(dir.path(), &["localhost".into()], NOW).unwrap_err();
        assert!(err.to_string().contains(SERVER_KEY_FILE), "{err}");
    }

    #[test]
    fn refuses_a_ca_file_without_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").unwrap();
        let err = read_certs(&path).unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }
}
