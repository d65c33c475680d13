//! `tidemill-edge run`: wires the sampler, journal, executor and link together.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_proto::ReportBody;
use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::clock::{self, Clock, SharedClock, SystemClock};
use tidemill_runtime::config_file::ConfigError;
use tidemill_runtime::identity::NodeIdentity;
use tidemill_runtime::probe;
use tidemill_runtime::quic::{self, EndpointError, Timing};
use tokio::sync::Notify;

use crate::checkpoint_config::Backend;
use crate::checkpoint_move::Mover;
use crate::checkpoint_shared::SharedStore;
use crate::config::EdgeConfig;
use crate::confine::{ConfineError, Confinement};
use crate::coordinators::Rotation;
use crate::executor::Executor;
use crate::forecasting::Forecasting;
use crate::join::{self, JoinError};
use crate::journal::{Journal, JournalError};
use crate::link::{Link, Probes};
use crate::renewal::Renewal;
use crate::sampler::{Sampler, SamplerError};

/// Why the daemon stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data dir cannot be created.
    #[error("cannot create data dir {path}: {source}; pass a writable --data-dir")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The coordinator's address does not resolve.
    #[error("cannot resolve coordinator address {addr:?}: {source}")]
    Resolve {
        /// The configured address.
        addr: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The QUIC endpoint or TLS set-up failed (often: a wrong `--ca`).
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// Tasks cannot be confined as configured.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// This node has no certificate and could not get one.
    #[error(transparent)]
    Join(#[from] JoinError),
    /// Sampling cannot start.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// The forecaster's settings are invalid.
    #[error("{0}; fix the [forecast] table of the config")]
    Forecast(#[from] tidemill_forecast::ConfigError),
    /// The journal failed; the daemon stops rather than lose reports.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Another daemon (or `reset`) holds the data dir.
    #[error(transparent)]
    Locked(#[from] tidemill_runtime::datadir::LockError),
    /// The local status port cannot start.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// The shared checkpoint store (`[checkpoint] backend = "shared"`)
    /// cannot be opened.
    #[error(transparent)]
    SharedCheckpoints(#[from] crate::checkpoint_shared::SharedError),
}

/// How long a stopping edge waits for the coordinator to acknowledge what it
/// journaled last (its tasks' yields) before it closes the connection.
const FLUSH_ON_STOP: Duration = Duration::from_secs(3);

/// How often old task and checkpoint dirs are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How often a stopping edge looks whether its journal is acknowledged.
const FLUSH_POLL: Duration = Duration::from_millis(20);

/// Least step, ms, between the readings a replaying edge primes its
/// forecaster with. The forecaster averages samples over slots of 5 to 15
/// minutes, so a reading a minute serves as well as one per sample: 14 days
/// are 20 160 rows, where a 0.2 s sample interval made 6 million, which took
/// a debug build on a loaded machine longer than a test waits for the edge.
const PRIME_STEP_MS: i64 = 60_000;

/// Starts this edge's probe responder, which presents `identity` and answers
/// only other nodes, and its prober, if probing is enabled (`probe`); rounds
/// and the budget's day follow `schedule`.
fn probes(
    probe: &crate::config::ProbeConfig,
    identity: Arc<NodeIdentity>,
    timing: Timing,
    schedule: SharedClock,
) -> Result<Option<Arc<Probes>>, EdgeError> {
    if !probe.enabled {
        return Ok(None);
    }
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], probe.listen_port));
    let mut reset_key = [0u8; quic::RESET_KEY_LEN];
    rand::fill(&mut reset_key);
    let config = probe::responder_config(&identity, timing)?;
    let responder = quic::server(addr, config, &reset_key)?;
    let responder_port = responder
        .local_addr()
        .map_err(|source| EndpointError::Bind { addr, source })?
        .port();
    tokio::spawn(probe::respond(responder.clone()));
    Ok(Some(Arc::new(Probes {
        prober: quic::bare_client()?,
        responder,
        identity: Mutex::new(identity),
        timing,
        responder_port,
        schedule,
        interval: Duration::from_secs(probe.interval_secs),
        bytes: probe.bytes,
        rate_refresh: Duration::from_secs(probe.rate_refresh_secs),
        budget: Mutex::new(probe::Budget::new(probe.daily_budget_bytes)),
        cloud: Mutex::default(),
    })))
}

/// Where the coordinator is and what it is called: the config's addresses,
/// resolved in order (joins use the first), and the name its certificate
/// must carry.
fn coordinator(cfg: &EdgeConfig) -> Result<(Vec<std::net::SocketAddr>, String), EdgeError> {
    let addrs = cfg
        .coordinator
        .resolve()
        .map_err(|(addr, source)| EdgeError::Resolve { addr, source })?;
    Ok((addrs, cfg.tls_name()))
}

fn timing(cfg: &EdgeConfig) -> Timing {
    Timing {
        keep_alive: Duration::from_secs(cfg.link.keep_alive_secs),
        idle_timeout: Duration::from_secs(cfg.link.idle_timeout_secs),
    }
}

fn data_dir(cfg: &EdgeConfig) -> Result<(), EdgeError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| EdgeError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cfg.data_dir, std::fs::Permissions::from_mode(0o700)).map_err(
        |source| EdgeError::DataDir {
            path: cfg.data_dir.clone(),
            source,
        },
    )
}

/// `tidemill-edge join`: gets this node's certificate with the configured
/// token and returns the node id it was issued for.
pub async fn join_only(cfg: &EdgeConfig) -> Result<String, EdgeError> {
    cfg.validate()?;
    let node_id = cfg.resolved_node_id();
    data_dir(cfg)?;
    // Not while a daemon (or another join) uses the data dir.
    let _lock = tidemill_runtime::datadir::lock(&cfg.data_dir)?;
    let token = cfg.join_token().ok_or_else(|| JoinError::NoIdentity {
        dir: cfg.data_dir.clone(),
    })?;
    let (addrs, name) = coordinator(cfg)?;
    join::join(
        &cfg.data_dir,
        token,
        &node_id,
        (addrs[0], &name),
        timing(cfg),
    )
    .await?;
    Ok(node_id)
}

/// Runs the edge daemon until `shutdown` resolves, then yields running tasks
/// (each checkpoints in its grace period; the journal says so) and returns. On a first start with a join token it
/// joins first.
pub async fn run(mut cfg: EdgeConfig, shutdown: impl Future<Output = ()>) -> Result<(), EdgeError> {
    // Every embedder (the CLI, the demo) gets absolute paths, which tasks
    // running as their own uid in their own work dir need.
    cfg.absolute_paths()?;
    cfg.validate()?;
    let node_id = cfg.resolved_node_id();
    data_dir(&cfg)?;
    // One daemon per data dir; `reset` and `doctor` see who holds it.
    let _lock = tidemill_runtime::datadir::lock(&cfg.data_dir)?;
    let (addrs, name) = coordinator(&cfg)?;
    let timing = timing(&cfg);

    // Samples, forecasts and probe rounds follow the trace clock (accelerated
    // under replay); process control, timeouts and keep-alives stay on the
    // wall clock.
    let speed = cfg.replay.as_ref().map_or(1.0, |r| r.speed);
    let sample_clock: SharedClock =
        clock::for_speed(speed, cfg.replay.as_ref().and_then(|r| r.clock_anchor_ms));
    let wall: SharedClock = Arc::new(SystemClock);

    let mut sampler = Sampler::open(&cfg, sample_clock.now_ms()).await?;
    let capabilities = sampler.capabilities(cfg.capabilities.as_ref());
    tracing::info!(
        node_id = %node_id,
        cores = capabilities.cpu_cores,
        mem_bytes = capabilities.mem_bytes,
        accelerators = capabilities.accelerators.len(),
        replay = cfg.replay.as_ref().map(|r| r.file.display().to_string()),
        "tidemill-edge starting"
    );

    let journal = Arc::new(Mutex::new(Journal::open(&cfg.data_dir)?));
    // The local status port ([status] listen), if configured.
    let status = Arc::new(crate::status::Live::default());
    crate::status::spawn(
        &cfg.status,
        status.clone(),
        journal.clone(),
        node_id.clone(),
    )
    .await?;
    // systemd's keep-alives go on only while samples do: a sample interval
    // of the wall clock (longer than the trace clock's under replay faster
    // than real time), three of them, plus what a sample may wait on.
    let wall_interval = cfg.sample_interval().mul_f64(1.0 / speed.min(1.0));
    let stall_bound = 3 * wall_interval + crate::accel::MAX_READ;
    let _watchdog = tidemill_runtime::notify::start_watchdog_while({
        let status = status.clone();
        move || status.sampled_within(stall_bound)
    });
    let outbox = Arc::new(Notify::new());
    let confine = Confinement::detect(&cfg.tasks, &cfg.data_dir, &node_id)?;
    if let Err(e) = crate::ckprobe::checkpoint_dir(&confine).await {
        tracing::error!(node_id, error = %e, "tasks cannot save checkpoints here: a task would run, and every checkpoint it tried would be lost; `tidemill-edge doctor` says how to fix it");
    }
    let executor = Executor::new(
        journal.clone(),
        outbox.clone(),
        cfg.tasks.clone(),
        cfg.data_dir.clone(),
        node_id.clone(),
        (wall.clone(), sample_clock.clone()),
        confine,
    );
    let store_dir = std::path::absolute(&cfg.data_dir).unwrap_or_else(|_| cfg.data_dir.clone());
    let moves = cfg.checkpoint.moves.clone();
    executor.set_mover(match cfg.checkpoint.backend {
        Backend::Coordinator => Mover::new(node_id.clone(), &store_dir, moves),
        Backend::Shared => {
            let shared = SharedStore::open(&cfg.checkpoint.url, moves.max_bytes, moves.keep)?;
            Mover::with_shared(node_id.clone(), &store_dir, moves, shared)
        }
    });
    executor.recover()?;
    let pruning = tokio::spawn({
        let executor = executor.clone();
        let wall = wall.clone();
        let node_id = node_id.clone();
        async move {
            loop {
                match executor.prune_dirs(std::time::SystemTime::now()) {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(node_id = %node_id, dirs = n, "deleted old task and checkpoint dirs")
                    }
                    Err(e) => {
                        tracing::warn!(node_id = %node_id, error = %e, "cannot prune old task dirs")
                    }
                }
                wall.sleep(PRUNE_EVERY).await;
            }
        }
    });
    // The journal is open and tasks are recovered: systemd may call us started.
    tidemill_runtime::notify::ready();

    // A first start joins in the background, so the node journals from the
    // start even while the coordinator is out of reach.
    let backoff = Backoff::new(
        Duration::from_millis(cfg.link.reconnect_min_ms),
        Duration::from_secs(cfg.link.reconnect_max_secs),
    );
    let joining = join::Joining {
        dir: cfg.data_dir.clone(),
        ca: cfg.ca_override().map(std::path::Path::to_path_buf),
        token: cfg.join_token().map(str::to_string),
        node_id: node_id.clone(),
        coordinator: (addrs[0], name.clone()),
        timing,
    };
    let identity = if tidemill_runtime::identity::NodeIdentity::present(&cfg.data_dir) {
        Some(joining.identity().await?)
    } else if cfg.join_token().is_none() {
        return Err(JoinError::NoIdentity {
            dir: cfg.data_dir.clone(),
        }
        .into());
    } else {
        None
    };
    let endpoint_slot: Arc<std::sync::OnceLock<quinn::Endpoint>> = Arc::default();
    let slot = endpoint_slot.clone();
    let (priors, mut prior_rx) = tokio::sync::watch::channel(None);
    let mut link = Link {
        node_id: node_id.clone(),
        coordinators: Rotation::new(addrs),
        server_name: name,
        endpoint: None,
        capabilities,
        site: cfg.site().map(str::to_string),
        priors,
        journal: journal.clone(),
        outbox: outbox.clone(),
        executor: executor.clone(),
        clock: wall.clone(),
        backoff: backoff.clone(),
        ack_timeout: Duration::from_secs(cfg.link.ack_timeout_secs),
        probes: None,
        renewal: None,
        batch_budget: crate::link::BATCH_BYTES,
        status: status.clone(),
    };
    let renew_before = Duration::from_secs(cfg.link.renew_before_days * 86_400);
    let probe_cfg = cfg.probe.clone();
    let probe_clock = sample_clock.clone();
    let mut link = tokio::spawn(async move {
        let identity = match identity {
            Some(identity) => identity,
            None => joining.retrying(backoff, &*wall).await?,
        };
        link.renewal = Some(Arc::new(Renewal {
            dir: joining.dir.clone(),
            ca: joining.ca.clone(),
            renew_before,
            not_after_ms: AtomicI64::new(identity.not_after_ms.unwrap_or(0)),
            renewed: AtomicBool::new(false),
            issuer: Mutex::new(identity.issuer_sha256.clone()),
            timing,
        }));
        let endpoint = quic::client(&identity, timing)?;
        link.probes = probes(&probe_cfg, Arc::new(identity), timing, probe_clock)?;
        let _ = slot.set(endpoint.clone());
        link.endpoint = Some(endpoint);
        link.run().await.map_err(EdgeError::from)
    });

    let mut forecasting = {
        let refresh_ms = (cfg.forecast_refresh_secs * 1000.0) as i64;
        let now = sample_clock.now_ms();
        let since = now - i64::from(cfg.forecast.history_days) * 86_400_000;
        let mut history = journal.lock().unwrap().history(since)?;
        let prime = cfg.replay.as_ref().is_some_and(|r| r.prime_history);
        if prime {
            // The trace's readings stand for the box's past, before the
            // journal's own: on the first start, all of the window; after a
            // restart, what precedes the samples journaled since, so that a
            // replaying edge, like a real one, keeps its history.
            let step_ms = ((cfg.sample_interval_secs * 1000.0) as i64).max(PRIME_STEP_MS);
            let until = history.first().map_or(now, |row| row.0);
            let mut primed = sampler
                .replay_history(since, until, step_ms)
                .unwrap_or_default();
            tracing::info!(node_id = %node_id, rows = primed.len(), journaled = history.len(), "forecaster primed with the replayed trace's history");
            primed.append(&mut history);
            history = primed;
        }
        Forecasting::new(cfg.forecast.clone(), refresh_ms, history)?
    };
    let sampling = async {
        let interval = cfg.sample_interval();
        loop {
            let now = sample_clock.now_ms();
            let own = journal.lock().unwrap().running_pids()?;
            let sample = sampler.sample(now, &own).await;
            status.sampled();
            if prior_rx.has_changed().unwrap_or(false) {
                forecasting.set_prior(prior_rx.borrow_and_update().clone());
            }
            forecasting.observe(&sample);
            let forecast = forecasting.due(now);
            {
                let mut journal = journal.lock().unwrap();
                journal.append_sample(&sample)?;
                if let Some(f) = forecast {
                    tracing::debug!(node_id = %node_id, idle_windows = f.idle_windows.len(), "forecast issued");
                    journal.append(&ReportBody::Forecast(Box::new(f)))?;
                    journal.prune_history(now - forecasting.history_ms())?;
                }
            }
            outbox.notify_one();
            sample_clock.sleep(interval).await;
        }
    };
    let outcome: Result<(), EdgeError> = tokio::select! {
        r = sampling => r,
        r = &mut link => match r {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) | Err(_) => unreachable!("the link runs until its journal fails"),
        },
        () = shutdown => Ok(()),
    };
    tracing::info!(node_id = %node_id, "stopping: running tasks checkpoint and yield");
    executor.yield_all().await;
    // The yields go out before the connection closes, so the coordinator
    // requeues the jobs now; what is not acknowledged in time stays in the
    // journal for the next start.
    let flushed = async {
        while journal.lock().unwrap().pending_count().unwrap_or(0) > 0 {
            SystemClock.sleep(FLUSH_POLL).await;
        }
    };
    if clock::timeout(&SystemClock, FLUSH_ON_STOP, flushed)
        .await
        .is_err()
    {
        tracing::info!(node_id = %node_id, "stopping with reports unacknowledged; they go out on the next start");
    }
    link.abort();
    pruning.abort();
    if let Some(endpoint) = endpoint_slot.get() {
        // Tell the coordinator at once, so it does not wait out the idle
        // timeout before it sees this edge go.
        quic::close_stopping(endpoint, "edge");
        let _ = clock::timeout(&SystemClock, Duration::from_secs(2), endpoint.wait_idle()).await;
    }
    outcome
}
