//! The edge side of the protocol for emulated edges (`swarm`, `twin`): the
//! join, the hello, an in-memory journal of sequence-numbered reports sent in
//! batches, each acknowledged before the next, and after a reconnect the
//! resend of every report the coordinator's welcome says it has not stored,
//! as a real edge's journal does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemill_proto::{CloudMsg, EdgeMsg, Hello, Report, ReportBody};
use tidemill_runtime::frames;
use tidemill_runtime::identity::{JoinToken, NodeKeyPair, request_certificate};
use tidemill_runtime::quic::{self, Timing};

/// Reports sent in one batch at most, as the edge's link sends them.
pub(crate) const BATCH: usize = 256;

/// How long an edge waits for an acknowledgement before it reconnects.
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// One emulated edge's journal: reports not yet acknowledged, with the time
/// each was journaled.
pub(crate) struct Outbox {
    next_seq: u64,
    pub(crate) pending: VecDeque<(Report, Instant)>,
}

impl Outbox {
    /// An empty journal whose first report is number 1.
    pub(crate) fn new() -> Outbox {
        Outbox {
            next_seq: 0,
            pending: VecDeque::new(),
        }
    }

    /// Journals `body` under the next sequence number.
    pub(crate) fn append(&mut self, body: ReportBody) {
        self.next_seq += 1;
        self.pending.push_back((
            Report {
                seq: self.next_seq,
                body,
            },
            Instant::now(),
        ));
    }

    /// Drops every report up to `seq`, returning their journaling times.
    pub(crate) fn ack(&mut self, seq: u64) -> Vec<Instant> {
        let mut times = Vec::new();
        while self.pending.front().is_some_and(|(r, _)| r.seq <= seq) {
            times.extend(self.pending.pop_front().map(|(_, t)| t));
        }
        times
    }
}

/// One request and its answer, bounded by [`ACK_TIMEOUT`].
pub(crate) async fn ask(conn: &quinn::Connection, msg: &EdgeMsg) -> Result<CloudMsg, String> {
    match tokio::time::timeout(ACK_TIMEOUT, frames::request(conn, msg)).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within the ack timeout".into()),
    }
}

/// How emulated edges reach the coordinator: a shared join token and, per
/// edge, the certificate it got by joining, kept in memory.
pub(crate) struct Dialer {
    /// The client socket this edge shares with others.
    pub(crate) endpoint: quinn::Endpoint,
    /// The coordinator's QUIC address.
    pub(crate) coordinator: SocketAddr,
    /// The name checked against the coordinator's certificate.
    pub(crate) server_name: String,
    /// The join token and the client config that pins the CA it names.
    pub(crate) join: Arc<(JoinToken, quinn::ClientConfig)>,
    /// The client side of this edge's connections, once it has joined.
    config: Mutex<Option<quinn::ClientConfig>>,
}

impl Dialer {
    /// A dialer that joins on first use.
    pub(crate) fn new(
        endpoint: quinn::Endpoint,
        coordinator: SocketAddr,
        server_name: String,
        join: Arc<(JoinToken, quinn::ClientConfig)>,
    ) -> Dialer {
        Dialer {
            endpoint,
            coordinator,
            server_name,
            join,
            config: Mutex::new(None),
        }
    }

    /// This edge's client configuration, joining as `node_id` first if it has none.
    async fn config(&self, node_id: &str) -> Result<quinn::ClientConfig, String> {
        if let Some(c) = self.config.lock().unwrap().clone() {
            return Ok(c);
        }
        let (token, joiner) = &*self.join;
        let conn = self
            .endpoint
            .connect_with(joiner.clone(), self.coordinator, &self.server_name)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let key = NodeKeyPair::generate().map_err(|e| e.to_string())?;
        let joined = request_certificate(&conn, token, node_id, &key).await;
        conn.close(0u32.into(), b"joined");
        let issued = joined.map_err(|e| e.to_string())?;
        let config = quic::client_config(&key.into_identity(issued), Timing::default())
            .map_err(|e| e.to_string())?;
        *self.config.lock().unwrap() = Some(config.clone());
        Ok(config)
    }

    /// Connects with this edge's certificate and says `hello`; returns the
    /// connection and the highest report sequence number the welcome says is
    /// stored.
    pub(crate) async fn open(&self, hello: Hello) -> Result<(quinn::Connection, u64), String> {
        let config = self.config(&hello.node_id).await?;
        let conn = self
            .endpoint
            .connect_with(config, self.coordinator, &self.server_name)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        match ask(&conn, &EdgeMsg::Hello(hello)).await? {
            CloudMsg::Welcome(w) => Ok((conn, w.acked_seq)),
            other => Err(format!("unexpected answer to the hello: {other:?}")),
        }
    }
}

/// Sends `outbox`'s pending reports in batches, each acknowledged before the
/// next, until the connection fails; `acked` gets the journaling times of the
/// reports each acknowledgement covers.
pub(crate) async fn drain(
    conn: &quinn::Connection,
    outbox: &Mutex<Outbox>,
    wake: &tokio::sync::Notify,
    acked: &(dyn Fn(&[Instant]) + Sync),
) -> Result<(), String> {
    loop {
        let woken = wake.notified();
        let batch: Vec<Report> = outbox
            .lock()
            .unwrap()
            .pending
            .iter()
            .take(BATCH)
            .map(|(r, _)| r.clone())
            .collect();
        let Some(last) = batch.last().map(|r| r.seq) else {
            tokio::select! {
                () = woken => continue,
                e = conn.closed() => return Err(e.to_string()),
            }
        };
        match ask(conn, &EdgeMsg::Reports(batch)).await? {
            CloudMsg::Ack { seq } if seq >= last => {
                let times = outbox.lock().unwrap().ack(seq);
                acked(&times);
            }
            other => return Err(format!("unexpected answer to reports: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_drops_exactly_the_reports_it_covers() {
        let mut o = Outbox::new();
        for _ in 0..5 {
            o.append(ReportBody::Samples(Vec::new()));
        }
        assert_eq!(o.ack(3).len(), 3);
        assert_eq!(o.pending.front().map(|(r, _)| r.seq), Some(4));
        assert!(o.ack(2).is_empty(), "an old ack changes nothing");
        assert_eq!(o.ack(9).len(), 2);
    }
}
