//! `tidemill-edge run`: wires the sampler, journal, executor and link together.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_proto::ReportBody;
use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::clock::{self, SharedClock, SystemClock};
use tidemill_runtime::config_file::ConfigError;
use tidemill_runtime::probe;
use tidemill_runtime::quic::{self, EndpointError, Timing};
use tokio::sync::Notify;

use crate::config::EdgeConfig;
use crate::executor::Executor;
use crate::forecasting::Forecasting;
use crate::journal::{Journal, JournalError};
use crate::link::{Link, Probes};
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
    /// Sampling cannot start.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// The forecaster's settings are invalid.
    #[error("{0}; fix the [forecast] table of the config")]
    Forecast(#[from] tidemill_forecast::ConfigError),
    /// The journal failed; the daemon stops rather than lose reports.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Starts this edge's probe responder and prober, if probing is enabled.
fn probes(cfg: &EdgeConfig, timing: Timing) -> Result<Option<Arc<Probes>>, EdgeError> {
    if !cfg.probe.enabled {
        return Ok(None);
    }
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], cfg.probe.listen_port));
    let mut reset_key = [0u8; quic::RESET_KEY_LEN];
    rand::fill(&mut reset_key);
    let identity = probe::responder_identity().map_err(EndpointError::from)?;
    let responder = quic::server(addr, identity, timing, &reset_key)?;
    let responder_port = responder
        .local_addr()
        .map_err(|source| EndpointError::Bind { addr, source })?
        .port();
    tokio::spawn(probe::respond(responder));
    Ok(Some(Arc::new(Probes {
        prober: probe::prober(timing)?,
        responder_port,
        interval: Duration::from_secs(cfg.probe.interval_secs),
        bytes: cfg.probe.bytes,
    })))
}

/// Runs the edge daemon until `shutdown` resolves, then cancels running tasks
/// (journaling their end) and returns.
pub async fn run(cfg: EdgeConfig, shutdown: impl Future<Output = ()>) -> Result<(), EdgeError> {
    cfg.validate()?;
    let node_id = cfg.resolved_node_id();
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| EdgeError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    let addr = cfg
        .coordinator_addr()
        .map_err(|source| EdgeError::Resolve {
            addr: cfg.coordinator.clone(),
            source,
        })?;
    let timing = Timing {
        keep_alive: Duration::from_secs(cfg.link.keep_alive_secs),
        idle_timeout: Duration::from_secs(cfg.link.idle_timeout_secs),
    };
    let endpoint = quic::client(&cfg.ca, timing)?;

    // Samples follow the trace clock (accelerated under replay); process control
    // and networking stay on the wall clock.
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
    let outbox = Arc::new(Notify::new());
    let executor = Executor::new(
        journal.clone(),
        outbox.clone(),
        cfg.tasks.clone(),
        cfg.data_dir.clone(),
        node_id.clone(),
        (wall.clone(), sample_clock.clone()),
    );
    executor.recover()?;

    let link = Link {
        node_id: node_id.clone(),
        addr,
        server_name: cfg.tls_name(),
        endpoint: endpoint.clone(),
        capabilities,
        journal: journal.clone(),
        outbox: outbox.clone(),
        executor: executor.clone(),
        clock: wall,
        backoff: Backoff::new(
            Duration::from_millis(cfg.link.reconnect_min_ms),
            Duration::from_secs(cfg.link.reconnect_max_secs),
        ),
        ack_timeout: Duration::from_secs(cfg.link.ack_timeout_secs),
        probes: probes(&cfg, timing)?,
        batch_budget: crate::link::BATCH_BYTES,
    };
    let mut link = tokio::spawn(link.run());

    let mut forecasting = {
        let refresh_ms = (cfg.forecast_refresh_secs * 1000.0) as i64;
        let now = sample_clock.now_ms();
        let since = now - i64::from(cfg.forecast.history_days) * 86_400_000;
        let mut history = journal.lock().unwrap().history(since)?;
        let prime = cfg.replay.as_ref().is_some_and(|r| r.prime_history);
        if history.is_empty() && prime {
            let step_ms = (cfg.sample_interval_secs * 1000.0) as i64;
            history = sampler
                .replay_history(since, now, step_ms)
                .unwrap_or_default();
            tracing::info!(node_id = %node_id, rows = history.len(), "forecaster primed with the replayed trace's history");
        }
        Forecasting::new(cfg.forecast.clone(), refresh_ms, history)?
    };
    let sampling = async {
        let interval = cfg.sample_interval();
        loop {
            let now = sample_clock.now_ms();
            let own = journal.lock().unwrap().running_pids()?;
            let sample = sampler.sample(now, &own).await;
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
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(())) | Err(_) => unreachable!("the link runs until its journal fails"),
        },
        () = shutdown => Ok(()),
    };
    tracing::info!(node_id = %node_id, "stopping: cancelling running tasks");
    executor.stop_all().await;
    // Reports not yet acknowledged stay in the journal and go out on the next start.
    link.abort();
    endpoint.close(0u32.into(), b"edge stopping");
    outcome
}
