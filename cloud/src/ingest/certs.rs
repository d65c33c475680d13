//! Who a connection is and how it gets a certificate: the node its
//! certificate was issued to, a join that trades a token for one, and a
//! renewal that trades the certificate in use for a new one.

use tidemill_proto::{CloudMsg, ErrorCode, Join};
use tidemill_runtime::clock::{self, Clock, SystemClock};
use tidemill_runtime::frames;
use tidemill_runtime::identity::sha256_hex;

use super::{refuse_with_answer, stream_timeout};
use crate::budget;
use crate::coordinator::Coordinator;
use crate::store::{CertRecord, CertStatus};

/// Longest node id accepted.
pub(super) const MAX_NODE_ID: usize = 128;

/// The node the connection's certificate was issued to, `None` for a
/// connection without one (it may only join), or why the certificate is
/// refused.
pub(super) fn certified_node(
    conn: &quinn::Connection,
    coord: &Coordinator,
) -> Result<Option<(String, String)>, String> {
    let Some(chain) = conn.peer_identity().and_then(|id| {
        id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    }) else {
        return Ok(None);
    };
    let Some(leaf) = chain.first() else {
        return Ok(None);
    };
    let fingerprint = sha256_hex(leaf);
    let status = coord.store.lock().unwrap().cert_status(&fingerprint);
    match status {
        Ok(CertStatus::Node(node)) => Ok(Some((node, fingerprint))),
        Ok(CertStatus::Revoked(node)) => Err(format!(
            "the certificate of node {node} (sha256 {fingerprint}) was revoked; join again with a new token"
        )),
        Ok(CertStatus::Unknown) => Err(format!(
            "certificate sha256 {fingerprint} was not issued by this coordinator's joins; join with a token"
        )),
        Err(e) => Err(format!("cannot check the certificate: {e}")),
    }
}

/// Why a node id cannot be used, if it cannot.
pub(super) fn invalid_node_id(id: &str) -> Option<String> {
    let valid = !id.is_empty()
        && id.len() <= MAX_NODE_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    (!valid).then(|| format!(
        "node id {id:?} is invalid: use 1 to {MAX_NODE_ID} letters, digits, '.', '_' or '-' (set node_id or --node-id)"
    ))
}

/// Trades a join token for a node certificate, then closes the connection:
/// the node reconnects with the certificate.
pub(super) async fn join(
    coord: &Coordinator,
    conn: &quinn::Connection,
    mut send: quinn::SendStream,
    j: Join,
    remote: std::net::SocketAddr,
) {
    // Certificates are checked against real time, so they are issued in it.
    let now = SystemClock.now_ms();
    let issued = match invalid_node_id(&j.node_id) {
        Some(why) => Err((ErrorCode::UnexpectedMessage, why)),
        None => issue(coord, &j.node_id, &j.public_key, now),
    };
    let outcome = issued.and_then(|issued| {
        let fingerprint = sha256_hex(&issued.cert);
        let record = CertRecord {
            fingerprint: &fingerprint,
            not_after_ms: issued.not_after_ms,
            issuer_sha256: &issued.issuer_sha256,
        };
        let joined =
            coord
                .store
                .lock()
                .unwrap()
                .join(&j.token_id, &j.secret, &j.node_id, record, now);
        match joined {
            Ok(Ok(())) => Ok(issued),
            Ok(Err(refusal)) => Err((ErrorCode::Unauthorized, refusal.to_string())),
            Err(e) => {
                tracing::error!(node_id = %j.node_id, error = %e, "cannot record a join");
                Err((
                    ErrorCode::Internal,
                    "the coordinator cannot record the join".into(),
                ))
            }
        }
    });
    match outcome {
        Ok(issued) => {
            coord.metrics.joins.inc();
            tracing::info!(node_id = %j.node_id, token_id = %j.token_id, %remote, "node joined");
            let joined = CloudMsg::Joined(issued);
            let _ = coord
                .metrics
                .sent(&joined, frames::write_msg(&mut send, &joined).await);
            let _ = send.finish();
            let _ = clock::timeout(&SystemClock, stream_timeout(coord), send.stopped()).await;
            conn.close(0u32.into(), b"joined; reconnect with the certificate");
        }
        Err((code, why)) => refuse_with_answer(coord, conn, remote, send, code, &why).await,
    }
}

/// A new certificate for `node_id`, the node of the connection that asks,
/// over its new `public_key`.
pub(super) fn renew(
    coord: &Coordinator,
    node_id: &str,
    public_key: &[u8],
) -> Result<CloudMsg, (ErrorCode, String)> {
    let now = SystemClock.now_ms();
    budget::renewal_allowed(coord, node_id, now)?;
    let issued = issue(coord, node_id, public_key, now)?;
    let fingerprint = sha256_hex(&issued.cert);
    let in_use = coord.session_cert(node_id).unwrap_or_default();
    let record = CertRecord {
        fingerprint: &fingerprint,
        not_after_ms: issued.not_after_ms,
        issuer_sha256: &issued.issuer_sha256,
    };
    let revoked = coord
        .store
        .lock()
        .unwrap()
        .renew(node_id, record, &in_use, now)
        .map_err(|e| {
            tracing::error!(node_id = %node_id, error = %e, "cannot record a renewal");
            (
                ErrorCode::Internal,
                "the coordinator cannot record the renewal".to_string(),
            )
        })?;
    tracing::info!(node_id = %node_id, issuer = %&issued.issuer_sha256[..16], revoked, "certificate renewed; older ones but the one in use revoked");
    Ok(CloudMsg::Renewed(issued))
}

/// A certificate for `node_id` over `public_key` from the CA that issues now,
/// with what the node should trust.
pub(super) fn issue(
    coord: &Coordinator,
    node_id: &str,
    public_key: &[u8],
    now_ms: i64,
) -> Result<tidemill_proto::Issued, (ErrorCode, String)> {
    let authority = coord.authority();
    let (cert, not_after_ms) = authority
        .issue(node_id, public_key, now_ms)
        .map_err(|e| (ErrorCode::UnexpectedMessage, e.to_string()))?;
    Ok(authority.issued(&cert, not_after_ms))
}
