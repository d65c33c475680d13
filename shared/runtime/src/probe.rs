//! Link probes: small, timed transfers that measure a link's round-trip time,
//! throughput and loss, for the scheduler's cost model. Edges probe the
//! coordinator over their existing connection and a few peer edges through the
//! peers' probe responders. Probes are bounded: packet trains give the rate of
//! any link slower than [`TRAIN_CEILING_BPS`], so the timed transfer is sent
//! only for faster links, a [`Budget`] caps the bytes an edge spends on them
//! per day, and [`passive`] reads a link's RTT and loss off a connection that
//! carries real traffic, for free.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemill_proto::{CloudMsg, EdgeMsg, ErrorCode, LinkSample, TrainArrival, WireError};

use crate::frames::{self, FrameError};
use crate::identity::NodeIdentity;
use crate::quic::{EndpointError, Timing};
use crate::tls::ServerIdentity;

/// The floor on the transfer time used for throughput, so that a transfer
/// faster than the clock's resolution does not divide by zero.
const MIN_TRANSFER: Duration = Duration::from_millis(1);

/// Throughput of a timed request: B = bytes / max(t − RTT, 1 ms), in bytes/s,
/// where t is the time from sending the first byte to receiving the answer and
/// one RTT of it is the request/answer latency rather than transfer. It is a
/// lower bound on the link's capacity: on a long or lossy path the congestion
/// controller, not the link, sets it.
pub fn throughput(bytes: u64, elapsed: Duration, rtt: Duration) -> f64 {
    bytes as f64 / elapsed.saturating_sub(rtt).max(MIN_TRANSFER).as_secs_f64()
}

/// Datagrams per packet train. Quinn's pacer lets this many leave back to back
/// from an idle connection (its minimum burst), so the train queues at the
/// path's bottleneck rather than at the sender.
pub const TRAIN_LEN: usize = 10;

/// Trains per probe; the probe takes the median of their rates.
pub const TRAINS: usize = 3;

/// Bytes per train datagram: below QUIC's 1 200-byte minimum path MTU less
/// headers, so that no datagram is dropped when path MTU discovery shrinks the
/// limit while the train waits to be sent.
pub const TRAIN_DATAGRAM: usize = 1_100;

/// The most arrivals a receiver records per train.
pub const MAX_ARRIVALS: usize = 4 * TRAIN_LEN;

/// The shortest spread of arrivals a train rate is taken from: below it the
/// receiver's timestamps (taken when its task runs) are too coarse to resolve
/// the spacing, and the probe falls back to [`throughput`].
pub const MIN_DISPERSION: Duration = Duration::from_millis(2);

/// The bottleneck rate a packet train of `size`-byte datagrams shows at its
/// receiver, in bytes/s: B_train = size / β, where β (seconds per datagram) is
/// the least-squares slope of arrival time over arrival index,
/// β = Σ(i − ī)(t_i − t̄) / Σ(i − ī)², over the longest run of m ≥ 3 arrivals
/// t_1..t_m (seconds) in which no gap reaches RTT/2. The datagrams left back
/// to back, so the bottleneck spaced them; the fit, unlike the first and last
/// arrival alone, evens out timestamps that come in clumps (a receiver or
/// relay that wakes once per millisecond). A gap of about one RTT is the
/// sender waiting for its congestion window, not the link, and splits the
/// train. `None` when no such run spreads over [`MIN_DISPERSION`] or more.
pub fn train_rate(arrivals_us: &[u64], size: usize, rtt: Duration) -> Option<f64> {
    let stall = rtt.as_micros() as u64 / 2;
    let run = arrivals_us
        .chunk_by(|a, b| b.saturating_sub(*a) < stall)
        .max_by_key(|run| run.len())?;
    let spread = Duration::from_micros(run[run.len() - 1] - run[0]);
    if run.len() < 3 || spread < MIN_DISPERSION {
        return None;
    }
    let m = run.len() as f64;
    let (i_mean, t_mean) = ((m - 1.0) / 2.0, run.iter().sum::<u64>() as f64 / m / 1e6);
    let (mut cov, mut var) = (0.0, 0.0);
    for (i, t) in run.iter().enumerate() {
        let di = i as f64 - i_mean;
        cov += di * (*t as f64 / 1e6 - t_mean);
        var += di * di;
    }
    let slope = cov / var;
    (slope > 0.0).then(|| size as f64 / slope)
}

/// The capacity a probe reports: B = max(B_transfer, median of the train
/// rates), in bytes/s. The transfer rate ([`throughput`]) is a lower bound
/// that loss and RTT pull down; a train rate ([`train_rate`]) measures the
/// bottleneck itself where it is slow enough to resolve. The cost model
/// applies loss and RTT to this capacity itself (`tidemill_sched::cost`).
pub fn capacity(transfer: f64, train_rates: &[f64]) -> f64 {
    let mut rates = train_rates.to_vec();
    rates.sort_by(f64::total_cmp);
    let median = match rates.len() {
        0 => 0.0,
        n if n % 2 == 1 => rates[n / 2],
        n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
    };
    transfer.max(median)
}

/// Sends one packet train of [`TRAIN_LEN`] datagrams over `conn`, each
/// carrying `id`, and asks the receiver how it arrived. `None` when the
/// connection carries no datagrams or nothing of the train arrived.
async fn train(conn: &quinn::Connection, id: u64) -> Result<Option<TrainArrival>, FrameError> {
    if conn.max_datagram_size() < Some(TRAIN_DATAGRAM) {
        return Ok(None);
    }
    let mut datagram = vec![0u8; TRAIN_DATAGRAM];
    datagram[..8].copy_from_slice(&id.to_be_bytes());
    let datagram = bytes::Bytes::from(datagram);
    for _ in 0..TRAIN_LEN {
        if conn.send_datagram(datagram.clone()).is_err() {
            return Ok(None);
        }
    }
    match frames::request(
        conn,
        &EdgeMsg::Probe {
            payload: Vec::new(),
            train: Some(id),
        },
    )
    .await?
    {
        CloudMsg::ProbeAck { train, .. } => Ok(train),
        _ => Err(FrameError::NoReply),
    }
}

/// The fastest bottleneck a packet train resolves, bytes/s: its
/// `TRAIN_LEN − 1` spacings over [`MIN_DISPERSION`], 4.95e6 B/s (39.6 Mb/s).
/// Trains through a faster link arrive too close together to time, and the
/// probe falls back to its timed transfer.
pub const TRAIN_CEILING_BPS: f64 =
    ((TRAIN_LEN - 1) * TRAIN_DATAGRAM) as f64 / (MIN_DISPERSION.as_micros() as f64 / 1e6);

/// Whether a train arrived whole but too tightly to time: the link is faster
/// than [`TRAIN_CEILING_BPS`], and more trains would tell no more.
fn too_fast(train: &TrainArrival) -> bool {
    let a = &train.arrivals_us;
    a.len() >= TRAIN_LEN && Duration::from_micros(a[a.len() - 1]) < MIN_DISPERSION
}

/// UDP payload bytes a connection has sent and received so far.
fn traffic(conn: &quinn::Connection) -> (u64, u64) {
    let stats = conn.stats();
    (stats.udp_tx.bytes, stats.udp_rx.bytes)
}

/// The share of packets QUIC has declared lost on `conn` so far.
fn loss(conn: &quinn::Connection) -> f64 {
    let stats = conn.stats();
    if stats.path.sent_packets == 0 {
        0.0
    } else {
        stats.path.lost_packets as f64 / stats.path.sent_packets as f64
    }
}

/// Measures the link under `conn`: up to [`TRAINS`] packet trains, the RTT
/// QUIC estimates after them, and, only where fewer than two trains gave a
/// rate (a link faster than [`TRAIN_CEILING_BPS`], or one that drops or
/// refuses datagrams), `transfer` bytes of filler in two timed halves, each
/// to its answer ([`timed_transfer`]). A first train too fast to time ends
/// the trains at once. `peer` names the other end
/// in the result; `t_ms` stamps it. The sample's probe bytes are what `conn`
/// carried meanwhile, which on a shared connection includes any report sent
/// at the same time.
pub async fn measure(
    conn: &quinn::Connection,
    peer: &str,
    transfer: usize,
    t_ms: i64,
) -> Result<LinkSample, FrameError> {
    let (sent_before, received_before) = traffic(conn);
    let first_id = rand::random::<u64>();
    let mut trains = Vec::with_capacity(TRAINS);
    for i in 0..TRAINS as u64 {
        let Some(arrival) = train(conn, first_id.wrapping_add(i)).await? else {
            continue;
        };
        let fast = too_fast(&arrival);
        trains.push(arrival);
        if fast {
            break;
        }
    }
    // Read before the transfer, whose own queue would inflate it.
    let rtt = conn.rtt();
    let rates: Vec<f64> = trains
        .iter()
        .filter_map(|t| train_rate(&t.arrivals_us, TRAIN_DATAGRAM, rtt))
        .collect();
    tracing::debug!(peer, ?trains, ?rates, "probe trains arrived");
    let timed = if rates.len() >= 2 {
        0.0
    } else {
        timed_transfer(conn, transfer, rtt).await?
    };
    let (sent, received) = traffic(conn);
    Ok(LinkSample {
        peer: peer.to_string(),
        t_ms,
        rtt_ms: rtt.as_secs_f64() * 1000.0,
        bandwidth_bps: capacity(timed, &rates),
        loss: loss(conn),
        probe_sent_bytes: sent - sent_before,
        probe_received_bytes: received - received_before,
    })
}

/// The rate of `transfer` bytes sent over `conn` as two requests of half
/// each, bytes/s: the higher [`throughput`] of the two. The first half opens
/// a fresh connection's congestion window, so that on a fast link the
/// second goes out in one flight and times the link, not slow start; the
/// default 16 KiB transfer sent whole takes two flights, an extra round
/// trip, and read a 100 Mb/s, 14 ms link at 8 to 16 Mb/s. Halves fit
/// QUIC's initial window (about 14 KB) and read up to (transfer / 2) per
/// [`MIN_TRANSFER`]: 65 Mb/s for 16 KiB, a lower bound as before. On a
/// slow link both halves are link-bound. The same bytes as one transfer,
/// so the probe's budget is unchanged.
async fn timed_transfer(
    conn: &quinn::Connection,
    transfer: usize,
    rtt: Duration,
) -> Result<f64, FrameError> {
    let mut best = 0.0_f64;
    for half in [transfer / 2, transfer - transfer / 2] {
        let started = Instant::now();
        let reply: CloudMsg = frames::request(
            conn,
            &EdgeMsg::Probe {
                payload: vec![0; half],
                train: None,
            },
        )
        .await?;
        match reply {
            CloudMsg::ProbeAck { bytes: got, .. } if got == half as u64 => {}
            _ => return Err(FrameError::NoReply),
        }
        best = best.max(throughput(half as u64, started.elapsed(), rtt));
    }
    Ok(best)
}

/// A sample of the link under `conn` read off the connection alone, at no
/// cost: QUIC's RTT estimate and loss share from the traffic it carries, and
/// `bandwidth_bps` from elsewhere (the last probe, or a real transfer's rate).
pub fn passive(conn: &quinn::Connection, peer: &str, bandwidth_bps: f64, t_ms: i64) -> LinkSample {
    LinkSample {
        peer: peer.to_string(),
        t_ms,
        rtt_ms: conn.rtt().as_secs_f64() * 1000.0,
        bandwidth_bps,
        loss: loss(conn),
        probe_sent_bytes: 0,
        probe_received_bytes: 0,
    }
}

/// The bytes one probe may cost at most, to check against a [`Budget`]
/// before it starts: every train, the transfer, and `overhead` for the
/// handshake, frames and acknowledgements.
pub fn worst_case(transfer: usize, overhead: u64) -> u64 {
    (TRAINS * TRAIN_LEN * TRAIN_DATAGRAM + transfer) as u64 + overhead
}

/// Bytes a peer probe spends besides its trains' and transfer's payload: a
/// mutual-TLS handshake (two certificate chains, the client's Initial padded
/// to 1 200 bytes), the probe frames, their answers, QUIC's packet headers
/// and acknowledgements, both ways. Measured: 17 800 bytes with a 64 KiB
/// transfer on loopback (10 100 sent, 7 700 received).
pub const PEER_OVERHEAD: u64 = 24 * 1024;

/// Bytes a probe over the existing coordinator connection spends besides its
/// trains' and transfer's payload: frames, answers, packet headers and
/// acknowledgements.
pub const CONNECTION_OVERHEAD: u64 = 8 * 1024;

/// A daily cap on probe bytes (sent and received), over a sliding day of the
/// caller's clock: a probe is allowed only if what the last 24 hours spent
/// plus its worst case stays within the cap, so the cap holds exactly. Once
/// spent, probing waits until old probes leave the window.
#[derive(Debug)]
pub struct Budget {
    per_day: u64,
    spent: VecDeque<(i64, u64)>,
    exhausted: bool,
}

/// One day, in ms.
const DAY_MS: i64 = 86_400_000;

impl Budget {
    /// A budget of `per_day` bytes per sliding day.
    pub fn new(per_day: u64) -> Self {
        Budget {
            per_day,
            spent: VecDeque::new(),
            exhausted: false,
        }
    }

    /// Bytes spent in the day up to `now_ms`.
    pub fn spent(&mut self, now_ms: i64) -> u64 {
        while self
            .spent
            .front()
            .is_some_and(|(t, _)| *t <= now_ms - DAY_MS)
        {
            self.spent.pop_front();
        }
        self.spent.iter().map(|(_, b)| b).sum()
    }

    /// Whether a probe of at most `worst` bytes fits at `now_ms`. The first
    /// refusal after an allowed probe, and the first allowed probe after
    /// refusals, are returned as a [`BudgetChange`] for the caller to log once.
    pub fn allow(&mut self, now_ms: i64, worst: u64) -> (bool, Option<BudgetChange>) {
        let fits = self.spent(now_ms) + worst <= self.per_day;
        let change = match (fits, self.exhausted) {
            (false, false) => Some(BudgetChange::Spent),
            (true, true) => Some(BudgetChange::Refilled),
            _ => None,
        };
        self.exhausted = !fits;
        (fits, change)
    }

    /// Records `bytes` spent at `now_ms`.
    pub fn charge(&mut self, now_ms: i64, bytes: u64) {
        self.spent.push_back((now_ms, bytes));
    }
}

/// A change in whether a [`Budget`] allows probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetChange {
    /// The day's budget is spent: probing stops and estimates age.
    Spent,
    /// Enough of it has left the window for probes to resume.
    Refilled,
}

/// How many trains a connection remembers; older ones are forgotten, so a
/// peer cannot grow the record by naming new trains.
const TRAINS_KEPT: usize = 2 * TRAINS;

/// How long a receiver waits for the rest of a train once the probe frame
/// naming it has come: the frame can share a packet with the first datagram.
/// A train still short by then (its datagrams lost, or a link slower than
/// [`TRAIN_LEN`] datagrams in this time) is answered with what arrived.
pub const TRAIN_WAIT: Duration = Duration::from_millis(300);

/// The arrivals of the packet trains received on one connection, recorded as
/// they come so that a probe frame can be answered with them.
#[derive(Default)]
pub struct Trains {
    seen: Mutex<VecDeque<(u64, Instant, Vec<u64>)>>,
    arrived: tokio::sync::Notify,
}

impl Trains {
    /// Records every datagram `conn` receives until it closes.
    pub fn watch(conn: &quinn::Connection) -> Arc<Trains> {
        let trains = Arc::new(Trains::default());
        let (conn, record) = (conn.clone(), trains.clone());
        tokio::spawn(async move {
            while let Ok(datagram) = conn.read_datagram().await {
                record.record(&datagram, Instant::now());
            }
        });
        trains
    }

    fn record(&self, datagram: &[u8], at: Instant) {
        let Some(id) = datagram.get(..8) else { return };
        let id = u64::from_be_bytes(id.try_into().expect("8 bytes"));
        let mut trains = self.seen.lock().unwrap();
        match trains.iter_mut().find(|(i, ..)| *i == id) {
            Some((_, first, arrivals)) if arrivals.len() < MAX_ARRIVALS => {
                arrivals.push(at.duration_since(*first).as_micros() as u64);
            }
            Some(_) => {}
            None => {
                if trains.len() == TRAINS_KEPT {
                    trains.pop_front();
                }
                trains.push_back((id, at, vec![0]));
            }
        }
        drop(trains);
        self.arrived.notify_waiters();
    }

    /// How train `id` has arrived so far, if any of it has.
    pub fn arrival(&self, id: u64) -> Option<TrainArrival> {
        let trains = self.seen.lock().unwrap();
        let (.., arrivals) = trains.iter().find(|(i, ..)| *i == id)?;
        Some(TrainArrival {
            arrivals_us: arrivals.clone(),
        })
    }

    /// How train `id` arrived, once all [`TRAIN_LEN`] datagrams have or
    /// [`TRAIN_WAIT`] has passed.
    pub async fn wait_for(&self, id: u64) -> Option<TrainArrival> {
        let complete = async {
            loop {
                let arrived = self.arrived.notified();
                if self
                    .arrival(id)
                    .is_some_and(|a| a.arrivals_us.len() >= TRAIN_LEN)
                {
                    return;
                }
                arrived.await;
            }
        };
        let _ = crate::clock::timeout(&crate::clock::SystemClock, TRAIN_WAIT, complete).await;
        self.arrival(id)
    }
}

/// The answer to a probe frame received on a connection whose datagrams
/// `trains` records.
pub async fn answer(msg: &EdgeMsg, trains: &Trains) -> CloudMsg {
    match msg {
        EdgeMsg::Probe { payload, train } => CloudMsg::ProbeAck {
            bytes: payload.len() as u64,
            train: match train {
                Some(id) => trains.wait_for(*id).await,
                None => None,
            },
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
            let trains = Trains::watch(&conn);
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                let trains = trains.clone();
                tokio::spawn(crate::clock::timeout(
                    &crate::clock::SystemClock,
                    STREAM_TIMEOUT,
                    async move {
                        if let Ok(Some(msg)) = frames::read_msg::<EdgeMsg>(&mut recv).await {
                            let _ =
                                frames::write_msg(&mut send, &answer(&msg, &trains).await).await;
                            let _ = send.finish();
                        }
                    },
                ));
            }
        });
    }
}

/// How long a probe stream may take, from its opening to its answer.
const STREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// The server side of this node's probe responder: its own certificate, and
/// only clients with a certificate from the same CA (other nodes).
pub fn responder_config(
    node: &NodeIdentity,
    timing: Timing,
) -> Result<quinn::ServerConfig, EndpointError> {
    let mut chain = vec![node.cert.clone()];
    chain.extend(node.ca.iter().cloned());
    let identity = ServerIdentity {
        chain,
        key: node.key.clone_key(),
        ca_path: std::path::PathBuf::new(),
        client_roots: node.ca.clone(),
    };
    crate::quic::server_config(identity, crate::quic::Clients::Certified, timing)
}

/// Connects from `prober` to the responder of `peer` at `addr`, accepting it
/// only if its certificate hashes to `peer_sha256`, as `node`, and measures
/// the link.
pub async fn measure_peer(
    prober: &quinn::Endpoint,
    node: &NodeIdentity,
    (peer, addr, peer_sha256): (&str, SocketAddr, &str),
    timing: Timing,
    (bytes, t_ms): (usize, i64),
) -> Result<LinkSample, PeerProbeError> {
    let config = crate::quic::peer_config(node, peer_sha256, timing)?;
    let conn = prober
        .connect_with(config, addr, "tidemill-probe")
        .map_err(FrameError::from)?
        .await
        .map_err(FrameError::from)?;
    let sample = measure(&conn, peer, bytes, t_ms).await;
    conn.close(0u32.into(), b"probe done");
    // The whole connection was the probe: charge its handshake too.
    let (sent, received) = traffic(&conn);
    Ok(LinkSample {
        probe_sent_bytes: sent,
        probe_received_bytes: received,
        ..sample?
    })
}

/// Why a peer could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum PeerProbeError {
    /// This node's credentials could not make a client configuration.
    #[error(transparent)]
    Config(#[from] EndpointError),
    /// The connection or the exchange failed (a peer whose certificate is not
    /// the one named fails here, in the handshake).
    #[error(transparent)]
    Frame(#[from] FrameError),
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

    #[test]
    fn a_train_rate_is_the_bytes_after_the_first_over_the_spread() {
        let rtt = Duration::from_millis(150);
        // Ten 1 250 B datagrams through a 10 Mb/s bottleneck leave it 1 ms
        // apart: 9 × 1 250 B over 9 ms = 1.25e6 B/s = 10 Mb/s.
        let even: Vec<u64> = (0..10).map(|i| i * 1_000).collect();
        let r = train_rate(&even, 1_250, rtt).unwrap();
        assert!((r - 1.25e6).abs() < 1e-6, "{r}");
        // A congestion-window stall of one RTT after the fourth: the longest
        // run is the last six, 5 × 1 250 B over 5 ms, the same rate.
        let stalled: Vec<u64> = (0..10)
            .map(|i| i * 1_000 + if i >= 4 { 150_000 } else { 0 })
            .collect();
        let r = train_rate(&stalled, 1_250, rtt).unwrap();
        assert!((r - 1.25e6).abs() < 1e-6, "{r}");
        // Arrivals in pairs every 2 ms (a relay whose timer wakes once per
        // millisecond): t = 0, 0, 2, 2, …, 8, 8 ms. ī = 4.5, t̄ = 4 ms,
        // Σ(i − ī)(t − t̄) = 80 ms, Σ(i − ī)² = 82.5, β = 0.9697 ms, so
        // 1 250 B / 0.9697 ms = 1.289e6 B/s (the first and last alone:
        // 9 × 1 250 B / 8 ms = 1.406e6).
        let pairs: Vec<u64> = (0..10).map(|i| i / 2 * 2_000).collect();
        let r = train_rate(&pairs, 1_250, rtt).unwrap();
        assert!((r - 1_250.0 / (80.0 / 82.5e3)).abs() < 1e-3, "{r}");
        // Too short a spread to resolve, or too few arrivals: no rate.
        let fast: Vec<u64> = (0..10).map(|i| i * 200).collect();
        assert_eq!(train_rate(&fast, 1_250, rtt), None);
        assert_eq!(train_rate(&[0, 5_000], 1_250, rtt), None);
        assert_eq!(train_rate(&[], 1_250, rtt), None);
    }

    #[test]
    fn capacity_is_the_transfer_rate_or_the_median_train_rate_if_higher() {
        let rates = [1.25e6, 6.25e5, 2e6];
        assert_eq!(capacity(1e5, &rates), 1.25e6);
        assert_eq!(capacity(3e6, &rates), 3e6);
        assert_eq!(capacity(1e5, &rates[..2]), (1.25e6 + 6.25e5) / 2.0);
        assert_eq!(capacity(1e5, &[]), 1e5);
    }

    #[test]
    fn trains_time_links_up_to_about_40_mbps_and_a_tight_whole_train_is_too_fast() {
        // 9 × 1 100 B over 2 ms = 4.95e6 B/s = 39.6 Mb/s.
        assert!(
            (TRAIN_CEILING_BPS - 4.95e6).abs() < 1e-6,
            "{TRAIN_CEILING_BPS}"
        );
        let arrived = |step_us: u64, n: u64| TrainArrival {
            arrivals_us: (0..n).map(|i| i * step_us).collect(),
        };
        // Ten datagrams 100 µs apart (99 Mb/s): too fast to time.
        assert!(too_fast(&arrived(100, 10)));
        // 1 ms apart (8.8 Mb/s): timed.
        assert!(!too_fast(&arrived(1_000, 10)));
        // A train short of datagrams is not known to be fast: it may be lossy.
        assert!(!too_fast(&arrived(100, 5)));
    }

    #[test]
    fn a_budget_holds_over_a_sliding_day_and_reports_each_change_once() {
        const H: i64 = 3_600_000;
        let mut b = Budget::new(100_000);
        assert_eq!(b.allow(0, 60_000), (true, None));
        b.charge(0, 60_000);
        // 60 000 + 60 000 would pass the cap: refused, reported once.
        assert_eq!(b.allow(H, 60_000), (false, Some(BudgetChange::Spent)));
        assert_eq!(b.allow(2 * H, 60_000), (false, None));
        // A smaller probe still fits.
        assert_eq!(b.allow(3 * H, 40_000), (true, Some(BudgetChange::Refilled)));
        b.charge(3 * H, 40_000);
        assert_eq!(b.spent(3 * H), 100_000);
        assert_eq!(b.allow(23 * H, 1), (false, Some(BudgetChange::Spent)));
        // The first probe leaves the window a day after it was charged.
        assert_eq!(b.spent(24 * H), 40_000);
        assert_eq!(
            b.allow(24 * H, 60_000),
            (true, Some(BudgetChange::Refilled))
        );
        assert_eq!(b.spent(27 * H), 0);
    }

    #[test]
    fn trains_record_arrivals_and_forget_the_oldest() {
        let trains = Trains::default();
        let t0 = Instant::now();
        let datagram = |id: u64| {
            let mut d = vec![0; 100];
            d[..8].copy_from_slice(&id.to_be_bytes());
            d
        };
        for i in 0..MAX_ARRIVALS as u64 + 5 {
            trains.record(&datagram(7), t0 + Duration::from_millis(i));
        }
        trains.record(&[1, 2, 3], t0);
        let kept = trains.arrival(7).unwrap().arrivals_us;
        assert_eq!(kept.len(), MAX_ARRIVALS);
        assert_eq!(kept[..3], [0, 1_000, 2_000]);
        for id in 100..100 + TRAINS_KEPT as u64 {
            trains.record(&datagram(id), t0);
        }
        assert_eq!(trains.arrival(7), None);
        assert_eq!(trains.arrival(100).unwrap().arrivals_us, [0]);
    }

    #[tokio::test]
    async fn measures_a_loopback_link_through_a_responder_only_between_named_nodes() {
        use crate::identity::{Authority, NodeIdentity, NodeKeyPair, sha256_hex};
        let pki = tempfile::tempdir().unwrap();
        crate::tls::load_or_create(pki.path(), &["localhost".into()], 1_800_000_000_000).unwrap();
        let ca = Authority::load(pki.path()).unwrap();
        let node = |id: &str| -> NodeIdentity {
            let key = NodeKeyPair::generate().unwrap();
            let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
            let (cert, not_after_ms) = ca.issue(id, &key.public_key(), now).unwrap();
            key.into_identity(ca.issued(&cert, not_after_ms))
        };
        let (a, b) = (node("a"), node("b"));
        let timing = Timing::default();
        let key = [7u8; crate::quic::RESET_KEY_LEN];
        let config = responder_config(&a, timing).unwrap();
        let server = crate::quic::server("127.0.0.1:0".parse().unwrap(), config, &key).unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(respond(server));
        let client = crate::quic::bare_client().unwrap();
        let pin = sha256_hex(&a.cert);
        let sample = measure_peer(&client, &b, ("a", addr, &pin), timing, (64 * 1024, 42))
            .await
            .unwrap();
        assert_eq!((sample.peer.as_str(), sample.t_ms), ("a", 42));
        assert!(sample.rtt_ms > 0.0 && sample.rtt_ms < 1000.0, "{sample:?}");
        assert!(sample.bandwidth_bps > 1e5, "{sample:?}");
        // Loopback is too fast for trains: one train, then the transfer,
        // both counted with the handshake (the client's Initial alone is
        // padded to 1 200 bytes).
        let floor = (TRAIN_LEN * TRAIN_DATAGRAM + 64 * 1024 + 1_200) as u64;
        assert!(sample.probe_sent_bytes > floor, "{sample:?}");
        assert!(
            sample.probe_sent_bytes < floor + PEER_OVERHEAD,
            "one train only: {sample:?}"
        );
        assert!(sample.probe_received_bytes > 1_200, "{sample:?}");
        assert!((0.0..=1.0).contains(&sample.loss));
        let config = crate::quic::peer_config(&b, &pin, timing).unwrap();
        let conn = client
            .connect_with(config, addr, "tidemill-probe")
            .unwrap()
            .await
            .unwrap();
        let arrived = train(&conn, 5).await.unwrap().unwrap().arrivals_us;
        assert_eq!(arrived.len(), TRAIN_LEN, "{arrived:?}");

        // A responder that is not the node named is refused by the prober.
        let wrong = sha256_hex(&b.cert);
        assert!(
            measure_peer(&client, &b, ("a", addr, &wrong), timing, (1_024, 42))
                .await
                .is_err()
        );
        // A client without a node certificate is refused by the responder.
        let anonymous = crate::quic::joiner_config(&ca.pin(), timing).unwrap();
        let refused = async {
            let conn = client
                .connect_with(anonymous, addr, "tidemill-probe")?
                .await?;
            conn.accept_uni().await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        assert!(refused.await.is_err());
    }
}
