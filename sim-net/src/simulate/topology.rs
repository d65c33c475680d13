//! The simulated world's description, read from TOML: cloud sites, edge sites,
//! links per class, per-model sizes, the input files and the knobs of the
//! engine, the forecaster and the tidemill policy. Every key is documented in
//! `configs/topology-edgeflow-eval.toml`; command-line flags override the paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;
use tidemill_sched::{AdmissionMode, BestEffortOrder, LinkDefaults, OnInfeasible};

use crate::trace::Format;

/// Why the topology file cannot be used.
#[derive(Debug, Error)]
pub enum TopologyError {
    /// The file could not be read.
    #[error("{path}: cannot read the topology: {source}; check --topology")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML does not parse or has an unknown or mistyped key.
    #[error(
        "{path}: {message}; see configs/topology-edgeflow-eval.toml for every key and its type"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A value breaks a rule.
    #[error("{path}: `{key}` = {value}: {rule}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, dotted.
        key: String,
        /// The value given.
        value: String,
        /// What it must satisfy.
        rule: &'static str,
    },
}

/// The whole topology file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The job trace, resolved against the working directory.
    pub jobs: Option<PathBuf>,
    /// Its format; `None` detects it from the header.
    pub jobs_format: Option<String>,
    /// Throughput table directory per device class.
    #[serde(default)]
    pub throughputs: BTreeMap<String, PathBuf>,
    /// The utilisation trace that drives edge availability.
    pub utilization: Option<UtilizationSpec>,
    /// Rented cloud GPU sites.
    #[serde(default)]
    pub cloud: Vec<CloudSite>,
    /// Edge sites.
    #[serde(default)]
    pub edge: Vec<EdgeSite>,
    /// Links per class.
    pub links: LinkDefaults,
    /// Simulation engine knobs.
    #[serde(default)]
    pub engine: EngineSpec,
    /// Online forecaster knobs.
    #[serde(default)]
    pub forecast: ForecastSpec,
    /// tidemill scheduler knobs.
    #[serde(default)]
    pub tidemill: TidemillSpec,
    /// Deadline generator for traces without deadlines.
    #[serde(default)]
    pub deadlines: DeadlineSpec,
    /// Per-model sizes; models not listed use `[models.default]`.
    #[serde(default)]
    pub models: BTreeMap<String, ModelSpec>,
}

/// Where the utilisation series come from and how they map onto edge nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationSpec {
    /// The trace file.
    pub file: PathBuf,
    /// Its preset (`forecast-eval`'s `--format` names).
    pub format: Option<String>,
    /// Hours by which each reuse of a series is shifted.
    #[serde(default = "default_reuse_offset_h")]
    pub reuse_offset_h: f64,
}

fn default_reuse_offset_h() -> f64 {
    7.0
}

/// A group of identical cloud GPU nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudSite {
    /// Name prefix of the nodes.
    pub name: String,
    /// Nodes in the site.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Device class, a key of `throughputs`.
    pub class: String,
    /// Currency units per GPU-hour.
    pub price_per_gpu_hour: f64,
}

/// A group of identical edge boxes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeSite {
    /// Name prefix of the nodes.
    pub name: String,
    /// Boxes in the site.
    pub nodes: u32,
    /// Training devices per box.
    #[serde(default = "one")]
    pub devices: u32,
    /// Device class, a key of `throughputs`.
    pub class: String,
    /// Primary-load utilisation (percent) under which the box is idle.
    pub idle_threshold_pct: f64,
}

fn one() -> u32 {
    1
}

/// Knobs of the discrete-event engine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSpec {
    /// Scheduling slot, seconds: events are coalesced to its boundaries.
    pub slot_s: u32,
    /// Resolution of the true primary load, seconds (series averaged per bin).
    pub truth_bin_s: u32,
    /// Seconds after a change of primary load before an edge reports it.
    pub detect_delay_s: u32,
    /// Seconds a job needs to restart from a checkpoint.
    pub restart_s: f64,
    /// Hours simulated after the last deadline so late and best-effort jobs can finish.
    pub drain_h: f64,
    /// Share of jobs (seeded draw) run as best-effort, without a deadline.
    pub best_effort_share: f64,
    /// Most GPUs a job may use (capped at the cloud's size).
    pub max_gpus_per_job: u32,
}

impl Default for EngineSpec {
    fn default() -> Self {
        EngineSpec {
            slot_s: 60,
            truth_bin_s: 300,
            detect_delay_s: 60,
            restart_s: 30.0,
            drain_h: 24.0,
            best_effort_share: 0.0,
            max_gpus_per_job: 64,
        }
    }
}

/// Knobs of the online forecaster that feeds tidemill.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForecastSpec {
    /// Forecast slot, seconds.
    pub slot_s: u32,
    /// Horizon, hours.
    pub horizon_h: u32,
    /// Seconds between refreshes.
    pub refresh_s: u32,
    /// Days of history fed before the first job arrives.
    pub warmup_days: f64,
}

impl Default for ForecastSpec {
    fn default() -> Self {
        ForecastSpec {
            slot_s: 900,
            horizon_h: 24,
            refresh_s: 900,
            warmup_days: 2.0,
        }
    }
}

/// Knobs of the tidemill policy (the scheduler library's `Policy`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TidemillSpec {
    /// Planning slot, seconds.
    pub slot_s: u32,
    /// Planning horizon, hours.
    pub horizon_h: u32,
    /// Seconds a job leaves an edge box before its idle window ends.
    pub grace_s: u32,
    /// Edge boxes considered per job.
    pub edge_candidates: usize,
    /// Most edge boxes one job may span.
    pub max_edge_nodes: usize,
    /// What becomes of an SLO job no plan can guarantee: `reject` or `best-effort`.
    pub on_infeasible: OnInfeasible,
    /// Best-effort jobs may use cloud capacity no reservation holds.
    pub best_effort_cloud: bool,
    /// Order in which jobs without a reservation take what is left.
    pub best_effort_order: BestEffortOrder,
    /// How SLO jobs are admitted: `reserve` or `each-round`.
    pub admission: AdmissionMode,
}

impl Default for TidemillSpec {
    fn default() -> Self {
        TidemillSpec {
            slot_s: 900,
            horizon_h: 48,
            grace_s: 120,
            edge_candidates: 12,
            max_edge_nodes: 8,
            on_infeasible: OnInfeasible::Reject,
            best_effort_cloud: true,
            best_effort_order: BestEffortOrder::LeastAttainedService,
            admission: AdmissionMode::Reserve,
        }
    }
}

/// Deadlines for traces that have none: `submit + λ × duration`, λ uniform.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlineSpec {
    /// Smallest λ.
    pub lambda_min: f64,
    /// Largest λ.
    pub lambda_max: f64,
}

impl Default for DeadlineSpec {
    fn default() -> Self {
        DeadlineSpec {
            lambda_min: 0.5,
            lambda_max: 1.5,
        }
    }
}

/// Sizes of one model's job, for the WAN cost model.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Gradient (model) size, MB; what all-reduce moves per step.
    pub model_mb: f64,
    /// Dataset size, GB; each worker stages its shard.
    pub dataset_gb: f64,
    /// Checkpoint size, MB; moved on migration.
    pub checkpoint_mb: f64,
}

impl Topology {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Topology::parse(path, &text)
    }

    /// Parses and validates TOML text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Topology, TopologyError> {
        let t: Topology = toml::from_str(text).map_err(|e| TopologyError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        t.validate(path)?;
        Ok(t)
    }

    fn validate(&self, path: &Path) -> Result<(), TopologyError> {
        let bad = |key: String, value: String, rule| TopologyError::Invalid {
            path: path.to_path_buf(),
            key,
            value,
            rule,
        };
        if self.cloud.is_empty() && self.edge.is_empty() {
            return Err(bad(
                "cloud/edge".into(),
                "none".into(),
                "give at least one [[cloud]] or [[edge]] site",
            ));
        }
        for (i, c) in self.cloud.iter().enumerate() {
            if c.nodes == 0 || c.gpus_per_node == 0 {
                return Err(bad(
                    format!("cloud[{i}].nodes/gpus_per_node"),
                    format!("{}/{}", c.nodes, c.gpus_per_node),
                    "both must be at least 1",
                ));
            }
            if c.price_per_gpu_hour.is_nan() || c.price_per_gpu_hour < 0.0 {
                return Err(bad(
                    format!("cloud[{i}].price_per_gpu_hour"),
                    c.price_per_gpu_hour.to_string(),
                    "must be a non-negative number",
                ));
            }
        }
        for (i, e) in self.edge.iter().enumerate() {
            if e.devices == 0 {
                return Err(bad(
                    format!("edge[{i}].devices"),
                    "0".into(),
                    "must be at least 1",
                ));
            }
            if !(0.0..=100.0).contains(&e.idle_threshold_pct) {
                return Err(bad(
                    format!("edge[{i}].idle_threshold_pct"),
                    e.idle_threshold_pct.to_string(),
                    "must be a percentage, 0 to 100",
                ));
            }
        }
        let e = &self.engine;
        if e.slot_s == 0 || e.truth_bin_s == 0 || !e.truth_bin_s.is_multiple_of(e.slot_s) {
            return Err(bad(
                "engine.slot_s/truth_bin_s".into(),
                format!("{}/{}", e.slot_s, e.truth_bin_s),
                "both positive, truth_bin_s a multiple of slot_s",
            ));
        }
        if !(0.0..=1.0).contains(&e.best_effort_share) {
            return Err(bad(
                "engine.best_effort_share".into(),
                e.best_effort_share.to_string(),
                "must be between 0 and 1",
            ));
        }
        if e.max_gpus_per_job == 0 {
            return Err(bad(
                "engine.max_gpus_per_job".into(),
                "0".into(),
                "must be at least 1",
            ));
        }
        let d = &self.deadlines;
        if !(d.lambda_min > 0.0 && d.lambda_min <= d.lambda_max) {
            return Err(bad(
                "deadlines.lambda_min/lambda_max".into(),
                format!("{}/{}", d.lambda_min, d.lambda_max),
                "need 0 < lambda_min <= lambda_max",
            ));
        }
        let t = &self.tidemill;
        if t.slot_s == 0 || t.horizon_h == 0 || t.edge_candidates == 0 || t.max_edge_nodes == 0 {
            return Err(bad(
                "tidemill".into(),
                format!("{t:?}"),
                "slot_s, horizon_h, edge_candidates and max_edge_nodes must be positive",
            ));
        }
        if let Some(u) = &self.utilization {
            if let Some(f) = &u.format {
                parse_format(f).map_err(|_| {
                    bad(
                        "utilization.format".into(),
                        f.clone(),
                        "not a known preset; use a --format name of forecast-eval, e.g. alibaba-2018",
                    )
                })?;
            }
            if u.reuse_offset_h.is_nan() || u.reuse_offset_h < 0.0 {
                return Err(bad(
                    "utilization.reuse_offset_h".into(),
                    u.reuse_offset_h.to_string(),
                    "must be a non-negative number",
                ));
            }
        }
        Ok(())
    }

    /// The sizes of `model`, falling back to `[models.default]`, then to 100 MB / 10 GB / 200 MB.
    pub fn model(&self, model: &str) -> ModelSpec {
        self.models
            .get(model)
            .or_else(|| self.models.get("default"))
            .copied()
            .unwrap_or(ModelSpec {
                model_mb: 100.0,
                dataset_gb: 10.0,
                checkpoint_mb: 200.0,
            })
    }
}

/// A utilisation preset by its command-line name.
pub fn parse_format(name: &str) -> Result<Format, String> {
    <Format as clap::ValueEnum>::from_str(name, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
[[cloud]]
name = "c"
nodes = 2
gpus_per_node = 8
class = "A100"
price_per_gpu_hour = 3.0
[links]
edge_edge = { bandwidth_mbps = 1000, latency_ms = 5 }
cloud_edge = { bandwidth_mbps = 100, latency_ms = 30, loss = 0.0001 }
cloud_cloud = { bandwidth_mbps = 10000, latency_ms = 1 }
"#;

    #[test]
    fn minimal_file_parses_with_defaults() {
        let t = Topology::parse(Path::new("t.toml"), MIN).unwrap();
        assert_eq!(t.engine.slot_s, 60);
        assert_eq!(t.links.table(Vec::new()).cloud_edge.bandwidth_bps, 12.5e6);
        assert_eq!(t.model("nope").model_mb, 100.0);
    }

    #[test]
    fn errors_name_the_key_and_rule() {
        let text = MIN.replace("nodes = 2", "nodes = 0");
        let msg = Topology::parse(Path::new("t.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("t.toml: `cloud[0].nodes/gpus_per_node`"),
            "{msg}"
        );
        let text = format!("{MIN}\n[engine]\nslot_z = 3\n");
        let msg = Topology::parse(Path::new("t.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("slot_z"), "{msg}");
    }
}
