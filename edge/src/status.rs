//! The edge's local status: a port (`[status] listen`, off by default) that
//! serves `GET /metrics` (Prometheus text, the same exposition code as the
//! coordinator's) and `GET /status` (JSON), and what `tidemill-edge status`
//! prints, from that port or, without it, from the journal alone.
//!
//! The port authenticates as every interface must: it listens on loopback
//! only, unless `[status] token_file` names a bearer token, which every
//! request must then carry.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::{Deserialize, Serialize};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::metrics::prometheus::{Gauge, IntCounter, IntGauge, Registry};
use tidemill_runtime::metrics::{self as exposition, register};
use tokio::net::TcpListener;

use crate::config::StatusConfig;
use crate::journal::{Journal, JournalError};

/// Time a client has to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a request's head may take; a larger one is refused.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Why the status port or `tidemill-edge status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The listen address cannot be bound.
    #[error(
        "cannot listen on [status] listen = {addr}: {source}; pick a free port or set listen = \"\" to turn the status port off"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token file cannot be read or is empty.
    #[error(
        "cannot use [status] token_file {path}: {why}; write a long random token into it (e.g. `openssl rand -hex 32`)"
    )]
    Token {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The journal cannot be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The status port did not answer.
    #[error(
        "cannot ask the status port at {addr}: {why}; is tidemill-edge running with this config?"
    )]
    Ask {
        /// The address asked.
        addr: SocketAddr,
        /// What went wrong.
        why: String,
    },
}

/// What the daemon tells the status port as it runs: the connection, and
/// its instruments.
pub struct Live {
    registry: Registry,
    /// When the last sample was taken (or the daemon started), wall time.
    last_sample: Mutex<Instant>,
    connected: AtomicBool,
    samples: IntCounter,
    connected_gauge: IntGauge,
    backlog: IntGauge,
    last_ack_age: Gauge,
    tasks: IntGauge,
}

impl Default for Live {
    fn default() -> Self {
        let registry = exposition::registry(env!("CARGO_PKG_VERSION"));
        let int_gauge = |name: &str, help: &str| {
            register(
                &registry,
                IntGauge::new(name, help).expect("a valid metric name"),
            )
        };
        Live {
            last_sample: Mutex::new(Instant::now()),
            connected: AtomicBool::new(false),
            samples: register(
                &registry,
                IntCounter::new(
                    "tidemill_edge_samples_total",
                    "Utilisation samples taken since the daemon started.",
                )
                .expect("a valid metric name"),
            ),
            connected_gauge: int_gauge(
                "tidemill_edge_connected",
                "1 while the edge has a live, registered connection to the coordinator.",
            ),
            backlog: int_gauge(
                "tidemill_edge_journal_backlog",
                "Journaled reports the coordinator has not acknowledged yet.",
            ),
            last_ack_age: register(
                &registry,
                Gauge::new(
                    "tidemill_edge_last_ack_age_seconds",
                    "Seconds since the coordinator last acknowledged reports; +Inf if it never has.",
                )
                .expect("a valid metric name"),
            ),
            tasks: int_gauge(
                "tidemill_edge_tasks_running",
                "Tasks accepted and not yet finished.",
            ),
            registry,
        }
    }
}

impl Live {
    /// Notes whether the edge is connected and registered now.
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    /// Counts one sample taken.
    pub fn sampled(&self) {
        self.samples.inc();
        *self.last_sample.lock().unwrap() = Instant::now();
    }

    /// `Ok` if a sample was taken within `bound` of wall time (or the daemon
    /// started that recently); else why not, for the watchdog.
    pub fn sampled_within(&self, bound: Duration) -> Result<(), String> {
        let age = self.last_sample.lock().unwrap().elapsed();
        if age <= bound {
            Ok(())
        } else {
            Err(format!(
                "the sampling loop has taken no sample for {:.0} s (expected within {:.0} s)",
                age.as_secs_f64(),
                bound.as_secs_f64()
            ))
        }
    }

    fn connection(&self) -> Connection {
        if self.connected.load(Ordering::Relaxed) {
            Connection::Connected
        } else {
            Connection::Disconnected
        }
    }
}

/// The edge's connection to the coordinator, as far as the asker can know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Connection {
    /// Connected and registered.
    Connected,
    /// Not connected (connecting, backing off, or never joined).
    Disconnected,
    /// Read from the journal alone: only the daemon knows.
    Unknown,
}

/// A task the edge runs, without its command or environment (which may hold
/// secrets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task.
    pub task_id: u64,
    /// Its job.
    pub job_id: u64,
    /// Its process, once started.
    pub pid: Option<u32>,
}

/// The next stretch the node expects to be idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleWindowView {
    /// Start, Unix ms.
    pub start_ms: i64,
    /// End, Unix ms.
    pub end_ms: i64,
    /// Probability (0-1) that it is really idle.
    pub confidence: f64,
}

/// What the latest forecast says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastSummary {
    /// When it was issued, Unix ms of the sample clock.
    pub issued_ms: i64,
    /// The first idle window that has not ended by the time it was issued.
    pub next_idle: Option<IdleWindowView>,
}

/// The answer to `GET /status` and what `tidemill-edge status` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// This node.
    pub node_id: String,
    /// The connection to the coordinator.
    pub connection: Connection,
    /// When the coordinator last acknowledged reports, Unix ms; `None`: never.
    pub last_ack_ms: Option<i64>,
    /// Reports journaled and not yet acknowledged.
    pub journal_backlog: u64,
    /// Tasks accepted and not finished.
    pub tasks: Vec<TaskView>,
    /// The latest forecast, if one was issued.
    pub forecast: Option<ForecastSummary>,
}

impl Snapshot {
    /// Reads what the journal knows; `connection` is what the caller knows.
    pub fn read(
        journal: &Journal,
        node_id: &str,
        connection: Connection,
    ) -> Result<Self, JournalError> {
        let tasks = journal
            .unfinished_task_ids()?
            .into_iter()
            .map(|(task_id, job_id, pid)| TaskView {
                task_id,
                job_id,
                pid,
            })
            .collect();
        let forecast = journal.latest_forecast()?.map(|f| ForecastSummary {
            issued_ms: f.issued_ms,
            next_idle: f
                .idle_windows
                .iter()
                .find(|w| w.end_ms > f.issued_ms)
                .map(|w| IdleWindowView {
                    start_ms: w.start_ms,
                    end_ms: w.end_ms,
                    confidence: w.confidence,
                }),
        });
        Ok(Snapshot {
            node_id: node_id.to_string(),
            connection,
            last_ack_ms: journal.last_ack_ms()?,
            journal_backlog: journal.pending_count()?,
            tasks,
            forecast,
        })
    }

    /// A table for people.
    pub fn table(&self, now_ms: i64) -> String {
        let time = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms).map_or_else(
                || ms.to_string(),
                |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            )
        };
        let connection = match self.connection {
            Connection::Connected => "connected",
            Connection::Disconnected => "disconnected",
            Connection::Unknown => {
                "unknown (read from the journal; set [status] listen to ask the daemon)"
            }
        };
        let last_ack = self.last_ack_ms.map_or_else(
            || "never".to_string(),
            |ms| format!("{} ({} s ago)", time(ms), (now_ms - ms).max(0) / 1000),
        );
        let tasks = if self.tasks.is_empty() {
            "none".to_string()
        } else {
            self.tasks
                .iter()
                .map(|t| match t.pid {
                    Some(pid) => format!("task {} (job {}, pid {pid})", t.task_id, t.job_id),
                    None => format!("task {} (job {}, not started)", t.task_id, t.job_id),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let forecast = match &self.forecast {
            None => "none issued yet".to_string(),
            Some(ForecastSummary {
                issued_ms,
                next_idle: None,
            }) => format!("no idle window ahead (issued {})", time(*issued_ms)),
            Some(ForecastSummary {
                issued_ms,
                next_idle: Some(w),
            }) => format!(
                "next idle {} to {}, confidence {:.2} (issued {})",
                time(w.start_ms),
                time(w.end_ms),
                w.confidence,
                time(*issued_ms)
            ),
        };
        [
            ("node", self.node_id.clone()),
            ("connection", connection.to_string()),
            ("last ack", last_ack),
            (
                "journal backlog",
                format!("{} reports", self.journal_backlog),
            ),
            ("tasks", tasks),
            ("forecast", forecast),
        ]
        .iter()
        .map(|(k, v)| format!("{k:<16} {v}\n"))
        .collect()
    }
}

/// What the port serves from.
struct Shared {
    live: Arc<Live>,
    journal: Arc<Mutex<Journal>>,
    node_id: String,
    token: Option<String>,
}

/// Binds the status port if `[status] listen` is set and serves it in the
/// background; nothing when it is empty.
pub async fn spawn(
    cfg: &StatusConfig,
    live: Arc<Live>,
    journal: Arc<Mutex<Journal>>,
    node_id: String,
) -> Result<Option<SocketAddr>, StatusError> {
    let Some(addr) = cfg.listen_addr() else {
        return Ok(None);
    };
    let token = cfg.token_file().map(read_token).transpose()?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StatusError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StatusError::Bind { addr, source })?;
    tracing::info!(node_id = %node_id, addr = %bound, token = token.is_some(), "status port listening");
    let shared = Arc::new(Shared {
        live,
        journal,
        node_id,
        token,
    });
    tokio::spawn(serve(listener, shared));
    Ok(Some(bound))
}

fn read_token(path: &Path) -> Result<String, StatusError> {
    let text = std::fs::read_to_string(path).map_err(|e| StatusError::Token {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    let token = text.trim();
    if token.len() < 16 {
        return Err(StatusError::Token {
            path: path.to_owned(),
            why: "it holds fewer than 16 characters".into(),
        });
    }
    Ok(token.to_string())
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a status connection");
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&shared, &req)) }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false);
            let served = http.serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(HEADER_TIMEOUT * 2, served).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "status connection ended"),
                Err(_) => tracing::debug!(%peer, "status connection cut at its time limit"),
            }
        });
    }
}

/// Whether `given` equals `want`, in time that does not depend on where they
/// differ.
fn same_secret(given: &[u8], want: &[u8]) -> bool {
    given.len() == want.len() && given.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

fn answer<B>(shared: &Shared, req: &Request<B>) -> Response<Full<Bytes>> {
    let plain = "text/plain; charset=utf-8";
    if let Some(token) = &shared.token {
        let given = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_secret(g.as_bytes(), token.as_bytes())) {
            return text(
                StatusCode::UNAUTHORIZED,
                plain,
                "send Authorization: Bearer <the token in [status] token_file>\n".into(),
            );
        }
    }
    if req.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            plain,
            "only GET is served here\n".into(),
        );
    }
    let snapshot = || {
        let journal = shared.journal.lock().unwrap_or_else(|e| e.into_inner());
        Snapshot::read(&journal, &shared.node_id, shared.live.connection())
    };
    match req.uri().path() {
        "/metrics" => match snapshot() {
            Ok(s) => {
                let live = &shared.live;
                live.connected_gauge
                    .set(i64::from(s.connection == Connection::Connected));
                live.backlog.set(s.journal_backlog as i64);
                live.tasks.set(s.tasks.len() as i64);
                live.last_ack_age
                    .set(s.last_ack_ms.map_or(f64::INFINITY, |ms| {
                        (SystemClock.now_ms() - ms).max(0) as f64 / 1000.0
                    }));
                text(
                    StatusCode::OK,
                    exposition::CONTENT_TYPE,
                    exposition::encode(&live.registry),
                )
            }
            Err(e) => unavailable(&e),
        },
        "/status" => match snapshot() {
            Ok(s) => text(
                StatusCode::OK,
                "application/json",
                serde_json::to_string(&s).expect("a snapshot serialises") + "\n",
            ),
            Err(e) => unavailable(&e),
        },
        other => text(
            StatusCode::NOT_FOUND,
            plain,
            format!(
                "no {:?} here; GET /status or /metrics\n",
                other.chars().take(64).collect::<String>()
            ),
        ),
    }
}

fn unavailable(e: &JournalError) -> Response<Full<Bytes>> {
    tracing::error!(error = %e, "the status port cannot read the journal");
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        format!("cannot read the journal: {e}\n"),
    )
}

/// `tidemill-edge status`: asks the status port when one is configured,
/// else reads the journal in `data_dir` (connection unknown).
pub fn query(cfg: &StatusConfig, data_dir: &Path, node_id: &str) -> Result<Snapshot, StatusError> {
    let Some(mut addr) = cfg.listen_addr() else {
        let journal = Journal::open_read_only(data_dir)?;
        return Ok(Snapshot::read(&journal, node_id, Connection::Unknown)?);
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let token = cfg.token_file().map(read_token).transpose()?;
    let ask = |why: String| StatusError::Ask { addr, why };
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut req = agent.get(format!("http://{addr}/status"));
    if let Some(token) = token {
        req = req.header("Authorization", format!("Bearer {token}"));
    }
    let mut resp = req.call().map_err(|e| ask(e.to_string()))?;
    let status = resp.status();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| ask(e.to_string()))?;
    if !status.is_success() {
        return Err(ask(format!("{status}: {}", body.trim())));
    }
    serde_json::from_str(&body).map_err(|e| ask(format!("an answer that is not a status: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_hears_of_a_stalled_sampling_loop() {
        let live = Live::default();
        assert_eq!(live.sampled_within(Duration::from_secs(40)), Ok(()));
        *live.last_sample.lock().unwrap() = Instant::now() - Duration::from_secs(100);
        let why = live.sampled_within(Duration::from_secs(40)).unwrap_err();
        assert!(
            why.starts_with(
                "the sampling loop has taken no sample for 100 s (expected within 40 s)"
            ),
            "{why}"
        );
        live.sampled();
        assert_eq!(live.sampled_within(Duration::from_secs(40)), Ok(()));
    }
}
