//! `tidemill-sim swarm`: many simulated edges against one coordinator, to
//! find how many it holds. Each edge has its own QUIC connection and node id
//! and speaks the real protocol: a hello, sequence-numbered report batches at
//! the sampling interval, each acknowledged before the next, a forecast every
//! refresh, and after a reconnect the resend of every report the coordinator
//! has not acknowledged (its welcome says which), as an edge's journal does.
//! The journal here is in memory: the swarm measures the coordinator, not the
//! edges' disks.
//!
//! A simulated edge runs no task: it answers every command with an error that
//! says so, and the coordinator treats the assignment as refused. Loads are
//! synthetic: a tidal day (busy by day, idle at night), phase-shifted per edge.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemill_forecast::{ForecastConfig, LoadSample, NodeForecast, NodeForecaster};
use tidemill_proto::{
    Capabilities, CloudMsg, EdgeMsg, ErrorCode, Hello, ReportBody, Sample, WireError,
};
use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::frames;
use tidemill_runtime::identity::JoinToken;
use tidemill_runtime::quic::{self, Timing};

use crate::edge_link::{Dialer, Outbox, drain};

/// Simulated edges that share one UDP socket.
const EDGES_PER_SOCKET: usize = 250;

/// Options of `swarm`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The coordinator's QUIC address.
    #[arg(long)]
    pub coordinator: SocketAddr,
    /// A join token (`tidemill-cloud token create --uses N`, N at least
    /// --edges): each simulated edge joins with it on its first connection
    /// and keeps its certificate in memory.
    #[arg(long, env = "TIDEMILL_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The name checked against the coordinator's certificate.
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// How many simulated edges.
    #[arg(long)]
    pub edges: usize,
    /// Seconds between an edge's samples, each a report.
    #[arg(long, default_value_t = 10.0)]
    pub sample_interval: f64,
    /// Seconds between an edge's forecasts.
    #[arg(long, default_value_t = 300.0)]
    pub forecast_refresh: f64,
    /// Node ids are this prefix and the edge's number.
    #[arg(long, default_value = "swarm-")]
    pub prefix: String,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 10.0)]
    pub stats_every: f64,
    /// Stop after this many seconds; run until SIGINT or SIGTERM if absent.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds over which the edges start, evenly spread, so that their
    /// handshakes do not all land at once.
    #[arg(long, default_value_t = 10.0)]
    pub ramp: f64,
}

/// Why `swarm` could not run.
#[derive(Debug, thiserror::Error)]
pub enum SwarmError {
    /// A flag is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The flag, without dashes.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// The QUIC client endpoint could not be made.
    #[error("cannot make the QUIC client: {0}")]
    Endpoint(#[from] quic::EndpointError),
    /// The join token is malformed.
    #[error(transparent)]
    Token(#[from] tidemill_runtime::identity::TokenError),
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// What the swarm has done so far; every field counts up from the start.
#[derive(Debug, Default)]
pub struct Counters {
    /// Edges with a session open now.
    pub connected: AtomicUsize,
    /// Sessions opened (reconnects included).
    pub sessions: AtomicU64,
    /// Reports journaled.
    pub journaled: AtomicU64,
    /// Reports acknowledged.
    pub acked: AtomicU64,
    /// UDP bytes sent, counted at each acknowledgement and at each session's end.
    pub udp_tx_bytes: AtomicU64,
    /// Report-to-acknowledgement latencies since the last [`Counters::take_latencies`], ms.
    latencies_ms: Mutex<Vec<u32>>,
}

impl Counters {
    /// The latencies recorded since the last call, sorted.
    pub fn take_latencies(&self) -> Vec<u32> {
        let mut l = std::mem::take(&mut *self.latencies_ms.lock().unwrap());
        l.sort_unstable();
        l
    }
}

/// The `q`-quantile (0 to 1) of sorted `values`, by the nearest rank; `None` when empty.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The forecast the edges send: one forecaster primed with a synthetic tidal
/// week, asked again each refresh, shared by every edge (the coordinator
/// stores each edge's copy as its own).
struct SharedForecast {
    model: NodeForecaster,
    latest: Mutex<Option<(i64, Arc<NodeForecast>)>>,
}

impl SharedForecast {
    fn new() -> SharedForecast {
        let mut model = NodeForecaster::new(ForecastConfig::default())
            .expect("the default forecast config is valid");
        let now = now_ms();
        for k in (0..7 * 288).rev() {
            let t_ms = now - k * 300_000;
            let load = tidal_cpu(t_ms, 0);
            let _ = model.update(&LoadSample {
                t_ms,
                cpu_pct: Some(load),
                mem_pct: Some(30.0),
                gpu_pct: None,
            });
        }
        SharedForecast {
            model,
            latest: Mutex::new(None),
        }
    }

    /// A forecast made at most `refresh` ago.
    fn get(&self, refresh: Duration) -> Arc<NodeForecast> {
        let now = now_ms();
        let mut latest = self.latest.lock().unwrap();
        match &*latest {
            Some((made, f)) if now - made < refresh.as_millis() as i64 => f.clone(),
            _ => {
                let f = Arc::new(self.model.forecast(now));
                *latest = Some((now, f.clone()));
                f
            }
        }
    }
}

/// Wall time, Unix ms.
fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A tidal CPU load in percent at `t_ms` for edge number `k`: 45 ± 40 over
/// the day, peaking mid-afternoon, shifted by `k` minutes.
fn tidal_cpu(t_ms: i64, k: usize) -> f64 {
    let hour = ((t_ms / 60_000 + k as i64) % 1440) as f64 / 60.0;
    45.0 + 40.0 * ((hour - 15.0) / 24.0 * std::f64::consts::TAU).cos()
}

/// Everything one edge task needs.
struct Edge {
    k: usize,
    node_id: String,
    args: Arc<Args>,
    dialer: Dialer,
    counters: Arc<Counters>,
    forecast: Arc<SharedForecast>,
    outbox: Mutex<Outbox>,
    wake: tokio::sync::Notify,
}

impl Edge {
    /// Journals a sample every interval and a forecast every refresh.
    async fn sample(&self) {
        let interval = Duration::from_secs_f64(self.args.sample_interval);
        let refresh = Duration::from_secs_f64(self.args.forecast_refresh);
        let mut ticks = tokio::time::interval(interval);
        let mut last_forecast: Option<Instant> = None;
        loop {
            ticks.tick().await;
            let t_ms = now_ms();
            let sample = Sample {
                t_ms,
                cpu_pct: tidal_cpu(t_ms, self.k) as f32,
                per_core_pct: vec![tidal_cpu(t_ms, self.k) as f32; 4],
                mem_pct: 30.0,
                net_rx_bytes: 0,
                net_tx_bytes: 0,
                gpu_pct: None,
            };
            let mut outbox = self.outbox.lock().unwrap();
            outbox.append(ReportBody::Samples(vec![sample]));
            let mut journaled = 1;
            if last_forecast.is_none_or(|at| at.elapsed() >= refresh) {
                let f = self.forecast.get(refresh);
                outbox.append(ReportBody::Forecast(Box::new((*f).clone())));
                last_forecast = Some(Instant::now());
                journaled += 1;
            }
            drop(outbox);
            self.counters
                .journaled
                .fetch_add(journaled, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// Connects, sends what is pending, and reconnects with backoff when the
    /// session ends.
    async fn link(&self) {
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
        let mut rng: rand::rngs::StdRng = rand::make_rng();
        loop {
            if let Err(e) = self.session(&mut backoff).await {
                let delay = backoff.next_delay(&mut rng);
                tracing::debug!(node_id = %self.node_id, error = %e, retry_in_ms = delay.as_millis() as u64, "swarm edge link down");
                tokio::time::sleep(delay).await;
            }
        }
    }

    async fn session(&self, backoff: &mut Backoff) -> Result<(), String> {
        let hello = Hello {
            node_id: self.node_id.clone(),
            capabilities: Capabilities {
                cpu_cores: 4,
                mem_bytes: 8 << 30,
                accelerators: Vec::new(),
                os: "linux".into(),
                arch: "x86_64".into(),
                daemon_version: env!("CARGO_PKG_VERSION").into(),
            },
            probe_port: None,
            site: None,
        };
        let (conn, acked) = self.dialer.open(hello).await?;
        self.outbox.lock().unwrap().ack(acked);
        backoff.reset();
        self.counters.sessions.fetch_add(1, Ordering::Relaxed);
        self.counters.connected.fetch_add(1, Ordering::Relaxed);
        let refuse = tokio::spawn(refuse_commands(conn.clone()));
        let sent = Mutex::new(0);
        let result = drain(&conn, &self.outbox, &self.wake, &|times| {
            self.counters
                .acked
                .fetch_add(times.len() as u64, Ordering::Relaxed);
            self.counters.latencies_ms.lock().unwrap().extend(
                times
                    .iter()
                    .map(|t| t.elapsed().as_millis().min(u32::MAX as u128) as u32),
            );
            self.count_sent(&conn, &mut sent.lock().unwrap());
        })
        .await;
        refuse.abort();
        self.counters.connected.fetch_sub(1, Ordering::Relaxed);
        self.count_sent(&conn, &mut sent.lock().unwrap());
        conn.close(0u32.into(), b"swarm edge reconnects");
        result
    }

    /// Adds the UDP bytes `conn` sent since `sent` to the counters.
    fn count_sent(&self, conn: &quinn::Connection, sent: &mut u64) {
        let now = conn.stats().udp_tx.bytes;
        self.counters
            .udp_tx_bytes
            .fetch_add(now.saturating_sub(*sent), Ordering::Relaxed);
        *sent = now;
    }
}

/// Answers every command the coordinator sends with an error: a simulated
/// edge runs no task.
async fn refuse_commands(conn: quinn::Connection) {
    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
        tokio::spawn(async move {
            let _ = frames::read_msg::<CloudMsg>(&mut recv).await;
            let reply = EdgeMsg::Error(WireError {
                code: ErrorCode::UnexpectedMessage,
                message: "a simulated swarm edge runs no tasks".into(),
            });
            let _ = frames::write_msg(&mut send, &reply).await;
            let _ = send.finish();
        });
    }
}

/// Checks the options.
fn check(args: &Args) -> Result<(), SwarmError> {
    let positive = |flag, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(SwarmError::BadOption {
                flag,
                value: v.to_string(),
                rule: "must be a positive number of seconds",
            })
        }
    };
    positive("sample-interval", args.sample_interval)?;
    positive("forecast-refresh", args.forecast_refresh)?;
    positive("stats-every", args.stats_every)?;
    if args.edges == 0 {
        return Err(SwarmError::BadOption {
            flag: "edges",
            value: "0".into(),
            rule: "must be at least 1",
        });
    }
    Ok(())
}

/// Starts the swarm's edges on the current runtime and returns its counters;
/// the edges run until the runtime stops.
pub fn start(args: Args) -> Result<Arc<Counters>, SwarmError> {
    check(&args)?;
    // Real edges each have a socket of their own; a few hundred per socket
    // keeps the swarm's own receive queues from being what breaks.
    let endpoints: Vec<quinn::Endpoint> = (0..args.edges.div_ceil(EDGES_PER_SOCKET))
        .map(|_| quic::bare_client())
        .collect::<Result<_, _>>()?;
    let token: JoinToken = args.token.parse()?;
    let joiner = quic::joiner_config(&token.ca_sha256, Timing::default())?;
    let join = Arc::new((token, joiner));
    let counters = Arc::new(Counters::default());
    let forecast = Arc::new(SharedForecast::new());
    let args = Arc::new(args);
    for k in 0..args.edges {
        let edge = Arc::new(Edge {
            k,
            node_id: format!("{}{k:05}", args.prefix),
            args: args.clone(),
            dialer: Dialer::new(
                endpoints[k / EDGES_PER_SOCKET].clone(),
                args.coordinator,
                args.server_name.clone(),
                join.clone(),
            ),
            counters: counters.clone(),
            forecast: forecast.clone(),
            outbox: Mutex::new(Outbox::new()),
            wake: tokio::sync::Notify::new(),
        });
        let delay = Duration::from_secs_f64(args.ramp * k as f64 / args.edges as f64);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let sampler = edge.clone();
            tokio::spawn(async move { sampler.sample().await });
            edge.link().await;
        });
    }
    Ok(counters)
}

/// Runs `swarm`: starts the edges and prints a progress line every
/// `--stats-every` seconds until stopped: the uplink per edge since the
/// start (handshakes included) and over the last period.
pub fn run(args: &Args) -> Result<(), SwarmError> {
    tidemill_runtime::lifecycle::init_logging("info");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(SwarmError::Runtime)?;
    rt.block_on(async {
        let counters = start(args.clone())?;
        let every = Duration::from_secs_f64(args.stats_every);
        let started = Instant::now();
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        println!(
            "t_s edges_connected sessions journaled acked ack_p50_ms ack_p99_ms uplink_bps_per_edge uplink_bps_per_edge_window"
        );
        let mut last = (Instant::now(), 0u64);
        let stop = tidemill_runtime::lifecycle::shutdown_signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = ticks.tick() => {
                    let lat = counters.take_latencies();
                    let fmt = |q| quantile(&lat, q).map_or("-".to_string(), |v| v.to_string());
                    let sent = counters.udp_tx_bytes.load(Ordering::Relaxed);
                    let per_edge =
                        |bytes: u64, secs: f64| bytes as f64 * 8.0 / secs / args.edges as f64;
                    let uplink = per_edge(sent, started.elapsed().as_secs_f64());
                    let window = per_edge(sent - last.1, last.0.elapsed().as_secs_f64());
                    last = (Instant::now(), sent);
                    println!(
                        "{:.0} {} {} {} {} {} {} {uplink:.1} {window:.1}",
                        started.elapsed().as_secs_f64(),
                        counters.connected.load(Ordering::Relaxed),
                        counters.sessions.load(Ordering::Relaxed),
                        counters.journaled.load(Ordering::Relaxed),
                        counters.acked.load(Ordering::Relaxed),
                        fmt(0.5),
                        fmt(0.99),
                    );
                    if args.duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
                        break;
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }
}
