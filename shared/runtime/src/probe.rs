//! Link probes: small, timed transfers that measure a link's round-trip time,
//! throughput and loss, for the scheduler's cost model. Edges probe the
//! coordinator over their existing connection and a few peer edges through the
//! peers' probe responders.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemill_proto::{CloudMsg, EdgeMsg, ErrorCode, LinkSample, WireError};

use crate::frames::{self, FrameError};
use crate::quic::{EndpointError, Timing};
use crate::tls::{ServerIdentity, TlsError};

/// The floor on the transfer time used for throughput, so that a transfer
/// faster than the clock's resolution does not divide by zero.
const MIN_TRANSFER: Duration = Duration::from_millis(1);

/// Throughput of a timed request: B = bytes / max(t − RTT, 1 ms), in bytes/s,
/// where t is the time from sending the first byte to receiving the answer and
/// one RTT of it is the request/answer latency rather than transfer.
pub fn throughput(bytes: u64, elapsed: Duration, rtt: Duration) -> f64 {
    bytes as f64 / elapsed.saturating_sub(rtt).max(MIN_TRANSFER).as_secs_f64()
}

/// Measures the link under `conn` by sending `bytes` of filler and timing the
/// answer. `peer` names the other end in the result; `t_ms` stamps it.
pub async fn measure(
    conn: &quinn::Connection,
    peer: &str,
    bytes: usize,
    t_ms: i64,
) -> Result<LinkSample, FrameError> {
    let started = Instant::now();
    let reply: CloudMsg = frames::request(
        conn,
        &EdgeMsg::Probe {
            payload: vec![0; bytes],
        },
    )
    .await?;
    let elapsed = started.elapsed();
    match reply {
        CloudMsg::ProbeAck { bytes: got } if got == bytes as u64 => {}
        _ => return Err(FrameError::NoReply),
    }
    let rtt = conn.rtt();
    let stats = conn.stats();
    let loss = if stats.path.sent_packets == 0 {
        0.0
    } else {
        stats.path.lost_packets as f64 / stats.path.sent_packets as f64
    };
    Ok(LinkSample {
        peer: peer.to_string(),
        t_ms,
        rtt_ms: rtt.as_secs_f64() * 1000.0,
        bandwidth_bps: throughput(bytes as u64, elapsed, rtt),
        loss,
    })
}

/// The answer to a probe frame.
pub fn answer(msg: &EdgeMsg) -> CloudMsg {
    match msg {
        EdgeMsg::Probe { payload } => CloudMsg::ProbeAck {
            bytes: payload.len() as u64,
        },
        _ => CloudMsg::Error(WireError {
            code: ErrorCode::UnexpectedMessage,
            message: "a probe responder answers only probes".into(),
        }),
    }
}

/// Serves probes on `endpoint` until it closes: each stream carries one probe
/// frame and gets its [`CloudMsg::ProbeAck`].
pub async fn respond(endpoint: quinn::Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                tokio::spawn(async move {
                    if let Ok(Some(msg)) = frames::read_msg::<EdgeMsg>(&mut recv).await {
                        let _ = frames::write_msg(&mut send, &answer(&msg)).await;
                        let _ = send.finish();
                    }
                });
            }
        });
    }
}

/// A probe responder's identity: a certificate made up at start. Probes carry
/// nothing of value, so probers do not verify it (see [`prober`]).
pub fn responder_identity() -> Result<ServerIdentity, TlsError> {
    let key = rcgen::KeyPair::generate()?;
    let cert =
        rcgen::CertificateParams::new(vec!["tidemill-probe".to_string()])?.self_signed(&key)?;
    Ok(ServerIdentity {
        chain: vec![cert.der().clone()],
        key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        ca_path: std::path::PathBuf::new(),
    })
}

/// A client endpoint for probing peers' responders. It accepts any server
/// certificate (the handshake signature is still checked): a probe sends only
/// filler and trusts nothing it receives beyond a byte count.
pub fn prober(timing: Timing) -> Result<quinn::Endpoint, EndpointError> {
    crate::quic::client_with_verifier(Arc::new(AnyCertificate(crate::quic::provider())), timing)
}

/// Connects to a peer's probe responder and measures the link.
pub async fn measure_peer(
    prober: &quinn::Endpoint,
    peer: &str,
    addr: SocketAddr,
    bytes: usize,
    t_ms: i64,
) -> Result<LinkSample, FrameError> {
    let conn = prober.connect(addr, "tidemill-probe")?.await?;
    let sample = measure(&conn, peer, bytes, t_ms).await;
    conn.close(0u32.into(), b"probe done");
    sample
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_subtracts_one_round_trip() {
        // 1 MB in 120 ms with a 20 ms RTT: 1e6 B / 0.1 s = 1e7 B/s.
        let b = throughput(
            1_000_000,
            Duration::from_millis(120),
            Duration::from_millis(20),
        );
        assert!((b - 1e7).abs() < 1.0, "{b}");
        // A transfer faster than one RTT is floored at 1 ms: 1000 B / 0.001 s.
        assert_eq!(
            throughput(1_000, Duration::from_millis(5), Duration::from_millis(20)),
            1e6
        );
    }

    #[tokio::test]
    async fn measures_a_loopback_link_through_a_responder() {
        let identity = responder_identity().unwrap();
        let key = [7u8; crate::quic::RESET_KEY_LEN];
        let server = crate::quic::server(
            "127.0.0.1:0".parse().unwrap(),
            identity,
            Timing::default(),
            &key,
        )
        .unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(respond(server));
        let client = prober(Timing::default()).unwrap();
        let sample = measure_peer(&client, "peer-1", addr, 64 * 1024, 42)
            .await
            .unwrap();
        assert_eq!((sample.peer.as_str(), sample.t_ms), ("peer-1", 42));
        assert!(sample.rtt_ms > 0.0 && sample.rtt_ms < 1000.0, "{sample:?}");
        assert!(sample.bandwidth_bps > 1e5, "{sample:?}");
        assert!((0.0..=1.0).contains(&sample.loss));
    }
}
