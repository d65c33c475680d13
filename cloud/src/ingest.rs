//! The QUIC server: accepts edges, registers them, and applies their reports.
//! A connection is mutual TLS: the node id is the one its certificate was
//! issued for, and a connection without a certificate may only join (trade a
//! join token for one). A bad peer (no, an unknown or a revoked certificate, a
//! node id not its own, a wrong protocol version, oversized or malformed
//! frames, silence) is refused with an error, a counter and a log line; it
//! never takes the server down.

mod certs;

use std::sync::Arc;
use std::time::Duration;

use tidemill_proto::{CloudMsg, CodecError, EdgeMsg, ErrorCode, Welcome, WireError};
use tidemill_runtime::clock::{self, Clock, SystemClock};
use tidemill_runtime::frames::{self, FrameError};
use tidemill_runtime::probe;
use tidemill_runtime::quic;

use crate::admission::{Ticket, UNADMITTED_FRAME};
use crate::coordinator::Coordinator;
use crate::store::ReportKind;
use crate::{budget, duplicate};
use certs::{certified_node, invalid_node_id, join, renew};

/// Accepts connections until the endpoint closes.
pub async fn accept_loop(endpoint: quinn::Endpoint, coord: Arc<Coordinator>) {
    while let Some(incoming) = endpoint.accept().await {
        let remote = incoming.remote_address();
        match coord.admission.admit(remote, endpoint.open_connections()) {
            Ok(ticket) => {
                tokio::spawn(serve_connection(incoming, ticket, coord.clone()));
            }
            Err(why) => {
                coord.metrics.refused_admission.inc();
                let refused = coord.metrics.refused_admission.get();
                // At the 1st, 2nd, 4th, 8th... refusal: a flood logs a few lines.
                if refused.is_power_of_two() {
                    tracing::warn!(%remote, %why, refused, "refused a connection before its handshake (logged at powers of two)");
                } else {
                    tracing::debug!(%remote, %why, "refused a connection before its handshake");
                }
                incoming.refuse();
            }
        }
    }
}

fn stream_timeout(coord: &Coordinator) -> Duration {
    Duration::from_secs(coord.cfg.link.stream_timeout_secs)
}

async fn serve_connection(incoming: quinn::Incoming, ticket: Ticket, coord: Arc<Coordinator>) {
    let remote = incoming.remote_address();
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(e) => {
            coord.metrics.refused_connections.inc();
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
    let certified = match certified_node(&conn, &coord) {
        Ok(node) => node,
        Err(why) => return refuse_identity(&coord, &conn, remote, &why),
    };
    let first = clock::timeout(&SystemClock, stream_timeout(&coord), async {
        let (send, mut recv) = conn.accept_bi().await?;
        let hello = coord.metrics.received(
            coord
                .admission
                .read_frame::<EdgeMsg>(&mut recv, UNADMITTED_FRAME)
                .await,
        );
        Ok::<_, quinn::ConnectionError>((send, hello))
    })
    .await;
    let (mut send, first) = match first {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) if quic::is_check(&e) => {
            tracing::debug!(%remote, "a handshake check (tidemill-edge doctor) connected and left");
            return;
        }
        Ok(Err(e)) => return refuse(&coord, &conn, remote, &e.to_string()),
        Err(_) => return refuse(&coord, &conn, remote, "no hello within the stream timeout"),
    };
    let duplicate = match (&first, certified.as_ref()) {
        (Ok(Some(EdgeMsg::Hello(h))), Some((node, _))) if &h.node_id == node => {
            duplicate::refusal(&coord, node, &conn, remote).await
        }
        _ => None,
    };
    if let Some(why) = duplicate {
        return refuse_with_answer(&coord, &conn, remote, send, ErrorCode::Unauthorized, &why)
            .await;
    }
    // From here until its session is registered, a certified node counts as
    // connected, so a round cannot call it offline mid-handshake.
    let greeting = certified.as_ref().map(|(node, _)| coord.greeting(node));
    let outcome = match (first, certified.as_ref()) {
        (Ok(Some(EdgeMsg::Join(j))), None) => {
            return join(&coord, &conn, send, j, remote).await;
        }
        (Ok(Some(EdgeMsg::ClockRequest)), Some(_)) => {
            let now_ms = SystemClock.now_ms();
            let _ = frames::write_msg(&mut send, &CloudMsg::Clock { now_ms }).await;
            let _ = send.finish();
            // The checker closes once it has the answer.
            let _ = clock::timeout(&SystemClock, stream_timeout(&coord), conn.closed()).await;
            return;
        }
        (Ok(Some(EdgeMsg::Hello(_))), None) => {
            let why = "a hello without a node certificate: join first with `tidemill-edge join --token` (a token from `tidemill-cloud token create`)";
            return refuse_with_answer(&coord, &conn, remote, send, ErrorCode::Unauthorized, why)
                .await;
        }
        (Ok(Some(EdgeMsg::Hello(h))), Some((node, _))) if &h.node_id != node => {
            let why = format!(
                "a hello as node {} over the certificate of node {node}: a node may only use its own id",
                h.node_id
            );
            return refuse_with_answer(&coord, &conn, remote, send, ErrorCode::Unauthorized, &why)
                .await;
        }
        (Ok(Some(EdgeMsg::Hello(h))), Some(_)) => clock::timeout(
            &SystemClock,
            stream_timeout(&coord),
            welcome(send, h, &remote.ip().to_string(), &coord),
        )
        .await
        .unwrap_or_else(|_| Err("the welcome could not be sent in time".into())),
        (Ok(Some(_)), _) => {
            let msg = "the first message on a connection must be a hello (or, without a certificate, a join)";
            reply_error(&mut send, ErrorCode::UnexpectedMessage, msg).await;
            Err(msg.to_string())
        }
        (Ok(None), _) => Err("stream closed before the hello".into()),
        (Err(e), _) => {
            let (code, msg) = classify(&e);
            reply_error(&mut send, code, &msg).await;
            Err(msg)
        }
    };
    let (node_id, probe_port) = match outcome {
        Ok(hello) => hello,
        Err(why) => return refuse(&coord, &conn, remote, &why),
    };
    let fingerprint = certified.as_ref().map_or("", |(_, f)| f.as_str());
    tracing::info!(node_id = %node_id, %remote, cert = %&fingerprint[..fingerprint.len().min(16)], "edge connected");
    coord.connect(&node_id, conn.clone(), probe_port, fingerprint);
    drop(greeting);
    drop(ticket);
    quic::raise_to_admitted(&conn, coord.admission.admitted_bounds());
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
    let current = coord.disconnect(&node_id, &conn);
    let now = coord.clock.now_ms();
    let mut store = coord.store.lock().unwrap();
    if let Err(e) = store.touch(&node_id, now) {
        tracing::error!(node_id = %node_id, error = %e, "cannot record the disconnect");
    }
    tracing::info!(node_id = %node_id, %remote, %reason, "edge disconnected");
    // An edge that says it is stopping is offline now; one that vanished
    // gets the grace period to come back.
    if current && quic::is_stopping(&reason) {
        match store.stopped(&node_id, now) {
            Ok(true) => tracing::info!(node_id = %node_id, "node offline: its edge stopped"),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(node_id = %node_id, error = %e, "cannot mark the stopped node offline")
            }
        }
        drop(store);
        coord.wake.notify_one();
    }
}

/// Refuses a connection with `why` as the answer on `send`. It is counted
/// and logged first, so a peer that has the answer finds it in the metrics;
/// then the answer is sent, and the connection closed once the peer has it
/// (within the stream timeout), so that closing does not race it.
async fn refuse_with_answer(
    coord: &Coordinator,
    conn: &quinn::Connection,
    remote: std::net::SocketAddr,
    mut send: quinn::SendStream,
    code: ErrorCode,
    why: &str,
) {
    if code == ErrorCode::Unauthorized {
        coord.metrics.refused_identity.inc();
    }
    coord.metrics.refused_connections.inc();
    tracing::warn!(%remote, %why, "refused a connection");
    reply_error(&mut send, code, why).await;
    let _ = clock::timeout(&SystemClock, stream_timeout(coord), send.stopped()).await;
    conn.close(1u32.into(), why.as_bytes());
}

/// Refuses a connection: counts it, logs why, and closes it with the reason.
fn refuse(coord: &Coordinator, conn: &quinn::Connection, remote: std::net::SocketAddr, why: &str) {
    coord.metrics.refused_connections.inc();
    tracing::warn!(%remote, %why, "refused a connection");
    conn.close(1u32.into(), why.as_bytes());
}

/// Refuses a connection whose peer is not who it claims, or nobody: counted
/// apart, as a possible attack.
fn refuse_identity(
    coord: &Coordinator,
    conn: &quinn::Connection,
    remote: std::net::SocketAddr,
    why: &str,
) {
    coord.metrics.refused_identity.inc();
    refuse(coord, conn, remote, why);
}

/// Registers the node a hello names, with the address it connected from,
/// and answers it with the welcome; returns the node id and probe port, or
/// why the connection is refused.
async fn welcome(
    mut send: quinn::SendStream,
    hello: tidemill_proto::Hello,
    address: &str,
    coord: &Coordinator,
) -> Result<(String, Option<u16>), String> {
    let id = &hello.node_id;
    if let Some(msg) = invalid_node_id(id) {
        reply_error(&mut send, ErrorCode::UnexpectedMessage, &msg).await;
        return Err(msg);
    }
    if let Some(msg) = hello.site.as_deref().and_then(tidemill_proto::site_problem) {
        reply_error(&mut send, ErrorCode::UnexpectedMessage, &msg).await;
        // The connection closes once the edge has the reason.
        let _ = clock::timeout(&SystemClock, stream_timeout(coord), send.stopped()).await;
        return Err(msg);
    }
    let now = coord.clock.now_ms();
    let registered = coord.store.lock().unwrap().hello(&hello, address, now);
    let acked_seq = match registered {
        Ok(Ok(seq)) => seq,
        Ok(Err(refusal)) => {
            coord.metrics.refused_claims.inc();
            let msg = refusal.to_string();
            tracing::warn!(node_id = %id, claimed = ?hello.capabilities, refused = %refusal.over.join("; "),
                "refused a hello claiming more than the node joined with");
            reply_error(&mut send, ErrorCode::Unauthorized, &msg).await;
            // The connection closes once the edge has the reason.
            let _ = clock::timeout(&SystemClock, stream_timeout(coord), send.stopped()).await;
            return Err(msg);
        }
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
    let default_slot_s = tidemill_forecast::ForecastConfig::default().slot_len_s;
    let prior = match coord.store.lock().unwrap().prior_for(id, default_slot_s) {
        Ok(prior) => prior,
        Err(e) => {
            tracing::warn!(node_id = %id, error = %e, "cannot build the peers' prior; the node forecasts from its own history alone");
            None
        }
    };
    if let Some(p) = &prior {
        tracing::info!(node_id = %id, source = %p.source, peers = p.peers, "sending the peers' tide to a node with little history of its own");
    }
    let welcome = CloudMsg::Welcome(Welcome {
        acked_seq,
        coordinator_version: env!("CARGO_PKG_VERSION").into(),
        issuing_ca_sha256: coord.authority().issuing_pin(),
        prior,
    });
    coord
        .metrics
        .sent(&welcome, frames::write_msg(&mut send, &welcome).await)
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
    let mut frame_bytes = 0;
    let read = clock::timeout(
        &SystemClock,
        stream_timeout(&coord),
        coord
            .admission
            .read_frame::<EdgeMsg>(&mut recv, tidemill_proto::MAX_FRAME_LEN),
    )
    .await
    .map(|read| {
        frame_bytes = read
            .as_ref()
            .map_or(0, |r| r.as_ref().map_or(0, |(_, b)| *b));
        coord.metrics.received(read)
    });
    let arrived = std::time::Instant::now();
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
        Ok(Ok(Some(EdgeMsg::Reports(reports)))) => 'reports: {
            if let Some(message) = budget::refusal(&coord, &node_id, reports.len(), frame_bytes) {
                // Logged once an hour and counted by the budget, not per frame.
                let code = ErrorCode::Internal;
                break 'reports (None, Some(CloudMsg::Error(WireError { code, message })));
            }
            let now = coord.clock.now_ms();
            let first = reports.first().map(|r| r.seq);
            let ingest = coord.metrics.ingest_seconds.start_timer();
            let applied = coord
                .report_commits
                .apply(
                    &coord.store,
                    &coord.metrics.report_commits,
                    &node_id,
                    reports,
                    now,
                )
                .await;
            ingest.observe_duration();
            match applied {
                Ok(a) => {
                    for d in &a.dropped {
                        coord
                            .metrics
                            .dropped_values
                            .with_label_values(&[d.field])
                            .inc();
                        tracing::warn!(node_id = %node_id, seq = d.seq, field = d.field, value = %d.value,
                            "dropped a report value out of range");
                    }
                    for (seq, kind) in &a.stored {
                        tracing::debug!(node_id = %node_id, seq, kind = %kind.as_str(), "report stored");
                        // A forecast dropped for a value out of range was not stored.
                        let dropped = a.dropped.iter().any(|d| d.seq == *seq);
                        if *kind == ReportKind::Forecast && !dropped {
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
        Ok(Ok(Some(EdgeMsg::Renew { public_key }))) => match renew(&coord, &node_id, &public_key) {
            Ok(renewed) => (None, Some(renewed)),
            Err((code, why)) => refuse(code, why),
        },
        Ok(Ok(Some(
            msg @ (EdgeMsg::CheckpointOffer { .. }
            | EdgeMsg::CheckpointChunk { .. }
            | EdgeMsg::CheckpointCommit { .. }
            | EdgeMsg::CheckpointLatest { .. }
            | EdgeMsg::CheckpointFetch { .. }
            | EdgeMsg::CheckpointShared { .. }),
        ))) => {
            let (c, node) = (coord.clone(), node_id.clone());
            match tokio::task::spawn_blocking(move || crate::checkpoints::answer(&c, &node, msg))
                .await
            {
                Ok(Ok(reply)) => (None, Some(reply)),
                Ok(Err((code, why))) => refuse(code, why),
                Err(e) => refuse(
                    ErrorCode::Internal,
                    format!("checkpoint request failed: {e}"),
                ),
            }
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
            coord.metrics.refused_frames.inc();
            tracing::warn!(node_id = %node_id, ?code, %message, "refused a frame");
            if code == ErrorCode::FrameTooLarge {
                let _ = recv.stop(1u32.into());
            }
            CloudMsg::Error(WireError { code, message })
        }
        None => reply.expect("a reply when nothing was refused"),
    };
    let written = frames::write_msg(&mut send, &reply).await;
    match coord.metrics.sent(&reply, written) {
        Ok(()) if matches!(reply, CloudMsg::Ack { .. }) => coord
            .metrics
            .ack_seconds
            .observe(arrived.elapsed().as_secs_f64()),
        Ok(()) => {}
        Err(e) => tracing::debug!(node_id = %node_id, error = %e, "cannot reply on a stream"),
    }
    let _ = send.finish();
}

fn variant(msg: &EdgeMsg) -> &'static str {
    match msg {
        EdgeMsg::Hello(_) => "a second hello",
        EdgeMsg::Join(_) => "a join",
        EdgeMsg::Renew { .. } => "a renewal",
        EdgeMsg::Reports(_) => "reports",
        EdgeMsg::CommandAck { .. } => "a command ack",
        EdgeMsg::Error(_) => "an error",
        EdgeMsg::Probe { .. } => "a probe",
        EdgeMsg::PeersRequest => "a peers request",
        EdgeMsg::ClockRequest => "a clock request",
        EdgeMsg::CheckpointOffer { .. } => "a checkpoint offer",
        EdgeMsg::CheckpointChunk { .. } => "a checkpoint chunk",
        EdgeMsg::CheckpointCommit { .. } => "a checkpoint commit",
        EdgeMsg::CheckpointLatest { .. } => "a checkpoint request",
        EdgeMsg::CheckpointFetch { .. } => "a checkpoint chunk request",
        EdgeMsg::CheckpointShared { .. } => "a shared-store checkpoint report",
    }
}
