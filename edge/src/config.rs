//! The edge daemon's configuration: TOML with every key documented in
//! `configs/edge.toml`, which is embedded as the default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tidemill_runtime::config_file::{self, ConfigError};

use crate::coordinators::Coordinators;

/// The documented default configuration, printed by `print-default-config`.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/edge.toml");

/// Everything the edge daemon can be told.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// Stable node identity; empty means the host name.
    pub node_id: String,
    /// The site the box stands at, shared by boxes with the same tide; empty
    /// for none. A new box's forecast starts from its site peers'.
    pub site: String,
    /// The coordinator's QUIC address, or several: replicas tried in order,
    /// the edge moving to the next when a connection is lost or refused.
    pub coordinator: Coordinators,
    /// The name checked against the coordinator's certificate.
    pub server_name: String,
    /// The coordinator's CA certificate, if not the one received at join.
    pub ca: PathBuf,
    /// The join token used when the data dir holds no certificate yet.
    pub token: String,
    /// Where the journal lives.
    pub data_dir: PathBuf,
    /// Seconds between samples.
    pub sample_interval_secs: f64,
    /// Seconds (of sample-clock time) between forecasts.
    pub forecast_refresh_secs: f64,
    /// The forecaster's settings.
    #[serde(default)]
    pub forecast: tidemill_forecast::ForecastConfig,
    /// Connection settings.
    pub link: LinkConfig,
    /// Link probe settings.
    pub probe: ProbeConfig,
    /// Task execution settings.
    pub tasks: TaskConfig,
    /// How accelerators are found.
    pub accelerators: AcceleratorConfig,
    /// Replaces detected hardware.
    #[serde(default)]
    pub capabilities: Option<CapabilityOverride>,
    /// Replays a trace instead of sampling the host.
    #[serde(default)]
    pub replay: Option<ReplayConfig>,
    /// How log lines are written: text or json.
    #[serde(default)]
    pub log_format: tidemill_runtime::lifecycle::LogFormat,
    /// The local status port (off unless set).
    #[serde(default)]
    pub status: StatusConfig,
    /// How checkpoints move with their jobs, and where they are kept.
    pub checkpoint: crate::checkpoint_config::CheckpointTable,
}

/// The local status port (`[status]`): off by default, loopback only unless
/// a bearer token guards it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusConfig {
    /// HOST:PORT to listen on; empty: off.
    pub listen: String,
    /// A file with the bearer token every request must send; empty: none.
    pub token_file: PathBuf,
}

impl StatusConfig {
    /// The address to listen on, if the port is on and the address parses
    /// ([`EdgeConfig::validate`] refuses one that does not).
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen.parse().ok()
    }

    /// The token file, if one is set.
    pub fn token_file(&self) -> Option<&Path> {
        (!self.token_file.as_os_str().is_empty()).then_some(self.token_file.as_path())
    }

    /// Checks the address, and that a non-loopback one has a token.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Ok(());
        }
        let invalid = |rule: &'static str| {
            Err(ConfigError::Invalid {
                key: "status.listen",
                value: self.listen.clone(),
                rule,
            })
        };
        match self.listen_addr() {
            None => invalid(
                "must be HOST:PORT with an IP address, such as 127.0.0.1:7491, or empty to turn the status port off",
            ),
            Some(a) if !a.ip().is_loopback() && self.token_file().is_none() => invalid(
                "is not a loopback address, and the status port has no other protection there: set [status] token_file to a file holding a bearer token, or listen on 127.0.0.1",
            ),
            Some(_) => Ok(()),
        }
    }
}

/// Connection settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Seconds between keep-alives.
    pub keep_alive_secs: u64,
    /// Seconds of silence before the connection is dead.
    pub idle_timeout_secs: u64,
    /// Seconds to wait for an acknowledgement.
    pub ack_timeout_secs: u64,
    /// First reconnect delay, ms.
    pub reconnect_min_ms: u64,
    /// Largest reconnect delay, s.
    pub reconnect_max_secs: u64,
    /// Days before its expiry that the node renews its certificate.
    pub renew_before_days: u64,
}

/// Link probe settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Seconds between rounds of probes.
    pub interval_secs: u64,
    /// Bytes of the timed transfer, sent only for links too fast for trains.
    pub bytes: usize,
    /// Seconds between active probes of the coordinator link.
    pub rate_refresh_secs: u64,
    /// Bytes (sent and received) probes may spend per sliding day.
    pub daily_budget_bytes: u64,
    /// UDP port of the responder; 0 for any.
    pub listen_port: u16,
    /// Whether to probe and answer probes.
    pub enabled: bool,
}

/// Task execution settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Seconds between SIGTERM and SIGKILL.
    pub grace_secs: u64,
    /// Output lines kept and reported.
    pub output_tail_lines: usize,
    /// Where tasks run; empty means under the data dir.
    pub work_dir: PathBuf,
    /// The unprivileged user tasks run as when the daemon is root.
    pub user: String,
    /// Hours an ended task's work dir is kept (under the data dir only).
    pub keep_ended_hours: u64,
    /// Days a job's checkpoint dir under the data dir is kept after it was
    /// last written, once no task of the job runs here.
    pub checkpoint_retention_days: u64,
    /// The uids (`FIRST-LAST`) a root daemon runs tasks as, one per job, so
    /// that one tenant's task cannot read another's files; empty: every task
    /// runs as `user`.
    pub uid_range: String,
    /// Where the jobs' checkpoint dirs (`job-<id>`) are made; empty means
    /// `<data_dir>/checkpoints`. The operator's choice, never the job's.
    pub checkpoint_dir: PathBuf,
    /// Whether single-node tasks get a network namespace of their own.
    pub network: TaskNetwork,
}

/// The network a single-node task gets (`[tasks] network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskNetwork {
    /// Its own namespace with only its own loopback, where the host allows
    /// it (the daemon is root); else the host's, with a warning.
    Private,
    /// The host's network, 127.0.0.1 included.
    Host,
}

/// How accelerators are found.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorConfig {
    /// The nvidia-smi program.
    pub nvidia_smi: String,
    /// SoC load files.
    #[serde(default)]
    pub sysfs: Vec<SysfsLoad>,
}

/// One SoC accelerator load file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SysfsLoad {
    /// The load file.
    pub path: PathBuf,
    /// The model name to register.
    pub model: String,
    /// How the file's number maps to percent.
    pub scale: LoadScale,
}

/// How a load file's number maps to percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadScale {
    /// 0 to 1000.
    Permille,
    /// 0 to 100.
    Percent,
}

/// Hardware to pose as.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityOverride {
    /// Logical cores.
    pub cpu_cores: Option<u32>,
    /// Memory in bytes.
    pub mem_bytes: Option<u64>,
    /// Accelerators.
    pub accelerators: Option<Vec<AcceleratorOverride>>,
}

/// One accelerator to pose as.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorOverride {
    /// Model name, for example `Tesla T4`.
    pub model: String,
    /// Device memory in bytes.
    pub mem_bytes: Option<u64>,
}

/// A trace to replay as if it were the host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// The CSV file, optionally gzip.
    pub file: PathBuf,
    /// The node whose rows are replayed.
    pub node: String,
    /// Time compression factor.
    #[serde(default = "one")]
    pub speed: f64,
    /// Wall time, Unix ms, at which the accelerated clock and the trace start;
    /// processes sharing it agree on the time. `None`: this process's start.
    #[serde(default)]
    pub clock_anchor_ms: Option<i64>,
    /// Prime the forecaster with the trace's days before the start when the
    /// journal holds no history, so a fresh replaying edge forecasts at once.
    #[serde(default = "yes")]
    pub prime_history: bool,
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

impl Default for EdgeConfig {
    fn default() -> Self {
        config_file::embedded_default(DEFAULT_CONFIG)
    }
}

impl EdgeConfig {
    /// The CA file to trust instead of the one received at join, if set.
    pub fn ca_override(&self) -> Option<&Path> {
        (!self.ca.as_os_str().is_empty()).then_some(self.ca.as_path())
    }

    /// The join token, if set.
    pub fn join_token(&self) -> Option<&str> {
        (!self.token.trim().is_empty()).then_some(self.token.trim())
    }

    /// Loads a config file, or the default when `path` is `None`, overlaid
    /// with the `TIDEMILL_*` environment variables.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_effective(path).map(|(cfg, _)| cfg)
    }

    /// As [`Self::load`], with the effective TOML it was read from.
    pub fn load_effective(path: Option<&Path>) -> Result<(Self, toml::Table), ConfigError> {
        config_file::load_layered(path, DEFAULT_CONFIG, &[], &config_file::prefixed_env()?)
    }

    /// Checks values that TOML types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, value: String, rule| Err(ConfigError::Invalid { key, value, rule });
        self.status.validate()?;
        if let Some((key, value, rule)) = self.checkpoint.problem() {
            return invalid(key, value, rule);
        }
        if self.site().and_then(tidemill_proto::site_problem).is_some() {
            return invalid(
                "site",
                format!("{:?}", self.site),
                "must be empty or 1 to 64 lower-case letters, digits, '.', '_' or '-', such as \"mec-07\"",
            );
        }
        if !(self.sample_interval_secs.is_finite() && self.sample_interval_secs >= 0.01) {
            return invalid(
                "sample_interval_secs",
                self.sample_interval_secs.to_string(),
                "must be at least 0.01 seconds",
            );
        }
        if !(self.forecast_refresh_secs.is_finite() && self.forecast_refresh_secs >= 1.0) {
            return invalid(
                "forecast_refresh_secs",
                self.forecast_refresh_secs.to_string(),
                "must be at least 1 second",
            );
        }
        if let Err(e) = self.forecast.validate() {
            return Err(ConfigError::InvalidInTable {
                table: "forecast",
                key: e.key,
                value: e.value,
                rule: e.rule,
            });
        }
        if self.coordinator.as_slice().is_empty() {
            return invalid(
                "coordinator",
                "[]".into(),
                "must list at least one HOST:PORT, such as [\"10.0.0.5:7400\"]",
            );
        }
        if let Err((addr, _)) = self.coordinator.resolve() {
            return invalid(
                "coordinator",
                format!("{addr:?}"),
                "must be HOST:PORT, for example 10.0.0.5:7400 or coord.example:7400",
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
        if !self.tasks.uid_range.trim().is_empty()
            && crate::uids::UidRange::parse(&self.tasks.uid_range).is_none()
        {
            return invalid(
                "tasks.uid_range",
                format!("{:?}", self.tasks.uid_range),
                "must be FIRST-LAST with 0 < FIRST <= LAST < 4294967295, such as \"60600-61099\", or empty to run every task as [tasks] user",
            );
        }
        if self.probe.interval_secs == 0 {
            return invalid("probe.interval_secs", "0".into(), "must be at least 1");
        }
        if self.probe.rate_refresh_secs < self.probe.interval_secs {
            return invalid(
                "probe.rate_refresh_secs",
                self.probe.rate_refresh_secs.to_string(),
                "must be at least probe.interval_secs (probes run once a round)",
            );
        }
        if !(1..=(512 << 10)).contains(&self.probe.bytes) {
            return invalid(
                "probe.bytes",
                self.probe.bytes.to_string(),
                "must be 1 to 524288, well under the frame cap",
            );
        }
        if self.link.ack_timeout_secs == 0 {
            return invalid("link.ack_timeout_secs", "0".into(), "must be at least 1");
        }
        if self.link.reconnect_min_ms == 0 {
            return invalid("link.reconnect_min_ms", "0".into(), "must be at least 1");
        }
        if let Some(r) = &self.replay {
            if !(r.speed.is_finite() && r.speed > 0.0) {
                return invalid(
                    "replay.speed",
                    r.speed.to_string(),
                    "must be a positive number",
                );
            }
            if r.node.is_empty() {
                return invalid(
                    "replay.node",
                    "\"\"".into(),
                    "must name a node in the trace",
                );
            }
        }
        Ok(())
    }

    /// The coordinator's first address, resolved: the one joins and
    /// `doctor` use.
    pub fn coordinator_addr(&self) -> std::io::Result<SocketAddr> {
        let mut addrs = self.coordinator.resolve().map_err(|(_, e)| e)?;
        Ok(addrs.swap_remove(0))
    }

    /// The TLS name to verify: `server_name`, else the host part of the
    /// first `coordinator` address. Replicas share one server identity, so
    /// one name serves the whole list.
    pub fn tls_name(&self) -> String {
        if !self.server_name.is_empty() {
            return self.server_name.clone();
        }
        let first = self.coordinator.first();
        let host = first.rsplit_once(':').map_or(first, |(h, _)| h);
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    }

    /// Makes the data dir and the task roots absolute, once, at start: a
    /// relative path would otherwise mean something else to a task, whose
    /// working directory is its own work dir, and to every later `chdir`.
    pub fn absolute_paths(&mut self) -> Result<(), ConfigError> {
        let cwd_gone = |key, path: &Path| ConfigError::Invalid {
            key,
            value: format!("\"{}\"", path.display()),
            rule: "a relative path needs a working directory that still exists; give an absolute path",
        };
        self.data_dir = std::path::absolute(&self.data_dir)
            .map_err(|_| cwd_gone("data_dir", &self.data_dir))?;
        for (key, dir) in [
            ("tasks.work_dir", &mut self.tasks.work_dir),
            ("tasks.checkpoint_dir", &mut self.tasks.checkpoint_dir),
        ] {
            if !dir.as_os_str().is_empty() {
                *dir = std::path::absolute(&*dir).map_err(|_| cwd_gone(key, dir))?;
            }
        }
        Ok(())
    }

    /// The site, if one is set.
    pub fn site(&self) -> Option<&str> {
        Some(self.site.as_str()).filter(|s| !s.is_empty())
    }

    /// The node id: configured, else the host name.
    pub fn resolved_node_id(&self) -> String {
        if !self.node_id.is_empty() {
            return self.node_id.clone();
        }
        sysinfo::System::host_name().unwrap_or_else(|_| "edge".to_string())
    }

    /// Time between samples.
    pub fn sample_interval(&self) -> Duration {
        Duration::from_secs_f64(self.sample_interval_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses_and_validates() {
        let cfg = EdgeConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.sample_interval_secs, 10.0);
        assert_eq!(cfg.accelerators.sysfs.len(), 2);
        assert!(cfg.replay.is_none());
    }

    #[test]
    fn commented_examples_in_the_default_parse() {
        let uncommented: String = DEFAULT_CONFIG
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.starts_with('[') || rest.contains(" = ") => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let cfg: EdgeConfig = config_file::parse(&uncommented, Path::new("x")).unwrap();
        assert_eq!(cfg.capabilities.unwrap().cpu_cores, Some(4));
        assert_eq!(cfg.replay.unwrap().speed, 60.0);
    }

    /// A relative data dir and task roots become absolute against the
    /// working directory; empty task roots stay empty (under the data dir).
    #[test]
    fn relative_paths_become_absolute_once() {
        let mut cfg = EdgeConfig {
            data_dir: "edge-e0".into(),
            ..EdgeConfig::default()
        };
        cfg.tasks.checkpoint_dir = "shared/ck".into();
        cfg.absolute_paths().unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(cfg.data_dir, cwd.join("edge-e0"));
        assert_eq!(cfg.tasks.checkpoint_dir, cwd.join("shared/ck"));
        assert!(cfg.tasks.work_dir.as_os_str().is_empty());
        cfg.absolute_paths().unwrap();
        assert_eq!(cfg.data_dir, cwd.join("edge-e0"), "idempotent");
    }

    #[test]
    fn tls_name_defaults_to_the_coordinator_host() {
        let mut cfg = EdgeConfig {
            coordinator: "[::1]:7400".into(),
            ..EdgeConfig::default()
        };
        assert_eq!(cfg.tls_name(), "::1");
        cfg.server_name = "coord.example".into();
        assert_eq!(cfg.tls_name(), "coord.example");
    }

    #[test]
    fn invalid_values_name_their_key() {
        let cfg = EdgeConfig {
            coordinator: "nope".into(),
            ..EdgeConfig::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("`coordinator`")
        );
        let cfg = EdgeConfig {
            coordinator: Coordinators::parse_flag(""),
            ..EdgeConfig::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("`coordinator`") && err.contains("at least one HOST:PORT"),
            "{err}"
        );
        let cfg = EdgeConfig {
            sample_interval_secs: 0.0,
            ..EdgeConfig::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("sample_interval_secs")
        );
    }

    /// The shared checkpoint backend is set like any key, and a URL this
    /// edge cannot reach is refused at load, naming the key, the value and
    /// the fix.
    #[test]
    fn a_shared_checkpoint_url_is_checked_at_load() {
        let load = |url: &str| {
            let env = [
                (
                    "TIDEMILL_CHECKPOINT__BACKEND".to_string(),
                    "shared".to_string(),
                ),
                ("TIDEMILL_CHECKPOINT__URL".to_string(), url.to_string()),
            ];
            let (cfg, _): (EdgeConfig, _) =
                config_file::load_layered(None, DEFAULT_CONFIG, &[], &env).unwrap();
            cfg
        };
        let cfg = load("file:///mnt/ck");
        assert_eq!(
            cfg.checkpoint.backend,
            crate::checkpoint_config::Backend::Shared
        );
        cfg.validate().unwrap();
        let err = load("s3://bucket/ck").validate().unwrap_err().to_string();
        assert!(
            err.contains("checkpoint.url")
                && err.contains("s3://bucket/ck")
                && err.contains("file:///"),
            "{err}"
        );
        let env = [(
            "TIDEMILL_CHECKPOINT__BACKEND".to_string(),
            "nfs".to_string(),
        )];
        let err = config_file::load_layered::<EdgeConfig>(None, DEFAULT_CONFIG, &[], &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nfs") && err.contains("coordinator"), "{err}");
    }
}
