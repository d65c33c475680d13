//! QUIC endpoints for both daemons, with the protocol's ALPN, TLS 1.3 against the
//! coordinator's CA, and explicit keep-alive and idle timeout (quinn's keep-alive
//! is off by default, which would let NAT bindings on edge links expire).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tidemill_proto::ALPN;

use crate::identity::{NodeIdentity, Pinned};
use crate::tls::{ServerIdentity, TlsError, read_certs};

/// TLS alert 120, `no_application_protocol`: the peers share no ALPN token, which
/// for tidemill means they speak different protocol versions.
const NO_APPLICATION_PROTOCOL: u8 = 120;

/// Connection timing, shared by both ends.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How often an otherwise silent connection sends a keep-alive.
    pub keep_alive: Duration,
    /// How long a silent connection lives before it is declared dead.
    pub idle_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            keep_alive: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Why an endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// TLS set-up failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The UDP socket could not be bound.
    #[error("cannot bind UDP {addr}: {source}; is another process using the port?")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The idle timeout is beyond what QUIC can encode.
    #[error("idle timeout {0:?} is too large")]
    IdleTimeout(Duration),
}

fn transport(timing: Timing) -> Result<Arc<quinn::TransportConfig>, EndpointError> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(timing.keep_alive));
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(timing.idle_timeout)
            .map_err(|_| EndpointError::IdleTimeout(timing.idle_timeout))?,
    ));
    Ok(Arc::new(t))
}

/// What a server lets one connection hold before the peer has proven who it
/// is; [`raise_to_admitted`] lifts a connection to its admitted bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionBounds {
    /// Streams the peer may have open at once.
    pub streams: u32,
    /// Bytes the peer may have in flight on the connection, unread by the
    /// server, all streams together (the connection's receive window).
    pub receive_window: u32,
}

/// Streams a connection gets before it is admitted: a hello or a join, and
/// a handshake check.
pub const UNADMITTED_STREAMS: u32 = 2;

/// Receive window of a connection before it is admitted: a join or a hello
/// takes a few hundred bytes.
pub const UNADMITTED_WINDOW: u32 = 64 * 1024;

/// Bytes of unread datagrams a connection may buffer: four of the probes'
/// packet trains; older datagrams are dropped past it.
pub const DATAGRAM_BUFFER: usize = 4 * crate::probe::TRAIN_LEN * crate::probe::TRAIN_DATAGRAM;

/// A server's transport: [`Timing`], and every connection starts bounded as
/// an unadmitted one ([`UNADMITTED_STREAMS`], [`UNADMITTED_WINDOW`]), with no
/// streams one way, and [`DATAGRAM_BUFFER`] for datagrams.
pub fn bounded_transport(timing: Timing) -> Result<Arc<quinn::TransportConfig>, EndpointError> {
    let mut t = Arc::into_inner(transport(timing)?).expect("a fresh transport config");
    t.max_concurrent_bidi_streams(UNADMITTED_STREAMS.into())
        .max_concurrent_uni_streams(0u32.into())
        .receive_window(UNADMITTED_WINDOW.into())
        .datagram_receive_buffer_size(Some(DATAGRAM_BUFFER));
    Ok(Arc::new(t))
}

/// Lifts a connection started under [`bounded_transport`] to `bounds`, once
/// its peer is admitted.
pub fn raise_to_admitted(conn: &quinn::Connection, bounds: ConnectionBounds) {
    conn.set_max_concurrent_bi_streams(bounds.streams.into());
    conn.set_receive_window(bounds.receive_window.into());
}

/// Whether the peer of `conn` still answers: a datagram, which its QUIC
/// stack acknowledges within its ack delay, draws a packet back within
/// `within`. A peer that crashed, or whose path is gone, sends nothing.
pub async fn answers(conn: &quinn::Connection, within: Duration) -> bool {
    let heard = |c: &quinn::Connection| c.stats().udp_rx.datagrams;
    let before = heard(conn);
    if conn.close_reason().is_some() {
        return false;
    }
    if conn.send_datagram(bytes::Bytes::from_static(&[0])).is_err() {
        // A peer that takes no datagrams cannot be asked: it stays live
        // until its idle timeout says otherwise.
        return true;
    }
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if conn.close_reason().is_some() {
            return false;
        }
        if heard(conn) > before {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server endpoint that accepts only peers speaking this protocol version.
///
/// `reset_key` signs QUIC stateless resets and keys the connection-id hash.
/// Keeping it across restarts (see [`load_or_create_reset_key`]) lets a
/// restarted coordinator recognise the connection ids its previous run issued
/// and answer them with valid stateless resets, so edges reconnect at their next
/// packet instead of waiting out the idle timeout.
pub fn server(
    addr: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8; RESET_KEY_LEN],
) -> Result<quinn::Endpoint, EndpointError> {
    let bind = |source| EndpointError::Bind { addr, source };
    let socket = std::net::UdpSocket::bind(addr).map_err(bind)?;
    widen_buffers(&socket);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let cid_key = ring::hmac::sign(&key, b"tidemill connection-id key");
    let cid_key = u64::from_le_bytes(
        cid_key.as_ref()[..8]
            .try_into()
            .expect("HMAC-SHA256 has 32 bytes"),
    );
    let mut endpoint_config = quinn::EndpointConfig::new(Arc::new(key));
    endpoint_config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    let runtime = quinn::default_runtime()
        .ok_or_else(|| bind(std::io::Error::other("no async runtime is running")))?;
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime).map_err(bind)
}

/// Which clients a server accepts. Either way a client certificate must be
/// one the server's CA (the rest of its chain) signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clients {
    /// Also clients without a certificate, which may only join (the
    /// coordinator checks which, per connection).
    CertifiedOrJoining,
    /// Only clients with a certificate (a node's probe responder).
    Certified,
}

/// A server's side of its connections: its chain and key, the clients it
/// accepts, and the transport timing.
pub fn server_config(
    identity: ServerIdentity,
    clients: Clients,
    timing: Timing,
) -> Result<quinn::ServerConfig, EndpointError> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in &identity.client_roots {
        roots.add(ca.clone()).map_err(TlsError::from)?;
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let verifier = match clients {
        Clients::CertifiedOrJoining => verifier.allow_unauthenticated(),
        Clients::Certified => verifier,
    }
    .build()
    .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)
        .map_err(TlsError::from)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls)
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(transport(timing)?);
    Ok(config)
}

/// The UDP buffer size the coordinator asks for, each way. Thousands of edges
/// share its one socket, and the Linux default (`net.core.rmem_default`,
/// 212 992 B) drops datagrams in their bursts; the kernel caps the request
/// at `net.core.rmem_max` and `net.core.wmem_max`.
pub const UDP_BUFFER_BYTES: usize = 8 << 20;

/// Asks for [`UDP_BUFFER_BYTES`] of receive and send buffer on `socket`, and
/// logs what the kernel granted.
fn widen_buffers(socket: &std::net::UdpSocket) {
    let sock = socket2::SockRef::from(socket);
    let _ = sock.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = sock.set_send_buffer_size(UDP_BUFFER_BYTES);
    tracing::debug!(
        recv = sock.recv_buffer_size().unwrap_or(0),
        send = sock.send_buffer_size().unwrap_or(0),
        "UDP socket buffers"
    );
}

/// Bytes in a stateless-reset key.
pub const RESET_KEY_LEN: usize = 32;

/// Reads the stateless-reset key from `path`, creating a random one on first use.
pub fn load_or_create_reset_key(path: &Path) -> Result<[u8; RESET_KEY_LEN], EndpointError> {
    let io = |source| {
        EndpointError::Tls(TlsError::Io {
            path: path.to_owned(),
            source,
        })
    };
    match std::fs::read(path) {
        Ok(bytes) => bytes.try_into().map_err(|_| {
            io(std::io::Error::other(format!(
                "expected {RESET_KEY_LEN} bytes; delete the file to create a new key"
            )))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; RESET_KEY_LEN];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
                .map_err(|_| io(std::io::Error::other("the system random source failed")))?;
            crate::tls::write_private(path, &key).map_err(EndpointError::Tls)?;
            Ok(key)
        }
        Err(e) => Err(io(e)),
    }
}

/// A node's client endpoint: it trusts only the coordinator CAs in
/// `node.ca` and proves its identity with the node's certificate.
pub fn client(node: &NodeIdentity, timing: Timing) -> Result<quinn::Endpoint, EndpointError> {
    let mut endpoint = bare_client()?;
    endpoint.set_default_client_config(client_config(node, timing)?);
    Ok(endpoint)
}

/// The client side of a node's connections, for [`client`] or for an
/// endpoint that many simulated nodes share.
pub fn client_config(
    node: &NodeIdentity,
    timing: Timing,
) -> Result<quinn::ClientConfig, EndpointError> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in &node.ca {
        roots.add(ca.clone()).map_err(TlsError::from)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![node.cert.clone()], node.key.clone_key())
        .map_err(TlsError::from)?;
    quinn_config(tls, timing, ALPN)
}

/// A client endpoint with no certificate of its own that trusts the CA in
/// `ca_path` and offers `alpn`: all a coordinator lets it do is join.
pub fn anonymous_client(
    ca_path: &Path,
    timing: Timing,
    alpn: &[u8],
) -> Result<quinn::Endpoint, EndpointError> {
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .with_root_certificates(roots(ca_path)?)
        .with_no_client_auth();
    client_endpoint(tls, timing, alpn)
}

fn roots(ca_path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca_path)? {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// A client endpoint for joining: it accepts only a coordinator whose CA
/// hashes to the join token's `pin`.
pub fn joiner(pin: &str, timing: Timing) -> Result<quinn::Endpoint, EndpointError> {
    let mut endpoint = bare_client()?;
    endpoint.set_default_client_config(joiner_config(pin, timing)?);
    Ok(endpoint)
}

/// The client side of a join: no certificate of its own, and a coordinator
/// accepted only if its CA hashes to `pin`.
pub fn joiner_config(pin: &str, timing: Timing) -> Result<quinn::ClientConfig, EndpointError> {
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::ca(pin)))
        .with_no_client_auth();
    quinn_config(tls, timing, ALPN)
}

/// The client side of a link probe to a peer: this node's certificate, and
/// the peer accepted only if its certificate hashes to `peer_sha256`, the
/// pin the coordinator named it with.
pub fn peer_config(
    node: &NodeIdentity,
    peer_sha256: &str,
    timing: Timing,
) -> Result<quinn::ClientConfig, EndpointError> {
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::leaf(peer_sha256)))
        .with_client_auth_cert(vec![node.cert.clone()], node.key.clone_key())
        .map_err(TlsError::from)?;
    quinn_config(tls, timing, ALPN)
}

fn client_endpoint(
    tls: rustls::ClientConfig,
    timing: Timing,
    alpn: &[u8],
) -> Result<quinn::Endpoint, EndpointError> {
    let mut endpoint = bare_client()?;
    endpoint.set_default_client_config(quinn_config(tls, timing, alpn)?);
    Ok(endpoint)
}

fn quinn_config(
    mut tls: rustls::ClientConfig,
    timing: Timing,
    alpn: &[u8],
) -> Result<quinn::ClientConfig, EndpointError> {
    tls.alpn_protocols = vec![alpn.to_vec()];
    let crypto = QuicClientConfig::try_from(tls)
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport(timing)?);
    Ok(config)
}

/// A client endpoint on an ephemeral UDP port, with no default client
/// configuration.
pub fn bare_client() -> Result<quinn::Endpoint, EndpointError> {
    let addr = SocketAddr::from(([0, 0, 0, 0], 0));
    quinn::Endpoint::client(addr).map_err(|source| EndpointError::Bind { addr, source })
}

/// The application close code of a peer that closes because it is stopping
/// on purpose (an operator, systemd or an upgrade stopped it), as opposed to
/// one that crashed or lost its network.
pub const CLOSE_STOPPING: u32 = 0x7374;

/// Closes every connection of `endpoint` with [`CLOSE_STOPPING`], saying
/// `who` is stopping.
pub fn close_stopping(endpoint: &quinn::Endpoint, who: &str) {
    endpoint.close(CLOSE_STOPPING.into(), format!("{who} stopping").as_bytes());
}

/// The application close code of a peer that connected only to check the
/// handshake (`tidemill-edge doctor`): not a refusal, not worth a warning.
pub const CLOSE_CHECK: u32 = 0x6368;

/// Closes `conn` as a finished handshake check.
pub fn close_check(conn: &quinn::Connection) {
    conn.close(CLOSE_CHECK.into(), b"handshake check done");
}

/// Whether the peer closed the connection after only checking the handshake.
pub fn is_check(err: &quinn::ConnectionError) -> bool {
    matches!(err, quinn::ConnectionError::ApplicationClosed(c) if c.error_code == CLOSE_CHECK.into())
}

/// Whether the peer closed the connection because it is stopping on purpose.
pub fn is_stopping(err: &quinn::ConnectionError) -> bool {
    matches!(err, quinn::ConnectionError::ApplicationClosed(c) if c.error_code == CLOSE_STOPPING.into())
}

/// Whether a connection failed because this side did not trust the peer's
/// certificate (it is not from the CA this side trusts, or names another
/// host).
pub fn is_untrusted_peer(err: &quinn::ConnectionError) -> bool {
    matches!(err, quinn::ConnectionError::TransportError(e) if e.reason.contains("invalid peer certificate"))
}

/// Whether a connection failed because the peers speak different protocol
/// versions (their ALPN tokens do not match).
pub fn is_version_mismatch(err: &quinn::ConnectionError) -> bool {
    let code = quinn::TransportErrorCode::crypto(NO_APPLICATION_PROTOCOL);
    match err {
        quinn::ConnectionError::TransportError(e) => e.code == code,
        quinn::ConnectionError::ConnectionClosed(c) => c.error_code == code,
        _ => false,
    }
}
