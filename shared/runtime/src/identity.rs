//! Node identity: join tokens pinned to the coordinator's CA (as K3s does),
//! the client certificates the coordinator issues to edges that present one,
//! and the files an edge keeps them in.
//!
//! A token reads `K10<sha256 of the CA certificate, hex>::<id>.<secret>`. An
//! edge that holds one needs nothing else: it accepts the coordinator only if
//! the CA certificate the coordinator presents hashes to the token's pin, sends
//! the token and its public key, and gets back a certificate for its node id.
//! From then on every connection is mutual TLS with that certificate.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PublicKeyData, SignatureAlgorithm,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::tls::{self, TlsError};

/// A node's certificate, in its data dir.
pub const NODE_CERT_FILE: &str = "node.pem";
/// A node's private key, in its data dir (0600).
pub const NODE_KEY_FILE: &str = "node-key.pem";
/// The coordinator's CA certificate as a node received it at join, in its data dir.
pub const NODE_CA_FILE: &str = "ca.pem";
/// When a node's certificate expires (Unix ms), in its data dir.
pub const NODE_EXPIRY_FILE: &str = "node.expires";
/// SHA-256 of the CA that signed a node's certificate, in its data dir.
pub const NODE_ISSUER_FILE: &str = "node.issuer";

/// Days a leaf certificate (a node's or the server's) is valid.
pub const LEAF_DAYS: i64 = 365;

/// Why a join token could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a join token ({0}); a token reads K10<64 hex digits>::<id>.<secret>, as `tidemill-cloud token create` prints it"
)]
pub struct TokenError(&'static str);

/// A join token: the CA pin, the token's public id and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// SHA-256 of the CA certificate (DER), lower-case hex.
    pub ca_sha256: String,
    /// The token's id, shown in listings.
    pub id: String,
    /// The secret; only its hash is stored by the coordinator.
    pub secret: String,
}

/// Never prints the secret.
impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinToken")
            .field("ca_sha256", &self.ca_sha256)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl JoinToken {
    /// A fresh token for the CA whose certificate hashes to `ca_sha256`.
    pub fn generate(ca_sha256: &str) -> JoinToken {
        JoinToken {
            ca_sha256: ca_sha256.to_string(),
            id: random_word(6),
            secret: random_word(24),
        }
    }

    /// The token as the operator hands it to an edge.
    pub fn reveal(&self) -> String {
        format!("K10{}::{}.{}", self.ca_sha256, self.id, self.secret)
    }
}

impl std::str::FromStr for JoinToken {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, TokenError> {
        let rest = s
            .trim()
            .strip_prefix("K10")
            .ok_or(TokenError("no K10 prefix"))?;
        let (pin, cred) = rest.split_once("::").ok_or(TokenError("no ::"))?;
        let (id, secret) = cred
            .split_once('.')
            .ok_or(TokenError("no . after the id"))?;
        let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric());
        if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(TokenError("the CA pin is not 64 hex digits"));
        }
        if !word(id) || !word(secret) || id.len() > 32 || secret.len() > 64 {
            return Err(TokenError(
                "the id or secret is empty, too long or not alphanumeric",
            ));
        }
        Ok(JoinToken {
            ca_sha256: pin.to_ascii_lowercase(),
            id: id.to_string(),
            secret: secret.to_string(),
        })
    }
}

/// `n` random lower-case letters and digits from the system's random source.
pub fn random_word(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; n];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .expect("the system random source works");
    // 256 = 7 × 36 + 4: the bias toward the first four symbols is under 2 %.
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// SHA-256 of `bytes`, lower-case hex: the CA pin, certificate fingerprints
/// and stored token hashes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `secret` hashes to `stored_sha256` (hex, as [`sha256_hex`] writes
/// it). The hashes, not the secrets, are compared, so the time a mismatch
/// takes tells an attacker only about a hash, which does not lead back to
/// a secret.
pub fn secret_matches(stored_sha256: &str, secret: &str) -> bool {
    sha256_hex(secret.as_bytes()) == stored_sha256
}

/// The coordinator's CA, able to issue node certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// The CA that signs node certificates now: the next one while a
    /// rotation is under way.
    pub issuing: CertificateDer<'static>,
    /// The CA the server presents, which join tokens pin.
    pub ca: CertificateDer<'static>,
    /// Every CA nodes should trust: the CA, and the next one during a
    /// rotation.
    pub trust: Vec<CertificateDer<'static>>,
}

/// An ECDSA P-256 public key as an edge sends it (the uncompressed point).
struct NodeKey<'a>(&'a [u8]);

impl PublicKeyData for NodeKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

/// Why a certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The public key is not an uncompressed P-256 point.
    #[error("the public key is not an uncompressed ECDSA P-256 point (65 bytes, 0x04 first)")]
    BadKey,
    /// Signing failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl Authority {
    /// Loads the CA (and, during a rotation, the next one) from the
    /// coordinator's data dir.
    pub fn load(dir: &Path) -> Result<Authority, TlsError> {
        let (params, key, issuing) = tls::issuing_ca(dir)?;
        let ca = tls::read_certs(&dir.join(tls::CA_CERT_FILE))?.remove(0);
        Ok(Authority {
            issuer: Issuer::new(params, key),
            issuing,
            ca,
            trust: tls::trusted_cas(dir)?,
        })
    }

    /// The pin a join token carries: the CA the server presents.
    pub fn pin(&self) -> String {
        sha256_hex(&self.ca)
    }

    /// The pin of the CA that signs node certificates now.
    pub fn issuing_pin(&self) -> String {
        sha256_hex(&self.issuing)
    }

    /// What a node gets with a certificate it was issued.
    pub fn issued(&self, cert: &CertificateDer<'_>, not_after_ms: i64) -> tidemill_proto::Issued {
        tidemill_proto::Issued {
            cert: cert.to_vec(),
            ca: self.trust.iter().map(|c| c.to_vec()).collect(),
            issuer_sha256: self.issuing_pin(),
            not_after_ms,
        }
    }

    /// A client certificate for `node_id` over `public_key`, valid from
    /// yesterday for [`LEAF_DAYS`] days from `now_ms`; returns it with its
    /// expiry (Unix ms).
    pub fn issue(
        &self,
        node_id: &str,
        public_key: &[u8],
        now_ms: i64,
    ) -> Result<(CertificateDer<'static>, i64), IssueError> {
        if public_key.len() != 65 || public_key[0] != 4 {
            return Err(IssueError::BadKey);
        }
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(TlsError::from)?;
        params.distinguished_name.push(DnType::CommonName, node_id);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let not_after_ms = tls::set_validity(&mut params, now_ms, LEAF_DAYS);
        let cert = params
            .signed_by(&NodeKey(public_key), &self.issuer)
            .map_err(TlsError::from)?;
        Ok((cert.der().clone(), not_after_ms))
    }
}

/// A node's own credentials.
#[derive(Debug)]
pub struct NodeIdentity {
    /// The node's certificate.
    pub cert: CertificateDer<'static>,
    /// The node's private key.
    pub key: PrivateKeyDer<'static>,
    /// The CA certificates the coordinator is checked against.
    pub ca: Vec<CertificateDer<'static>>,
    /// When the certificate expires, Unix ms, if known.
    pub not_after_ms: Option<i64>,
    /// SHA-256 of the CA that signed the certificate, if known.
    pub issuer_sha256: Option<String>,
}

pub use tidemill_proto::Issued;

impl NodeIdentity {
    /// Whether `dir` holds a node certificate and key.
    pub fn present(dir: &Path) -> bool {
        dir.join(NODE_CERT_FILE).exists() && dir.join(NODE_KEY_FILE).exists()
    }

    /// Loads the credentials `join` wrote to `dir`; `ca` overrides the CA
    /// file received at join.
    pub fn load(dir: &Path, ca: Option<&Path>) -> Result<NodeIdentity, TlsError> {
        let cert = tls::read_certs(&dir.join(NODE_CERT_FILE))?.remove(0);
        let key_path = dir.join(NODE_KEY_FILE);
        let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| TlsError::Pem {
            path: key_path.clone(),
            what: "private key",
            detail: e.to_string(),
        })?;
        let ca_path = ca.map_or_else(|| dir.join(NODE_CA_FILE), Path::to_path_buf);
        let not_after_ms = std::fs::read_to_string(dir.join(NODE_EXPIRY_FILE))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let issuer_sha256 = std::fs::read_to_string(dir.join(NODE_ISSUER_FILE))
            .ok()
            .map(|s| s.trim().to_string());
        Ok(NodeIdentity {
            cert,
            key,
            ca: tls::read_certs(&ca_path).map_err(|e| match e {
                TlsError::Io { path, source } => TlsError::CaFile { path, source },
                other => other,
            })?,
            not_after_ms,
            issuer_sha256,
        })
    }
}

/// A key pair made on the edge for its certificate: the private half never
/// leaves the node.
pub struct NodeKeyPair(KeyPair);

impl NodeKeyPair {
    /// A fresh P-256 key pair.
    pub fn generate() -> Result<NodeKeyPair, TlsError> {
        Ok(NodeKeyPair(KeyPair::generate().map_err(TlsError::from)?))
    }

    /// The public key to send with a join.
    pub fn public_key(&self) -> Vec<u8> {
        self.0.public_key_raw().to_vec()
    }

    /// Writes the key, the certificate the coordinator issued, its expiry and
    /// the CA to `dir`, each 0600 and each atomically. A crash between the
    /// files leaves a key that no longer matches the certificate only if it
    /// strikes between the first two writes; the node then joins again.
    pub fn store(&self, dir: &Path, issued: &Issued) -> Result<(), TlsError> {
        let pem = |der: &[u8]| tls::cert_pem(&CertificateDer::from(der));
        let bundle: String = issued.ca.iter().map(|c| pem(c)).collect();
        tls::write_private(&dir.join(NODE_KEY_FILE), self.0.serialize_pem().as_bytes())?;
        tls::write_private(&dir.join(NODE_CA_FILE), bundle.as_bytes())?;
        tls::write_private(
            &dir.join(NODE_EXPIRY_FILE),
            issued.not_after_ms.to_string().as_bytes(),
        )?;
        tls::write_private(&dir.join(NODE_ISSUER_FILE), issued.issuer_sha256.as_bytes())?;
        tls::write_private(&dir.join(NODE_CERT_FILE), pem(&issued.cert).as_bytes())
    }

    /// The credentials this key and what the coordinator sent make.
    pub fn into_identity(self, issued: Issued) -> NodeIdentity {
        NodeIdentity {
            cert: CertificateDer::from(issued.cert),
            key: PrivateKeyDer::Pkcs8(self.0.serialize_der().into()),
            ca: issued.ca.into_iter().map(CertificateDer::from).collect(),
            not_after_ms: Some(issued.not_after_ms),
            issuer_sha256: Some(issued.issuer_sha256),
        }
    }
}

/// Why a join over an open connection failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinFailure {
    /// The exchange failed.
    #[error(transparent)]
    Frame(#[from] crate::frames::FrameError),
    /// The coordinator refused the join; its reason.
    #[error("the coordinator refused the join: {0}")]
    Refused(String),
}

/// Asks the coordinator on `conn` (a connection made with
/// [`crate::quic::joiner_config`]) for a certificate for `node_id` over
/// `key`.
pub async fn request_certificate(
    conn: &quinn::Connection,
    token: &JoinToken,
    node_id: &str,
    key: &NodeKeyPair,
) -> Result<Issued, JoinFailure> {
    let request = tidemill_proto::EdgeMsg::Join(tidemill_proto::Join {
        token_id: token.id.clone(),
        secret: token.secret.clone(),
        node_id: node_id.to_string(),
        public_key: key.public_key(),
    });
    issued(crate::frames::request(conn, &request).await?)
}

/// Asks the coordinator on a node's own connection for a new certificate over
/// `key`, before the current one expires.
pub async fn request_renewal(
    conn: &quinn::Connection,
    key: &NodeKeyPair,
) -> Result<Issued, JoinFailure> {
    let request = tidemill_proto::EdgeMsg::Renew {
        public_key: key.public_key(),
    };
    issued(crate::frames::request(conn, &request).await?)
}

fn issued(reply: tidemill_proto::CloudMsg) -> Result<Issued, JoinFailure> {
    use tidemill_proto::CloudMsg;
    match reply {
        CloudMsg::Joined(issued) | CloudMsg::Renewed(issued) => Ok(issued),
        CloudMsg::Error(e) => Err(JoinFailure::Refused(e.message)),
        other => Err(JoinFailure::Refused(format!("unexpected answer {other:?}"))),
    }
}

/// Accepts a server by a SHA-256 pin: a join token's pin on the CA, whose
/// certificate must be in the server's chain and must have signed its leaf for
/// the name dialled; or a peer's pin on its leaf itself, as the coordinator
/// named it. The handshake's signature is checked either way.
#[derive(Debug)]
pub struct Pinned {
    pin: Pin,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

#[derive(Debug)]
enum Pin {
    Ca(String),
    Leaf(String),
}

impl Pinned {
    /// A verifier for a coordinator whose CA hashes to `pin`.
    pub fn ca(pin: &str) -> Pinned {
        Pinned {
            pin: Pin::Ca(pin.to_ascii_lowercase()),
            provider: crate::quic::provider(),
        }
    }

    /// A verifier for a peer whose own certificate hashes to `pin`.
    pub fn leaf(pin: &str) -> Pinned {
        Pinned {
            pin: Pin::Leaf(pin.to_ascii_lowercase()),
            provider: crate::quic::provider(),
        }
    }
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let pin = match &self.pin {
            Pin::Leaf(pin) if sha256_hex(end_entity) == *pin => {
                return Ok(rustls::client::danger::ServerCertVerified::assertion());
            }
            Pin::Leaf(_) => {
                return Err(rustls::Error::General(
                    "the peer's certificate is not the one the coordinator named".into(),
                ));
            }
            Pin::Ca(pin) => pin,
        };
        let ca = intermediates
            .iter()
            .find(|c| sha256_hex(c) == *pin)
            .ok_or_else(|| {
                rustls::Error::General(
                    "the coordinator's CA does not match the join token's pin; check the token and the address".into(),
                )
            })?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?
        .verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_bad_ones_say_why() {
        let t = JoinToken::generate(&"ab".repeat(32));
        let text = t.reveal();
        assert!(
            text.starts_with(&format!("K10{}::", "ab".repeat(32))),
            "{text}"
        );
        assert_eq!(text.parse::<JoinToken>().unwrap(), t);
        assert!(!format!("{t:?}").contains(&t.secret));
        for bad in [
            "",
            "K10abc::id.secret",
            &format!("K10{}::id", "ab".repeat(32)),
            &format!("K10{}::i d.secret", "ab".repeat(32)),
            &format!("K11{}::id.secret", "ab".repeat(32)),
        ] {
            let e = bad.parse::<JoinToken>().unwrap_err();
            assert!(e.to_string().contains("token create"), "{e}");
        }
    }

    #[test]
    fn sha256_matches_a_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn the_authority_issues_a_certificate_for_the_node_key() {
        let dir = tempfile::tempdir().unwrap();
        tls::load_or_create(dir.path(), &["localhost".into()], 0).unwrap();
        let ca = Authority::load(dir.path()).unwrap();
        let node = NodeKeyPair::generate().unwrap();
        let now = 1_800_000_000_000;
        let (cert, not_after) = ca.issue("e1", &node.public_key(), now).unwrap();
        assert_eq!(not_after, now + LEAF_DAYS * 86_400_000);
        let edge = tempfile::tempdir().unwrap();
        let issued = ca.issued(&cert, not_after);
        node.store(edge.path(), &issued).unwrap();
        let id = NodeIdentity::load(edge.path(), None).unwrap();
        assert_eq!(id.cert, cert);
        assert_eq!(sha256_hex(&id.ca[0]), ca.pin());
        assert_eq!(id.not_after_ms, Some(not_after));
        for f in [
            NODE_CERT_FILE,
            NODE_KEY_FILE,
            NODE_CA_FILE,
            NODE_EXPIRY_FILE,
        ] {
            let mode = std::fs::metadata(edge.path().join(f)).unwrap();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
                0o600,
                "{f}"
            );
        }
        assert!(matches!(
            ca.issue("e1", &[4; 10], now),
            Err(IssueError::BadKey)
        ));
    }
}
