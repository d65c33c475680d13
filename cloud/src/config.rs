//! The coordinator's configuration: TOML with every key documented in
//! `configs/cloud.toml`, which is embedded as the default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tidemill_runtime::config_file::{self, ConfigError};

/// The documented default configuration, printed by `print-default-config`.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/cloud.toml");

/// Everything the coordinator can be told.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudConfig {
    /// UDP address for edges.
    pub quic_listen: SocketAddr,
    /// TCP address for the operator API.
    pub api_listen: SocketAddr,
    /// Database and PKI directory.
    pub data_dir: PathBuf,
    /// Names the server certificate covers.
    pub tls_names: Vec<String>,
    /// Seconds of disconnection before a node is offline.
    pub offline_after_secs: u64,
    /// Seconds between scheduling rounds.
    pub round_interval_secs: f64,
    /// Peer edges each edge is asked to probe.
    pub probe_peers_per_edge: usize,
    /// Hours of samples, report ledger and events kept.
    pub retention_hours: u64,
    /// Connection settings.
    pub link: LinkConfig,
    /// Placement settings.
    pub scheduler: SchedulerConfig,
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

/// Placement settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// The policy.
    pub policy: Policy,
    /// CPU percent below which a node is idle.
    pub idle_cpu_threshold_pct: f32,
    /// Tasks per node at once.
    pub max_tasks_per_node: u32,
    /// The port rank 0 of a distributed job listens on (`MASTER_PORT`).
    pub master_port: u16,
}

/// The placement policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// First fit on idle nodes.
    FirstFit,
}

impl Default for CloudConfig {
    fn default() -> Self {
        config_file::embedded_default(DEFAULT_CONFIG)
    }
}

impl CloudConfig {
    /// Loads a config file, or the default when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        config_file::load_or_default(path, DEFAULT_CONFIG)
    }

    /// Checks values that TOML types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, value: String, rule| Err(ConfigError::Invalid { key, value, rule });
        if self.tls_names.is_empty() {
            return invalid(
                "tls_names",
                "[]".into(),
                "must name at least one host or address",
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses_and_validates() {
        let cfg = CloudConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.quic_listen, "127.0.0.1:7400".parse().unwrap());
        assert_eq!(cfg.scheduler.policy, Policy::FirstFit);
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
    }
}
