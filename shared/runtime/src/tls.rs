//! The coordinator's private CA. On first start the coordinator creates a CA and a
//! server certificate signed by it; edges are given the CA certificate and verify
//! the coordinator against it, so no public CA or DNS name is needed.
//!
//! The CA key is kept beside the certificate so that client certificates for
//! edges can be issued from the same CA later.

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
}

/// Loads the PKI from `dir`, creating a CA and a server certificate valid for
/// `names` (DNS names or IP addresses) on first start.
pub fn load_or_create(dir: &Path, names: &[String]) -> Result<ServerIdentity, TlsError> {
    let ca_path = dir.join(CA_CERT_FILE);
    if !ca_path.exists() {
        create(dir, names)?;
    }
    for missing in [SERVER_CERT_FILE, SERVER_KEY_FILE, CA_KEY_FILE] {
        if !dir.join(missing).exists() {
            return Err(TlsError::Incomplete {
                dir: dir.to_owned(),
                missing,
            });
        }
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
        chain,
        key,
        ca_path,
    })
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

fn create(dir: &Path, names: &[String]) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_owned(),
        source,
    })?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tidemill coordinator CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let mut server_params = CertificateParams::new(names.to_vec())?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "tidemill coordinator");
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server_params.signed_by(&server_key, &issuer)?;

    // The CA certificate is written last: its presence means the set is complete.
    write_private(
        &dir.join(SERVER_KEY_FILE),
        server_key.serialize_pem().as_bytes(),
    )?;
    write_file(
        &dir.join(SERVER_CERT_FILE),
        server_cert.pem().as_bytes(),
        0o644,
    )?;
    write_private(&dir.join(CA_KEY_FILE), ca_key_pem.as_bytes())?;
    write_file(&dir.join(CA_CERT_FILE), ca_cert.pem().as_bytes(), 0o644)?;
    tracing::info!(dir = %dir.display(), ?names, "created a new CA and server certificate");
    Ok(())
}

/// Writes a secret readable only by its owner, atomically.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> Result<(), TlsError> {
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

    #[test]
    fn creates_once_then_reloads_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let first = load_or_create(dir.path(), &names).unwrap();
        let second = load_or_create(dir.path(), &names).unwrap();
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
        load_or_create(dir.path(), &["localhost".into()]).unwrap();
        std::fs::remove_file(dir.path().join(SERVER_KEY_FILE)).unwrap();
        let err = load_or_create(dir.path(), &["localhost".into()]).unwrap_err();
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
