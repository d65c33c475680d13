//! `tidemill-cloud serve`: opens the store and the PKI, binds the QUIC and HTTP
//! listeners, and runs ingest, scheduling rounds and the API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tidemill_runtime::clock::{Clock, SharedClock, SystemClock};
use tidemill_runtime::config_file::ConfigError;
use tidemill_runtime::datadir;
use tidemill_runtime::identity::Authority;
use tidemill_runtime::quic::{self, EndpointError, Timing};
use tidemill_runtime::tls::{self, TlsError};
use tokio::task::JoinSet;

use crate::config::CloudConfig;
use crate::coordinator::Coordinator;
use crate::store::{Store, StoreError};
use crate::{api, ingest, round};

/// The stateless-reset key file inside the data dir.
const RESET_KEY_FILE: &str = "quic-reset-key";

/// Why the coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data dir cannot be created.
    #[error("cannot create data dir {path}: {source}; pass a writable --data-dir")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another coordinator holds the data dir.
    #[error(
        "another tidemill-cloud ({holder}) is running on data dir {path}; stop it, or pass another --data-dir"
    )]
    Locked {
        /// The data dir.
        path: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// The store cannot be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The PKI cannot be loaded or created.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The QUIC endpoint cannot be set up.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The API address cannot be bound.
    #[error("cannot listen for the API on {addr}: {source}; is another process using the port?")]
    Api {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A throughput table named in `scheduler.throughput` is unusable.
    #[error("config key scheduler.throughput: {0}")]
    Throughput(#[from] tidemill_sched::ThroughputError),
}

/// A running coordinator.
pub struct Server {
    /// Where edges connect.
    pub quic_addr: SocketAddr,
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// The CA certificate edges need.
    pub ca_path: PathBuf,
    /// The shared state, for in-process embedding.
    pub coordinator: Arc<Coordinator>,
    endpoint: quinn::Endpoint,
    tasks: JoinSet<()>,
    /// Held while the coordinator runs: the data dir's lock.
    _lock: datadir::DataDirLock,
}

/// Bytes of first packets quinn holds for connections not yet accepted, all
/// together (its default is 100 MB).
const INCOMING_BUFFER_TOTAL: u64 = 4 << 20;

/// Connections the kernel holds for the API until the loop accepts them (at
/// once; those over `[api] max_connections` or
/// `max_connections_per_address` are then closed). The kernel caps it at
/// net.core.somaxconn.
const API_BACKLOG: u32 = 4096;

fn api_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(API_BACKLOG)
}

/// Takes the data dir's lock (shared with the edge: tidemill_runtime::datadir)
/// for as long as the returned guard lives, naming its holder to the next one.
fn lock_data_dir(dir: &std::path::Path) -> Result<datadir::DataDirLock, CloudError> {
    datadir::lock(dir).map_err(|e| match e {
        datadir::LockError::Held { path, holder } => CloudError::Locked { path, holder },
        datadir::LockError::Io { path, source } => CloudError::DataDir { path, source },
    })
}

/// Starts a coordinator and returns once it listens.
pub async fn start(cfg: CloudConfig, clock: SharedClock) -> Result<Server, CloudError> {
    cfg.validate()?;
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| CloudError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    let lock = lock_data_dir(&cfg.data_dir)?;
    let throughput = cfg.scheduler.throughput_tables()?;
    let policy = cfg.scheduler.policy;
    let mut store = if cfg.forget_lost_secrets {
        Store::open_forgetting_lost_secrets(&cfg.data_dir, &cfg.store, SystemClock.now_ms())?.0
    } else {
        Store::open_with(&cfg.data_dir, &cfg.store)?
    };
    store.set_report_bounds(
        cfg.trust
            .report_bounds(cfg.clock.speed, cfg.retention_hours),
    );
    crate::auth::bootstrap(&mut store, &cfg.data_dir)?;
    // Certificates are checked against real time, whatever the plans' clock.
    let identity = tls::load_or_create(&cfg.data_dir, &cfg.tls_names, SystemClock.now_ms())?;
    let authority = Authority::load(&cfg.data_dir).map_err(EndpointError::from)?;
    let api_tls = if cfg.api.tls {
        Some(crate::http::acceptor(&identity).map_err(|e| EndpointError::from(TlsError::from(e)))?)
    } else {
        None
    };
    let ca_path = identity.ca_path.clone();
    let reset_key = quic::load_or_create_reset_key(&cfg.data_dir.join(RESET_KEY_FILE))?;
    let timing = Timing {
        keep_alive: Duration::from_secs(cfg.link.keep_alive_secs),
        idle_timeout: Duration::from_secs(cfg.link.idle_timeout_secs),
    };
    let mut config = quic::server_config(identity, quic::Clients::CertifiedOrJoining, timing)?;
    config
        .transport_config(quic::bounded_transport(timing)?)
        .max_incoming(cfg.quic.max_unadmitted)
        .incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
    let endpoint = quic::server(cfg.quic_listen, config, &reset_key)?;
    let quic_addr = endpoint.local_addr().map_err(|source| {
        CloudError::Endpoint(EndpointError::Bind {
            addr: cfg.quic_listen,
            source,
        })
    })?;
    let listener = api_listener(cfg.api_listen).map_err(|source| CloudError::Api {
        addr: cfg.api_listen,
        source,
    })?;
    let api_addr = listener.local_addr().map_err(|source| CloudError::Api {
        addr: cfg.api_listen,
        source,
    })?;

    let coordinator = Arc::new(Coordinator::new(store, cfg, clock, throughput, authority));
    let _ = coordinator.endpoint.set(endpoint.clone());
    let mut tasks = JoinSet::new();
    tasks.spawn(ingest::accept_loop(endpoint.clone(), coordinator.clone()));
    tasks.spawn(crate::leadership::run(coordinator.clone()));
    tasks.spawn(round::run(coordinator.clone()));
    let app = api::router(coordinator.clone());
    let limits = crate::http::Limits {
        max_connections: coordinator.cfg.api.max_connections,
        max_connections_per_address: coordinator.cfg.api.max_connections_per_address,
        header_timeout: Duration::from_secs(coordinator.cfg.api.header_timeout_secs),
        request_timeout: Duration::from_secs(coordinator.cfg.api.request_timeout_secs),
    };
    tasks.spawn(crate::http::serve(listener, app, api_tls, limits));
    tracing::info!(%quic_addr, %api_addr, ca = %ca_path.display(), %policy, "tidemill-cloud serving");
    Ok(Server {
        quic_addr,
        api_addr,
        ca_path,
        coordinator,
        endpoint,
        tasks,
        _lock: lock,
    })
}

impl Server {
    /// Stops serving: closes edge connections and ends every task.
    pub async fn stop(mut self) {
        quic::close_stopping(&self.endpoint, "coordinator");
        self.tasks.shutdown().await;
        self.endpoint.wait_idle().await;
    }
}
