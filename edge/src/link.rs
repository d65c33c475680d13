//! The edge's one connection to the coordinator. It connects (with jittered
//! exponential backoff), registers, resends every unacknowledged journal entry
//! in order, keeps sending new ones as they are journaled, and takes commands
//! on streams the coordinator opens.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_proto::{
    CLOUD_PEER, Capabilities, CloudMsg, EdgeMsg, ErrorCode, Hello, LinkSample, Report, ReportBody,
    WireError,
};
use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::clock::{self, SharedClock};
use tidemill_runtime::frames::{self, FrameError};
use tidemill_runtime::identity::NodeIdentity;
use tidemill_runtime::quic::{EndpointError, Timing};
use tidemill_runtime::{probe, quic};
use tokio::sync::Notify;

use crate::coordinators::Rotation;
use crate::executor::Executor;
use crate::journal::{Journal, JournalError};
use crate::renewal::{Renewal, renew_when_due};

/// Reports read from the journal at a time.
const BATCH: usize = 256;

/// Most encoded bytes of reports in one frame: well under the frame cap, so a
/// batch never risks refusal.
pub const BATCH_BYTES: usize = 256 * 1024;

/// The smallest batch budget; a batch always holds at least one report.
const MIN_BATCH_BYTES: usize = 4 * 1024;

/// Why a session with the coordinator ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    #[error(
        "the coordinator speaks another protocol version (this edge speaks {}); run the same tidemill release on both",
        String::from_utf8_lossy(tidemill_proto::ALPN)
    )]
    VersionMismatch,
    #[error(
        "the coordinator's certificate does not verify ({0}): it is not from the CA this node trusts (its data dir's ca.pem, or --ca / `ca`), or does not name the address dialled; if the coordinator got a new CA, give this node the new ca.pem, or `tidemill-edge reset` and join again with a new token"
    )]
    UntrustedCoordinator(quinn::ConnectionError),
    #[error("{0}")]
    Connection(quinn::ConnectionError),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the coordinator refused {what}: {message}")]
    Refused { what: &'static str, message: String },
    #[error("unexpected reply to {0}")]
    Unexpected(&'static str),
    #[error("no answer to {0} within the ack timeout; the coordinator may have restarted")]
    Timeout(&'static str),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot use the renewed certificate: {0}")]
    Credentials(#[from] EndpointError),
}

impl From<quinn::ConnectionError> for SessionError {
    fn from(e: quinn::ConnectionError) -> Self {
        if quic::is_version_mismatch(&e) {
            SessionError::VersionMismatch
        } else if quic::is_untrusted_peer(&e) {
            SessionError::UntrustedCoordinator(e)
        } else {
            SessionError::Connection(e)
        }
    }
}

/// What a link needs to know.
pub struct Link {
    /// The node id.
    pub node_id: String,
    /// The coordinator's addresses, and which one is in use.
    pub coordinators: Rotation,
    /// The name its certificate must carry.
    pub server_name: String,
    /// The client endpoint, with this node's certificate; set once the node
    /// has its certificate, before [`Link::run`].
    pub endpoint: Option<quinn::Endpoint>,
    /// What to register.
    pub capabilities: Capabilities,
    /// The site to register, if the operator set one.
    pub site: Option<String>,
    /// Where a peers' prior from the welcome goes, for the forecaster.
    pub priors: tokio::sync::watch::Sender<Option<tidemill_forecast::Prior>>,
    /// The journal to drain.
    pub journal: Arc<Mutex<Journal>>,
    /// Woken whenever the journal gains an entry.
    pub outbox: Arc<Notify>,
    /// Where commands go.
    pub executor: Arc<Executor>,
    /// Times reconnect delays.
    pub clock: SharedClock,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// How long to wait for any answer.
    pub ack_timeout: Duration,
    /// Link probing, if enabled.
    pub probes: Option<Arc<Probes>>,
    /// When and where this node renews its certificate.
    pub renewal: Option<Arc<Renewal>>,
    /// The current batch budget in bytes; see [`Link::drain`].
    pub batch_budget: usize,
    /// What the status port reports about the connection.
    pub status: Arc<crate::status::Live>,
}

/// How this edge probes its links.
pub struct Probes {
    /// The client endpoint for peers' responders.
    pub prober: quinn::Endpoint,
    /// This edge's own responder.
    pub responder: quinn::Endpoint,
    /// The credentials both present (replaced when the certificate is renewed).
    pub identity: Mutex<Arc<NodeIdentity>>,
    /// Connection timing.
    pub timing: Timing,
    /// The UDP port of this edge's own responder.
    pub responder_port: u16,
    /// The clock rounds, rate refreshes and the budget's day run on: the
    /// sample clock, accelerated under replay like everything else that sets
    /// the day's traffic. Probe timeouts stay on the wall clock.
    pub schedule: SharedClock,
    /// Time between rounds of probes.
    pub interval: Duration,
    /// Bytes of the timed transfer, sent only when trains cannot time a link.
    pub bytes: usize,
    /// How often the coordinator link's rate is measured actively.
    pub rate_refresh: Duration,
    /// Bytes per day the probes may spend.
    pub budget: Mutex<probe::Budget>,
    /// What is known of the coordinator link between active probes.
    pub cloud: Mutex<CloudRate>,
}

/// The coordinator link's rate between active probes: the last probe's, or
/// more if a large report batch has since shown more.
#[derive(Debug, Default, Clone, Copy)]
pub struct CloudRate {
    /// Capacity in bytes/s.
    pub bandwidth_bps: f64,
    /// When it was last probed actively (schedule clock, Unix ms).
    pub probed_ms: Option<i64>,
}

/// Report batches at least this large time the coordinator link: smaller ones
/// finish within the 1 ms floor of [`probe::throughput`] and would claim a
/// rate they never showed.
const PASSIVE_MIN_BYTES: usize = 16 * 1024;

impl Link {
    /// Runs until the journal fails, reconnecting whenever the connection drops.
    pub async fn run(mut self) -> Result<(), JournalError> {
        let mut rng: rand::rngs::StdRng = rand::make_rng();
        loop {
            match self.session().await {
                Err(SessionError::Journal(e)) => return Err(e),
                Err(e) => {
                    let from = self.coordinators.current();
                    let delay = if self.coordinators.failed() {
                        self.backoff.next_delay(&mut rng)
                    } else {
                        Duration::ZERO
                    };
                    tracing::warn!(
                        node_id = %self.node_id,
                        coordinator = %from,
                        next = %self.coordinators.current(),
                        error = %e,
                        retry_in_ms = delay.as_millis() as u64,
                        "link to coordinator down; trying the next address"
                    );
                    self.clock.sleep(delay).await;
                }
                Ok(()) => unreachable!("a session only ends in an error"),
            }
        }
    }

    async fn session(&mut self) -> Result<(), SessionError> {
        if let Some(r) = self
            .renewal
            .as_ref()
            .filter(|r| r.renewed.swap(false, Ordering::Relaxed))
        {
            let identity =
                NodeIdentity::load(&r.dir, r.ca.as_deref()).map_err(EndpointError::from)?;
            let config = quic::client_config(&identity, r.timing)?;
            if let Some(endpoint) = self.endpoint.as_mut() {
                endpoint.set_default_client_config(config);
            }
            if let Some(p) = &self.probes {
                p.responder
                    .set_server_config(Some(probe::responder_config(&identity, p.timing)?));
                *p.identity.lock().unwrap() = Arc::new(identity);
            }
        }
        let endpoint = self
            .endpoint
            .as_ref()
            .expect("the link runs once the node has its certificate");
        let addr = self.coordinators.current();
        let conn = endpoint.connect(addr, &self.server_name)?.await?;
        let hello = EdgeMsg::Hello(Hello {
            node_id: self.node_id.clone(),
            capabilities: self.capabilities.clone(),
            probe_port: self.probes.as_ref().map(|p| p.responder_port),
            site: self.site.clone(),
        });
        let (acked, issuing) = match self.ask(&conn, &hello, "the hello").await? {
            CloudMsg::Welcome(w) => {
                if let Some(p) = &w.prior {
                    tracing::info!(node_id = %self.node_id, source = %p.source, peers = p.peers,
                        "the coordinator sent its peers' tide: forecasts start from it until this box has its own history");
                }
                self.priors.send_replace(w.prior);
                (w.acked_seq, w.issuing_ca_sha256)
            }
            CloudMsg::Error(e) => {
                tracing::error!(node_id = %self.node_id, coordinator = %addr, reason = %e.message,
                    "the coordinator refused this node's hello; retrying with backoff until the cause is fixed");
                return Err(refused("registration", e));
            }
            _ => return Err(SessionError::Unexpected("hello")),
        };
        self.journal.lock().unwrap().reconcile(acked)?;
        self.backoff.reset();
        self.coordinators.connected();
        tracing::info!(node_id = %self.node_id, coordinator = %addr, acked_seq = acked, "connected");
        self.status.set_connected(true);
        self.executor
            .set_link(Some((conn.clone(), self.probes.clone())));

        let commands = tokio::spawn(serve_commands(conn.clone(), self.executor.clone()));
        let probing = self.probes.clone().map(|p| {
            tokio::spawn(probe_links(
                conn.clone(),
                p,
                self.journal.clone(),
                self.outbox.clone(),
                self.clock.clone(),
                self.node_id.clone(),
            ))
        });
        let renewing = self.renewal.clone().map(|r| {
            tokio::spawn(renew_when_due(
                conn.clone(),
                r,
                self.clock.clone(),
                (self.node_id.clone(), issuing.clone()),
            ))
        });
        let result = self.drain(&conn).await;
        if let Some(r) = renewing {
            r.abort();
        }
        commands.abort();
        if let Some(p) = probing {
            p.abort();
        }
        self.status.set_connected(false);
        self.executor.set_link(None);
        conn.close(0u32.into(), b"session ended");
        result
    }

    /// Sends one message on a new stream and waits, bounded, for the answer.
    async fn ask(
        &self,
        conn: &quinn::Connection,
        msg: &EdgeMsg,
        what: &'static str,
    ) -> Result<CloudMsg, SessionError> {
        let reply = clock::timeout(&*self.clock, self.ack_timeout, frames::request(conn, msg));
        Ok(reply.await.map_err(|_| SessionError::Timeout(what))??)
    }

    /// Sends journal entries in order, in batches, each acknowledged before
    /// the next. The batch budget halves (down to one report) whenever a batch
    /// fails, so a link too slow to carry a full batch within the timeouts
    /// still drains, and doubles back towards [`BATCH_BYTES`] after each success.
    async fn drain(&mut self, conn: &quinn::Connection) -> Result<(), SessionError> {
        loop {
            let wake = self.outbox.notified();
            let pending = self.journal.lock().unwrap().pending(BATCH)?;
            if pending.is_empty() {
                tokio::select! {
                    _ = wake => continue,
                    e = conn.closed() => return Err(e.into()),
                }
            }
            let (batch, bytes) = within_budget(pending, self.batch_budget);
            let last = batch.last().map_or(0, |r| r.seq);
            let started = std::time::Instant::now();
            let reply = self.ask(conn, &EdgeMsg::Reports(batch), "reports").await;
            match reply {
                Ok(CloudMsg::Ack { seq }) if seq >= last => {
                    if let Some(p) = self.probes.as_ref().filter(|_| bytes >= PASSIVE_MIN_BYTES) {
                        let rate = probe::throughput(bytes as u64, started.elapsed(), conn.rtt());
                        let mut cloud = p.cloud.lock().unwrap();
                        cloud.bandwidth_bps = cloud.bandwidth_bps.max(rate);
                    }
                    self.journal.lock().unwrap().ack(seq)?;
                    self.batch_budget = next_budget(self.batch_budget, true);
                }
                failed => {
                    self.batch_budget = next_budget(self.batch_budget, false);
                    return Err(match failed {
                        Ok(CloudMsg::Error(e)) => refused("reports", e),
                        Ok(_) => SessionError::Unexpected("reports"),
                        Err(e) => e,
                    });
                }
            }
        }
    }
}

/// The batch budget after a batch succeeded or failed: double, up to
/// [`BATCH_BYTES`], or halve, down to [`MIN_BATCH_BYTES`].
fn next_budget(current: usize, succeeded: bool) -> usize {
    if succeeded {
        (current * 2).min(BATCH_BYTES)
    } else {
        (current / 2).max(MIN_BATCH_BYTES)
    }
}

/// The longest prefix of `reports` whose encoding fits `budget` bytes, and
/// its encoded size; at least one report, which alone always fits a frame.
fn within_budget(reports: Vec<Report>, budget: usize) -> (Vec<Report>, usize) {
    let mut used = 0;
    let mut keep = 0;
    for r in &reports {
        let size = rmp_serde::to_vec_named(r).map_or(usize::MAX / 2, |b| b.len());
        if keep > 0 && used + size > budget {
            break;
        }
        used += size;
        keep += 1;
    }
    (reports.into_iter().take(keep).collect(), used)
}

fn refused(what: &'static str, e: WireError) -> SessionError {
    SessionError::Refused {
        what,
        message: e.message,
    }
}

/// Measures this edge's links every interval (schedule clock) for the life of
/// the connection, and journals what it measured. The coordinator link gets
/// a free passive sample each round (RTT and loss off this connection, the
/// last known rate), and an active probe once its rate is older than the
/// refresh; peers are probed when the coordinator names them, which it does
/// only for links the scheduler uses whose estimate is due. Every active
/// probe is checked against the daily budget first.
async fn probe_links(
    conn: quinn::Connection,
    probes: Arc<Probes>,
    journal: Arc<Mutex<Journal>>,
    outbox: Arc<Notify>,
    wall: SharedClock,
    node_id: String,
) {
    let limit = Duration::from_secs(10);
    loop {
        let now = probes.schedule.now_ms();
        let mut measured = Vec::new();
        let cloud = *probes.cloud.lock().unwrap();
        let rate_due = cloud
            .probed_ms
            .is_none_or(|t| now - t >= probes.rate_refresh.as_millis() as i64);
        let worst = probe::worst_case(probes.bytes, probe::CONNECTION_OVERHEAD);
        if rate_due && probes.allow(now, worst, &node_id) {
            let active = clock::timeout(
                &*wall,
                limit,
                probe::measure(&conn, CLOUD_PEER, probes.bytes, now),
            );
            match active.await {
                Ok(Ok(sample)) => {
                    probes.charge(now, &sample);
                    *probes.cloud.lock().unwrap() = CloudRate {
                        bandwidth_bps: sample.bandwidth_bps,
                        probed_ms: Some(now),
                    };
                    measured.push(sample);
                }
                Ok(Err(e)) => {
                    probes.budget.lock().unwrap().charge(now, worst);
                    tracing::debug!(node_id = %node_id, error = %e, "cannot probe the coordinator link")
                }
                Err(_) => {
                    probes.budget.lock().unwrap().charge(now, worst);
                    tracing::debug!(node_id = %node_id, "coordinator probe timed out")
                }
            }
        } else if cloud.probed_ms.is_some() {
            measured.push(probe::passive(&conn, CLOUD_PEER, cloud.bandwidth_bps, now));
        }
        let peers = match clock::timeout(
            &*wall,
            limit,
            frames::request(&conn, &EdgeMsg::PeersRequest),
        )
        .await
        {
            Ok(Ok(CloudMsg::Peers(peers))) => peers,
            _ => Vec::new(),
        };
        let identity = probes.identity.lock().unwrap().clone();
        let worst = probe::worst_case(probes.bytes, probe::PEER_OVERHEAD);
        for peer in peers {
            if !probes.allow(now, worst, &node_id) {
                break;
            }
            let probe = probe::measure_peer(
                &probes.prober,
                &identity,
                (&peer.node_id, peer.addr, &peer.cert_sha256),
                probes.timing,
                (probes.bytes, now),
            );
            match clock::timeout(&*wall, limit, probe).await {
                Ok(Ok(sample)) => {
                    probes.charge(now, &sample);
                    measured.push(sample);
                }
                Ok(Err(e)) => {
                    // A failed probe spent bytes too; charge its worst case.
                    probes.budget.lock().unwrap().charge(now, worst);
                    tracing::debug!(node_id = %node_id, peer = %peer.node_id, error = %e, "cannot probe a peer")
                }
                Err(_) => {
                    probes.budget.lock().unwrap().charge(now, worst);
                    tracing::debug!(node_id = %node_id, peer = %peer.node_id, "peer probe timed out")
                }
            }
        }
        if !measured.is_empty() {
            tracing::debug!(node_id = %node_id, links = measured.len(), "links measured");
            if let Err(e) = journal.lock().unwrap().append(&ReportBody::Links(measured)) {
                tracing::error!(node_id = %node_id, error = %e, "cannot journal link measurements");
            }
            outbox.notify_one();
        }
        probes.schedule.sleep(probes.interval).await;
    }
}

impl Probes {
    /// Whether a probe of at most `worst` bytes fits the day's budget at
    /// `now_ms`; logs once when the budget is spent and once when it refills.
    fn allow(&self, now_ms: i64, worst: u64, node_id: &str) -> bool {
        let mut budget = self.budget.lock().unwrap();
        let (fits, change) = budget.allow(now_ms, worst);
        match change {
            Some(probe::BudgetChange::Spent) => tracing::warn!(
                node_id = %node_id,
                spent_bytes = budget.spent(now_ms),
                "the daily probe budget is spent; probing stops until it refills and link estimates age (raise [probe] daily_budget_bytes to probe more)"
            ),
            Some(probe::BudgetChange::Refilled) => {
                tracing::info!(node_id = %node_id, "the daily probe budget has room again; probing resumes")
            }
            None => {}
        }
        fits
    }

    /// Charges what `sample` cost to the budget at `now_ms`.
    fn charge(&self, now_ms: i64, sample: &LinkSample) {
        let bytes = sample.probe_sent_bytes + sample.probe_received_bytes;
        self.budget.lock().unwrap().charge(now_ms, bytes);
    }
}

/// Accepts the coordinator's command streams for the life of the connection.
async fn serve_commands(conn: quinn::Connection, executor: Arc<Executor>) {
    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
        let executor = executor.clone();
        tokio::spawn(async move {
            let reply = match frames::read_msg::<CloudMsg>(&mut recv).await {
                Ok(Some(CloudMsg::Command(cmd))) => {
                    let task_id = match &cmd {
                        tidemill_proto::Command::Assign(a) => a.task_id,
                        tidemill_proto::Command::Cancel { task_id } => *task_id,
                    };
                    match executor.handle(cmd) {
                        Ok(()) => EdgeMsg::CommandAck { task_id },
                        Err(e) => {
                            tracing::error!(task_id, error = %e, "cannot journal a command");
                            wire_error(ErrorCode::Internal, format!("edge journal failed: {e}"))
                        }
                    }
                }
                Ok(Some(other)) => wire_error(
                    ErrorCode::UnexpectedMessage,
                    format!("expected a command, got {other:?}"),
                ),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "bad command frame from the coordinator");
                    wire_error(ErrorCode::MalformedFrame, e.to_string())
                }
            };
            if let Err(e) = frames::write_msg(&mut send, &reply).await {
                tracing::debug!(error = %e, "cannot reply to a command");
            }
            let _ = send.finish();
        });
    }
}

fn wire_error(code: ErrorCode, message: String) -> EdgeMsg {
    EdgeMsg::Error(WireError { code, message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_proto::{ReportBody, Sample};

    fn report(seq: u64, cores: usize) -> Report {
        let s = Sample {
            t_ms: 0,
            cpu_pct: 1.0,
            per_core_pct: vec![1.0; cores],
            mem_pct: 1.0,
            net_rx_bytes: 0,
            net_tx_bytes: 0,
            gpu_pct: None,
        };
        Report {
            seq,
            body: ReportBody::Samples(vec![s]),
        }
    }

    #[test]
    fn the_budget_halves_on_failure_and_recovers_on_success() {
        let mut b = BATCH_BYTES;
        for _ in 0..20 {
            b = next_budget(b, false);
        }
        assert_eq!(b, MIN_BATCH_BYTES);
        b = next_budget(b, true);
        assert_eq!(b, 2 * MIN_BATCH_BYTES);
        for _ in 0..20 {
            b = next_budget(b, true);
        }
        assert_eq!(b, BATCH_BYTES);
    }

    #[test]
    fn batches_stop_at_the_byte_budget_but_never_empty() {
        let small: Vec<Report> = (1..=10).map(|i| report(i, 1)).collect();
        let (all, bytes) = within_budget(small.clone(), BATCH_BYTES);
        assert_eq!(all.len(), 10);
        let one = rmp_serde::to_vec_named(&small[0]).unwrap().len();
        assert!(bytes >= 10 * one - 10 && bytes <= 10 * one + 10, "{bytes}");
        assert_eq!(within_budget(small, 1).0.len(), 1, "never empty");
        // Each report encodes to about 100 kB: two fit the 256 KiB budget, three do not.
        let big: Vec<Report> = (1..=5).map(|i| report(i, 20_000)).collect();
        let (kept, _) = within_budget(big, BATCH_BYTES);
        assert_eq!(kept.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
        let huge = vec![report(1, 80_000)];
        assert_eq!(within_budget(huge, BATCH_BYTES).0.len(), 1);
    }
}
