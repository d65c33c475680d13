//! The coordinator's configuration: TOML with every key documented in
//! `configs/cloud.toml`, which is embedded as the default.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tidemill_runtime::config_file::{self, ConfigError};
use tidemill_sched::policies::{PolicyName, SnapshotDriver};
use tidemill_sched::{LinkDefaults, ThroughputError, ThroughputTables};

/// The documented default configuration, printed by `print-default-config`.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/cloud.toml");

/// `TIDEMILL_*` variables of the client commands' flags (`--api`,
/// `--api-token`, `--api-ca`), not config keys.
pub const ENV_RESERVED: &[&str] = &["TIDEMILL_API", "TIDEMILL_API_TOKEN", "TIDEMILL_API_CA"];

/// Everything the coordinator can be told.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudConfig {
    /// UDP address for edges.
    pub quic_listen: SocketAddr,
    /// TCP address for the operator API.
    pub api_listen: SocketAddr,
    /// How the API authenticates and what it accepts.
    pub api: ApiConfig,
    /// Database and PKI directory.
    pub data_dir: PathBuf,
    /// `serve --forget-lost-secrets` (no config key): start although
    /// `secrets.key` is lost or replaced, cancelling the jobs whose sealed
    /// secrets no longer decrypt.
    #[serde(skip)]
    pub forget_lost_secrets: bool,
    /// Names the server certificate covers.
    pub tls_names: Vec<String>,
    /// Seconds of disconnection before a node is offline.
    pub offline_after_secs: u64,
    /// Seconds after this coordinator starts in which the nodes it has not
    /// heard from yet are not marked offline: they are reconnecting.
    pub restart_grace_secs: u64,
    /// Seconds between scheduling rounds.
    pub round_interval_secs: f64,
    /// Peer edges each edge is asked to probe.
    pub probe_peers_per_edge: usize,
    /// Seconds after which a link's estimate is stale.
    pub link_stale_secs: u64,
    /// Hours of downsampled samples and of events kept.
    pub retention_hours: u64,
    /// Hours of raw samples and report ledger kept (at most
    /// `retention_hours`); older samples are downsampled to the forecaster's
    /// slots, so the store grows by slots, not samples.
    pub raw_sample_hours: u64,
    /// Days an ended job (and its tasks) is kept after it ended.
    pub ended_job_retention_days: u64,
    /// Connection settings.
    pub link: LinkConfig,
    /// Bounds on QUIC connections, before and after admission.
    pub quic: QuicConfig,
    /// What one node may have stored, and renewed, per hour.
    pub ingest: IngestConfig,
    /// The coordinator's clock: real or accelerated time.
    pub clock: ClockConfig,
    /// Placement settings.
    pub scheduler: SchedulerConfig,
    /// What `/metrics` exposes.
    pub metrics: MetricsConfig,
    /// The checkpoints the coordinator keeps for moving jobs.
    pub checkpoint: CheckpointConfig,
    /// Where the durable state lives: SQLite or PostgreSQL.
    #[serde(default)]
    pub store: StoreConfig,
    /// How far what edges say is trusted.
    #[serde(default)]
    pub trust: crate::trust::TrustConfig,
    /// How log lines are written: text or json.
    #[serde(default)]
    pub log_format: tidemill_runtime::lifecycle::LogFormat,
}

/// Where the coordinator's durable state lives (`[store]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Which database.
    pub backend: StoreBackend,
    /// PostgreSQL's connection URL (`backend = "postgres"`); it may hold a
    /// password, so it is redacted wherever the config is shown.
    pub url: String,
    /// This replica's name among those sharing the database; empty: the
    /// host's name and the data dir's path.
    pub replica: String,
    /// Seconds the leading replica's lease on the scheduling rounds lasts
    /// unless renewed.
    pub lease_secs: f64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Sqlite,
            url: String::new(),
            replica: String::new(),
            lease_secs: 6.0,
        }
    }
}

impl StoreConfig {
    /// This replica's name ([`StoreConfig::replica`]), stable across its
    /// restarts, so that a restarted leader renews its own lease at once.
    pub fn replica_name(&self, data_dir: &Path) -> String {
        if !self.replica.is_empty() {
            return self.replica.clone();
        }
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into());
        format!("{host}:{}", data_dir.display())
    }
}

/// The store's database: embedded, or a server replicas can share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// `<data_dir>/tidemill.db`, no server.
    #[default]
    Sqlite,
    /// A PostgreSQL database at `url`.
    Postgres,
}

/// The checkpoints the coordinator keeps so that a moved job resumes where
/// it stopped (`[checkpoint]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Complete checkpoints kept per job.
    pub keep: usize,
    /// Largest checkpoint taken, bytes.
    pub max_bytes: u64,
}

/// Bounds on what `/metrics` exposes, so that a large fleet cannot blow up
/// a Prometheus server's series count.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Nodes with a `tidemill_node_last_seen_seconds` series, in node id
    /// order; the rest are counted in `tidemill_node_series_dropped`.
    pub max_node_series: usize,
}

/// The operator API's security and limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Serve HTTPS with a certificate from the coordinator's CA.
    pub tls: bool,
    /// Requests from loopback without a token act as admin (off by default:
    /// any local process, jobs included, could then act as admin).
    pub loopback_is_admin: bool,
    /// Largest request body in bytes (413 above it).
    pub max_body_bytes: usize,
    /// Seconds a client may take to finish the TLS handshake, and to send
    /// each request's headers.
    pub header_timeout_secs: u64,
    /// A connection lasts at most six times this many seconds.
    pub request_timeout_secs: u64,
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections open at once from one address; more are closed as they
    /// arrive.
    pub max_connections_per_address: usize,
}

/// Accelerated time for demos and tests, matching replaying edges.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockConfig {
    /// Coordinator seconds per wall second; 1 is real time.
    pub speed: f64,
    /// Wall time, Unix ms, at which accelerated time starts; `None`: at start.
    #[serde(default)]
    pub anchor_ms: Option<i64>,
    /// Later speeds, each from a time of this clock on: a twin hurries
    /// through the quiet tail of a trace. Empty: `speed` throughout.
    #[serde(default)]
    pub phases: Vec<tidemill_runtime::clock::Phase>,
}

/// Connection settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Seconds between keep-alives.
    pub keep_alive_secs: u64,
    /// Seconds of silence before a connection is dead.
    pub idle_timeout_secs: u64,
    /// Seconds a stream has to deliver its frame or answer.
    pub stream_timeout_secs: u64,
}

/// Bounds on QUIC connections: what an unauthenticated peer may hold, and
/// what an admitted edge's connection may.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicConfig {
    /// Connections at once, admitted or not.
    pub max_connections: usize,
    /// Connections not yet admitted (handshaking, joining or before their
    /// hello), all source addresses together.
    pub max_unadmitted: usize,
    /// Connections not yet admitted from one source address.
    pub max_unadmitted_per_address: usize,
    /// Streams an admitted edge may have open at once.
    pub max_streams_per_connection: u32,
    /// Bytes an admitted edge may have in flight unread, all its streams together.
    pub receive_window_bytes: u32,
    /// Frame bytes being read from every connection together.
    pub frame_bytes_total: usize,
}

/// Per-node budgets, so that one node cannot fill the coordinator's disk or
/// mint certificates.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    /// Reports one node may have stored per hour (coordinator clock).
    pub reports_per_hour: u64,
    /// Report frame bytes one node may have stored per hour (coordinator clock).
    pub report_bytes_per_hour: u64,
    /// Certificate renewals one node may have per hour (wall clock).
    pub renewals_per_hour: u64,
}

/// Placement settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// The policy that plans jobs with a `[work]` section, by its registered name.
    pub policy: PolicyName,
    /// CPU percent below which a node is idle.
    pub idle_cpu_threshold_pct: f32,
    /// Tasks per node at once.
    pub max_tasks_per_node: u32,
    /// The port rank 0 of a distributed job listens on (`MASTER_PORT`).
    pub master_port: u16,
    /// Device class of nodes without an accelerator.
    pub cpu_class: String,
    /// Throughput tables: a device class's directory in ElasticFlow's format,
    /// or a model's built-in one-worker rates per class.
    #[serde(default)]
    pub throughput: BTreeMap<String, ThroughputEntry>,
    /// Accelerator model substrings to device classes, e.g. `"T4" = "T4"`.
    #[serde(default)]
    pub device_classes: BTreeMap<String, String>,
    /// Nodes that are rented cloud GPU boxes, by node id.
    #[serde(default)]
    pub cloud_nodes: BTreeMap<String, CloudNode>,
    /// Link defaults per class, used until a link is measured.
    pub links: LinkDefaults,
    /// The tidal scheduler's settings (`[scheduler.tidemill]`): the
    /// library's own type and defaults, as a simulator topology's `[tidemill]`.
    #[serde(default)]
    pub tidemill: tidemill_sched::Policy,
}

/// One `[scheduler.throughput]` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum ThroughputEntry {
    /// `CLASS = "dir"`: a device class's tables, one ElasticFlow CSV per model.
    Dir(PathBuf),
    /// `[scheduler.throughput.MODEL]`: the model's one-worker rates per class,
    /// used where no file gives the model for a class.
    Model(tidemill_sched::ModelRates),
}

impl<'de> Deserialize<'de> for ThroughputEntry {
    /// A string is a directory, a table a model's rates; the error says which
    /// keys a table takes.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match toml::Value::deserialize(d)? {
            toml::Value::String(dir) => Ok(Self::Dir(dir.into())),
            table @ toml::Value::Table(_) => tidemill_sched::ModelRates::deserialize(table)
                .map(Self::Model)
                .map_err(|e| {
                    D::Error::custom(format!(
                        "a model's rates take global_batch, source and iters_per_s = {{ CLASS = iterations/s }}: {e}"
                    ))
                }),
            other => Err(D::Error::custom(format!(
                "must be a device class's directory of ElasticFlow tables (a string) or a model's rates (a table), not {}",
                other.type_str()
            ))),
        }
    }
}

/// A rented cloud node: always available, at a price.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudNode {
    /// Currency units per GPU-hour.
    pub price_per_gpu_hour: f64,
}

impl SchedulerConfig {
    /// The chosen policy, ready to plan rounds.
    pub fn driver(&self) -> SnapshotDriver {
        SnapshotDriver::new(self.policy, self.tidemill.clone())
    }

    /// The device class of an accelerator model: the class of the first
    /// `device_classes` key it contains (case-insensitive), else the model name.
    pub fn class_of(&self, model: &str) -> String {
        let lower = model.to_lowercase();
        self.device_classes
            .iter()
            .find(|(k, _)| lower.contains(&k.to_lowercase()))
            .map_or_else(|| model.to_string(), |(_, class)| class.clone())
    }

    /// Loads the throughput tables, filling missing models from other
    /// classes, then adds the models' rates given in the config where no
    /// table gives them (they take no part in the cross-class estimates).
    pub fn throughput_tables(&self) -> Result<ThroughputTables, ThroughputError> {
        let mut tables = ThroughputTables::default();
        for (class, entry) in &self.throughput {
            if let ThroughputEntry::Dir(dir) = entry {
                tables.load_dir(class, dir)?;
            }
        }
        tables.fill_missing();
        for (model, entry) in &self.throughput {
            if let ThroughputEntry::Model(rates) = entry {
                tables.insert_rates(model, rates)?;
            }
        }
        Ok(tables)
    }
}

impl Default for CloudConfig {
    fn default() -> Self {
        config_file::embedded_default(DEFAULT_CONFIG)
    }
}

impl CloudConfig {
    /// Loads a config file, or the default when `path` is `None`, overlaid
    /// with the `TIDEMILL_*` environment variables.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_effective(path).map(|(cfg, _)| cfg)
    }

    /// As [`Self::load`], with the effective TOML it was read from.
    pub fn load_effective(path: Option<&Path>) -> Result<(Self, toml::Table), ConfigError> {
        config_file::load_layered(
            path,
            DEFAULT_CONFIG,
            ENV_RESERVED,
            &config_file::prefixed_env()?,
        )
    }

    /// Checks values that TOML types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, value: String, rule| Err(ConfigError::Invalid { key, value, rule });
        if !(self.store.lease_secs >= 1.0 && self.store.lease_secs.is_finite()) {
            return invalid(
                "store.lease_secs",
                self.store.lease_secs.to_string(),
                "must be at least 1: the leader renews its lease three times a lease, and a shorter one would pass to another replica between renewals",
            );
        }
        if self.store.backend == StoreBackend::Postgres
            && !(self.store.url.starts_with("postgres://")
                || self.store.url.starts_with("postgresql://"))
        {
            return invalid(
                "store.url",
                config_file::redact_url(&self.store.url),
                "is not a PostgreSQL URL, and backend = \"postgres\" needs one: set [store] url, or TIDEMILL_STORE__URL, to postgres://USER:PASSWORD@HOST:PORT/DATABASE",
            );
        }
        if !self.api_listen.ip().is_loopback() && !self.api.tls {
            return invalid(
                "api_listen",
                self.api_listen.to_string(),
                "is not a loopback address, and the API would take tokens in clear text there: set [api] tls = true (clients then pass --api-ca <data_dir>/ca.pem and --api-token), or listen on 127.0.0.1",
            );
        }
        if self.api.max_body_bytes == 0
            || self.api.header_timeout_secs == 0
            || self.api.request_timeout_secs == 0
            || self.api.max_connections == 0
            || self.api.max_connections_per_address == 0
        {
            return invalid(
                "api",
                format!(
                    "max_body_bytes {}, header_timeout_secs {}, request_timeout_secs {}, max_connections {}, max_connections_per_address {}",
                    self.api.max_body_bytes,
                    self.api.header_timeout_secs,
                    self.api.request_timeout_secs,
                    self.api.max_connections,
                    self.api.max_connections_per_address
                ),
                "each must be at least 1",
            );
        }
        if self.checkpoint.keep == 0 || self.checkpoint.max_bytes == 0 {
            return invalid(
                "checkpoint",
                format!(
                    "keep {}, max_bytes {}",
                    self.checkpoint.keep, self.checkpoint.max_bytes
                ),
                "each must be at least 1",
            );
        }
        let q = &self.quic;
        let i = &self.ingest;
        if [
            q.max_connections,
            q.max_unadmitted,
            q.max_unadmitted_per_address,
            q.max_streams_per_connection as usize,
            q.frame_bytes_total,
        ]
        .contains(&0)
            || [
                i.reports_per_hour,
                i.report_bytes_per_hour,
                i.renewals_per_hour,
            ]
            .contains(&0)
        {
            return invalid(
                "quic, ingest",
                format!("{q:?}, {i:?}"),
                "each must be at least 1",
            );
        }
        let frame = (tidemill_proto::MAX_FRAME_LEN + tidemill_proto::HEADER_LEN) as u64;
        if u64::from(q.receive_window_bytes) < frame || (q.frame_bytes_total as u64) < frame {
            return invalid(
                "quic.receive_window_bytes, quic.frame_bytes_total",
                format!("{}, {}", q.receive_window_bytes, q.frame_bytes_total),
                "each must hold one largest frame: at least 1048580",
            );
        }
        if self.tls_names.is_empty() {
            return invalid(
                "tls_names",
                "[]".into(),
                "must name at least one host or address",
            );
        }
        if self.link_stale_secs < 3_600 {
            return invalid(
                "link_stale_secs",
                self.link_stale_secs.to_string(),
                "must be at least 3600: links are probed in its last eighth, and edges check hourly",
            );
        }
        if !(self.round_interval_secs.is_finite() && self.round_interval_secs >= 0.05) {
            return invalid(
                "round_interval_secs",
                self.round_interval_secs.to_string(),
                "must be at least 0.05 seconds",
            );
        }
        if self.link.keep_alive_secs == 0
            || self.link.keep_alive_secs >= self.link.idle_timeout_secs
        {
            return invalid(
                "link.keep_alive_secs",
                self.link.keep_alive_secs.to_string(),
                "must be at least 1 and below link.idle_timeout_secs",
            );
        }
        if self.retention_hours == 0 {
            return invalid("retention_hours", "0".into(), "must be at least 1");
        }
        if self.raw_sample_hours == 0 {
            return invalid("raw_sample_hours", "0".into(), "must be at least 1");
        }
        if let Some((key, value, rule)) = self.trust.invalid() {
            return Err(ConfigError::InvalidInTable {
                table: "trust",
                key,
                value,
                rule,
            });
        }
        if self.ended_job_retention_days == 0 {
            return invalid("ended_job_retention_days", "0".into(), "must be at least 1");
        }
        if self.link.stream_timeout_secs == 0 {
            return invalid("link.stream_timeout_secs", "0".into(), "must be at least 1");
        }
        let t = self.scheduler.idle_cpu_threshold_pct;
        if !(t > 0.0 && t <= 100.0) {
            return invalid(
                "scheduler.idle_cpu_threshold_pct",
                t.to_string(),
                "must be in (0, 100]",
            );
        }
        let phases = &self.clock.phases;
        let speeds = phases.iter().map(|p| ("clock.phases.speed", p.speed));
        for (key, speed) in std::iter::once(("clock.speed", self.clock.speed)).chain(speeds) {
            let rule = "must be between 1 (real time) and 100000";
            if !tidemill_runtime::clock::SPEEDS.contains(&speed) {
                return invalid(key, speed.to_string(), rule);
            }
        }
        for w in phases.windows(2) {
            if w[1].from_ms <= w[0].from_ms {
                return invalid(
                    "clock.phases.from_ms",
                    w[1].from_ms.to_string(),
                    "must be later than the phase before it: list the phases in order of time",
                );
            }
        }
        let s = &self.scheduler;
        if let Err(e) = s.tidemill.validate() {
            return Err(ConfigError::InvalidInTable {
                table: "scheduler.tidemill",
                key: e.key,
                value: e.value,
                rule: e.expected,
            });
        }
        for (id, node) in &s.cloud_nodes {
            if !(node.price_per_gpu_hour.is_finite() && node.price_per_gpu_hour >= 0.0) {
                return Err(ConfigError::InvalidInTable {
                    table: "scheduler.cloud_nodes",
                    key: "price_per_gpu_hour",
                    value: format!("{} (node {id})", node.price_per_gpu_hour),
                    rule: "must be 0 or more",
                });
            }
        }
        for (name, l) in [
            ("edge_edge", s.links.edge_edge),
            ("cloud_edge", s.links.cloud_edge),
            ("cloud_cloud", s.links.cloud_cloud),
        ] {
            if !(l.bandwidth_mbps > 0.0 && l.latency_ms >= 0.0 && (0.0..1.0).contains(&l.loss)) {
                return Err(ConfigError::InvalidInTable {
                    table: "scheduler.links",
                    key: name,
                    value: format!("{} Mb/s, {} ms, {}", l.bandwidth_mbps, l.latency_ms, l.loss),
                    rule: "bandwidth must be above 0, latency 0 or more, loss in [0, 1)",
                });
            }
        }
        if self.scheduler.max_tasks_per_node == 0 {
            return invalid(
                "scheduler.max_tasks_per_node",
                "0".into(),
                "must be at least 1",
            );
        }
        Ok(())
    }

    /// Seconds of disconnection before a node is offline, as a duration.
    pub fn offline_after(&self) -> Duration {
        Duration::from_secs(self.offline_after_secs)
    }

    /// Hours raw samples are kept: `raw_sample_hours`, at most
    /// `retention_hours`.
    pub fn raw_hours(&self) -> u64 {
        self.raw_sample_hours.min(self.retention_hours)
    }

    /// How long after a start nodes not heard from yet keep their state.
    pub fn restart_grace(&self) -> Duration {
        Duration::from_secs(self.restart_grace_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses_and_validates() {
        let cfg = CloudConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.quic_listen, "127.0.0.1:7400".parse().unwrap());
        assert_eq!(cfg.scheduler.policy, PolicyName::Tidemill);
        assert_eq!(cfg.scheduler.class_of("Tesla T4"), "T4");
        assert_eq!(cfg.scheduler.class_of("NVIDIA A100-SXM4-80GB"), "A100");
        assert_eq!(cfg.scheduler.class_of("Mali-G78"), "Mali-G78");
        // 1000 Mb/s is 125 MB/s.
        assert_eq!(cfg.scheduler.links.edge_edge.spec().bandwidth_bps, 125e6);
        // The documented [scheduler.tidemill] values are the library's defaults.
        assert_eq!(cfg.scheduler.tidemill, tidemill_sched::Policy::default());
    }

    #[test]
    fn named_models_have_built_in_rates_that_measured_tables_override() {
        let tables = CloudConfig::default()
            .scheduler
            .throughput_tables()
            .unwrap();
        for class in ["cpu", "T4", "V100", "A100"] {
            for model in ["resnet50", "resnet18", "bert", "deepspeech2", "yolov3"] {
                let t = tables.lookup(class, model, 32, 1);
                assert!(t.is_some_and(|t| t.iters_per_s > 0.0), "{class} {model}");
            }
        }
        // Samples/s is kept at another batch: 0.154 it/s at 57 is 0.154 × 57 / 32 at 32.
        let cpu = tables.lookup("cpu", "resnet50", 32, 1).unwrap();
        assert!(
            (cpu.iters_per_s - 0.154 * 57.0 / 32.0).abs() < 1e-9,
            "{cpu:?}"
        );

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("resnet50.csv"),
            "global_batch_size,1\n32,9.0\n",
        )
        .unwrap();
        let text = DEFAULT_CONFIG.replace(
            "[scheduler.throughput]\n",
            &format!("[scheduler.throughput]\nT4 = {:?}\n", dir.path()),
        );
        let cfg = config_file::parse::<CloudConfig>(&text, Path::new("c.toml")).unwrap();
        let tables = cfg.scheduler.throughput_tables().unwrap();
        assert_eq!(
            tables.lookup("T4", "resnet50", 32, 1).unwrap().iters_per_s,
            9.0
        );
        assert!(tables.lookup("cpu", "resnet50", 57, 1).is_some());
    }

    #[test]
    fn a_bad_built_in_rate_names_the_model_and_class() {
        let text = DEFAULT_CONFIG.replace("cpu = 0.154,", "cpu = -1.0,");
        let cfg = config_file::parse::<CloudConfig>(&text, Path::new("c.toml")).unwrap();
        let err = cfg.scheduler.throughput_tables().unwrap_err().to_string();
        assert!(
            err.contains("model resnet50 on class cpu: -1 iterations/s"),
            "{err}"
        );
        let text = DEFAULT_CONFIG.replace("global_batch = 57\n", "batch = 57\n");
        let err = config_file::parse::<CloudConfig>(&text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a model's rates take global_batch, source and iters_per_s"),
            "{err}"
        );
    }

    #[test]
    fn clock_phases_are_read_in_order_and_named_when_not() {
        let with = |phases: &str| {
            let text = DEFAULT_CONFIG.replace("speed = 1.0\n", &format!("speed = 60.0\n{phases}"));
            config_file::parse::<CloudConfig>(&text, Path::new("c.toml")).unwrap()
        };
        let cfg = with(
            "phases = [{ from_ms = 1000, speed = 600.0 }, { from_ms = 2000, speed = 6000.0 }]\n",
        );
        cfg.validate().unwrap();
        assert_eq!(cfg.clock.phases[1].from_ms, 2000);
        assert_eq!(cfg.clock.phases[1].speed, 6000.0);
        let late_first = with(
            "phases = [{ from_ms = 2000, speed = 600.0 }, { from_ms = 1000, speed = 600.0 }]\n",
        );
        let err = late_first.validate().unwrap_err().to_string();
        assert!(
            err.contains("`clock.phases.from_ms` = 1000") && err.contains("in order"),
            "{err}"
        );
        let err = with("phases = [{ from_ms = 1000, speed = 0.5 }]\n")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("`clock.phases.speed` = 0.5"), "{err}");
        let slow = DEFAULT_CONFIG.replace("speed = 1.0\n", "speed = 0.5\n");
        let err = config_file::parse::<CloudConfig>(&slow, Path::new("c.toml"))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("`clock.speed` = 0.5"), "{err}");
    }

    #[test]
    fn a_bad_scheduler_setting_is_named_with_its_table() {
        let mut cfg = CloudConfig::default();
        cfg.scheduler.tidemill.max_edge_nodes = 0;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("`scheduler.tidemill.max_edge_nodes` = 0 is invalid: at least 1"),
            "{err}"
        );
    }

    #[test]
    fn a_promise_lead_is_read_in_hours_and_must_be_positive() {
        let with = |line: &str| DEFAULT_CONFIG.replace("promise_lead_h = 1.0", line);
        assert_eq!(
            CloudConfig::default().scheduler.tidemill.promise_lead_ms,
            3_600_000
        );
        let cfg =
            config_file::parse::<CloudConfig>(&with("promise_lead_h = 0.5"), Path::new("c.toml"))
                .unwrap();
        assert_eq!(cfg.scheduler.tidemill.promise_lead_ms, 1_800_000);
        cfg.validate().unwrap();
        let cfg = config_file::parse::<CloudConfig>(&with(""), Path::new("c.toml")).unwrap();
        assert_eq!(cfg.scheduler.tidemill.promise_lead_ms, 3_600_000);
        let cfg =
            config_file::parse::<CloudConfig>(&with("promise_lead_h = 0"), Path::new("c.toml"))
                .unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("`scheduler.tidemill.promise_lead_h` = 0 is invalid: more than 0 hours"),
            "{err}"
        );
    }

    #[test]
    fn the_urgent_laxity_is_read_in_hours_may_be_off_and_not_negative() {
        let with = |line: &str| DEFAULT_CONFIG.replace("urgent_laxity_h = 3.0", line);
        let read = |line: &str| {
            config_file::parse::<CloudConfig>(&with(line), Path::new("c.toml")).unwrap()
        };
        assert_eq!(
            CloudConfig::default().scheduler.tidemill.urgent_laxity_ms,
            3 * 3_600_000
        );
        assert_eq!(read("").scheduler.tidemill.urgent_laxity_ms, 3 * 3_600_000);
        let cfg = read("urgent_laxity_h = 0.5");
        assert_eq!(cfg.scheduler.tidemill.urgent_laxity_ms, 1_800_000);
        cfg.validate().unwrap();
        let off = read("urgent_laxity_h = inf");
        assert_eq!(off.scheduler.tidemill.urgent_laxity_ms, i64::MAX);
        off.validate().unwrap();
        let err = read("urgent_laxity_h = -1.0")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`scheduler.tidemill.urgent_laxity_h` = -1 is invalid: 0 hours or more"),
            "{err}"
        );
    }

    #[test]
    fn raw_samples_are_kept_at_least_an_hour_and_at_most_the_retention() {
        let mut cfg = CloudConfig::default();
        assert_eq!((cfg.raw_sample_hours, cfg.raw_hours()), (48, 48));
        cfg.retention_hours = 24;
        assert_eq!(cfg.raw_hours(), 24, "retention caps the raw window");
        cfg.validate().unwrap();
        cfg.raw_sample_hours = 0;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("raw_sample_hours"), "{err}");
    }

    #[test]
    fn rejects_bad_values_naming_the_key() {
        let mut cfg = CloudConfig::default();
        cfg.scheduler.idle_cpu_threshold_pct = 0.0;
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("scheduler.idle_cpu_threshold_pct")
        );
        let err = config_file::parse::<CloudConfig>("policy = 3", Path::new("c.toml")).unwrap_err();
        assert!(err.to_string().contains("c.toml"), "{err}");
        let unknown = DEFAULT_CONFIG.replace("policy = \"tidemill\"", "policy = \"tidal\"");
        let err = config_file::parse::<CloudConfig>(&unknown, Path::new("c.toml")).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown policy \"tidal\": expected one of tidemill, edgeflow"),
            "{err}"
        );
    }
}
