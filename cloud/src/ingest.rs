//! The QUIC server: accepts edges, registers them, and applies their reports.
//! A bad peer (wrong protocol version, oversized or malformed frames, silence)
//! is refused with an error and a log line; it never takes the server down.

use std::sync::Arc;
use std::time::Duration;

use tidemill_proto::{CloudMsg, CodecError, EdgeMsg, ErrorCode, Welcome, WireError};
use tidemill_runtime::clock::{self, SystemClock};
use tidemill_runtime::frames::{self, FrameError};
use tidemill_runtime::probe;
use tidemill_runtime::quic;

use crate::coordinator::{Coordinator, Counters};
use crate::store::ReportKind;

/// Longest node id accepted.
const MAX_NODE_ID: usize = 128;

/// Accepts connections until the endpoint closes.
pub async fn accept_loop(endpoint: quinn::Endpoint, coord: Arc<Coordinator>) {
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(serve_connection(incoming, coord.clone()));
    }
}

fn stream_timeout(coord: &Coordinator) -> Duration {
    Duration::from_secs(coord.cfg.link.stream_timeout_secs)
}

async fn serve_connection(incoming: quinn::Incoming, coord: Arc<Coordinator>) {
    let remote = incoming.remote_address();
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(e) => {
            Counters::bump(&coord.counters.refused_connections);
            if quic::is_version_mismatch(&e) {
                tracing::warn!(%remote, error = %e,
                    "refused a connection: the peer does not speak {}; upgrade it to this release",
                    String::from_utf8_lossy(tidemill_proto::ALPN));
            } else {
                tracing::warn!(%remote, error = %e, "refused a connection: handshake failed");
            }
            return;
        }
    };
    let (node_id, probe_port) =
        match clock::timeout(&SystemClock, stream_timeout(&coord), hello(&conn, &coord)).await {
            Ok(Ok(hello)) => hello,
            Ok(Err(why)) => {
                Counters::bump(&coord.counters.refused_connections);
                tracing::warn!(%remote, %why, "refused a connection");
                conn.close(1u32.into(), why.as_bytes());
                return;
            }
            Err(_) => {
                Counters::bump(&coord.counters.refused_connections);
                tracing::warn!(%remote, "refused a connection: no hello within the stream timeout");
                conn.close(1u32.into(), b"no hello in time");
                return;
            }
        };
    tracing::info!(node_id = %node_id, %remote, "edge connected");
    coord.connect(&node_id, conn.clone(), probe_port);
    let trains = probe::Trains::watch(&conn);
    let reason = loop {
        match conn.accept_bi().await {
            Ok((send, recv)) => {
                tokio::spawn(serve_stream(
                    node_id.clone(),
                    send,
                    recv,
                    coord.clone(),
                    trains.clone(),
                ));
            }
            Err(e) => break e,
        }
    };
    coord.disconnect(&node_id, &conn);
    let now = coord.clock.now_ms();
    if let Err(e) = coord.store.lock().unwrap().touch(&node_id, now) {
        tracing::error!(node_id = %node_id, error = %e, "cannot record the disconnect");
    }
    tracing::info!(node_id = %node_id, %remote, %reason, "edge disconnected");
}

/// Reads the hello on the first stream and answers it; returns the node id or a
/// reason for refusing the connection.
async fn hello(
    conn: &quinn::Connection,
    coord: &Coordinator,
) -> Result<(String, Option<u16>), String> {
    let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
    let hello = match frames::read_msg::<EdgeMsg>(&mut recv).await {
        Ok(Some(EdgeMsg::Hello(h))) => h,
        Ok(Some(_)) => {
            let msg = "the first message on a connection must be a hello".to_string();
            reply_error(&mut send, ErrorCode::UnexpectedMessage, &msg).await;
            return Err(msg);
        }
        Ok(None) => return Err("stream closed before the hello".into()),
        Err(e) => {
            let (code, msg) = classify(&e);
            reply_error(&mut send, code, &msg).await;
            return Err(msg);
        }
    };
    let id = &hello.node_id;
    let valid = !id.is_empty()
        && id.len() <= MAX_NODE_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !valid {
        let msg = format!(
            "node id {id:?} is invalid: use 1 to {MAX_NODE_ID} letters, digits, '.', '_' or '-' (set node_id or --node-id)"
        );
        reply_error(&mut send, ErrorCode::UnexpectedMessage, &msg).await;
        return Err(msg);
    }
    let now = coord.clock.now_ms();
    let registered = coord.store.lock().unwrap().register(&hello, now);
    let acked_seq = match registered {
        Ok(seq) => seq,
        Err(e) => {
            tracing::error!(node_id = %id, error = %e, "cannot register node");
            reply_error(
                &mut send,
                ErrorCode::Internal,
                "the coordinator cannot store the registration",
            )
            .await;
            return Err(e.to_string());
        }
    };
    let welcome = CloudMsg::Welcome(Welcome {
        acked_seq,
        coordinator_version: env!("CARGO_PKG_VERSION").into(),
    });
    frames::write_msg(&mut send, &welcome)
        .await
        .map_err(|e| e.to_string())?;
    let _ = send.finish();
    Ok((hello.node_id, hello.probe_port))
}

/// Maps a frame error to the refusal sent back.
fn classify(e: &FrameError) -> (ErrorCode, String) {
    match e {
        FrameError::Codec(CodecError::Oversized { .. }) => {
            (ErrorCode::FrameTooLarge, e.to_string())
        }
        _ => (ErrorCode::MalformedFrame, e.to_string()),
    }
}

async fn reply_error(send: &mut quinn::SendStream, code: ErrorCode, message: &str) {
    let msg = CloudMsg::Error(WireError {
        code,
        message: message.to_string(),
    });
    let _ = frames::write_msg(send, &msg).await;
    let _ = send.finish();
}

async fn serve_stream(
    node_id: String,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    coord: Arc<Coordinator>,
    trains: Arc<probe::Trains>,
) {
    let read = clock::timeout(
        &SystemClock,
        stream_timeout(&coord),
        frames::read_msg::<EdgeMsg>(&mut recv),
    )
    .await;
    let refuse = |code, msg: String| (Some((code, msg)), None);
    let (refusal, reply) = match read {
        Err(_) => refuse(
            ErrorCode::MalformedFrame,
            "no complete frame within the stream timeout".to_string(),
        ),
        Ok(Ok(None)) => return,
        Ok(Err(e @ (FrameError::Codec(_) | FrameError::Truncated { .. }))) => {
            let (code, msg) = classify(&e);
            refuse(code, msg)
        }
        Ok(Err(e)) => {
            tracing::debug!(node_id = %node_id, error = %e, "stream failed");
            return;
        }
        Ok(Ok(Some(EdgeMsg::Reports(reports)))) => {
            let now = coord.clock.now_ms();
            let applied = coord
                .store
                .lock()
                .unwrap()
                .apply_reports(&node_id, &reports, now);
            match applied {
                Ok(a) => {
                    for (seq, kind) in &a.stored {
                        tracing::debug!(node_id = %node_id, seq, kind = %kind.as_str(), "report stored");
                        if *kind == ReportKind::Forecast {
                            tracing::debug!(node_id = %node_id, seq, "forecast stored");
                        }
                    }
                    if a.duplicates > 0 {
                        tracing::debug!(node_id = %node_id, duplicates = a.duplicates, "ignored reports already stored");
                    }
                    for (job_id, state) in &a.jobs {
                        tracing::info!(node_id = %node_id, job_id, state = %state.as_str(), "job state changed");
                    }
                    if !a.jobs.is_empty() {
                        coord.wake.notify_one();
                    }
                    (None, Some(CloudMsg::Ack { seq: a.ack }))
                }
                Err(e) => {
                    let first = reports.first().map(|r| r.seq);
                    tracing::error!(node_id = %node_id, first_seq = first, error = %e, "cannot store reports");
                    refuse(
                        ErrorCode::Internal,
                        "the coordinator cannot store the reports; they will be resent".into(),
                    )
                }
            }
        }
        Ok(Ok(Some(probe @ EdgeMsg::Probe { .. }))) => {
            (None, Some(probe::answer(&probe, &trains).await))
        }
        Ok(Ok(Some(EdgeMsg::PeersRequest))) => (
            None,
            Some(CloudMsg::Peers(
                coord.peers_for(&node_id, coord.cfg.probe_peers_per_edge),
            )),
        ),
        Ok(Ok(Some(other))) => refuse(
            ErrorCode::UnexpectedMessage,
            format!(
                "expected a report on an edge-opened stream, got {}",
                variant(&other)
            ),
        ),
    };
    let reply = match refusal {
        Some((code, message)) => {
            Counters::bump(&coord.counters.refused_frames);
            tracing::warn!(node_id = %node_id, ?code, %message, "refused a frame");
            if code == ErrorCode::FrameTooLarge {
                let _ = recv.stop(1u32.into());
            }
            CloudMsg::Error(WireError { code, message })
        }
        None => reply.expect("a reply when nothing was refused"),
    };
    if let Err(e) = frames::write_msg(&mut send, &reply).await {
        tracing::debug!(node_id = %node_id, error = %e, "cannot reply on a stream");
    }
    let _ = send.finish();
}

fn variant(msg: &EdgeMsg) -> &'static str {
    match msg {
        EdgeMsg::Hello(_) => "a second hello",
        EdgeMsg::Reports(_) => "reports",
        EdgeMsg::CommandAck { .. } => "a command ack",
        EdgeMsg::Error(_) => "an error",
        EdgeMsg::Probe { .. } => "a probe",
        EdgeMsg::PeersRequest => "a peers request",
    }
}
