//! The simulated world's description, read from TOML: cloud sites, edge sites,
//! links per class, per-model sizes, the input files and the knobs of the
//! engine, the forecaster and the tidemill policy. Every key is documented in
//! `configs/topology-edgeflow-eval.toml`; command-line flags override the paths.

mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;
use tidemill_sched::{
    Lambda, LinkDefault, LinkDefaults, LinkTable, MeasuredLink, Policy as SchedPolicy,
};

use super::placement::CostNode;
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
    /// How each device class's throughput tables are made.
    #[serde(default)]
    pub throughputs: BTreeMap<String, ClassSpec>,
    /// The utilisation trace that drives edge availability.
    pub utilization: Option<UtilizationSpec>,
    /// Rented cloud GPU sites.
    #[serde(default)]
    pub cloud: Vec<CloudSite>,
    /// Edge sites.
    #[serde(default)]
    pub edge: Vec<EdgeSite>,
    /// Links per class, and between boxes of one site.
    pub links: LinkTiers,
    /// Simulation engine knobs.
    #[serde(default)]
    pub engine: EngineSpec,
    /// Online forecaster knobs.
    #[serde(default)]
    pub forecast: ForecastSpec,
    /// The tidemill scheduler's settings, the library's own type and defaults.
    #[serde(default)]
    pub tidemill: SchedPolicy,
    /// Deadline generator for traces without deadlines.
    #[serde(default)]
    pub deadlines: DeadlineSpec,
    /// The scenario's job generator: when present, it replaces every job's
    /// deadline and class, whatever the trace says.
    pub generator: Option<GeneratorSpec>,
    /// Per-model sizes; models not listed use `[models.default]`.
    #[serde(default)]
    pub models: BTreeMap<String, ModelSpec>,
}

/// How one device class's throughput tables are made (a value of `[throughputs]`).
#[derive(Debug, Clone, PartialEq)]
pub enum ClassSpec {
    /// `CLASS = "DIR"`: a directory of ElasticFlow-format CSVs, one per model.
    ElasticFlow(PathBuf),
    /// `CLASS = { sia = "DIR", cluster = "aws" }`: Sia placement profiles.
    Sia {
        /// The profile directory.
        dir: PathBuf,
        /// The profiled cluster (`aws` = T4, `azure` = V100, `dgx-ext` = A100, ...).
        cluster: String,
    },
    /// `scale = "OTHER"` with `[throughputs.CLASS.lambda]` entries
    /// `MODEL = { ratio = R, source = "..." }`: R × OTHER's table per model.
    Scale {
        /// The class scaled.
        from: String,
        /// Per-model ratio and where it comes from.
        lambda: BTreeMap<String, Lambda>,
    },
}

/// The keys a `[throughputs]` table may hold; [`ClassSpec`] checks the mix.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassTable {
    sia: Option<PathBuf>,
    cluster: Option<String>,
    scale: Option<String>,
    lambda: Option<BTreeMap<String, Lambda>>,
}

impl<'de> Deserialize<'de> for ClassSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ClassSpec, D::Error> {
        struct Spec;
        impl<'de> serde::de::Visitor<'de> for Spec {
            type Value = ClassSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a directory of ElasticFlow-format CSVs (a string), { sia = DIR, cluster = NAME }, or a table with `scale` and `lambda`",
                )
            }
            fn visit_str<E: serde::de::Error>(self, dir: &str) -> Result<ClassSpec, E> {
                Ok(ClassSpec::ElasticFlow(PathBuf::from(dir)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ClassSpec, A::Error> {
                let t = ClassTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                match t {
                    ClassTable {
                        sia: Some(dir),
                        cluster: Some(cluster),
                        scale: None,
                        lambda: None,
                    } => Ok(ClassSpec::Sia { dir, cluster }),
                    ClassTable {
                        sia: None,
                        cluster: None,
                        scale: Some(from),
                        lambda: Some(lambda),
                    } => Ok(ClassSpec::Scale { from, lambda }),
                    _ => Err(serde::de::Error::custom(
                        "a device class table takes `sia` and `cluster` (Sia profiles, e.g. { sia = \"../shared/data/gpu-throughput-profiles/sia-placements\", cluster = \"aws\" }) or `scale` and `lambda` (a per-model multiple of another class), not a mix",
                    )),
                }
            }
        }
        d.deserialize_any(Spec)
    }
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
    /// Only series whose id starts with this are used (C2TM: `fog_`, whole
    /// fog sites, leaving out their `rrh_` parts); `None` uses every series.
    pub series_prefix: Option<String>,
    /// Present: every box of an edge site follows its site's series; absent:
    /// box i follows series i mod S.
    pub by_site: Option<SiteTideSpec>,
}

fn default_reuse_offset_h() -> f64 {
    7.0
}

/// How the boxes of one edge site follow the site's series (the formulas are
/// `edges::SiteTide`'s).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteTideSpec {
    /// The percentile p (0 to 100] of a site's series that is mapped to `peak_pct`.
    pub percentile: f64,
    /// A box's utilisation, percent, when its site's series is at its p-th percentile.
    pub peak_pct: f64,
    /// Spread s of the per-box factor g ~ U[1 − s, 1 + s].
    pub gain_spread: f64,
    /// Hours j of per-box phase jitter, uniform in [−j, j] in whole bins.
    pub jitter_h: f64,
    /// Series id per site name, for sites that do not take series in order.
    pub series: BTreeMap<String, String>,
}

impl Default for SiteTideSpec {
    fn default() -> Self {
        SiteTideSpec {
            percentile: 95.0,
            peak_pct: 80.0,
            gain_spread: 0.1,
            jitter_h: 0.5,
            series: BTreeMap::new(),
        }
    }
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
    /// The site the boxes stand at: boxes of one site reach each other over
    /// `[links] same_site` and may share one tide (`[utilization.by_site]`).
    pub site: Option<String>,
    /// Sites the group is repeated at, `nodes` boxes each: `SITE-00`,
    /// `SITE-01`, ... (1: the group is at `site` itself).
    #[serde(default = "one")]
    pub sites: u32,
}

fn one() -> u32 {
    1
}

impl EdgeSite {
    /// Boxes in the group, over all its sites.
    pub fn boxes(&self) -> u32 {
        self.nodes * self.sites
    }

    /// The site of the group's box `i` (0-based over [`EdgeSite::boxes`]).
    pub fn site_of(&self, i: u32) -> Option<String> {
        self.site_name(i / self.nodes.max(1))
    }

    /// The name of the group's `k`-th site.
    fn site_name(&self, k: u32) -> Option<String> {
        let site = self.site.as_ref()?;
        Some(if self.sites <= 1 {
            site.clone()
        } else {
            format!("{site}-{k:02}")
        })
    }
}

/// The link tiers, as `[links]` writes them: the scheduler's three classes,
/// and optionally a faster tier between edge boxes of one site.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkTiers {
    /// Between edge boxes of different sites (or of no site).
    pub edge_edge: LinkDefault,
    /// Between a cloud node and an edge box.
    pub cloud_edge: LinkDefault,
    /// Between two cloud nodes.
    pub cloud_cloud: LinkDefault,
    /// Between two edge boxes of the same site; `None`: `edge_edge`.
    pub same_site: Option<LinkDefault>,
}

impl LinkTiers {
    /// The link table every policy and the scheduler read, the one answer to
    /// "the link between nodes a and b": the class defaults, plus one entry
    /// in `measured` per pair of edge boxes of the same site, with the
    /// `same_site` spec (none without it). The scheduler looks node pairs up
    /// in `measured` before the class default, and so does the cost model.
    pub fn table(&self, nodes: &[CostNode]) -> LinkTable {
        let defaults = LinkDefaults {
            edge_edge: self.edge_edge,
            cloud_edge: self.cloud_edge,
            cloud_cloud: self.cloud_cloud,
        };
        let Some(same) = self.same_site else {
            return defaults.table(Vec::new());
        };
        let mut by_site: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for n in nodes.iter().filter(|n| !n.is_cloud()) {
            if let Some(site) = &n.site {
                by_site.entry(site).or_default().push(&n.id);
            }
        }
        let mut measured = Vec::new();
        for ids in by_site.values() {
            for (i, a) in ids.iter().enumerate() {
                for b in &ids[i + 1..] {
                    measured.push(MeasuredLink {
                        a: a.to_string(),
                        b: b.to_string(),
                        link: same.spec(),
                    });
                }
            }
        }
        defaults.table(measured)
    }
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
    /// Minutes of training between two checkpoints of every trace job
    /// (`JobSpec::checkpoint_interval_s` / 60): what an eviction can lose.
    pub checkpoint_interval_min: f64,
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
            checkpoint_interval_min: tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S / 60.0,
        }
    }
}

/// Knobs of the online forecaster that feeds tidemill.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForecastSpec {
    /// Forecast slot, seconds.
    pub slot_s: u32,
    /// Horizon, hours (default 48: as far as plans reach).
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
            horizon_h: 48,
            refresh_s: 900,
            warmup_days: 2.0,
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

/// The scenario's job generator (`jobs::generate_deadlines`): every job's
/// deadline becomes `submit + λ × T_req`, λ uniform in [`lambda_min`,
/// `lambda_max`], and a seeded share runs best-effort.
///
/// [`lambda_min`]: GeneratorSpec::lambda_min
/// [`lambda_max`]: GeneratorSpec::lambda_max
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// Smallest λ.
    pub lambda_min: f64,
    /// Largest λ.
    pub lambda_max: f64,
    /// Share of jobs run best-effort, without a deadline.
    pub best_effort_share: f64,
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

    /// The edge sites, in the order their first box appears.
    pub fn edge_sites(&self) -> Vec<String> {
        let mut sites: Vec<String> = Vec::new();
        for e in self.edge.iter().filter(|e| e.nodes > 0) {
            for k in 0..e.sites {
                if let Some(site) = e.site_name(k)
                    && !sites.contains(&site)
                {
                    sites.push(site);
                }
            }
        }
        sites
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
        assert_eq!(t.links.table(&[]).cloud_edge.bandwidth_bps, 12.5e6);
        assert_eq!(t.model("nope").model_mb, 100.0);
    }

    const SITES: &str = r#"
[[edge]]
name = "mec"
nodes = 2
class = "T4"
idle_threshold_pct = 30.0
site = "mec"
sites = 3
[[edge]]
name = "hub"
nodes = 1
class = "T4"
idle_threshold_pct = 30.0
site = "mec-01"
[utilization]
file = "u.csv"
[utilization.by_site]
series = { "mec-02" = "fog_9.0" }
"#;

    #[test]
    fn repeated_groups_number_their_sites_in_order() {
        let t = Topology::parse(Path::new("t.toml"), &format!("{MIN}{SITES}")).unwrap();
        let e = &t.edge[0];
        assert_eq!(e.boxes(), 6);
        let sites: Vec<_> = (0..6).map(|i| e.site_of(i).unwrap()).collect();
        assert_eq!(
            sites,
            ["mec-00", "mec-00", "mec-01", "mec-01", "mec-02", "mec-02"]
        );
        // The second group stands at an existing site: no new one.
        assert_eq!(t.edge_sites(), ["mec-00", "mec-01", "mec-02"]);
        let by_site = t.utilization.unwrap().by_site.unwrap();
        assert_eq!((by_site.percentile, by_site.peak_pct), (95.0, 80.0));
    }

    #[test]
    fn site_keys_are_checked() {
        let err = |text: String| {
            Topology::parse(Path::new("t.toml"), &text)
                .unwrap_err()
                .to_string()
        };
        let all = format!("{MIN}{SITES}");
        let msg = err(all.replace("site = \"mec-01\"\n", ""));
        assert!(msg.contains("`edge[1].site`"), "{msg}");
        let msg = err(all.replace("\"mec-02\" =", "\"mec-07\" ="));
        assert!(
            msg.contains("`utilization.by_site.series` = mec-07"),
            "{msg}"
        );
        let msg = err(all.replace("site = \"mec\"\n", ""));
        assert!(msg.contains("`edge[0].sites` = 3"), "{msg}");
        let msg = err(format!(
            "{MIN}[generator]\nlambda_min = 2.0\nlambda_max = 12.0\nbest_effort_share = 0.2\n[engine]\nbest_effort_share = 0.1\n"
        ));
        assert!(msg.contains("`generator.best_effort_share`"), "{msg}");
    }

    #[test]
    fn throughput_classes_are_dirs_sia_profiles_or_lambda_multiples() {
        let text = format!(
            r#"{MIN}
[throughputs]
A100 = "../a100"
T4 = {{ sia = "../sia", cluster = "aws" }}
[throughputs.V100]
scale = "A100"
[throughputs.V100.lambda]
resnet50 = {{ ratio = 0.527, source = "DLE" }}
"#
        );
        let t = Topology::parse(Path::new("t.toml"), &text).unwrap();
        assert_eq!(
            t.throughputs["A100"],
            ClassSpec::ElasticFlow(PathBuf::from("../a100"))
        );
        assert_eq!(
            t.throughputs["T4"],
            ClassSpec::Sia {
                dir: PathBuf::from("../sia"),
                cluster: "aws".into()
            }
        );
        let ClassSpec::Scale { from, lambda } = &t.throughputs["V100"] else {
            panic!("{:?}", t.throughputs["V100"]);
        };
        assert_eq!(from, "A100");
        assert_eq!(
            lambda["resnet50"],
            Lambda {
                ratio: 0.527,
                source: "DLE".into()
            }
        );

        let parse_err = |text: String| {
            Topology::parse(Path::new("t.toml"), &text)
                .unwrap_err()
                .to_string()
        };
        let e = parse_err(format!(
            "{MIN}\n[throughputs]\nT4 = {{ sia = \"../sia\", scale = \"A100\" }}\n"
        ));
        assert!(e.contains("not a mix") && e.contains("T4"), "{e}");
        let e = parse_err(format!(
            "{MIN}\n[throughputs]\nT4 = {{ sia = \"../sia\", cluster = \"aws\", gpus = 4 }}\n"
        ));
        assert!(e.contains("gpus"), "{e}");
        let e = parse_err(text.replace("scale = \"A100\"", "scale = \"H100\""));
        assert!(
            e.contains("`throughputs.V100.scale` = \"H100\"") && e.contains("add that class"),
            "{e}"
        );
        let e = parse_err(text.replace("A100 = \"../a100\"", "A100 = 3"));
        assert!(e.contains("A100") && e.contains("sia = DIR"), "{e}");
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
